"""`profile --scaling 1,2,4` for real: TensorFlow children at each count, projected on 8x-a100-nvlink,
the report's Scaling chart in headless Chromium (where present)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfprof_towers.cli import main

CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.slow
def test_profile_scaling_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["profile", "--preset", "tiny", "--scaling", "1,2,4", "--variants", "single,replicated,mirrored",
            "--project-on", "8x-a100-nvlink", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "scaling sweep (weak)" in err
    summary = json.loads((out / "summary.json").read_text())
    assert [v["name"] for v in summary["variants"]] == ["single", "replicated", "mirrored"]
    sc = summary["scaling"]
    assert sc["mode"] == "weak" and sc["counts"] == [1, 2, 4]
    points = {(v["variant"], p["count"]): p for v in sc["variants"] for p in v["points"]}
    # one_device is added: mirrored's efficiency is measured against its family's baseline
    assert sorted(points) == [("mirrored", 1), ("mirrored", 2), ("mirrored", 4), ("one_device", 1),
                              ("replicated", 1), ("replicated", 2), ("replicated", 4), ("single", 1)]
    for key, p in points.items():
        assert p["status"] in ("ok", "skipped"), (key, p)
        if p["status"] == "skipped":
            assert p["reason"], key
        else:
            assert p["examples_per_s"] > 0 and p["efficiency"] > 0, key
            assert (out / "variants" / f"{key[0]}@{key[1]}" / "record.json").is_file()
    assert points[("replicated", 1)]["status"] == "skipped"
    assert points[("replicated", 4)]["global_batch"] == 16  # weak: the tiny batch (4) per replica
    assert points[("replicated", 4)]["wall_per_step"]["compute"] > 0
    proj = sc["projected"]
    assert proj["hardware"] == "8x-a100-nvlink"
    for name in ("replicated", "mirrored"):
        curve = next(v for v in proj["variants"] if v["variant"] == name)
        assert [p["count"] for p in curve["points"]] == [2, 4, 8]
        assert all(p["bottleneck"] for p in curve["points"])
    assert proj["recommendation"]
    html = (out / "report.html").read_text()
    assert 'id="scaling"' in html
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent: the chart was not rendered in a browser")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_context(offline=True).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((out / "report.html").resolve().as_uri())
            charts = page.locator("#scaling svg.scaling-chart")
            assert charts.count() == 2  # tf1-graph and tf2-strategy
            box = charts.first.bounding_box()
            assert box is not None and box["width"] > 300
            assert page.locator("#scaling polyline.series.projected").count() == 2
            assert errors == []
        finally:
            browser.close()
