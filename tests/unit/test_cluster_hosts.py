"""A cluster variant's run directory with synthetic multi-host traces, analysed end to end (no TensorFlow):
one trace per task, a delayed worker, the straggler rule, task names everywhere, network links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_kit import HOSTS, RUN, W0, W1, make_cluster_run, worker

from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run
from tfprof_towers.vocab.device_names import link_kind


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_cluster_run(tmp_path / "run")


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
