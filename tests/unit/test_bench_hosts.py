"""The multi-host generator of ``make bench-hosts`` (:func:`tfprof_towers.testing.synth.pod_host_trace`) and
the benchmark's pure parts; ``--quick`` as a whole runs in tests/e2e/test_bench_hosts_quick.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_hosts import stragglers_of
from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.testing.synth import copy_heavy_trace, pod_host_trace, pod_host_windows
from tfprof_towers.trace.executors import analyze_pod
from tfprof_towers.xplane import read_xspace

EVENTS, GPUS, STEPS = 5000, 4, 10
PERIOD, STEP = pod_host_windows(EVENTS, GPUS, STEPS)
SLOW = STEP // 5


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pod")
    for h in range(4):
        slow = SLOW if h in (1, 2) else 0
        pod_host_trace(h, EVENTS, GPUS, STEPS, slow_ps=slow).write_logdir(root, host=f"host{h}")
    return root


def _events(b, tmp: Path) -> int:
    return read_xspace(b.write(tmp / "t.xplane.pb")).n_events


def test_windows_stretch_the_unit_to_the_step() -> None:
    assert PERIOD > 10_000_000
    assert abs(STEP - 100 * 10**9) < PERIOD  # about 100 ms steps


@pytest.mark.parametrize("slow, extra", [(0, GPUS * STEPS), (SLOW, 2 * GPUS * STEPS)])
def test_one_all_reduce_per_gpu_and_step(tmp_path: Path, slow: int, extra: int) -> None:
    base = copy_heavy_trace(EVENTS, GPUS, STEPS, 7919, period_ps=PERIOD)
    made = pod_host_trace(1, EVENTS, GPUS, STEPS, slow_ps=slow)
    assert _events(made, tmp_path) == _events(base, tmp_path) + extra


def test_slow_must_leave_an_all_reduce() -> None:
    with pytest.raises(ValueError):
        pod_host_trace(0, EVENTS, GPUS, STEPS, slow_ps=STEP)


def test_copy_heavy_on_an_epoch_clock_keeps_its_times(tmp_path: Path) -> None:
    a = read_xspace(copy_heavy_trace(2000, 2, 4).write(tmp_path / "a.xplane.pb"))
    b = read_xspace(copy_heavy_trace(2000, 2, 4, t0_ns=1_704_067_200 * 10**9).write(tmp_path / "b.xplane.pb"))
    assert a.n_events == b.n_events


def test_the_slow_hosts_are_the_stragglers(pod: Path) -> None:
    analysis = analyze_pod(pod, executor="serial")
    doc = analysis.to_doc(per_step=False)
    host_of = {t["task"]: t["host"] for t in doc["tasks"]}
    found = [f for f in evaluate_trace(analysis.facts).to_json()["findings"] if f["rule"] == "straggler"]
    assert len(found) == 1
    ev = found[0]["evidence"]
    assert [host_of[ev["task"]], *(host_of[t] for t in ev["others_late"])] == ["host1", "host2"]
    assert ev["late_steps"] == list(range(STEPS))
    assert ev["late_s_median"] == pytest.approx(SLOW / 1e12, rel=1e-6)
    coll = {t["host"]: {round(s["collective_s"] * 1e12 / STEP, 3) for s in t["steps"]} for t in doc["tasks"]}
    assert coll == {"host0": {0.3}, "host1": {0.1}, "host2": {0.1}, "host3": {0.3}}


@pytest.mark.parametrize("hosts, slow", [(32, (1, 5)), (8, (1, 5)), (4, (1, 3)), (3, (1, 2))])
def test_two_stragglers_in_every_logdir(hosts: int, slow: tuple[int, ...]) -> None:
    assert stragglers_of(hosts) == slow
