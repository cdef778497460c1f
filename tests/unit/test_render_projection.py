"""The report's "Measured here vs projected on HARDWARE" section (``profile --project-on NAME``)."""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest
from report_kit import HOSTILE, PROJECTION_PROFILE, make_run_dir, write_projection

from tfprof_towers.analysis.pipeline import compact_projection
from tfprof_towers.projection.api import ASSUMPTIONS
from tfprof_towers.render.filters import fmt_seconds
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run

OUR_SCRIPTS = 2  # the JSON data block and the inlined report.js


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return make_run_dir(tmp_path / "run")


def section(html: str) -> str:
    """The projection section's HTML (fails when it is absent)."""
    m = re.search(r'<section id="projection".*?</section>', html, re.S)
    assert m, "no projection section"
    return m.group(0)


def row(sec: str, variant: str) -> str:
    m = re.search(rf'<tr data-variant="{re.escape(variant)}">(.*?)</tr>', sec, re.S)
    assert m, f"no row for {variant}"
    return m.group(1)


def text(fragment: str) -> str:
    """Visible text of an HTML fragment, whitespace collapsed."""
    spaced = re.sub(r"<br>", " ", fragment)
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", "", spaced)).split())


def test_summary_carries_the_compact_projection(run: Path) -> None:
    doc = write_projection(run)
    summary = finish_run(RunDir(run))
    proj = summary["projection"]
    assert proj["label"] == "projected" and proj["hardware"] == PROJECTION_PROFILE
    assert proj["assumptions"] == list(ASSUMPTIONS)
    assert proj["recommendation"] == doc["recommendation"]
    assert proj["ranking"] == ["replicated", "single", "towers_bug"]
    by = {v["name"]: v for v in proj["variants"]}
    assert set(by["towers_bug"]) == {"name", "rank", "projected_step_s", "bottleneck", "memory", "memory_fit"}
    assert by["towers_bug"]["memory_fit"]["verdict"] == "memory not estimated"  # the kit's graphs carry none
    assert by["towers_bug"]["bottleneck"] == "host compute (/device:CPU:0)"
    assert by["towers_bug"]["projected_step_s"] == next(
        v for v in doc["variants"] if v["name"] == "towers_bug")["projected_step_s"]
    assert by["broken"] == {"name": "broken", "error": "building the graph failed: ValueError: no"}
    assert proj["profile"]["host_link"]["bandwidth_gbs"] == 7.88
    assert json.loads((run / "summary.json").read_text())["projection"] == proj


def test_section_shows_measured_and_labelled_projected_numbers(run: Path) -> None:
    doc = write_projection(run)
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    assert '<a href="#projection">' in html
    sec = section(html)
    heading = text(re.search(r"<h2>.*?</h2>", sec, re.S).group(0))
    assert heading == f"Measured here vs projected on {PROJECTION_PROFILE}"
    assert 'class="badge projected"' in sec
    headers = [text(h) for h in re.findall(r"<th[^>]*>.*?</th>", sec.split("</thead>")[0], re.S)]
    assert headers[:6] == ["variant", "measured median step here (2 logical CPU devices)", "measured rank",
                           "projected step overlapped – serial", "projected rank", "projected bottleneck"]
    projected = {v["name"]: v for v in doc["variants"]}
    for name, measured_median, measured_rank in (("single", "10.0 ms", "1"), ("towers_bug", "50.0 ms", "2")):
        r = row(sec, name)
        cells = re.findall(r"<td([^>]*)>(.*?)</td>", r, re.S)
        assert [text(c) for _, c in cells[1:3]] == [measured_median, measured_rank]
        assert all("projected" not in attrs for attrs, _ in cells[1:3])
        step = projected[name]["projected_step_s"]
        want = f"{fmt_seconds(step['overlapped'])} – {fmt_seconds(step['serial'])}"
        assert [text(c) for _, c in cells[3:6]] == [want, str(projected[name]["rank"]),
                                                   projected[name]["bottleneck"]["text"]]
        assert all(re.search(r'class="(num )?projected"', attrs) for attrs, _ in cells[3:6])
        assert all("projected on 2x-gtx1060-pcie3, not measured" in attrs for attrs, _ in cells[3:5])
    assert "not in this run" in text(row(sec, "replicated"))  # projected, never measured here
    broken = text(row(sec, "broken"))
    assert "failed here" in broken and "building the graph failed" in broken
    rec = text(re.search(r'<div class="projected-recommendation".*?</div>', sec, re.S).group(0))
    assert rec.startswith(f"projected recommendation on {PROJECTION_PROFILE}: replicated "
                          "(measured here: single)")
    assert "projected fastest on 2x-gtx1060-pcie3" in rec
    page = text(sec)
    assert "logical CPU devices standing in for accelerators" in page
    for assumption in ASSUMPTIONS:
        assert assumption in page
    assert "7.88 GB/s per direction; × 0.8 efficiency; 10 µs latency" in page
    assert "2 × NVIDIA GeForce GTX 1060 6GB" in page and "builtin:2x-gtx1060-pcie3" in page
    # the built-in profile's sources are carried into the projection and shown beside its numbers
    assert "PCI-SIG PCI Express Base Specification Revision 3.0" in page
    assert "in the profile's TOML" not in page


def test_no_projection_no_section(run: Path) -> None:
    summary = finish_run(RunDir(run))
    assert summary["projection"] is None
    html = (run / "report.html").read_text()
    assert 'id="projection"' not in html and "#projection" not in html
    body = html.split("</style>", 1)[1]
    assert "projected" not in body


@pytest.mark.parametrize("content, why", [
    ("{not json", "corrupt JSON"),
    ("[]", "not a projection document"),
    ('{"label": "projected"}', "not a projection document (KeyError"),
    ('{"label": "projected", "hardware": "x", "assumptions": [], "recommendation": {},'
     ' "variants": [{"name": "single", "projected_step_s": {"overlapped": NaN, "serial": 1}}]}',
     "not a projection document (ValueError"),
    ('{"label": "projected", "hardware": "x", "assumptions": [], "recommendation": {}, "variants": 3}',
     "not a projection document (TypeError"),
])
def test_unreadable_projection_is_reported_not_raised(run: Path, content: str, why: str) -> None:
    (run / "projection.json").write_text(content)
    summary = finish_run(RunDir(run))
    assert why in summary["projection"]["error"]
    html = (run / "report.html").read_text()
    sec = text(section(html))
    assert "The projection could not be read:" in sec and why in sec
    assert 'id="ranking-table"' in html and "projection-table" not in html  # the rest still renders


def test_unreadable_projection_file(run: Path) -> None:
    (run / "projection.json").mkdir()  # a directory where the file should be
    summary = finish_run(RunDir(run))
    assert "cannot read" in summary["projection"]["error"]
    assert "The projection could not be read" in (run / "report.html").read_text()


def test_hostile_hardware_name_is_escaped(tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "hostile", hostile=True)
    write_projection(run, hardware_name=HOSTILE)
    summary = finish_run(RunDir(run))
    assert summary["projection"]["hardware"] == HOSTILE
    html = (run / "report.html").read_text()
    assert HOSTILE not in html and "<img" not in html.lower()
    assert html.count("</script>") == OUR_SCRIPTS
    sec = section(html)
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in sec
    assert f"Measured here vs projected on {HOSTILE}" in text(sec)
    assert f'title="projected on {htmllib.escape(HOSTILE)}, not measured"' in sec
    assert "builtin:2x-gtx1060-pcie3" in text(sec)  # the TOML it came from, not the new name


def test_preset_and_device_count_mismatch_are_said(run: Path) -> None:
    doc = write_projection(run)
    doc["preset"]["name"] = "seed"
    doc["profile"]["accelerator"]["count"] = 8
    (run / "projection.json").write_text(json.dumps(doc))
    finish_run(RunDir(run))
    sec = text(section((run / "report.html").read_text()))
    assert "projected at the seed preset, measured at tiny: compare the rankings, not the times" in sec
    assert "measured with 2 accelerator(s) here, projected with 8" in sec


def test_profile_sources_are_shown_when_the_document_has_them(run: Path) -> None:
    doc = write_projection(run)
    doc["profile"]["host_link"]["source"] = "PCI-SIG PCI Express Base Specification Revision 3.0"
    (run / "projection.json").write_text(json.dumps(doc))
    finish_run(RunDir(run))
    sec = section((run / "report.html").read_text())
    assert "<th>source</th>" in sec
    assert "PCI-SIG PCI Express Base Specification Revision 3.0" in sec


def test_compact_projection_rejects_other_documents() -> None:
    with pytest.raises(ValueError):
        compact_projection({"label": "measured"})
