"""Issue 22: failures that say what happened (no TensorFlow child, no subprocess of the tool).

Each test is one case a user ran: a model whose loss is NaN, inputs that must be refused up
front, a disk that fills during the run.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from records_kit import record, run_doc, write_run

from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import MathCheck, load_record

NAN_FINDING = "loss is NaN at step 1 (the model diverges or its inputs hold NaN); timings are still valid"
LOSSES = (0.47490591, 0.47462937)
NORM = 0.14417072


def strict_loads(text: str) -> object:
    """``json.loads`` that fails on ``NaN``/``Infinity`` (not strict JSON)."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def by_name(summary: dict) -> dict[str, dict]:
    return {v["name"]: v for v in summary["variants"]}


# --------------------------------------------------------------------------- a NaN loss


def nan_run(tmp_path: Path, diverged: tuple[str, ...] = ("replicated",)) -> RunDir:
    names = ["single", "replicated", "towers_host_vars"]
    recs = []
    for i, n in enumerate(names):
        math_check = (MathCheck((math.nan, math.nan), math.nan) if n in diverged
                      else MathCheck(LOSSES, NORM))
        # the diverged variant is the fastest: the recommendation must still pass it over
        recs.append(replace(record(n, median=0.01 if n in diverged else 0.02 + 0.01 * i), math=math_check))
    return write_run(tmp_path / "run", run_doc(names), recs)


def test_a_nan_loss_is_written_as_null_plus_a_flag_and_read_back(tmp_path: Path) -> None:
    rd = nan_run(tmp_path)
    text = rd.record_json("replicated").read_text()
    doc = strict_loads(text)
    assert doc["math"] == {"losses": [None, None], "grad_norm": None,
                           "not_finite": {"losses[0]": "NaN", "losses[1]": "NaN", "grad_norm": "NaN"}}
    rec = load_record(rd, "replicated")
    assert rec.status == "ok", rec.error
    assert all(math.isnan(x) for x in (*rec.math.losses, rec.math.grad_norm))
    assert rec.timings.step_time_s.median == 0.01


def test_a_null_loss_without_its_flag_is_still_a_wrongly_typed_record(tmp_path: Path) -> None:
    rd = nan_run(tmp_path)
    path = rd.record_json("replicated")
    doc = json.loads(path.read_text())
    del doc["math"]["not_finite"]
    path.write_text(json.dumps(doc))
    rec = load_record(rd, "replicated")
    assert rec.status == "failed"
    assert rec.error == "record.json is invalid: math.losses[0] must be a number, not null"


def test_report_keeps_a_nan_variant_with_its_timings_and_finds_the_nan(tmp_path: Path) -> None:
    rd = nan_run(tmp_path)
    assert main(["report", str(rd.root)]) == 0
    summary = strict_loads((rd.root / "summary.json").read_text())
    nan = by_name(summary)["replicated"]
    assert nan["status"] == "ok" and nan["step_time_s"]["median"] == 0.01
    assert nan["losses"] == [None, None]
    assert nan["not_finite"] == {"losses[0]": "NaN", "losses[1]": "NaN", "grad_norm": "NaN"}
    found = [f for f in summary["findings"] if f["variant"] == "replicated"]
    assert [(f["rule"], f["severity"], f["message"]) for f in found] == [
        ("changed_math", "high", NAN_FINDING)]
    # the math check shows it, the others are compared with the baseline as before
    rows = {r["variant"]: r for r in summary["math"]["variants"]}
    assert rows["replicated"]["status"] == "differs" and rows["replicated"]["why"] == "loss is NaN at step 1"
    assert rows["towers_host_vars"]["status"] == "same" and rows["single"]["status"] == "reference"
    # the fastest, but its math differs: passed over, as any variant whose math differs
    assert summary["recommendation"]["variant"] != "replicated"
    assert "replicated" in summary["recommendation"]["excluded"]
    html = (rd.root / "report.html").read_text()
    assert ">NaN</td>" in html


def test_when_every_variant_diverges_each_has_the_finding_and_there_is_no_reference(tmp_path: Path) -> None:
    rd = nan_run(tmp_path, diverged=("single", "replicated", "towers_host_vars"))
    assert main(["report", str(rd.root)]) == 0
    summary = strict_loads((rd.root / "summary.json").read_text())
    assert {v["status"] for v in summary["variants"]} == {"ok"}
    assert sorted(f["variant"] for f in summary["findings"] if f["message"] == NAN_FINDING) == [
        "replicated", "single", "towers_host_vars"]
    assert summary["math"]["reference"] is None
    assert {r["status"] for r in summary["math"]["variants"]} == {"differs"}


def test_a_cluster_task_record_with_a_nan_loss_is_strict_and_read_back(tmp_path: Path) -> None:
    from tfprof_towers.capture.cluster.coord import write_marker
    from tfprof_towers.capture.cluster.docs import TaskRecord

    path = tmp_path / "record.json"
    write_marker(path, {"task": "worker:0", "status": "ok", "step_times_s": [0.1],
                        "math": MathCheck((math.nan, 1.0), math.inf).to_json(), "stray": math.nan})
    doc = strict_loads(path.read_text())
    rec = TaskRecord.from_json(doc)
    assert math.isnan(rec.math.losses[0]) and rec.math.losses[1] == 1.0 and rec.math.grad_norm == math.inf
    assert doc["stray"] is None


def test_a_task_record_that_cannot_be_read_is_named_with_why(tmp_path: Path) -> None:
    from tfprof_towers.capture.cluster.docs import task_dir
    from tfprof_towers.capture.cluster.spec import TaskId
    from tfprof_towers.capture.cluster.watch import record_problem

    class A:  # the attempt's folder is all record_problem reads
        folder = tmp_path

    bad = task_dir(tmp_path, TaskId.parse("worker:1"))
    bad.mkdir(parents=True)
    (bad / "record.json").write_text('{"task": "worker:1", "status": "ok", "math": {"losses": [NaN]}}')
    assert record_problem(A(), "worker:0") == "worker:0 wrote no record"
    assert record_problem(A(), "worker:1") == (
        "worker:1's record.json is invalid: record.json: math.losses[0] must be a finite number, "
        "not the number nan")
