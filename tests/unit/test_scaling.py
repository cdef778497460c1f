"""Scaling arithmetic (analysis/scaling.py) on synthetic points, with exact numbers."""

from __future__ import annotations

import pytest

from tfprof_towers.analysis import scaling as sc
from tfprof_towers.analysis.scaling import Point, Sweep
from tfprof_towers.rundir.trace_doc import DeviceTime

TF1 = "tf1-graph"


def _p(variant: str, count: int, step: float | None, batch: int, **kw) -> Point:
    base = variant == "single"
    return Point(variant, count, family=TF1, baseline=base, step_median_s=step, step_p10_s=step,
                 step_p90_s=step, global_batch=batch, **kw)


def _by(section: dict, variant: str) -> dict[int, dict]:
    v = next(v for v in section["variants"] if v["variant"] == variant)
    return {p["count"]: p for p in v["points"]}


def test_weak_mode_efficiency_is_throughput_over_the_baseline_divided_by_n() -> None:
    # per-replica batch 4: the global batch is 4 x N
    points = (
        _p("single", 1, 0.1, 4),  # 40 examples/s
        Point("replicated", 1, status=sc.SKIPPED, family=TF1, reason="needs at least 2 accelerators"),
        _p("replicated", 2, 0.125, 8),  # 64 examples/s
        _p("replicated", 4, 0.16, 16),  # 100 examples/s
    )
    doc = sc.measured_section(Sweep(sc.WEAK, (1, 2, 4), 4, points)).to_json()
    assert doc["mode"] == "weak" and doc["counts"] == [1, 2, 4] and doc["batch_is"] == "per replica"
    rep = _by(doc, "replicated")
    assert rep[1]["status"] == "skipped" and rep[1]["reason"] == "needs at least 2 accelerators"
    assert rep[1]["efficiency"] is None and rep[1]["examples_per_s"] is None
    assert rep[2]["examples_per_s"] == pytest.approx(64.0, rel=1e-12)
    assert rep[2]["speedup"] == pytest.approx(1.0, rel=1e-12)
    assert rep[2]["speedup_vs_baseline"] == pytest.approx(1.6, rel=1e-12)
    assert rep[2]["efficiency"] == pytest.approx(0.8, rel=1e-12)  # 1.6 / 2
    assert rep[2]["efficiency_basis"] == "baseline"
    assert rep[4]["examples_per_s"] == pytest.approx(100.0, rel=1e-12)
    assert rep[4]["speedup"] == pytest.approx(1.5625, rel=1e-12)  # 100 / 64
    assert rep[4]["speedup_vs_baseline"] == pytest.approx(2.5, rel=1e-12)
    assert rep[4]["efficiency"] == pytest.approx(0.625, rel=1e-12)  # 2.5 / 4
    assert rep[4]["efficiency_vs_baseline"] == pytest.approx(0.625, rel=1e-12)
    single = _by(doc, "single")[1]
    assert single["efficiency"] == pytest.approx(1.0) and single["speedup_vs_baseline"] == 1.0
    assert doc["best_by_count"] == [{"count": 1, "variant": "single"}, {"count": 2, "variant": "replicated"},
                                    {"count": 4, "variant": "replicated"}]


def test_strong_mode_efficiency_is_speedup_over_its_smallest_count_divided_by_the_count_ratio() -> None:
    # global batch 8 at every count
    points = (
        _p("single", 1, 0.2, 8),  # 40 examples/s
        _p("replicated", 2, 0.125, 8),  # 64 examples/s
        _p("replicated", 4, 0.08, 8),  # 100 examples/s
    )
    doc = sc.measured_section(Sweep(sc.STRONG, (1, 2, 4), 8, points)).to_json()
    assert doc["batch_is"] == "global"
    rep = _by(doc, "replicated")
    assert rep[2]["efficiency"] == pytest.approx(1.0, rel=1e-12)  # its own smallest count
    assert rep[4]["speedup"] == pytest.approx(0.125 / 0.08, rel=1e-12)  # 1.5625
    assert rep[4]["efficiency"] == pytest.approx(1.5625 / 2, rel=1e-12)  # 0.78125
    assert rep[4]["efficiency_basis"] == "own"
    assert rep[4]["speedup_vs_baseline"] == pytest.approx(2.5, rel=1e-12)  # 0.2 / 0.08
    assert rep[4]["efficiency_vs_baseline"] == pytest.approx(0.625, rel=1e-12)


def test_weak_mode_without_a_baseline_falls_back_to_the_variants_own_smallest_count() -> None:
    points = (_p("replicated", 2, 0.1, 8), _p("replicated", 4, 0.125, 16))  # 80, 128 examples/s
    rep = _by(sc.measured_section(Sweep(sc.WEAK, (2, 4), 4, points)).to_json(), "replicated")
    assert rep[4]["efficiency"] == pytest.approx(128 / 80 / 2, rel=1e-12)  # 0.8
    assert rep[4]["efficiency_basis"] == "own" and rep[4]["efficiency_vs_baseline"] is None


def test_global_batch_per_mode() -> None:
    assert sc.global_batch(sc.WEAK, 4, 8) == 32
    assert sc.global_batch(sc.STRONG, 4, 8) == 4
    with pytest.raises(ValueError):
        sc.global_batch("both", 4, 2)


def test_wall_groups_average_the_accelerators_and_group_the_categories() -> None:
    devices = {
        "/host:CPU": DeviceTime(wall={"host_compute": 9.0, "idle": 1.0}),
        "/gpu:0": DeviceTime(wall={"compute": 1.5, "host_compute": 0.5, "collective": 1.0, "h2d": 0.5,
                                   "framework": 0.25, "idle": 0.25}),
        "/gpu:1": DeviceTime(wall={"compute": 1.0, "collective": 2.0, "d2h": 0.25, "idle": 0.75}),
    }
    roles = {"/host:CPU": "host", "/gpu:0": "accelerator", "/gpu:1": "accelerator"}
    assert sc.wall_groups(devices, roles) == {"compute": 1.5, "copies": 0.375, "collectives": 1.5,
                                              "send_recv": 0.0, "host": 0.125, "idle": 0.5}
    assert sc.wall_groups({}, {}) is None


def test_growth_names_what_grew_between_counts() -> None:
    zero = {"copies": 0.0, "send_recv": 0.0, "host": 0.0}
    w2 = {"compute": 2e-3, "collectives": 1.1e-3, "idle": 0.4e-3, **zero}
    w4 = {"compute": 2e-3, "collectives": 3.0e-3, "idle": 2.2e-3, **zero}
    points = [_p("replicated", 2, 4e-3, 8, wall_per_step=w2),
              _p("replicated", 4, 7e-3, 16, wall_per_step=w4)]
    assert sc.growth(points) == ["from 2 to 4 accelerators, collective time per step grew from 1.10 ms to "
                                 "3.00 ms and idle from 400 µs to 2.20 ms"]


def test_headline_says_where_90_percent_is_lost_and_what_limits_it() -> None:
    points = [
        _p("single", 1, 0.1, 4),
        _p("replicated", 2, 0.1, 8),  # 80 ex/s: 2 x the baseline's 40 on 2: 100%
        Point("replicated", 4, family=TF1, step_median_s=0.2, global_batch=16,  # 80 ex/s: 50%
              bottleneck="the PCIe link"),
    ]
    scored = sc.curves(sc.WEAK, points)
    assert sc.headline("replicated", scored["replicated"]) == (
        "replicated keeps ≥ 90% efficiency up to 2 GPUs; at 4 GPUs it is 50%, limited by the PCIe link")
    assert sc.headline("single", scored["single"]) is None
    under = sc.curves(sc.WEAK, points[:1] + points[2:])
    assert sc.headline("replicated", under["replicated"]) == (
        "replicated is under 90% efficiency from 4 GPUs (50%, limited by the PCIe link)")


def test_count_recommendation_merges_counts_with_the_same_pick() -> None:
    picks = [(1, "single"), (2, "towers_accel0_vars"), (4, "replicated"), (8, "replicated")]
    assert sc.count_recommendation(picks) == (
        "at 1 GPU single; at 2 GPUs towers_accel0_vars; from 4 GPUs up, replicated")
    assert sc.count_recommendation([]) is None
    assert sc.count_recommendation([(2, "a"), (4, "a"), (8, "b")], "accelerators") == (
        "from 2 to 4 accelerators a; at 8 accelerators b")


def test_projected_section_shape() -> None:
    points = [Point("single", 1, family=TF1, baseline=True, step_median_s=0.1, global_batch=64,
                    bottleneck="accelerator compute (/gpu:0)", bottleneck_kind="accelerator compute"),
              Point("replicated", 8, family=TF1, step_median_s=0.2, global_batch=512, bottleneck="link",
                    bottleneck_kind="link")]
    doc = sc.projected_section(sc.WEAK, "8x-a100-nvlink", "seed", points).to_json()
    assert set(doc) >= {"hardware", "preset", "variants"}
    rep = doc["variants"][1]
    assert rep["variant"] == "replicated"
    assert rep["points"][0]["count"] == 8 and rep["points"][0]["bottleneck"] == "link"
    assert rep["points"][0]["efficiency"] == pytest.approx(512 / 0.2 / 640 / 8, rel=1e-12)  # 0.5


def test_the_scaling_section_reads_back_as_it_was_written() -> None:
    from tfprof_towers.rundir.scaling import ProjectedScaling, ScalingSection
    from tfprof_towers.session.scaling import scaling_lines

    points = (_p("single", 1, 0.1, 4), _p("replicated", 2, 0.125, 8, wall_per_step={"compute": 0.1}))
    proj = sc.projected_section(sc.WEAK, "8x-a100-nvlink", "seed", [
        Point("single", 1, family=TF1, baseline=True, step_median_s=0.1, global_batch=64, bottleneck="x")])
    section = sc.measured_section(Sweep(sc.WEAK, (1, 2), 4, points)).to_json() | {
        "stand_in": True, "projected": proj.to_json(), "headline": "projected", "recommendation_for": None}
    typed = ScalingSection.from_json(section)
    assert typed.to_json() == section and list(typed.to_json()) == list(section)
    assert typed.variants[1].points[0].wall_per_step == {"compute": 0.1}
    assert typed.projected_ok == proj and typed.projected.variants[0].points[0].bottleneck == "x"
    failed = ProjectedScaling(hardware="h", preset="seed", error="no GPUs")
    assert failed.to_json() == {"hardware": "h", "preset": "seed", "error": "no GPUs"}
    unread = {"error": "scaling.json: bad"}
    assert ScalingSection.from_json(unread).to_json() == unread
    assert scaling_lines({"scaling": section})[:2] == [
        "Scaling, projected on 8x-a100-nvlink: at 1 GPU single",
        "Scaling, measured here: at 1 accelerator single; at 2 accelerators replicated"]
