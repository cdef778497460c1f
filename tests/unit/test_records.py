"""Typed run-directory documents: round trips, one-line errors naming file and field, and
wrongly typed records that ``report`` names and skips while the rest renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from records_kit import GPU, edit_record, record, run_doc
from report_kit import make_run_dir

from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import (
    ChildSpec,
    RecordError,
    RunDoc,
    VariantRecord,
    load_record,
    load_run,
    load_run_or_skip,
)
from tfprof_towers.rundir.summary import Summary, SummaryEntry

WHERE = "variants/v/record.json"


def test_variant_record_round_trip() -> None:
    rec = record("towers_bug", 0.05, 0.048, 0.052, topology=GPU)
    assert VariantRecord.from_json(rec.to_json()) == rec
    assert VariantRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_child_record_keeps_the_runner_fields_out() -> None:
    """The child's own record has no ``wall_s`` and friends: the runner adds them (tests wait on it)."""
    doc = VariantRecord("v", "failed", error="boom", stage="build").to_json()
    assert set(doc) == {
        "schema",
        "name",
        "source",
        "status",
        "error",
        "stage",
        "versions",
        "topology",
        "timings",
        "placement",
    }
    assert doc["timings"] == {}


def test_run_doc_and_child_spec_round_trip() -> None:
    run = run_doc(["single", "mine"], accelerators=2)
    again = RunDoc.from_json(json.loads(json.dumps(run.to_json())))
    assert again == run
    assert [(v.name, v.file, v.family) for v in again.variants] == [
        ("single", None, "tf1-graph"),
        ("mine", "/x/mine.py", "tf1-graph"),
    ]
    assert again.to_json()["config"]["variants"][1] == {
        "name": "mine",
        "source": "file:/x/mine.py",
        "family": "tf1-graph",
    }
    spec = ChildSpec("v", "tf1-graph", None, run.preset, None, 1, 5, 3, "/l", "/r.json")
    assert ChildSpec.from_json(spec.to_json()) == spec


def test_old_run_json_without_family_gets_the_registry_family() -> None:
    doc = run_doc(["single"]).to_json()
    del doc["config"]["variants"][0]["family"]
    assert RunDoc.from_json(doc).variants[0].family == "tf1-graph"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["timings"].update(step_time_s="fast"),
            'timings.step_time_s must be an object, not the string "fast"',
        ),
        (
            lambda d: d["timings"]["step_time_s"].update(median="fast"),
            'timings.step_time_s.median must be a number, not the string "fast"',
        ),
        (lambda d: d.update(placement="x"), 'placement must be an object, not the string "x"'),
        (lambda d: d.pop("name"), "name is missing"),
        (
            lambda d: d.update(status="great"),
            "status must be one of 'ok', 'failed', 'skipped', not the string \"great\"",
        ),
        (
            lambda d: d["timings"].update(step_times_s=[0.1, None]),
            "timings.step_times_s[1] must be a number, not null",
        ),
        (
            lambda d: d["placement"]["transfers"][0].update(bytes_per_step=True),
            "placement.transfers[0].bytes_per_step must be a number, not true",
        ),
        (
            lambda d: d["placement"]["devices"]["/device:CPU:1"].update(ops=1.5),
            "placement.devices./device:CPU:1.ops must be an integer, not the number 1.5",
        ),
    ],
)
def test_wrong_types_are_one_line_naming_file_and_field(change: Any, message: str) -> None:
    doc = record(
        "v",
        place={
            "devices": {"/device:CPU:1": {"ops": 1, "flops_per_step": 2}},
            "nodes": [],
            "edges": [],
            "transfers": [{"src": "a", "dst": "b", "bytes_per_step": 4, "tensors": 1}],
        },
    ).to_json()
    change(doc)
    with pytest.raises(RecordError) as info:
        VariantRecord.from_json(doc, WHERE)
    assert str(info.value) == f"{WHERE}: {message}"
    assert info.value.detail == message


def test_run_json_config_of_the_wrong_type() -> None:
    doc = run_doc(["single"]).to_json()
    doc["config"] = "x"
    with pytest.raises(RecordError, match=r'^run.json: config must be an object, not the string "x"$'):
        RunDoc.from_json(doc)


def test_summary_and_entry_round_trip_and_errors(tmp_path: Path) -> None:
    from tfprof_towers.session.report import finish_run

    run = make_run_dir(tmp_path / "run")
    doc = finish_run(RunDir(run))
    summary = Summary.from_json(json.loads((run / "summary.json").read_text()))
    assert summary.to_json() == doc
    entry = dict(doc["variants"][0], step_time_s={"median": "fast"})
    with pytest.raises(RecordError, match=r'^x: step_time_s.median must be a number, not the string "fast"$'):
        SummaryEntry.from_json(entry, "x")
    with pytest.raises(RecordError, match="ranking names variants the summary lacks: ghost"):
        Summary.from_json({**doc, "ranking": ["ghost"]})


# ------------------------------------------------------------------------------------------
# report RUN_DIR on wrongly typed documents: named, skipped, and the rest renders



@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            lambda d: d["timings"].update(step_time_s="fast"),
            'record.json is invalid: timings.step_time_s must be an object, not the string "fast"',
        ),
        (
            lambda d: d["timings"]["step_time_s"].update(median="fast"),
            'record.json is invalid: timings.step_time_s.median must be a number, not the string "fast"',
        ),
        (
            lambda d: d.update(placement="x"),
            'record.json is invalid: placement must be an object, not the string "x"',
        ),
        (lambda d: d.pop("name"), "record.json is invalid: name is missing"),
        (
            lambda d: d.update(name="other"),
            'record.json is invalid: name is the string "other", not its folder\'s',
        ),
    ],
)
def test_report_names_and_skips_a_wrongly_typed_record(
    tmp_path: Path, change: Any, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run_dir(tmp_path / "run")
    edit_record(run, "towers_bug", change)
    assert main(["report", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    by = {v["name"]: v for v in summary["variants"]}
    assert (by["towers_bug"]["status"], by["towers_bug"]["error"]) == ("failed", why)
    assert by["single"]["status"] == "ok" and by["single"]["audit"] is not None
    assert summary["ranking"] == ["single", "towers_bug", "broken"]
    assert summary["recommendation"]["variant"] == "single"
    html = (run / "report.html").read_text()
    assert 'id="recommended-variant">single<' in html
    assert str(escape(why)) in html  # in the ranking and under "Failed variants", as text
    assert "towers_bug" in capsys.readouterr().out


def test_report_names_and_skips_a_wrongly_typed_run_json(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    doc = json.loads((run / "run.json").read_text())
    doc["config"] = "x"
    (run / "run.json").write_text(json.dumps(doc))
    assert main(["report", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    problem = f'{run / "run.json"}: config must be an object, not the string "x"; run.json was skipped'
    assert summary["problems"] == [problem]
    assert summary["config"] is None
    # the variants on disk still render, in folder order; the topology comes from their records
    assert [v["name"] for v in summary["variants"]] == ["broken", "single", "towers_bug"]
    assert summary["topology"]["kind"] == "logical-cpu"
    assert summary["recommendation"]["variant"] == "single"
    html = (run / "report.html").read_text()
    assert "config must be an object, not the string &#34;x&#34;; run.json was skipped" in html


def test_strict_and_lenient_run_json(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    (run / "run.json").write_text("{not json")
    with pytest.raises(Exception, match="corrupt JSON"):
        load_run(RunDir(run))
    doc, problems = load_run_or_skip(RunDir(run))
    assert doc == RunDoc() and len(problems) == 1 and "corrupt JSON" in problems[0]
    (run / "run.json").unlink()
    with pytest.raises(Exception, match="not a tfprof-towers run directory"):
        load_run_or_skip(RunDir(run))


def test_load_record_stand_ins(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    rd = RunDir(run)
    assert load_record(rd, "single").ok
    assert load_record(rd, "nope").error == "record.json is missing"
    assert load_record(rd, "nope", interrupted=True).error == "not run: the profile was interrupted first"
    (run / "variants" / "single" / "record.json").write_text("[1]")
    assert load_record(rd, "single").error == "record.json is corrupt: not a variant record"
