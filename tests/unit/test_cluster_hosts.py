"""A cluster variant's run directory with synthetic multi-host traces, analysed end to end (no TensorFlow):
one trace per task, a delayed worker, the straggler rule, task names everywhere, network links."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from records_kit import TINY, run_doc, stats, write_run
from trace_kit import US, TraceBuilder

from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import Timings, Topology, VariantRecord
from tfprof_towers.session.report import finish_run
from tfprof_towers.vocab.device_names import link_kind

T0 = 1_800_000_000_000_000_000  # ns since the epoch: one clock for both hosts (loopback)
RUN = "2026_12_01_00_00_00"
HOSTS = {"127.0.0.1_6001": "/job:worker/task:0", "127.0.0.1_6002": "/job:worker/task:1"}
W0, W1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
STEP_US = 40_000  # 40 ms steps
LATE_US = (20_000, 21_000, 20_000, 500)  # worker:1 arrives this late in steps 0..3
TRANSFER_US = 2_000  # the all-reduce itself, once both have arrived


def worker(task: int, lates: tuple[int, ...] = LATE_US) -> TraceBuilder:
    """Four synchronous steps: compute, then the all-reduce until the step's end (both leave together)."""
    b = TraceBuilder(hostname="vm")
    host = b.plane("/host:CPU")
    py = host.line("python", timestamp_ns=T0)
    ex = host.line("tf_Compute/1", timestamp_ns=T0)
    for step, late in enumerate(lates):
        t = T0 * 1000 + step * STEP_US * US  # absolute, in ps
        arrival = STEP_US - TRANSFER_US - (0 if task == 1 else late)
        py.event("train", t, STEP_US * US, {"step_num": step, "_r": 1})
        ex.event("block0/MatMul:MatMul", t + 1_000 * US, (arrival - 2_000) * US)
        ex.event("CollectiveReduceV2:CollectiveReduceV2", t + arrival * US, (STEP_US - arrival) * US)
    return b


def cluster_record() -> VariantRecord:
    ring = [{"src": a, "dst": b, "bytes_per_step": 6532, "tensors": 2, "kind": "collective"}
            for a, b in ((W0, W1), (W1, W0))]
    nodes = [{"name": "block0/MatMul", "device": d, "type": "MatMul", "kernel": "MatMul", "flops": 1000}
             for d in (W0, W1)]
    placement = {"nodes": nodes, "edges": [], "transfers": ring,
                 "devices": {d: {"ops": 1, "flops_per_step": 1000} for d in (W0, W1)}}
    tasks = [{"task": f"worker:{i}", "address": f"127.0.0.1:600{i + 1}", "status": "ok", "pid": 100 + i,
              "exit": "exit code 0", "stage": "done", "error": None} for i in range(2)]
    cluster = {"family": "multi_worker", "loopback": True, "attached": False,
               "cluster": {"worker": ["127.0.0.1:6001", "127.0.0.1:6002"]}, "host_tasks": HOSTS,
               "failed_task": None, "tasks": tasks, "attempts": [{"attempt": 1, "status": "ok"}],
               "stepping_tasks": ["worker:0", "worker:1"], "captured_tasks": ["worker:0", "worker:1"]}
    files = tuple(f"tensorboard/multi_worker/plugins/profile/{RUN}/{h}.xplane.pb" for h in HOSTS)
    return VariantRecord(name="multi_worker", status="ok", family="cluster",
                         topology=Topology("cpu", W0, ()), placement=placement,
                         timings=Timings(step_time_s=None), cluster=cluster, host_tasks=HOSTS,
                         xplane_files=files, versions={"tensorflow": "2.21.0"})


@pytest.fixture
def run(tmp_path: Path) -> Path:
    root = tmp_path / "run"
    timings = Timings(step_time_s=stats(0.04), profiled_step_time_s=stats(0.04))
    rec = replace(cluster_record(), timings=timings)
    write_run(root, run_doc(["multi_worker"], topology=rec.topology, preset=TINY), [rec])
    logdir = RunDir(root).logdir("multi_worker")
    for i, host in enumerate(HOSTS):
        worker(i).write_logdir(logdir, run=RUN, host=host)
    return root


def test_a_delayed_worker_is_named_with_its_numbers(run: Path) -> None:
    summary = finish_run(RunDir(run))
    entry = summary["variants"][0]
    assert sorted(entry["breakdown"]["devices"]) == [  # the MatMuls on each task's CPU, the rest its threads'
        W0, "/job:worker/task:0/host:CPU", W1, "/job:worker/task:1/host:CPU"]
    view = entry["cluster"]
    late = {(r["task"], r["step"]): round(r["late_s"] * 1e3, 6) for r in view["steps"] if r["straggler"]}
    assert late == {("/job:worker/task:1", 0): 20.0, ("/job:worker/task:1", 1): 21.0,
                    ("/job:worker/task:1", 2): 20.0, ("/job:worker/task:1", 3): 0.5}
    assert [s["task"] for s in view["stragglers"]] == ["/job:worker/task:1"]
    found = [f for f in summary["findings"] if f["rule"] == "straggler"]
    assert len(found) == 1
    f = found[0]
    assert (f["variant"], f["severity"]) == ("multi_worker", "medium")  # high, one tier lower on loopback
    assert f["message"] == (
        "on loopback, worker:1 reached the collectives last in 3 of 4 profiled steps (steps 0, 1, 2), "
        "20.0 ms late (median; worst 21.0 ms), 50.0% of the 40.0 ms step; worker:0 waited 22.0 ms per "
        "step inside collective ops")
    html = (run / "report.html").read_text()
    assert "worker:1 reached the collectives last" in html and 'id="cluster"' in html


def test_no_finding_when_the_workers_keep_pace(run: Path) -> None:
    logdir = RunDir(run).logdir("multi_worker")
    for i, host in enumerate(HOSTS):  # worker:1 no more than 0.3 ms behind, in half the steps
        worker(i, (300, 0, 300, 0)).write_logdir(logdir, run=RUN, host=host)
    summary = finish_run(RunDir(run))
    assert [f for f in summary["findings"] if f["rule"] == "straggler"] == []
    assert summary["variants"][0]["cluster"]["stragglers"] == []
    assert {r["step"]: r["late"] for r in summary["variants"][0]["cluster"]["steps"] if r["straggler"]} == {
        0: False, 2: False}


def test_links_between_tasks_are_network_links() -> None:
    assert link_kind(W0, W1, {"host": W0}) == "network"
    assert link_kind("/device:CPU:0", "/device:CPU:1", {"host": "/device:CPU:0", "accelerators":
                                                        ["/device:CPU:1"]}) == "host_to_device"


def test_the_audit_and_analyze_name_every_task(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = finish_run(RunDir(run))
    links = summary["variants"][0]["audit"]["links"]
    assert [(ln["src"], ln["dst"], ln["kind"], ln["via"], ln["modeled_s"]) for ln in links] == [
        (W0, W1, "network", "collective", {}), (W1, W0, "network", "collective", {})]
    assert main(["analyze", str(run), "--run", "multi_worker", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["task"] for t in doc["tasks"]] == ["/job:worker/task:0", "/job:worker/task:1"]
