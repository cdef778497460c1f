"""Across tasks, without TensorFlow: the per-step straggler view, the straggler rule, network bytes,
multi-host hardware profiles and the projection of the cluster variants, the CLI's cluster options."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import typed_kit as typed

from tfprof_towers.advice import rules as advise
from tfprof_towers.analysis.cluster_view import (
    STEP_COLUMNS,
    STRAGGLER_PARAMS,
    _group_medians,
    _median_of_others,
    as_task_steps,
    cluster_view,
    network_links,
    short_task,
    step_table,
    stragglers,
)
from tfprof_towers.cli import main
from tfprof_towers.projection.cluster import project_cluster
from tfprof_towers.projection.hardware import HardwareError, builtin_dir, load_file, load_hardware
from tfprof_towers.rundir.placement_doc import Placement
from tfprof_towers.variants.config import PRESETS

W0, W1, W2 = "/job:worker/task:0", "/job:worker/task:1", "/job:worker/task:2"
MS = 1e-3


def tasks_doc(late_ms: dict[str, list[float]], step_ms: float = 40.0, transfer_ms: float = 2.0) -> list[dict]:
    """Synchronous steps: each task computes ``step_ms - transfer_ms - max(late)`` plus its lateness,
    then waits in the all-reduce; every task leaves the step together."""
    names = list(late_ms)
    n = len(late_ms[names[0]])
    out = []
    for task in names:
        steps = []
        for i in range(n):
            worst = max(late_ms[t][i] for t in names)
            start = i * step_ms
            end = start + step_ms
            arrival = end - transfer_ms - (worst - late_ms[task][i])
            steps.append({"step": i, "start_s": start * MS, "end_s": end * MS,
                          "collective_s": (end - arrival) * MS})
        out.append({"task": task, "host": task, "steps": steps})
    return out


DELAYED = tasks_doc({W0: [0.0, 0.0, 0.0, 0.0], W1: [20.0, 21.0, 20.0, 0.5]})


def test_step_table_finds_the_late_task_per_step() -> None:
    t = step_table(as_task_steps(DELAYED))
    rows = [(task, step, round(coll / MS, 6), round(late / MS, 6), strag) for task, step, coll, late, strag
            in zip(t.task.tolist(), t.step.tolist(), t.collective_s.tolist(), t.late_s.tolist(),
                   t.straggler.tolist())]
    assert rows == [
        (W0, 0, 22.0, 0.0, False), (W1, 0, 2.0, 20.0, True),
        (W0, 1, 23.0, 0.0, False), (W1, 1, 2.0, 21.0, True),
        (W0, 2, 22.0, 0.0, False), (W1, 2, 2.0, 20.0, True),
        (W0, 3, 2.5, 0.0, False), (W1, 3, 2.0, 0.5, True),
    ]


def test_step_table_keeps_the_steps_two_tasks_ran_sorted_by_step_then_task() -> None:
    doc = tasks_doc({W1: [5.0, 0.0, 0.0], W0: [0.0, 0.0, 0.0]})
    doc.append({"task": W2, "host": W2, "steps": [{"step": 7, "start_s": 0.0, "end_s": 0.04}]})  # alone
    t = step_table(as_task_steps(doc))
    assert list(zip(t.step.tolist(), t.task.tolist())) == [(0, W0), (0, W1), (1, W0), (1, W1), (2, W0),
                                                           (2, W1)]
    assert t.dur_s.tolist() == pytest.approx([0.04] * 6)
    assert t.straggler.tolist() == [False, True, False, False, False, False]  # no one late: no straggler
    frame = t.frame()
    assert list(frame.columns) == list(STEP_COLUMNS) and frame.task.tolist() == t.task.tolist()
    single = step_table(as_task_steps(doc[:1]))
    assert single.empty and len(single) == 0 and stragglers(single, **STRAGGLER_PARAMS) == []


def test_the_median_of_the_others_is_numpy_s_median_without_the_row() -> None:
    rng = np.random.default_rng(3)
    for n in range(2, 9):
        values = rng.choice([0.001, 0.002, 0.0035, 0.01], size=n) + rng.choice([0.0, 1e-4], size=n)
        got = _median_of_others(values, np.zeros(n, dtype=np.int64), np.array([0]))
        assert got.tolist() == [float(np.median(np.delete(values, k))) for k in range(n)]  # exact, ties too
    # two groups (steps) of 3 and 2 rows: each row's own group only
    values = np.array([3.0, 1.0, 2.0, 10.0, 20.0])
    got = _median_of_others(values, np.array([0, 0, 0, 1, 1]), np.array([0, 3]))
    assert got.tolist() == [1.5, 2.5, 2.0, 20.0, 10.0]
    assert _group_medians(values, np.array([0, 0, 0, 1, 1]), np.array([0, 3])).tolist() == [2.0, 15.0]


def test_stragglers_need_enough_steps_and_enough_lateness() -> None:
    t = step_table(as_task_steps(DELAYED))
    found = stragglers(t, **STRAGGLER_PARAMS)
    assert len(found) == 1
    s = found[0]
    # step 3 (0.5 ms late, 1% of the step) is below the 10% threshold: late in 3 of 4
    assert (s["task"], s["late_steps"], s["steps"]) == (W1, [0, 1, 2], 4)
    got = (s["late_s_median"], s["late_s_max"], s["step_s_median"])
    assert got == pytest.approx((20 * MS, 21 * MS, 40 * MS))
    assert s["others_wait_s_median"] == pytest.approx(22 * MS)
    assert stragglers(t, 0.001, 0.10, 0.8) == []  # 3 of 4 is below 80% of the steps
    assert stragglers(t, 0.0301, 0.0, 0.5) == []  # never 30 ms late
    balanced = tasks_doc({W0: [1.0, 0.0, 1.0, 0.0], W1: [0.0, 1.0, 0.0, 1.0], W2: [0.0] * 4})
    # 1 ms trades places: noise
    assert stragglers(step_table(as_task_steps(balanced)), **STRAGGLER_PARAMS) == []


def facts(entry_cluster: dict, breakdown: dict | None) -> advise.Facts:
    entry = typed.entry({"name": "multi_worker", "status": "ok", "family": "cluster",
                         "cluster": entry_cluster})
    return advise.Facts(replace(entry, breakdown=typed.breakdown(breakdown)), typed.topology({"kind": "cpu"}))


def rule(name: str) -> advise.Rule:
    return next(r for r in advise.RULES if r.name == name)


def test_straggler_rule_names_the_task_with_the_numbers() -> None:
    r = rule("straggler")
    f = r.check(r, facts({"loopback": True}, {"tasks": DELAYED}))
    assert f is not None
    assert f.severity == "medium"  # 20 ms of a 40 ms step (high: at least 25%), one tier lower on loopback
    assert f.message == ("on loopback, worker:1 reached the collectives last in 3 of 4 profiled steps "
                         "(steps 0, 1, 2), 20.0 ms late (median; worst 21.0 ms), 50.0% of the 40.0 ms step; "
                         "worker:0 waited 22.0 ms per step inside collective ops")
    assert f.suggestion.startswith("Suggestion: find what slows worker:1")
    assert "shares this machine's cores" in f.suggestion
    assert f.evidence["late_steps"] == [0, 1, 2]
    real = r.check(r, facts({"loopback": False}, {"tasks": DELAYED}))
    assert real is not None and real.severity == "high" and real.message.startswith("worker:1 reached")
    assert "shares this machine's cores" not in real.suggestion
    quiet = tasks_doc({W0: [0.0] * 4, W1: [0.3] * 4})
    assert r.check(r, facts({"loopback": True}, {"tasks": quiet})) is None


def test_straggler_rule_needs_two_stepping_tasks() -> None:
    r = rule("straggler")
    ps = facts({"family": "parameter_server", "stepping_tasks": ["chief:0"]}, {"tasks": [
        {**DELAYED[0], "task": "/job:chief/task:0"}, *DELAYED]})  # workers' windows are not steps of theirs
    assert advise.unmet(r, ps) == ("fewer than two of its tasks ran steps (parameter_server: only the "
                                   "chief does)")
    broken = facts({"family": "multi_worker"}, {"error": "bad trace"})
    assert advise.unmet(r, broken) == "its trace could not be analysed: bad trace"
    single = typed.entry({"name": "single", "status": "ok"})
    one_process = advise.Facts(replace(single, breakdown=typed.breakdown({"tasks": []})),
                               typed.topology({"kind": "gpu"}))
    assert advise.unmet(r, one_process) is None and r.check(r, one_process) is None


def test_network_links_are_labelled_loopback() -> None:
    placement = {"transfers": [
        {"src": f"{W0}/device:CPU:0", "dst": f"{W1}/device:CPU:0", "bytes_per_step": 6532, "tensors": 2,
         "kind": "collective"},
        {"src": "/job:ps/task:0/device:CPU:0", "dst": f"{W0}/device:CPU:0", "bytes_per_step": 6528,
         "tensors": 13, "kind": "send_recv"},
        {"src": f"{W0}/device:CPU:0", "dst": f"{W0}/device:CPU:0", "bytes_per_step": 1, "kind": "send_recv"},
    ]}
    breakdown = {"links": [{"src": "/job:ps/task:0/device:CPU:0", "dst": f"{W0}/device:CPU:0",
                            "kind": "network", "count": 13, "bytes": 6528}]}
    links = network_links(Placement.from_json(placement), typed.breakdown(breakdown), loopback=True)
    rows = [r.to_json() for r in links]
    assert [(r["from"], r["to"], r["via"], r["bytes_per_step"], r["traced_per_step"], r["loopback"])
            for r in rows] == [
        ("worker:0", "worker:1", "ring all-reduce", 6532, None, True),
        ("ps:0", "worker:0", "send/recv", 6528, 13, True),
    ]
    typed_view = cluster_view({"family": "multi_worker", "loopback": True, "tasks": []},
                              Placement.from_json(placement),
                              typed.breakdown({"tasks": DELAYED, "links": []}))
    assert typed_view is not None and typed_view.on_loopback
    view = typed_view.to_json()
    assert "not a network card" in view["network_note"]
    assert [s["task"] for s in view["stragglers"]] == [W1]
    assert len(view["steps"]) == 8
    assert cluster_view(None, Placement.from_json(placement), None) is None
    assert short_task("/job:ps/task:0/device:CPU:0") == "ps:0" and short_task("/host:CPU") == "/host:CPU"


# -- multi-host hardware profiles and the projection across hosts


SIMPLE = """
name = "simple"
description = "round numbers"
[host]
model = "cpu"
cores = 1
clock_ghz = 1.0
flops_per_cycle_vectorised = 1
flops_per_cycle_unvectorised = 1
tensorflow_build = "vectorised"
efficiency = 1.0
memory_bandwidth_gbs = 100
memory_efficiency = 1.0
op_overhead_us = 0
source = "test"
[accelerator]
model = "acc"
count = 2
fp32_tflops = 1
matmul_tflops = 1
memory_bandwidth_gbs = 1000
efficiency = 1.0
memory_efficiency = 1.0
op_overhead_us = 0
source = "test"
[host_link]
name = "bus"
bandwidth_gbs = 10
efficiency = 1.0
latency_us = 0
source = "test"
[peer]
kind = "direct"
topology = "switch"
name = "peer"
bandwidth_gbs = 10
efficiency = 1.0
latency_us = 0
source = "test"
"""
NETWORK = """
[network]
name = "nic"
bandwidth_gbs = 1
efficiency = 1.0
latency_us = 0
source = "test"
"""


def test_projection_across_hosts_by_hand(tmp_path: Path) -> None:
    f = tmp_path / "simple.toml"
    f.write_text(SIMPLE + NETWORK)
    doc = project_cluster(load_file(f), PRESETS["tiny"], workers=2, ps=1)
    by = {e["name"]: e for e in doc["variants"]}
    # tiny: 6 blocks of 16x16 (+16): 1632 parameters, 6528 gradient bytes; 557056 matmul FLOPs per step
    mw = by["multi_worker"]["projected_step_s"]
    compute = 557056 / 4 / 1e12 + (7 * 6 * 4096 / 4 + 10 * 6528) / 1e12  # 4 replicas, Adam on each
    ring = 2 * 3 / 4 * 6528 / 1e9  # 4 accelerators, the 1 GB/s card is the slowest link
    assert mw == {"overlapped": pytest.approx(ring, rel=1e-12),
                  "serial": pytest.approx(compute + ring, rel=1e-12)}
    ps = by["parameter_server"]["projected_step_s"]
    card = 2 * 6528 / 1e9  # the ps card carries both workers' bytes, each way
    local = 6528 / 1e10 + 6528 / 1e10  # the pair's all-reduce on the peer link; the variables over the bus
    update = 2 * 10 * 6528 / 100e9
    compute_ps = 557056 / 4 / 1e12 + 7 * 6 * 4096 / 4 / 1e12
    assert ps == {"overlapped": pytest.approx(2 * card, rel=1e-12),
                  "serial": pytest.approx(compute_ps + 2 * card + update + local, rel=1e-12)}
    assert doc["ranking"] == ["multi_worker", "parameter_server"]
    assert doc["recommendation"]["variant"] == "multi_worker"
    assert by["parameter_server"]["bottleneck"]["text"].startswith("the ps hosts' network cards (nic)")


def test_a_single_host_profile_cannot_be_projected_across_hosts(tmp_path: Path) -> None:
    f = tmp_path / "simple.toml"
    f.write_text(SIMPLE)
    with pytest.raises(HardwareError, match=r"describes one machine \(no \[network\] section\)"):
        project_cluster(load_file(f), PRESETS["tiny"], workers=2)
    g = tmp_path / "bad.toml"
    g.write_text(SIMPLE + NETWORK.replace("latency_us = 0\n", ""))
    with pytest.raises(HardwareError, match=r"\[network\] missing key 'latency_us'"):
        load_file(g)


def test_builtin_multi_host_profile() -> None:
    hw = load_hardware("8x-a100-100gbe")
    assert hw.network is not None and hw.network.bytes_per_s == pytest.approx(10e9)
    assert hw.summary()["network"]["name"] == "100 Gb/s Ethernet (one port per host)"
    for line in (builtin_dir() / "8x-a100-100gbe.toml").read_text().splitlines():
        if re.match(r"^\s*\w+\s*=\s*[-\d.]+\s*(#.*)?$", line):
            assert len(line.partition("#")[2].strip()) > 8, f"no source next to: {line}"


def test_project_workers_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["project", "--workers", "4", "--hardware", "8x-a100-100gbe"]) == 0
    out = capsys.readouterr().out
    assert "PROJECTED step time on 4 x 8x-a100-100gbe" in out
    assert re.search(r"│ 1 │ multi_worker .*\n.*\n?│ 2 │ parameter_server", out)
    assert "Hosts linked by 100 Gb/s Ethernet" in out
    assert main(["project", "--workers", "2", "--hardware", "8x-a100-nvlink"]) == 2
    assert "describes one machine" in capsys.readouterr().err
    assert main(["project", "--ps", "2", "--hardware", "8x-a100-100gbe"]) == 2
    assert "--ps goes with --workers" in capsys.readouterr().err


# -- the CLI's cluster options: one line, before anything runs


@pytest.mark.parametrize(("argv", "message"), [
    (["--ps", "1"], "give --workers N too"),
    (["--workers", "2", "--cluster", "c.json"], "cannot be combined with --workers"),
    (["--workers", "2", "--variants", "parameter_server"], "parameter_server needs --ps M"),
    (["--workers", "2", "--variants", "single"], "single is a tf1-graph variant"),
    (["--workers", "20"], "must be at most 16"),
    (["--workers", "12", "--ps", "4"], "17 task processes; at most 16 on one machine"),
    (["--variants", "multi_worker"], "multi_worker is a cluster variant: it runs with --workers N"),
])
def test_cluster_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     message: str) -> None:
    out = tmp_path / "run"
    try:
        code = main(["profile", "--preset", "tiny", "--out", str(out), *argv])
    except SystemExit as exc:  # argparse's own check of a number
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_cluster_file_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"worker": ["nohost"]}')
    assert main(["profile", "--cluster", str(bad), "--out", str(tmp_path / "r1")]) == 2
    assert "'nohost' is not host:port" in capsys.readouterr().err
    good = tmp_path / "c.json"
    good.write_text('{"worker": ["127.0.0.1:6001", "127.0.0.1:6002"]}')
    assert main(["profile", "--cluster", str(good)]) == 2
    assert "--cluster needs --out DIR" in capsys.readouterr().err
    assert main(["profile", "--cluster", str(good), "--variants", "parameter_server",
                 "--out", str(tmp_path / "r2")]) == 2
    assert "parameter_server does not match the cluster file's jobs" in capsys.readouterr().err


# -- the report's "across tasks" section


def test_report_section_across_tasks(tmp_path: Path) -> None:
    from report_kit import make_run_dir

    from tfprof_towers.render.html import render_report_text
    from tfprof_towers.rundir.paths import RunDir
    from tfprof_towers.session.report import finish_run

    run = make_run_dir(tmp_path / "run")
    summary = finish_run(RunDir(run))
    assert 'id="cluster"' not in render_report_text(summary, run)  # no cluster variant: no section
    placement = {"transfers": [{"src": f"{W0}/device:CPU:0", "dst": f"{W1}/device:CPU:0",
                                "bytes_per_step": 6532, "tensors": 2, "kind": "collective"}]}
    tasks = [{"task": "worker:0", "address": "127.0.0.1:6001", "pid": 11, "status": "failed",
              "exit": "exit code 3", "stage": "profiled", "error": "UnavailableError: Socket closed"},
             {"task": "worker:1", "address": "127.0.0.1:6002", "pid": 12, "status": "failed",
              "exit": "killed by SIGSEGV", "stage": None, "progress": "tracing", "error": None}]
    ok = {"family": "multi_worker", "loopback": True, "tasks": tasks[:0], "attempts": []}
    failed = {"family": "multi_worker", "loopback": True, "failed_task": "worker:1", "tasks": tasks,
              "attempts": [{"attempt": 1, "status": "failed", "error": "worker:1 <b>crashed</b>",
                            "wall_s": 5.0}]}
    entries = summary["variants"]
    view = cluster_view(ok, Placement.from_json(placement), typed.breakdown({"tasks": DELAYED, "links": []}))
    entries[0] = {**entries[0], "cluster": view.to_json()}
    entries[1] = {**entries[1], "status": "failed", "error": "worker:1 <b>crashed</b>",
                  "cluster": cluster_view(failed, None, None).to_json()}
    html = render_report_text(summary, run)
    section = html[html.index('<section id="cluster">'):html.index('<section id="audit">')]
    assert '<a href="#cluster">across tasks</a>' in html
    assert "Failed — task worker:1:</b> worker:1 &lt;b&gt;crashed&lt;/b&gt;" in section
    assert '<tr class="failed-task"><td class="mono">worker:1</td>' in section
    assert "127.0.0.1_6002.xplane.pb" in section and "killed by SIGSEGV" in section
    assert '<span class="badge loopback">loopback</span> not a network measurement' in section
    assert "worker:0 → worker:1" in section and "6.53 kB" in section
    assert section.count('class="num straggler"') == 3  # worker:1 in steps 0-2 (step 3: 0.5 ms, too little)
    assert "was late in 3 of 4 steps (steps 0, 1, 2) by 20.0 ms" in section


def test_project_a_cluster_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dataclasses import replace

    from records_kit import record, run_doc, write_run

    from tfprof_towers.variants.config import ClusterOptions, VariantSpec

    run = run_doc(["multi_worker", "parameter_server"])
    config = replace(run.config, cluster=ClusterOptions(workers=3, ps=2),
                     variants=(VariantSpec.builtin("multi_worker"), VariantSpec.builtin("parameter_server")))
    root = tmp_path / "run"
    write_run(root, replace(run, config=config), [record("multi_worker"), record("parameter_server")])
    assert main(["project", str(root), "--hardware", "8x-a100-100gbe", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hardware"] == "3 x 8x-a100-100gbe (+2 ps hosts for parameter_server)"
    assert (doc["cluster"]["workers"], doc["cluster"]["ps"]) == (3, 2)
    summary = json.loads((root / "summary.json").read_text())
    assert summary["projection"]["ranking"] == doc["ranking"]
