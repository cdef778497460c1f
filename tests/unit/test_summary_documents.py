"""The records summary.json's audit, findings, rules, math, cluster and placement parts are read into:
each writes the JSON it reads, key for key, and says which field is wrong."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from report_kit import make_run_dir

from tfprof_towers.rundir.cluster_doc import ClusterView, NetworkLink
from tfprof_towers.rundir.fields import RecordError
from tfprof_towers.rundir.math_table import MathRow, MathTable
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.placement_audit import Audit, LinkModel, VariablePulls
from tfprof_towers.rundir.placement_doc import Placement
from tfprof_towers.rundir.rule_docs import Finding, RuleStatus, TraceFinding
from tfprof_towers.rundir.summary import Summary
from tfprof_towers.session.report import finish_run


def test_a_report_s_summary_reads_back_to_the_same_document(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    doc = finish_run(RunDir(run))
    summary = Summary.from_json(json.loads((run / "summary.json").read_text()))
    assert summary.to_json() == doc
    bug = summary.entry("towers_bug")
    assert isinstance(bug.audit, Audit) and bug.audit.host_flops_share == 0.6
    assert [f.rule for f in summary.findings if f.variant == "towers_bug"] == [
        "host_compute", "variables_remote"]
    assert all(isinstance(r, RuleStatus) for r in summary.rules)
    assert isinstance(summary.math, MathTable)


def test_a_finding_leaves_out_no_devices_but_a_trace_finding_writes_them() -> None:
    f = Finding("r", "low", "v", "m", "Suggestion: s", {"x": [1, 2]}, ("a.py:1",))
    assert f.to_json() == {"rule": "r", "severity": "low", "variant": "v", "message": "m",
                           "suggestion": "Suggestion: s", "evidence": {"x": [1, 2]}, "sources": ["a.py:1"]}
    traced = TraceFinding.of(f).to_json()
    assert list(traced)[-1] == "devices" and traced["devices"] == []
    assert Finding.from_json(f.to_json()) == f
    with pytest.raises(RecordError, match="finding: message is missing"):
        Finding.from_json({"rule": "r", "severity": "low", "variant": "v", "suggestion": "s"})


def test_a_rule_status_writes_not_evaluated_only_for_a_run() -> None:
    one_trace = RuleStatus("precision", threshold=0.8, evaluated=False, why_not="no kernels")
    assert "not_evaluated" not in one_trace.to_json()
    run = RuleStatus("variables_remote", threshold="pcie3_x16", not_evaluated={"a": "no placement recorded"})
    assert run.to_json()["not_evaluated"] == {"a": "no placement recorded"}
    assert RuleStatus.from_json(run.to_json()) == run
    assert RuleStatus.from_json(one_trace.to_json()) == one_trace
    with pytest.raises(RecordError, match="rule: threshold must be a number or a string"):
        RuleStatus.from_json({"rule": "r", "threshold": [1]})


def test_math_rows_write_their_keys_in_the_order_of_each_case() -> None:
    compared = MathRow("v", "differs", (math.nan, 0.5), 0.1, why="loss is NaN at step 1",
                       loss_rel_diff=(math.nan, 0.0), grad_norm_rel_diff=0.0)
    assert list(compared.to_json()) == ["variant", "losses", "grad_norm", "not_finite", "why", "status",
                                        "loss_rel_diff", "grad_norm_rel_diff"]
    assert compared.to_json()["losses"] == [None, 0.5]
    random = MathRow("d", "not compared", (1.0,), None, why="the step draws random numbers",
                     random_ops=("x",))
    assert list(random.to_json()) == ["variant", "losses", "grad_norm", "status", "why", "random_ops"]
    same = MathRow("s", "same", (1.0,), 0.2, loss_rel_diff=(0.0,), grad_norm_rel_diff=0.0)
    assert list(same.to_json()) == ["variant", "losses", "grad_norm", "status", "loss_rel_diff",
                                    "grad_norm_rel_diff"]
    # strict JSON writes the NaN difference as null: it reads back as NaN
    doc = {**compared.to_json(), "loss_rel_diff": [None, 0.0]}
    back = MathRow.from_json(doc)
    assert math.isnan(back.losses[0]) and math.isnan(back.loss_rel_diff[0]) and back.why == compared.why
    with pytest.raises(RecordError, match="status must be one of"):
        MathRow.from_json({"variant": "v", "status": "close"})


def test_a_placement_keeps_each_number_as_written_and_names_a_bad_node() -> None:
    doc = {"devices": {"/device:CPU:0": {"ops": 2, "flops_per_step": 1.5e3, "op_types": {"MatMul": 2}}},
           "nodes": [{"name": "a", "device": "/device:CPU:0", "flops": 7,
                      "sources": [{"file": "t.py", "line": 3, "device": "/cpu:0"}]}],
           "transfers": [{"src": "x", "dst": "y", "bytes_per_step": 8, "tensors": 1}],
           "collectives": [{"name": "c", "device": "y", "bytes": 6528, "group_size": 2}]}
    p = Placement.from_json(doc)
    assert p.devices["/device:CPU:0"].to_json() == {"ops": 2, "flops_per_step": 1500.0}
    assert type(p.nodes[0].flops) is int and p.nodes[0].sources[0].label == "t.py:3"
    assert p.transfers[0].to_json() == {"src": "x", "dst": "y", "bytes_per_step": 8, "tensors": 1}
    assert p.edges is None and p.collectives[0].bytes == 6528
    with pytest.raises(RecordError, match=r"record.json: placement: nodes\[0\].name must be a string"):
        Placement.from_json({"nodes": [{"name": 3, "device": "d"}]})


def test_audit_parts_keep_their_json_keys() -> None:
    pulls = VariablePulls(8, 1, {"g": 8}, ("h",), ("t.py:1",))
    assert pulls.to_json() == {"bytes_per_step": 8, "tensors": 1, "by_accelerator": {"g": 8}, "from": ["h"],
                               "sources": ["t.py:1"]}
    assert VariablePulls.from_json(pulls.to_json()) == pulls
    assert LinkModel("k", "n", 1e9, "s").to_json() == {"key": "k", "name": "n", "bytes_per_s": 1e9,
                                                       "source": "s"}
    assert LinkModel("k", "n", 1e9, "s", ("network",)).to_json()["kinds"] == ["network"]


def test_a_cluster_view_keeps_the_capture_s_parts_as_written() -> None:
    link = NetworkLink("a", "b", "worker:0", "worker:1", bytes_per_step=4, traced_per_step=None)
    view = ClusterView("multi_worker", True, None, {"worker": ["x"]}, None, [{"task": "worker:0"}],
                       network=(link,), stepping_tasks=("worker:0",))
    doc = view.to_json()
    assert doc["network"][0]["from"] == "worker:0" and doc["cluster"] == {"worker": ["x"]}
    assert ClusterView.from_json(doc) == view and view.on_loopback
