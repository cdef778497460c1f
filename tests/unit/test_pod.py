"""A multi-host profile analysed host by host (trace/pod.py, trace/executors.py).

* every executor on this machine (this process, a local pool) gives the same document, to the last
  digit, and the map of a host's bytes is the map of its file (a real Dask cluster's, by address and
  by client, and one whose workers are sent the bytes: tests/e2e/test_dask_e2e.py);
* the reduce is the merged analysis (all hosts' events in one trace, ``analyze_xplane``): the same
  document and findings, send/recv pairs across tasks included (one pair held only by its receiver);
* a host whose file is cut short is named and left out, the others analysed (``analyze`` exits 3);
* two slow hosts among 16 are the straggler rule's, with their delays;
* a single file: the same document as ``analyze_xplane``'s, on the real 8-GPU fixture.

Every figure is exact (integers of picoseconds); nothing depends on how fast the machine is.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pod_kit import EDGE_BYTES, RUN, TASKS4, devices_of, four_hosts, full_doc, host, task, text
from trace_kit import US

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.cli import main
from tfprof_towers.trace.analysis import analyze_xplane, devices_doc
from tfprof_towers.trace.executors import LocalPool, analyze_pod, host_jobs
from tfprof_towers.trace.pod import HostFailure, HostResult, map_host
from tfprof_towers.vocab.device_names import canonical_device
from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS, TraceError
from tfprof_towers.xplane.strings import Strings

POD_ONLY = ("hosts", "failed_hosts")


# --- 1. the same document whatever ran the map


def test_every_executor_gives_the_same_document(tmp_path: Path) -> None:
    root = four_hosts(tmp_path)

    def run(executor: Any) -> str:
        return text(full_doc(analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, executor=executor)))

    serial = run("serial")
    assert run("local") == serial
    assert run(LocalPool(workers=2)) == serial
    doc = json.loads(serial)  # (its keys sorted)
    assert doc["hosts"] == 4 and doc["failed_hosts"] == []
    assert sorted(doc["devices"]) == sorted(devices_of(range(4)))


def test_a_hosts_bytes_map_as_its_file(tmp_path: Path) -> None:
    """What a Dask worker that cannot read the file gets: the job with the file's bytes."""
    jobs, _, _ = host_jobs(four_hosts(tmp_path), tasks=TASKS4, edge_bytes=EDGE_BYTES)
    assert [j.name for j in jobs] == ["h0", "h1", "h2", "h3"]
    for job in jobs:
        from_file = map_host(job)
        sent = replace(job, data=Path(job.file).read_bytes(), file="/nowhere/on/this/worker.xplane.pb")
        from_bytes = map_host(sent)
        assert isinstance(from_file, HostResult) and isinstance(from_bytes, HostResult)
        assert devices_doc(from_bytes.breakdown) == devices_doc(from_file.breakdown)
        assert from_bytes.links == from_file.links
        assert from_bytes.origin_ns == from_file.origin_ns
        for col in ("step", "start_ps", "end_ps"):
            assert getattr(from_bytes.steps, col).tolist() == getattr(from_file.steps, col).tolist()
        assert from_bytes.collective_ps.tolist() == from_file.collective_ps.tolist()


# --- 2. the reduce is the merged analysis


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_reduce_is_the_merged_analysis(tmp_path: Path, n: int) -> None:
    root = four_hosts(tmp_path / "all")
    one = tmp_path / "some"
    for i in range(n):
        src = root / "plugins" / "profile" / RUN / f"h{i}.xplane.pb"
        dst = one / "plugins" / "profile" / RUN / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    tasks = {f"h{i}": task(i) for i in range(n)}
    pod = analyze_pod(one, tasks=tasks, edge_bytes=EDGE_BYTES, executor="serial")
    merged = analyze_xplane(one, tasks=tasks, edge_bytes=EDGE_BYTES)
    got, want = pod.to_doc(), merged.to_doc()
    assert set(got) - set(want) == set(POD_ONLY) and set(want) <= set(got)
    assert text({k: got[k] for k in want}) == text(want)
    assert text(evaluate_trace(pod.facts).to_json()) == text(evaluate_trace(merged).to_json())
    network = [(ln["src"], ln["dst"], ln["count"], ln["bytes"])
               for ln in got["links"] if ln["kind"] == "network"]
    cpu = "/job:worker/replica:0/task:{}/device:CPU:0"
    expect = {2: [(cpu.format(0), cpu.format(1), 3, 3 * 4096)],  # the sends; h1's receives not again
              3: [(cpu.format(0), cpu.format(1), 3, 3 * 4096),
                  (cpu.format(0), cpu.format(2), 3, 3 * 128)]}  # h2's receives: no host holds the sends
    assert network == [(canonical_device(a), canonical_device(b), c, by) for a, b, c, by in expect[min(n, 3)]]


def test_four_hosts_exact_figures(tmp_path: Path) -> None:
    doc = analyze_pod(four_hosts(tmp_path), tasks=TASKS4, edge_bytes=EDGE_BYTES, executor="serial").to_doc()
    assert doc["steps"] == 3 and doc["window"] == "markers"
    gpu = {i: doc["devices"][f"{task(i)}/device:GPU:0"]["total"] for i in range(4)}
    for i, compute in enumerate((300, 320, 250, 450)):
        assert gpu[i]["compute"]["count"] == 3
        assert gpu[i]["compute"]["seconds"] == 3 * compute * US / 1e12
        assert gpu[i]["collective"]["seconds"] == 3 * (800 - compute) * US / 1e12
        assert gpu[i]["h2d"]["bytes"] == 3 * (1000 + 100 * i)
    # per task: steps on one clock, from h0's step 0; collective time = the all-reduce
    got = {t["task"]: [(s["step"], s["start_s"], s["end_s"], s["collective_s"]) for s in t["steps"]]
           for t in doc["tasks"]}
    for i, (offset, compute) in enumerate(((0, 300), (7, 320), (14, 250), (21, 450))):
        assert got[task(i)] == [
            (s, (offset + 1000 * s) * US / 1e12, (offset + 1000 * (s + 1)) * US / 1e12,
             (800 - compute) * US / 1e12) for s in range(3)]


# --- 3. a host cut short


def cut(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def test_a_truncated_host_is_named_and_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = four_hosts(tmp_path)
    bad = root / "plugins" / "profile" / RUN / "h2.xplane.pb"
    cut(bad)
    pod = analyze_pod(root, tasks=TASKS4, executor="serial")
    doc = pod.to_doc()
    assert [r.name for r in pod.results] == ["h0", "h1", "h3"]
    assert list(doc["devices"]) == devices_of((0, 1, 3))
    assert doc["hosts"] == 4
    [failed] = doc["failed_hosts"]
    assert failed["host"] == "h2" and failed["file"] == str(bad) and failed["reason"]
    assert "\n" not in failed["reason"]
    assert [t["task"] for t in doc["tasks"]] == [task(0), task(1), task(3)]
    assert any(n.startswith("1 of 4 hosts could not be read and are left out: h2: ") for n in doc["notes"])
    # the same on a local pool
    assert text(analyze_pod(root, tasks=TASKS4, executor=LocalPool(workers=2)).to_doc()) == text(doc)

    capsys.readouterr()
    assert main(["analyze", str(root), "--json"]) == EXIT_SOME_HOSTS
    out, err = capsys.readouterr()
    cli = json.loads(out)
    assert [f["host"] for f in cli["failed_hosts"]] == ["h2"]
    assert cli["failed_hosts"][0]["reason"] == failed["reason"]
    assert len(cli["devices"]) == 5 and "findings" in cli and "rules" in cli
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == [
        f"host h2: could not be read: {failed['reason']}; the other hosts are still analysed",
        "error: 1 of 4 hosts could not be read (h2): the results above leave them out",
    ]
    assert "Traceback" not in err


def test_every_host_truncated_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = four_hosts(tmp_path)
    for f in sorted((root / "plugins" / "profile" / RUN).iterdir()):
        cut(f)
    with pytest.raises(TraceError, match=r"^none of the 4 hosts could be read: h0: .*; h3: "):
        analyze_pod(root, executor="serial")
    capsys.readouterr()
    code = main(["analyze", str(root), "--json"])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert "Traceback" not in err
    final = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("host h")]
    assert len(final) == 1 and "none of the 4 hosts could be read" in final[0]
    assert sorted(ln.split(":")[0] for ln in err.splitlines() if ln.startswith("host h")) == [
        "host h0", "host h1", "host h2", "host h3"]


# --- 4. two stragglers among 16 hosts


SLOW = {5: 2000, 11: 2000}  # host -> extra compute (us): both reach the all-reduce 2 ms late


def sixteen_hosts(root: Path, slow: dict[int, int]) -> Path:
    """16 hosts, 6 steps of 10 ms on one clock: 5 ms of compute from 100 us into the step (more on the
    slow hosts), then the all-reduce until 100 us before the step's end."""
    for i in range(16):
        b = host(i, steps=6, step_us=10_000, compute_us=5000 + slow.get(i, 0))
        b.write_logdir(root, run=RUN, host=f"h{i}")
    return root


def test_two_slow_hosts_are_the_stragglers(tmp_path: Path) -> None:
    tasks = {f"h{i}": task(i) for i in range(16)}
    pod = analyze_pod(sixteen_hosts(tmp_path, SLOW), tasks=tasks, executor="serial")
    doc = pod.to_doc()
    by_task = {t["task"]: t["steps"] for t in doc["tasks"]}
    assert len(by_task) == 16
    for i in range(16):
        compute = 5000 + SLOW.get(i, 0)
        assert by_task[task(i)] == [
            {"step": s, "start_s": 10_000 * s * US / 1e12, "end_s": 10_000 * (s + 1) * US / 1e12,
             "collective_s": (9800 - compute) * US / 1e12} for s in range(6)]
    assert doc["step_time_s"] == [0.01] * 6
    findings = evaluate_trace(pod.facts).to_json()["findings"]
    [f] = [f for f in findings if f["rule"] == "straggler"]
    # the rule makes one finding: the most late task (ties by name: "task:11" < "task:5"); the tasks
    # late as often and by enough are its "others_late"
    ev = f["evidence"]
    assert (ev["task"], ev["others_late"]) == (task(11), [task(5)])
    assert f["message"].startswith("worker:11 reached the collectives last in 6 of 6 profiled steps")
    assert ev["late_steps"] == [0, 1, 2, 3, 4, 5] and ev["steps"] == 6
    assert ev["late_s_median"] == pytest.approx(2e-3, abs=1e-12)
    assert ev["late_s_max"] == pytest.approx(2e-3, abs=1e-12)
    assert ev["step_s_median"] == pytest.approx(0.01, abs=1e-12)
    assert ev["others_wait_s_median"] == pytest.approx(4.8e-3, abs=1e-12)  # the 14 on time wait 4.8 ms


def test_two_slow_hosts_are_both_named_with_their_delays(tmp_path: Path) -> None:
    """Late by 3 and 2 ms (against the median arrival of the other 15 hosts): the 3 ms one leads the
    finding, the 2 ms one is named after it with its own delay; both are the finding's devices."""
    tasks = {f"h{i}": task(i) for i in range(16)}
    slow = {5: 3000, 11: 2000}
    pod = analyze_pod(sixteen_hosts(tmp_path, slow), tasks=tasks, executor="serial")
    [f] = [f for f in evaluate_trace(pod.facts).to_json()["findings"] if f["rule"] == "straggler"]
    assert f["evidence"]["task"] == task(5) and f["evidence"]["others_late"] == [task(11)]
    assert f["evidence"]["late_s_median"] == pytest.approx(3e-3, abs=1e-12)
    assert f["evidence"]["others_late_s_median"] == {task(11): pytest.approx(2e-3, abs=1e-12)}
    assert f["devices"] == [task(5), task(11)]
    assert "also late: worker:11 2.00 ms (median) in 6 of 6 steps" in f["message"]
    steps = {t["task"]: t["steps"] for t in pod.to_doc()["tasks"]}
    assert [s["collective_s"] for s in steps[task(11)]] == [(9800 - 7000) * US / 1e12] * 6
    assert [s["collective_s"] for s in steps[task(5)]] == [(9800 - 8000) * US / 1e12] * 6


# --- 5. one file


def test_one_file_is_the_merged_analysis(fixture_8gpu: Path) -> None:
    pod = analyze_pod(fixture_8gpu)
    merged = analyze_xplane(fixture_8gpu)
    got, want = pod.to_doc(), merged.to_doc()
    assert got["hosts"] == 1 and got["failed_hosts"] == []
    assert set(got) - set(want) == set(POD_ONLY)
    assert text({k: got[k] for k in want}) == text(want)
    assert text(evaluate_trace(pod.facts).to_json()) == text(evaluate_trace(merged).to_json())
    assert isinstance(pod.results[0], HostResult) and not any(isinstance(r, HostFailure) for r in pod.results)


def test_a_single_host_s_events_kept_from_the_map_s_read(tmp_path: Path) -> None:
    """``keep_events``: one host's events, read once for its map, kept on the result as ``load_hosts``
    gives them (what a report's Chrome trace and timeline read), and the same document."""
    import numpy as np

    from tfprof_towers.trace.hosts import load_hosts

    root = tmp_path / "one"
    host(0, sends=((1, "edge_a"),)).write_logdir(root, run=RUN, host="h0")
    tasks = {"h0": task(0)}
    kept = analyze_pod(root, tasks=tasks, edge_bytes=EDGE_BYTES, keep_events=True)
    plain = analyze_pod(root, tasks=tasks, edge_bytes=EDGE_BYTES)
    assert plain.events is None and text(full_doc(kept)) == text(full_doc(plain))
    want = load_hosts(root, tasks=tasks)
    got = kept.events
    assert got is not None and got.notes == want.notes
    assert [(h.name, h.task, h.window) for h in got.hosts] == [(h.name, h.task, h.window) for h in want.hosts]
    assert np.array_equal(got.hosts[0].steps.start_ps, want.hosts[0].steps.start_ps)
    assert got.columns.n == want.columns.n > 0
    assert np.array_equal(got.columns.start_ps, want.columns.start_ps)
    devices = [[t.columns.text(c) for c in t.columns.device] for t in (got, want)]
    assert devices[0] == devices[1]


def same(a: Any, b: Any) -> bool:
    """Whether two traces (or any of their parts) hold the same values, array by array."""
    import dataclasses

    import numpy as np

    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and np.array_equal(a, b)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, Strings):  # a table of strings, equal by its items
        return isinstance(b, Strings) and a.items == b.items
    return a == b


def test_a_few_small_hosts_events_kept_from_the_map_s_read(tmp_path: Path, monkeypatch) -> None:
    """``keep_events`` on several hosts whose files are small: the map runs here, host after host, and
    their reads, joined, are the trace ``load_hosts`` reads (every column, note, host and step table),
    less the hosts that failed, which ``load_hosts`` skips; the document is the pool's.  Above the size
    (``KEEP_EVENTS_BYTES``) or on another executor, none are kept: the pool's processes hold them."""
    from tfprof_towers.trace import executors
    from tfprof_towers.trace.hosts import load_hosts

    root = four_hosts(tmp_path / "four")
    kept = analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, keep_events=True)
    pooled = analyze_pod(root, tasks=TASKS4, edge_bytes=EDGE_BYTES, executor=LocalPool(workers=2))
    assert pooled.events is None and text(full_doc(kept)) == text(full_doc(pooled))
    want = load_hosts(root, tasks=TASKS4, workers=2)
    assert kept.events is not None and kept.events.columns.n > 0 and same(kept.events, want)
    assert sorted(set(kept.events.columns.line_host.tolist())) == [0, 1, 2, 3]
    cut(root / "plugins" / "profile" / RUN / "h2.xplane.pb")
    broken = analyze_pod(root, tasks=TASKS4, keep_events=True)
    assert [f.name for f in broken.failures] == ["h2"]
    assert same(broken.events, load_hosts(root, tasks=TASKS4, skip=("h2",)))
    monkeypatch.setattr(executors, "KEEP_EVENTS_BYTES", 1000)  # the four files are larger together
    big = analyze_pod(root, tasks=TASKS4, keep_events=True, executor="serial")
    assert big.events is None and text(big.to_doc()) == text(broken.to_doc())
