"""The report, the analysis page and the diff page in a real headless browser (Debian's chromium), offline.

A browser is a process of its own, so these run in the e2e tier: the pages built from run directories
made in code (their markup is tests/unit/test_render.py's), the Scaling chart of a sweep
(tests/unit/test_scaling_sweep.py builds its section), and the report of the tier's shared real tiny run.

Skipped, with the reason, where ``/usr/bin/chromium`` or playwright is missing;
``make test`` installs chromium through the Makefile's ``browser`` target.
Screenshots go to ``tests/output/`` (git-ignored); with ``TFPROF_TOWERS_WRITE_SCREENSHOT=1`` the
README's screenshot is written to ``docs/report.png`` too (commit it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from browser_kit import Page, opened
from hosts_kit import hosts_doc
from report_kit import HOSTILE, make_run_dir, sweep_run_dir, write_projection

from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run

pytestmark = pytest.mark.browser

#: The README's screenshot, rewritten only when this variable is 1 (the PNG is committed).
WRITE_SCREENSHOT = "TFPROF_TOWERS_WRITE_SCREENSHOT"
README_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "report.png"
MAX_README_SCREENSHOT = 300 * 1024


def test_report_charts_render_offline(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    finish_run(RunDir(run))
    with opened(browser, run / "report.html") as page:
        assert page.count("#breakdown-chart svg.breakdown-chart") == 1
        assert page.count("#breakdown-chart rect.seg") > 0
        assert page.count("#breakdown-chart .legend-item") > 0
        assert page.count(".timeline svg.timeline-chart") == 2
        assert page.count("#timeline-towers_bug rect.ev") == 5  # its five ops, once in the step shown
        page.page.hover("#timeline-single rect.ev")
        tip = page.page.inner_text("#tooltip")
        assert "block0/MatMul:MatMul" in tip and "200 ns" in tip
        assert page.page.inner_text("#recommended-variant") == "single"
        shot = page.screenshot("report.png")
        assert shot.stat().st_size > 10_000


def test_hostile_names_stay_text_in_the_browser(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "hostile", hostile=True)
    finish_run(RunDir(run))
    with opened(browser, run / "report.html") as page:
        assert page.count("img") == 0
        assert page.count("script") == 2
        assert HOSTILE in page.page.inner_text("body")
        page.page.hover("#timeline-towers_bug rect.ev >> nth=0")
        page.screenshot("report-hostile.png")


def test_projection_section_renders(browser, tmp_path: Path) -> None:
    run = make_run_dir(tmp_path / "run")
    write_projection(run, hardware_name=HOSTILE)
    finish_run(RunDir(run))
    with opened(browser, run / "report.html") as page:
        assert page.count("img") == 0
        assert page.count("#projection-table tbody tr") == 4  # the run's 3 variants and 1 only projected
        assert page.count("#projection-table td.projected") > 0
        assert page.page.inner_text("#projection h2") == f"Measured here vs projected on {HOSTILE}"
        assert page.page.inner_text("#projected-recommendation").startswith("projected")
        page.page.click('nav.toc a[href="#projection"]')
        assert page.screenshot("report-projection.png", "#projection").stat().st_size > 10_000


def test_analysis_page_renders(browser, tmp_path: Path, fixture_8gpu: Path) -> None:
    from tfprof_towers.cli import main

    out = tmp_path / "analysis.html"
    assert main(["analyze", str(fixture_8gpu), "--html", str(out)]) == 0
    with opened(browser, out) as page:
        assert page.count("#breakdown-chart rect.seg") > 0
        page.screenshot("analysis-8gpu.png")


def test_hosts_heatmap_renders_for_32_hosts(browser, tmp_path: Path) -> None:
    """A 32-host profile whose host 17 is slow: the heatmap draws a cell per host and step."""
    from tfprof_towers.render.analysis_html import render_analysis_html

    times = [[0.1 + 0.001 * (h % 5) + (0.05 if h == 17 else 0.0)] * 6 for h in range(32)]
    out = tmp_path / "hosts.html"
    render_analysis_html(hosts_doc(times), out)
    with opened(browser, out) as page:
        assert page.count("#hosts svg.hosts-heatmap rect.cell") == 32 * 6
        box = page.page.locator("#hosts svg.hosts-heatmap").bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 32 * 10
        cell = page.page.locator("#hosts rect.cell >> nth=0").bounding_box()
        assert cell is not None and cell["width"] > 0 and cell["height"] > 0
        assert page.page.inner_text("#hosts-extremes").startswith("Slowest host: w17")
        assert page.screenshot("analysis-hosts.png", "#hosts").stat().st_size > 5_000


def test_readme_screenshot(browser, tmp_path: Path) -> None:
    """The top of a report, as a newcomer first sees it: the README's picture."""
    run = make_run_dir(tmp_path / "run")
    finish_run(RunDir(run))
    with opened(browser, run / "report.html") as page:
        page.page.set_viewport_size({"width": 1200, "height": 1150})
        assert page.page.inner_text("#recommended-variant") == "single"
        shot = page.screenshot("readme-report.png", full_page=False)
    assert 10_000 < shot.stat().st_size < MAX_README_SCREENSHOT
    if os.environ.get(WRITE_SCREENSHOT) == "1":
        shutil.copyfile(shot, README_SCREENSHOT)


def test_diff_page_renders_offline_with_hostile_names(browser, tmp_path: Path) -> None:
    """`diff --html` of two runs whose names and paths carry markup: the page loads with no request,
    no script and no dialog, and shows them as text."""
    from tfprof_towers.cli import main

    markup = "<img src=x onerror=alert(1)>"  # a folder name cannot hold HOSTILE's "/"
    base = make_run_dir(tmp_path / f"a{markup}", hostile=True)
    new = make_run_dir(tmp_path / f"b{markup}", hostile=True)
    out = tmp_path / "diff.html"
    assert main(["diff", str(base), str(new), "--html", str(out)]) == 0
    page = Page(browser)
    try:
        page.page.goto(out.resolve().as_uri())
        page.page.wait_for_load_state("load")
        assert page.errors == [] and page.dialogs == []
        assert [u for u in page.requests if not u.startswith("file://")] == []
        assert page.count("script") == 0 and page.count("img") == 0
        assert f"a{markup}" in page.page.inner_text("body")
        page.screenshot("diff.png")
    finally:
        page.close()


def test_scaling_chart_renders_in_headless_chromium(browser, tmp_path: Path) -> None:
    run = sweep_run_dir(tmp_path / "run", projected_name=HOSTILE)
    finish_run(RunDir(run))
    report = run / "report.html"
    context = browser.new_context(offline=True)
    try:
        page = context.new_page()
        errors: list[str] = []
        requests: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.resolve().as_uri())
        count = lambda sel: int(page.evaluate(f"document.querySelectorAll({sel!r}).length"))  # noqa: E731
        assert count("#scaling svg.scaling-chart") == 1
        assert count("#scaling polyline.ideal") == 1
        assert count("#scaling polyline.series.measured") == 1  # towers_bug: 2 and 4
        assert count("#scaling polyline.series.projected") == 1  # the hostile one: 2 and 8
        assert count("#scaling svg.scaling-bars rect.part") > 0
        assert count("img") == 0
        box = page.locator("#scaling svg.scaling-chart").bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 200
        assert HOSTILE in page.inner_text("#scaling")
        assert count("#scaling-table tbody tr") == 7  # 4 measured points, 3 projected
        assert errors == [] and [u for u in requests if u != report.resolve().as_uri()] == []
    finally:
        context.close()


def test_real_run_report(browser, tiny_run: Path) -> None:
    with opened(browser, tiny_run / "report.html") as page:
        assert page.count(".timeline svg.timeline-chart") == 5
        assert page.count(".finding[data-rule=host_compute][data-variant=towers_bug]") == 1
        page.screenshot("report-tiny-run.png")
