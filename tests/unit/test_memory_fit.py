"""Memory fit on the target (projection/memory_fit.py, the projection's merging in projection/api.py, and the
recommender): verdicts with exact numbers, the headroom's edge, profiles with and without ``memory_gb``,
projection.json's schema, and summary.json's compact projection.

The estimates are the graph child's documents (``graphcost.estimate_memory``), written in code
(``report_kit.MEMORY``): on two 6 GiB GTX 1060s, ``single`` needs 7.2 GiB on GPU 0.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from report_kit import GPU0, GPU1, HOST, MEMORY, PROJECTION_PROFILE, make_projection, memory_estimate

from tfprof_towers.projection.hardware import GIB, load_file, load_hardware
from tfprof_towers.projection.memory_fit import (
    ESTIMATED,
    HEADROOM,
    NOT_CHECKED,
    Fit,
    capacity_of,
    device_rows,
    fit_of,
    with_memory,
)
from tfprof_towers.rundir.summary import MAY_NOT_FIT_WHY, judged


@pytest.fixture(scope="module")
def hw():
    return load_hardware(PROJECTION_PROFILE)


def test_profiles_give_memory_sizes(hw) -> None:
    assert (hw.accelerator.memory_gb, hw.host.memory_gb) == (6.0, 16.0)
    assert hw.accelerator.memory_bytes == 6 * GIB
    assert capacity_of(GPU0, hw) == 6 * GIB and capacity_of(HOST, hw) == 16 * GIB
    assert {load_hardware(n).accelerator.memory_gb for n in ("2x-rtx4090-pcie4", "4x-v100-nvlink",
                                                            "8x-a100-nvlink")} == {24.0, 16.0, 40.0}


def test_device_rows_and_a_verdict_that_does_not_fit(hw) -> None:
    rows = device_rows(MEMORY["single"], hw)
    assert rows[GPU0] == {"peak_bytes": int(7.2 * GIB), "basis": "estimated",
                          "persistent_bytes": int(0.07 * GIB),
                          "transient_bytes": int(7.2 * GIB) - int(0.07 * GIB),
                          "capacity_bytes": 6 * GIB, "fits": False, "may_not_fit": False,
                          "peak_low_bytes": int(7.2 * GIB), "peak_high_bytes": int(7.2 * GIB)}
    assert rows[HOST]["capacity_bytes"] == 16 * GIB and rows[HOST]["fits"] is True
    fit = fit_of(rows, MEMORY["single"])
    assert (fit.fits, fit.device) == (False, GPU0)
    assert fit.verdict == "does not fit: 7.20 GiB on GPU:0 of 6 GiB (5.40 GiB usable)"
    assert fit.why == ("the variables and their optimizer slots (38 tensors, 0.07 GiB) on GPU:0; the "
                       "largest tensors live at the peak: big/<b>act</b> 1.80 GiB, small 1.00 KiB; 7.13 GiB "
                       "of tensors live at once in all")


def test_a_verdict_that_fits_names_the_tightest_device(hw) -> None:
    fit = fit_of(device_rows(MEMORY["towers_bug"], hw), MEMORY["towers_bug"])
    # 3.0 of 16 GiB on the host is 19%; 0.6 of 6 GiB on a GPU is 10%
    assert (fit.fits, fit.device) == (True, HOST)
    assert fit.verdict == "fits: peak 3 GiB of 16 GiB (14.4 GiB usable) on CPU:0"
    assert fit.why == ""


@pytest.mark.parametrize(("peak", "fits"), [(int(6 * GIB * (1 - HEADROOM)), True),
                                            (int(6 * GIB * (1 - HEADROOM)) + 1, False)])
def test_the_headroom_is_the_edge(hw, peak: int, fits: bool) -> None:
    estimate = {"devices": {GPU0: {"peak_bytes": peak, "transient_bytes": peak, "persistent_bytes": 0}}}
    assert fit_of(device_rows(estimate, hw), estimate).fits is fits


def test_no_estimate_or_no_memory_size_is_not_a_verdict(hw) -> None:
    assert fit_of({}, None).to_json()["fits"] is None
    err = fit_of({}, {"error": "the memory estimate failed: boom"})
    assert (err.fits, err.verdict) == (None, "memory not estimated: the memory estimate failed: boom")
    bare = replace(hw, accelerator=replace(hw.accelerator, memory_gb=None),
                   host=replace(hw.host, memory_gb=None))
    entry = with_memory({"name": "single"}, MEMORY["single"], bare)
    assert entry["memory_fit"]["fits"] is None and entry["memory_fit"]["verdict"] == NOT_CHECKED
    assert entry["memory"][GPU0]["capacity_bytes"] is None and entry["memory"][GPU0]["fits"] is None
    assert entry["memory"][GPU0]["peak_bytes"] == int(7.2 * GIB)  # the estimate is still shown


def test_a_users_profile_without_memory_is_accepted(tmp_path: Path) -> None:
    from tfprof_towers.projection.hardware import builtin_dir

    text = (builtin_dir() / f"{PROJECTION_PROFILE}.toml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("memory_gb")]
    path = tmp_path / "mine.toml"
    path.write_text("\n".join(lines) + "\n")
    hw = load_file(path)
    assert hw.accelerator.memory_gb is None and hw.host.memory_gb is None
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("memory_gb = 6 ", "memory_gb = -6 ", 1))
    from tfprof_towers.projection.hardware import HardwareError

    with pytest.raises(HardwareError, match=r"\[accelerator\] memory_gb must be positive"):
        load_file(bad)


# ------------------------------------------------------------------ the projection document


def test_projection_marks_single_as_not_fitting_and_recommends_one_that_fits() -> None:
    doc = make_projection(memory=True)
    by = {e["name"]: e for e in doc["variants"]}
    assert doc["schema"] == 2
    assert doc["memory"]["basis"] == ESTIMATED and doc["memory"]["headroom"] == HEADROOM
    assert doc["memory"]["accelerator_memory_gb"] == 6.0 and doc["memory"]["note"] is None
    verdict = "does not fit: 7.20 GiB on GPU:0 of 6 GiB (5.40 GiB usable)"
    assert by["single"]["memory_fit"]["verdict"] == verdict
    assert set(by["single"]["memory"][GPU0]) == {"peak_bytes", "basis", "persistent_bytes", "transient_bytes",
                                                "capacity_bytes", "fits", "may_not_fit", "peak_low_bytes",
                                                "peak_high_bytes"}
    assert "single" in doc["ranking"]  # it stays in the ranking
    rec = doc["recommendation"]
    assert rec["variant"] == "replicated"
    assert doc["ranking"] == ["replicated", "single", "towers_bug"]
    # the runner-up named is the next one that fits (single, second, is not a choice)
    assert rec["reason"].endswith(
        "; next: towers_bug (+1463.5%); memory: fits: peak 3.10 GiB of 6 GiB (5.40 GiB usable) on GPU:1")
    assert by["replicated"]["memory"][GPU1]["fits"] is True


def test_summary_keeps_the_verdicts(tmp_path: Path) -> None:
    from report_kit import make_run_dir, write_projection

    from tfprof_towers.rundir.paths import RunDir
    from tfprof_towers.session.report import finish_run

    run = make_run_dir(tmp_path)
    write_projection(run, memory=True)
    summary = finish_run(RunDir(run))
    proj = summary["projection"]
    by = {v["name"]: v for v in proj["variants"]}
    assert by["single"]["memory_fit"]["fits"] is False
    assert by["single"]["memory"][GPU0]["peak_bytes"] == int(7.2 * GIB)
    assert proj["memory"]["headroom"] == HEADROOM
    # a CPU stand-in run: the headline comes from the projection, and never names what does not fit
    rec = summary["recommendation"]
    assert rec["basis"] == "projected" and rec["variant"] != "single"
    assert rec["excluded"]["single"] == "does not fit: 7.20 GiB on GPU:0 of 6 GiB (5.40 GiB usable)"
    assert memory_estimate({GPU0: 1.0})["devices"][GPU0]["peak_bytes"] == GIB
    from tfprof_towers.rundir.summary import MemoryPeak, Summary

    typed = Summary.from_json(summary)
    row = typed.entry("single").memory[GPU0]
    assert row == MemoryPeak(int(7.2 * GIB), "estimated", int(0.07 * GIB), 6 * GIB, False,
                             estimate_low_bytes=int(7.2 * GIB), estimate_high_bytes=int(7.2 * GIB),
                             may_not_fit=False)
    assert summary["schema"] == 4


def test_measured_rows_keep_the_estimate_beside_them(tmp_path: Path) -> None:
    """A variant whose trace has allocator events: measured peaks, the estimate next to a device both give,
    judged against the target's capacity (less its headroom), not the run's own allocator's limit."""
    from test_trace_memory import memory_trace

    from tfprof_towers.analysis.pipeline import VariantTrace, with_memory
    from tfprof_towers.rundir.projection_doc import ProjectionSummary
    from tfprof_towers.rundir.summary import MemoryPeak, Summary, SummaryEntry
    from tfprof_towers.rundir.trace_doc import TraceDoc
    from tfprof_towers.trace.executors import analyze_pod

    path = tmp_path / "h.xplane.pb"
    path.write_bytes(memory_trace().to_bytes())
    pod = analyze_pod(path)
    # the target's GPU holds 7 MB, less the 10% headroom: the measured 6.5 MB do not fit it (the run's own
    # allocator had 6 GB)
    projection = {"memory": {"headroom": 0.1}, "variants": [{"name": "single", "memory": {
        GPU0: {"peak_bytes": 13_000_000, "persistent_bytes": 1_000, "capacity_bytes": 7_000_000,
               "fits": False},
        "/device:GPU:3": {"peak_bytes": 5, "persistent_bytes": 0, "capacity_bytes": 6 * GIB, "fits": True}}}]}
    summary = Summary("run", variants=(SummaryEntry("single", status="ok"),),
                      projection=ProjectionSummary.from_json(projection))
    out = with_memory(summary, {"single": VariantTrace(TraceDoc(), pod)})
    mem = out.entry("single").memory
    assert mem[GPU0] == MemoryPeak(6_500_000, "measured", 1_000_000, 7_000_000, False, 13_000_000)
    assert mem[GPU0].estimate_vs_measured == 2.0
    assert mem["/device:GPU:3"].basis == "estimated" and mem["/device:GPU:3"].estimate_vs_measured is None
    assert mem["/host:CPU"] == MemoryPeak(4096, "measured", 0, None, None)
    back = Summary.from_json(out.to_json()).entry("single").memory
    assert back == mem


# ------------------------------------------------------------------ the report's Memory section


def _report(tmp_path: Path, measured: bool) -> str:
    import json

    from report_kit import STEPS, build_trace, make_run_dir, write_projection

    from tfprof_towers.rundir.paths import RunDir
    from tfprof_towers.session.report import finish_run
    from tfprof_towers.testing.synth import Alloc, allocator_events

    run = make_run_dir(tmp_path, hostile=True)
    write_projection(run, memory=True)
    if measured:  # single's trace gets GPU 0's allocator: 1 MiB then 3 MiB in use, of 8 MiB
        rec = json.loads((run / "variants" / "single" / "record.json").read_text())
        b = build_trace(rec["placement"]["nodes"])
        events = [Alloc(STEPS[0][0] + 1000, 1 << 20, 1, "<i>x</i>"),
                  Alloc(STEPS[0][0] + 2000, 2 << 20, 2, "y")]
        allocator_events(b.plane("/host:CPU").line("alloc"), "GPU_0_bfc", events, limit=8 << 20)
        b.write(run / rec["xplane_files"][0])
    finish_run(RunDir(run))
    return (run / "report.html").read_text()


def test_report_shows_each_variants_peaks_verdicts_and_why(tmp_path: Path) -> None:
    import re

    html = _report(tmp_path, measured=False)
    assert '<a href="#memory">memory</a>' in html
    sec = html[html.index('<section id="memory">'):]
    sec = sec[:sec.index("</section>")]
    single = re.search(r'<div class="memory-variant" data-variant="single">(.*?)</div>', sec, re.S).group(1)
    verdict = "does not fit: 7.20 GiB on GPU:0 of 6 GiB (5.40 GiB usable)"
    assert f'<span class="no-fit">— {verdict}</span>' in single
    assert "big/&lt;b&gt;act&lt;/b&gt; 1.80 GiB" in single and "<b>act</b>" not in single
    assert single.count('class="peak estimated"') == 1 and 'class="capacity"' in single  # GPU 0, vs 6 GiB
    assert "<td>estimated</td>" in single
    bug = re.search(r'data-variant="towers_bug">(.*?)</div>', sec, re.S).group(1)  # the run has no replicated
    assert "— fits: peak 3 GiB of 16 GiB (14.4 GiB usable) on CPU:0" in bug
    assert bug.count('class="peak estimated"') == 2
    assert "10% of each device" in sec


def test_report_draws_measured_peaks_and_their_timeline(tmp_path: Path) -> None:
    import re

    html = _report(tmp_path, measured=True)
    sec = html[html.index('<section id="memory">'):]
    single = re.search(r'<div class="memory-variant" data-variant="single">(.*?)</div>', sec, re.S).group(1)
    assert 'class="peak measured"' in single  # GPU 0's peak from the trace: solid
    assert '<svg class="memory-timeline" data-device="/device:GPU:0"' in single
    # GPU 0 has both: the measured 3 MiB, the estimate 7.2 GiB beside it
    row = re.search(r'<tr><td class="mono">/device:GPU:0</td>(.*?)</tr>', single, re.S).group(1)
    assert "<td>measured</td>" in row and "7.20 GiB estimated, 2457.60× the measured" in row


# ------------------------------------------------------------------ the run's finding


def test_a_run_finding_says_which_tensors_make_the_difference(tmp_path: Path) -> None:
    from report_kit import make_run_dir, write_projection

    from tfprof_towers.advice.memory_rules import DOES_NOT_FIT
    from tfprof_towers.rundir.paths import RunDir
    from tfprof_towers.session.report import finish_run

    assert DOES_NOT_FIT.param("headroom") == HEADROOM  # the rule judges as the projection does
    run = make_run_dir(tmp_path / "with")
    write_projection(run, memory=True)
    summary = finish_run(RunDir(run))
    found = [f for f in summary["findings"] if f["rule"] == "does_not_fit"]
    assert [f["variant"] for f in found] == ["single"]  # towers_bug fits
    assert found[0]["message"] == (
        "on 2x-gtx1060-pcie3, this placement does not fit: 7.20 GiB on GPU:0 of 6 GiB (5.40 GiB usable): "
        "the variables and their optimizer slots (38 tensors, 0.07 GiB) on GPU:0; the largest tensors live "
        "at the peak: big/<b>act</b> 1.80 GiB, small 1.00 KiB; 7.13 GiB of tensors live at once in all")
    assert found[0]["severity"] == "medium" and found[0]["evidence"]["device"] == GPU0
    rule = next(r for r in summary["rules"] if r["rule"] == "does_not_fit")
    assert rule["evaluated"]
    bare = make_run_dir(tmp_path / "without")  # no projection: not evaluated, and why
    rules = {r["rule"]: r for r in finish_run(RunDir(bare))["rules"]}
    assert not rules["does_not_fit"]["evaluated"]


def test_a_small_verdict_is_never_zero_of_zero(tmp_path) -> None:
    """A tiny model on a tiny device: the verdict names sizes that show, not "0.00 GiB of 0.00 GiB"."""
    from tfprof_towers.projection.hardware import load_hardware
    from tfprof_towers.vocab.fmt import fmt_gib

    assert (fmt_gib(1 << 20), fmt_gib(3 << 10), fmt_gib(100), fmt_gib(0), fmt_gib(6 << 30)) == (
        "1.00 MiB", "3.00 KiB", "100 B", "0 GiB", "6 GiB")
    hw = load_hardware("2x-gtx1060-pcie3")
    rows = device_rows({"devices": {GPU0: {"peak_bytes": 300_000, "transient_bytes": 300_000}}}, hw)
    rows[GPU0]["capacity_bytes"] = 4_000_000
    rows[GPU0]["fits"] = True
    fit = fit_of(rows, {"devices": {}})
    assert "0.00 GiB" not in fit.verdict
    assert fit.verdict == "fits: peak 292.97 KiB of 3.81 MiB (3.43 MiB usable) on GPU:0"


def test_a_range_over_the_executors_orders_fits_may_not_fit_or_does_not_fit(hw) -> None:
    """5.40 GiB usable of 6 GiB (5,798,205,849 B): the high end under it fits; the low end under it and the
    high end over it may not fit (named, one line, not "does not fit"); the low end over it does not fit."""
    def verdict(low: int, high: int) -> Fit:
        est = {"devices": {GPU0: {"peak_bytes": low, "peak_low_bytes": low, "peak_high_bytes": high,
                                  "persistent_bytes": 0, "transient_bytes": low}}}
        return fit_of(device_rows(est, hw), est)

    usable = 5_798_205_849
    fits = verdict(4 * GIB, usable)
    assert (fits.fits, fits.may_not_fit, fits.peak_high_bytes) == (True, False, usable)
    assert fits.verdict == ("fits: peak 4 GiB (up to 5.40 GiB in another executor order) of 6 GiB "
                            "(5.40 GiB usable) on GPU:0")
    maybe = verdict(4 * GIB, usable + 1)
    assert (maybe.fits, maybe.may_not_fit) == (True, True)
    assert maybe.verdict == ("may not fit: peak 4 GiB to 5.40 GiB on GPU:0 of 6 GiB (5.40 GiB usable): "
                             "fits " + MAY_NOT_FIT_WHY)
    assert "\n" not in maybe.verdict and not maybe.verdict.startswith("does not fit")
    over = verdict(usable + 1, usable + 2)
    assert (over.fits, over.may_not_fit) == (False, False) and over.verdict.startswith("does not fit: ")
    assert judged(10, 20, None, 0.1) == (None, False) and judged(90, 101, 100, 0.0) == (True, True)
    assert judged(90, 100, 100, 0.0) == (True, False) and judged(101, 102, 100, 0.0) == (False, False)


def test_the_terminal_and_the_report_say_may_not_fit_and_show_the_range() -> None:
    """A measured row on a logical device with the estimate's range beside it: 8.00 MB measured, the
    estimate 7.6 MB (x0.95) in a range of 7.6 to 10 MB, inside; 12 MB is over 1.1 x 10 MB, outside.  A
    verdict that may not fit is yellow, named, never red."""
    from tfprof_towers.commands.console import memory_cell, peak_cell
    from tfprof_towers.render.memory_charts import memory_view
    from tfprof_towers.rundir.projection_doc import ProjectionSummary
    from tfprof_towers.rundir.summary import MemoryPeak, Summary, SummaryEntry, estimate_gap

    label = "measured at the cpu preset, logical devices on this CPU"
    inside = MemoryPeak(8_000_000, "measured", 0, label=label, estimated_peak_bytes=7_600_000,
                        estimate_low_bytes=7_600_000, estimate_high_bytes=10_000_000)
    outside = replace(inside, peak_bytes=12_000_000)
    assert (inside.inside_range, outside.inside_range) == (True, False)
    assert peak_cell({"/device:CPU:1": inside}) == "8.00 MB CPU:1 (meas.) est. x0.95 (x0.95-x1.25)"
    assert peak_cell({"/device:CPU:1": outside}) == (
        "12.0 MB CPU:1 (meas.) est. x0.63 (x0.63-x0.83, outside)")
    assert estimate_gap({"/device:CPU:1": outside}).text().endswith(
        "; the measured peak is outside the range of the executor's orders")
    fit = {"fits": True, "may_not_fit": True, "peak_bytes": 4 * GIB, "device": GPU0,
           "verdict": "may not fit: peak 4 GiB to 6 GiB on GPU:0 of 6 GiB (5.40 GiB usable): fits ..."}
    assert memory_cell(fit) == "[yellow]4 GiB GPU:0 (may not fit)[/]"
    row = MemoryPeak(4 * GIB, "estimated", 0, 6 * GIB, True, estimate_low_bytes=4 * GIB,
                     estimate_high_bytes=6 * GIB, may_not_fit=True)
    projection = {"label": "projected", "hardware": "toy",
                  "variants": [{"name": "single", "memory_fit": fit}]}
    typed = Summary("run", variants=(SummaryEntry("single", status="ok", memory={GPU0: row}),),
                    projection=ProjectionSummary.from_json(projection))
    view = memory_view(Summary.from_json(typed.to_json()))
    assert view is not None and view["rows"][0]["may_not_fit"] is True and view["rows"][0]["fits"] is True
    assert view["rows"][0]["devices"][0]["row"].may_not_fit is True
