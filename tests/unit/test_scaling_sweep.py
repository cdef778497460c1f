"""profile --scaling without TensorFlow: the plan, a sweep's run directory read back into
summary.json -> scaling, and the report's Scaling section (in headless Chromium where present)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest
from reference_kit import is_point_name
from report_kit import HOSTILE, make_run_dir

from tfprof_towers.analysis.scaling import Point, projected_section
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.scaling import PlannedPoint, ScalingDoc, point_name, scaling_json
from tfprof_towers.session import scaling as sweep
from tfprof_towers.session.report import finish_run
from tfprof_towers.variants.config import ProfileOptions, VariantSpec, get_preset
from tfprof_towers.vocab.errors import VariantError


def _options(names: tuple[str, ...], accelerators: int | None = None) -> ProfileOptions:
    return ProfileOptions(preset=get_preset("tiny"), variants=tuple(VariantSpec.builtin(n) for n in names),
                          accelerators=accelerators)


def test_parse_counts() -> None:
    assert sweep.parse_counts("4,1, 2,2") == (1, 2, 4)
    assert sweep.parse_counts("AUTO") == "auto"
    for bad in ("0", "1,x", "", "129"):
        with pytest.raises(argparse.ArgumentTypeError):
            sweep.parse_counts(bad)
    with pytest.raises(VariantError):
        sweep.request_from_args(None, "strong")
    assert sweep.request_from_args("auto", None) == sweep.ScalingRequest(None, "weak")


def test_auto_counts_go_up_to_the_gpus_else_accelerators_else_two() -> None:
    auto = sweep.ScalingRequest(None)
    assert sweep.resolve_counts(auto, None, 8) == (1, 2, 4, 8)
    assert sweep.resolve_counts(auto, 6, 0) == (1, 2, 4, 6)
    assert sweep.resolve_counts(auto, None, 0) == (1, 2)
    assert sweep.resolve_counts(sweep.ScalingRequest((2, 3)), None, 8) == (2, 3)


def test_plan_runs_the_baseline_once_skips_one_accelerator_and_adds_missing_baselines() -> None:
    doc = sweep.plan(sweep.ScalingRequest((1, 2, 4)), _options(("single", "replicated", "mirrored")), gpus=0)
    got = {(p.variant, p.count): p for p in doc.points}
    assert sorted(got) == [("mirrored", 1), ("mirrored", 2), ("mirrored", 4), ("one_device", 1),
                           ("replicated", 1), ("replicated", 2), ("replicated", 4), ("single", 1)]
    assert got[("replicated", 1)].skipped.startswith("needs at least 2 accelerators")
    assert got[("mirrored", 1)].skipped.endswith("baseline, one_device)")
    assert got[("replicated", 4)].global_batch == 16 and got[("single", 1)].global_batch == 4  # weak: 4 x N
    assert any("one_device" in n for n in doc.notes)


def test_plan_strong_mode_skips_counts_the_batch_does_not_split_over_and_counts_above_the_gpus() -> None:
    doc = sweep.plan(sweep.ScalingRequest((2, 3, 8), "strong"), _options(("replicated",)), gpus=4)
    got = {p.count: p for p in doc.points if p.variant == "replicated"}
    assert got[2].skipped is None and got[2].global_batch == 4
    assert "does not split over 3" in got[3].skipped
    assert got[8].skipped == "this machine has 4 GPU(s)"


def test_point_folders_are_not_variants_of_the_run(tmp_path: Path) -> None:
    assert point_name("replicated", 4) == "replicated@4" and is_point_name("replicated@4")
    assert not is_point_name("replicated")
    for name in ("single", "single@1"):
        (tmp_path / "variants" / name).mkdir(parents=True)
    assert RunDir(tmp_path).variant_names() == ["single"]


def _sweep_run_dir(root: Path, projected_name: str = "towers_bug") -> Path:
    """make_run_dir's run with a weak sweep of single (1) and towers_bug (2, 4; skipped at 1): the
    points reuse the run's own traces, with their own step times."""
    run = make_run_dir(root)
    medians = {("single", 1): 0.010, ("towers_bug", 2): 0.010, ("towers_bug", 4): 0.025}
    for (name, n), median in medians.items():
        rec = json.loads((run / "variants" / name / "record.json").read_text())
        rec["timings"]["step_time_s"].update(median=median, p10=median, p90=median)
        (run / "variants" / point_name(name, n)).mkdir(parents=True)
        (run / "variants" / point_name(name, n) / "record.json").write_text(json.dumps(rec))
        shutil.copytree(run / "tensorboard" / name, run / "tensorboard" / point_name(name, n))
    skipped = {"name": "towers_bug", "status": "skipped", "error": "needs at least 2 accelerators"}
    (run / "variants" / "towers_bug@1").mkdir()
    (run / "variants" / "towers_bug@1" / "record.json").write_text(json.dumps(skipped))
    proj = projected_section("weak", "8x-a100-nvlink", "seed", [
        Point("single", 1, family="tf1-graph", baseline=True, step_median_s=0.1, global_batch=64,
              bottleneck="accelerator compute"),
        Point(projected_name, 2, family="tf1-graph", step_median_s=0.1, global_batch=128, bottleneck="x"),
        Point(projected_name, 8, family="tf1-graph", step_median_s=0.2, global_batch=512,
              bottleneck=f"link {HOSTILE}"),
    ])
    doc = ScalingDoc("weak", (1, 2, 4), 4, (
        PlannedPoint("single", 1, "tf1-graph", True, 4),
        PlannedPoint("towers_bug", 1, "tf1-graph", False, 4, "needs at least 2 accelerators"),
        PlannedPoint("towers_bug", 2, "tf1-graph", False, 8),
        PlannedPoint("towers_bug", 4, "tf1-graph", False, 16),
    ), projected=proj, finished=True)
    scaling_json(RunDir(run)).write_text(json.dumps(doc.to_json()))
    return run


def test_summary_scaling_section_from_a_sweep(tmp_path: Path) -> None:
    run = _sweep_run_dir(tmp_path / "run")
    doc = finish_run(RunDir(run))
    assert [v["name"] for v in doc["variants"]] == ["single", "towers_bug", "broken"]  # no point folders
    sc = doc["scaling"]
    assert sc["mode"] == "weak" and sc["counts"] == [1, 2, 4]
    bug = {p["count"]: p for p in next(v for v in sc["variants"] if v["variant"] == "towers_bug")["points"]}
    assert bug[1]["status"] == "skipped" and bug[1]["reason"] == "needs at least 2 accelerators"
    assert bug[2]["examples_per_s"] == pytest.approx(800.0) and bug[2]["efficiency"] == pytest.approx(1.0)
    assert bug[4]["examples_per_s"] == pytest.approx(640.0)
    assert bug[4]["efficiency"] == pytest.approx(0.4)  # 640 / 400 / 4
    walls = bug[2]["wall_per_step"]
    assert set(walls) == {"compute", "copies", "collectives", "send_recv", "host", "idle"}
    assert sum(walls.values()) > 0
    proj = sc["projected"]
    assert proj["hardware"] == "8x-a100-nvlink" and proj["preset"] == "seed"
    assert [p["count"] for p in proj["variants"][1]["points"]] == [2, 8]
    assert proj["variants"][1]["points"][1]["efficiency"] == pytest.approx(0.5)  # 2560 / 640 / 8
    assert proj["recommendation"] == "at 1 GPU single; from 2 GPUs up, towers_bug"
    assert sc["recommendation"] == "at 1 accelerator single; from 2 accelerators up, towers_bug"
    assert sc["recommendation_for"] == {
        "variant": "single", "count": 2, "unit": "accelerators", "basis": "measured",
        "text": "the recommendation (single) is for 2 accelerators; the fastest at each count of the sweep: "
                "at 1 accelerator single; from 2 accelerators up, towers_bug"}
    html = (run / "report.html").read_text()
    assert 'href="#scaling"' in html and html.count('class="scaling-chart"') == 1
    assert 'class="series projected"' in html and 'stroke-dasharray="6 4"' in html


def test_hostile_names_in_the_scaling_section_are_escaped(tmp_path: Path) -> None:
    run = _sweep_run_dir(tmp_path / "run", projected_name=HOSTILE)
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    assert HOSTILE not in html
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.browser
def test_scaling_chart_renders_in_headless_chromium(tmp_path: Path) -> None:
    if not CHROMIUM.is_file():
        pytest.skip(f"{CHROMIUM} is absent: `make browser` installs Debian's chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    run = _sweep_run_dir(tmp_path / "run", projected_name=HOSTILE)
    finish_run(RunDir(run))
    report = run / "report.html"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_context(offline=True).new_page()
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
            browser.close()


@pytest.mark.parametrize("argv", [["--scaling", "0"], ["--scaling", "1,two"], ["--scaling-mode", "both"]])
def test_bad_scaling_arguments_are_usage_errors(argv: list[str], tmp_path: Path) -> None:
    from tfprof_towers.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["profile", *argv, "--out", str(tmp_path / "r")])
    assert exc.value.code == 2
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("argv, message", [
    (["--scaling-mode", "strong"], "--scaling-mode says how to sweep: give --scaling COUNTS (or auto) too"),
    (["--scaling", "1,2", "--workers", "2"], "--scaling sweeps accelerators on one machine"),
])
def test_scaling_requests_it_cannot_do_fail_before_running(argv: list[str], message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from tfprof_towers.cli import main

    assert main(["profile", "--preset", "tiny", *argv, "--out", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_multi_host_profiles_project_multi_worker_across_hosts() -> None:
    from tfprof_towers.projection.hardware import load_hardware
    from tfprof_towers.projection.scaling import at_count, powers_of_two_to, project_hosts

    hw = load_hardware("8x-a100-100gbe")
    points = project_hosts(hw, get_preset("seed"), "weak")
    assert [(p.variant, p.count, p.global_batch) for p in points] == [
        ("multi_worker", 8, 512), ("multi_worker", 16, 1024), ("multi_worker", 32, 2048)]
    assert all(p.ok and p.bottleneck for p in points)
    assert points[0].bottleneck == "accelerator compute"
    strong = project_hosts(hw, get_preset("seed"), "strong")
    assert [p.global_batch for p in strong] == [64, 64, 64]
    assert strong[1].bottleneck.startswith("ring all-reduce over 16 accelerators: 100 Gb/s Ethernet")
    assert powers_of_two_to(8) == (1, 2, 4, 8) and powers_of_two_to(1) == (1,)
    assert at_count(hw, 2).accelerator.count == 2 and hw.accelerator.count == 8


def test_a_full_disk_stops_the_sweep_not_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []

    def no_space(folder: Path, variants: int) -> None:
        from tfprof_towers.vocab.errors import TowersError

        raise TowersError(f"{folder}: only 1.0 MiB free on its filesystem")

    monkeypatch.setattr(sweep, "check_free_space", no_space)
    monkeypatch.setattr(sweep, "run_all", lambda *a, **k: pytest.fail("no point may run"))
    took, code = sweep.run_scaling(sweep.ScalingRequest((1, 2)), _options(("single", "replicated")),
                                   RunDir(tmp_path), None, get_preset("seed"), said.append)
    assert (took, code) == ({}, 0)
    assert said == [f"scaling sweep not run: {tmp_path}: only 1.0 MiB free on its filesystem"]
    assert not scaling_json(RunDir(tmp_path)).exists()
