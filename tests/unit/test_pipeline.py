"""pipeline.py step by step on small run directories built in code (no TensorFlow): each step
returns a new summary, and what it adds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from records_kit import GPU, record, run_doc, write_run
from report_kit import ACC0, HOST, TOPOLOGY, make_run_dir

from tfprof_towers.advice.trace_rules import TRACE_RULES
from tfprof_towers.analysis.pipeline import (
    VariantTrace,
    analyze_traces,
    load_projection,
    with_audits,
    with_breakdowns,
)
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import load_records, load_run_or_skip
from tfprof_towers.rundir.summary import build_summary
from tfprof_towers.rundir.trace_doc import TraceDoc
from tfprof_towers.session.report import analyze_run, export_chrome_traces, finish_run, with_advice


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run_dir(tmp_path / "run")


def first_steps(run: Path):
    rd = RunDir(run)
    doc, problems = load_run_or_skip(rd)
    records = load_records(rd, doc)
    return rd, records, build_summary(rd, doc, records, problems)


def test_breakdowns_label_devices_and_leave_the_input_alone(run: Path) -> None:
    rd, records, summary = first_steps(run)
    analyses = analyze_traces(rd, summary, records)
    assert sorted(analyses) == ["single", "towers_bug"]  # the failed variant has no trace
    before = json.dumps(analyses["single"].breakdown.to_json(), sort_keys=True)
    out = with_breakdowns(summary, analyses)
    assert out is not summary and summary.entry("single").breakdown is None
    single = out.entry("single").breakdown
    assert {d: v.role for d, v in single.devices.items()} == {ACC0: "accelerator"}
    bug = out.entry("towers_bug").breakdown
    assert {d: v.role for d, v in bug.devices.items()} == {
        HOST: "host",
        ACC0: "accelerator",
        "/device:CPU:2": "accelerator",
    }
    assert single.steps == 3
    assert json.dumps(analyses["single"].breakdown.to_json(), sort_keys=True) == before
    assert out.entry("broken").breakdown is None


def test_breakdown_errors_are_kept(run: Path) -> None:
    _, _, summary = first_steps(run)
    out = with_breakdowns(summary, {"single": VariantTrace(TraceDoc(error="boom"))})
    assert out.entry("single").breakdown.to_json() == {"error": "boom"}  # what summary.json keeps
    assert out.entry("towers_bug").breakdown is None


def test_audits_once_per_variant_and_link_models_once_per_summary(run: Path) -> None:
    _, records, summary = first_steps(run)
    out = with_audits(summary, records)
    assert out.entry("broken").audit is None
    bug = out.entry("towers_bug").audit
    assert (bug.host_flops_share, bug.host_compute_share) == (0.6, None)  # no breakdown yet
    assert "link_models" not in bug.to_json()
    assert [m.key for m in out.link_models] == ["pcie3_x16", "pcie3_x8"]
    assert summary.link_models == () and summary.entry("towers_bug").audit is None


def test_advice_adds_findings_rules_and_the_recommendation(run: Path) -> None:
    _, records, summary = first_steps(run)
    audited = with_audits(summary, records)
    advised = with_advice(audited)
    assert audited.findings == () and audited.recommendation.variant is None
    assert [(f.rule, f.variant) for f in advised.findings] == [
        ("host_compute", "towers_bug"),
        ("variables_remote", "towers_bug"),
    ]
    assert advised.recommendation.variant == "single"
    rules = {r.rule: r.to_json() for r in advised.rules}
    assert rules["variables_remote"]["params"] == {
        "min_accelerators": 2,
        "link_model": "pcie3_x16",
        "medium_at_modeled_share": 0.1,
    }
    assert not rules["poor_scaling"]["evaluated"]


def test_gpu_run_whose_trace_failed_says_the_timing_rules_were_not_evaluated(run: Path) -> None:
    """A GPU run: one variant's trace is unreadable, so its timing rules cannot say anything."""
    run_json = json.loads((run / "run.json").read_text())
    run_json["topology"] = {"kind": "gpu", "host": HOST, "accelerators": [ACC0]}
    (run / "run.json").write_text(json.dumps(run_json))
    xplane = next((run / "tensorboard" / "towers_bug").glob("plugins/profile/*/*.xplane.pb"))
    xplane.write_bytes(b"\x00garbage")
    summary, _ = analyze_run(RunDir(run))
    rules = {r.rule: r.to_json() for r in summary.rules}
    error = summary.entry("towers_bug").breakdown.error
    assert rules["poor_scaling"]["evaluated"] is False
    assert rules["poor_scaling"]["not_evaluated"] == {"towers_bug": f"no device timings: {error}"}
    assert rules["poor_scaling"]["why_not"] == (
        f"not evaluated on 1 variant(s): towers_bug: no device timings: {error}")
    assert rules["host_compute"]["evaluated"] is True
    # the trace rules' status, after the run rules', per variant: no trace for towers_bug
    assert list(rules)[-len(TRACE_RULES) + 1:] == [r.name for r in TRACE_RULES if r.name != "straggler"]
    assert rules["host_bound"]["not_evaluated"] == {
        "single": "the trace has no accelerator plane (a CPU-only capture)",
        "towers_bug": "no trace analysed"}
    html = finish_run(RunDir(run)) and (run / "report.html").read_text()
    assert "not evaluated on 1 variant(s): towers_bug: no device timings" in html


def test_chrome_trace_export_that_cannot_be_written_says_why(run: Path) -> None:
    rd, records, summary = first_steps(run)
    analyses = analyze_traces(rd, summary, records)
    (run / "variants" / "towers_bug" / "trace.json").mkdir()  # a directory where the file goes
    out = export_chrome_traces(rd, summary, analyses)
    assert out.entry("single").chrome_trace == "variants/single/trace.json"
    assert out.entry("single").chrome_trace_error is None
    bug = out.entry("towers_bug")
    assert bug.chrome_trace is None and bug.chrome_trace_error.startswith("cannot write ")
    assert summary.entry("towers_bug").chrome_trace is None  # the input summary is unchanged


def test_the_report_shows_why_a_chrome_trace_is_missing(run: Path) -> None:
    (run / "variants" / "towers_bug" / "trace.json").mkdir()
    doc = finish_run(RunDir(run))
    bug = next(v for v in doc["variants"] if v["name"] == "towers_bug")
    assert bug["chrome_trace_error"].startswith("cannot write ")
    assert "not exported: cannot write " in (run / "report.html").read_text()


def test_no_breakdown_anywhere_says_why_per_variant(run: Path) -> None:
    for name in ("single", "towers_bug"):
        xplane = next((run / "tensorboard" / name).glob("plugins/profile/*/*.xplane.pb"))
        xplane.write_bytes(b"\x00garbage")
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    assert "No trace breakdown is available for this run:" in html
    assert html.count('<ul class="trace-errors">') == 1
    assert "<li><b>single</b>: " in html and "<li><b>towers_bug</b>: " in html


def test_finish_run_writes_what_it_returns(run: Path) -> None:
    doc = finish_run(RunDir(run))
    assert json.loads((run / "summary.json").read_text()) == json.loads(json.dumps(doc))
    assert doc["schema"] == 4 and doc["problems"] == [] and doc["projection"] is None  # 4: memory
    assert load_projection(RunDir(run)) is None


def test_pipeline_on_records_without_traces(tmp_path: Path) -> None:
    """Records only (no traces): audits, rules and the recommendation still come."""
    names = ["single", "replicated", "broken"]
    records = [
        record("single", 0.010, 0.009, 0.011, topology=GPU),
        record("replicated", 0.0048, 0.0047, 0.0049, topology=GPU),
        record("broken", status="failed", error="crashed: killed by SIGKILL"),
    ]
    rd = write_run(tmp_path / "run", run_doc(names, topology=GPU), records)
    summary, analyses = analyze_run(rd)
    assert analyses == {}
    assert summary.ranking == ("replicated", "single", "broken")
    assert summary.recommendation.variant == "replicated"
    assert summary.recommendation.speedup_vs_baseline == pytest.approx(10 / 4.8)
    rules = {r.rule: r.to_json() for r in summary.rules}
    # a GPU run, but no variant has a trace: the timing rules were not evaluated, and say so
    assert rules["poor_scaling"]["not_evaluated"] == {
        "single": "no device timings (no trace analysed)",
        "replicated": "no device timings (no trace analysed)",
    }
    assert replace(summary, rules=()).rules == ()


def test_topology_is_the_runs(run: Path) -> None:
    _, _, summary = first_steps(run)
    assert summary.topology.to_json() == TOPOLOGY


# -- a run on logical CPU devices: the projection decides, on one hardware profile


def _add_math(run: Path, name: str, losses: list[float], norm: float) -> None:
    path = run / "variants" / name / "record.json"
    doc = json.loads(path.read_text())
    doc["math"] = {"losses": losses, "grad_norm": norm}
    path.write_text(json.dumps(doc))


def test_a_cpu_run_with_a_projection_recommends_from_it(run: Path) -> None:
    from report_kit import PROJECTION_PROFILE, write_projection

    write_projection(run)
    summary, _ = analyze_run(RunDir(run))
    rec = summary.recommendation
    assert (rec.basis, rec.hardware, rec.preset, rec.label) == (
        "projected", PROJECTION_PROFILE, "tiny", f"projected on {PROJECTION_PROFILE}")
    # replicated is projected fastest but was never run here; towers_bug computes on the host
    assert (rec.variant, rec.fastest, rec.measured_pick) == ("single", "replicated", "single")
    assert rec.excluded == {
        "replicated": "not run here, so its placement and math were not checked",
        "towers_bug": "heavy compute on the host while accelerators are available (high-severity finding "
                      "host_compute)"}
    # one hardware profile: the links modeled times are quoted at are the projection's
    assert [(m.key, m.name) for m in summary.link_models] == [
        ("host_link", f"PCIe 3.0 x8 ({PROJECTION_PROFILE})"),
        ("peer", f"PCIe 3.0 x8, staged through host ({PROJECTION_PROFILE})")]
    links = {(ln.src, ln.dst): ln for ln in summary.entry("towers_bug").audit.links}
    assert links[(HOST, ACC0)].modeled_s == {"host_link": 3072 / (7.88e9 * 0.8)}
    [pulls] = [f for f in summary.findings if f.rule == "variables_remote"]
    assert pulls.evidence["modeled_s"] == {"host_link": 2048 / (7.88e9 * 0.8)}


def test_a_failed_projection_leaves_a_cpu_run_without_a_recommendation(run: Path) -> None:
    from tfprof_towers.projection.api import failed_projection
    from tfprof_towers.variants.config import PRESETS

    doc = failed_projection("2x-gtx1060-pcie3", PRESETS["seed"], "building the graphs took longer than 900 s")
    (run / "projection.json").write_text(json.dumps(doc))
    summary = finish_run(RunDir(run))
    assert summary["projection"] == {"label": "projected", "hardware": "2x-gtx1060-pcie3",
                                     "preset": {"name": "seed", "batch": 64, "dim": 1000, "blocks": 6},
                                     "error": "building the graphs took longer than 900 s"}
    rec = summary["recommendation"]
    assert (rec["variant"], rec["basis"], rec["measured_pick"]) == (None, "projected", "single")
    assert rec["error"] == "building the graphs took longer than 900 s"
    assert [m["key"] for m in summary["link_models"]] == ["pcie3_x16", "pcie3_x8"]  # no profile to quote
    html = (run / "report.html").read_text()
    assert "No recommendation" in html and "the projection on 2x-gtx1060-pcie3 failed" in html


def test_the_losses_go_side_by_side_into_the_summary(run: Path) -> None:
    _add_math(run, "single", [0.5, 0.25], 0.125)
    _add_math(run, "towers_bug", [0.5, 0.25], 0.0625)  # half the norm: a gradient went missing
    summary = finish_run(RunDir(run))
    by = {v["name"]: v for v in summary["variants"]}
    assert (by["single"]["losses"], by["single"]["grad_norm"]) == ([0.5, 0.25], 0.125)
    assert by["broken"]["losses"] is None
    assert [(r["variant"], r["status"]) for r in summary["math"]["variants"]] == [
        ("single", "reference"), ("towers_bug", "differs")]
    assert ("changed_math", "towers_bug", "high") in {
        (f["rule"], f["variant"], f["severity"]) for f in summary["findings"]}
