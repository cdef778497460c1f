"""profile --scaling without TensorFlow: the plan, a sweep's run directory read back into
summary.json -> scaling, and the report's Scaling section (its chart in headless Chromium is
tests/e2e/test_browser_e2e.py's)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from reference_kit import is_point_name
from report_kit import HOSTILE, sweep_run_dir

from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.scaling import point_name, scaling_json
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


def test_summary_scaling_section_from_a_sweep(tmp_path: Path) -> None:
    run = sweep_run_dir(tmp_path / "run")
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
    run = sweep_run_dir(tmp_path / "run", projected_name=HOSTILE)
    finish_run(RunDir(run))
    html = (run / "report.html").read_text()
    assert HOSTILE not in html
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html


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
