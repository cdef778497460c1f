"""The one recommender: the same "simpler" and a per-basis "within noise" for measured and projected times."""

from __future__ import annotations

import pytest
import typed_kit as typed

from tfprof_towers.advice import recommend
from tfprof_towers.advice.recommend import Candidate, choose, overlap, within_fraction
from tfprof_towers.rundir.projection_doc import ProjectionEntry
from tfprof_towers.rundir.summary import Summary


def c(name: str, t: float, simplicity: int, lo: float | None = None, hi: float | None = None) -> Candidate:
    return Candidate(name, t, simplicity, lo, hi)


def test_choose_prefers_the_simplest_within_noise() -> None:
    ranked = [
        c("replicated", 1.00, 2),
        c("towers_host_vars", 1.03, 1),
        c("single", 1.04, 0),
        c("bug", 1.01, 9),
    ]
    choice = choose(ranked, within_fraction(0.05))
    assert (choice.chosen.name, choice.fastest.name, choice.runner_up.name) == (
        "single",
        "replicated",
        "replicated",
    )
    assert [x.name for x in choice.close] == ["towers_host_vars", "single", "bug"]


def test_choose_keeps_the_fastest_when_nothing_simpler_is_close() -> None:
    ranked = [c("single", 1.0, 0), c("replicated", 1.01, 2)]
    choice = choose(ranked, within_fraction(0.05))
    assert (choice.chosen.name, choice.runner_up.name) == ("single", "replicated")
    assert choose([], overlap) is None


def test_measured_noise_is_p10_p90_overlap() -> None:
    assert overlap(c("a", 1, 0, 1.0, 2.0), c("b", 1, 0, 2.0, 3.0))
    assert not overlap(c("a", 1, 0, 1.0, 2.0), c("b", 1, 0, 2.1, 3.0))
    assert not overlap(c("a", 1, 0, None, 2.0), c("b", 1, 0, 1.0, 3.0))


def entries_of(entries: list[dict]) -> list[ProjectionEntry]:
    """``projection.json``'s entries as the recommender reads them."""
    return [ProjectionEntry.from_json(e) for e in entries]


def _projected(name: str, lo: float, hi: float) -> dict:
    return {
        "name": name,
        "projected_step_s": {"overlapped": lo, "serial": hi},
        "bottleneck": {"text": "accelerator compute (/device:GPU:0)"},
    }


def test_projection_uses_registry_simplicity_not_only_single() -> None:
    """towers_host_vars (simplicity 1) within 5% of replicated (2) is the projected pick."""
    entries = [
        _projected("replicated", 1.00, 1.10),
        _projected("towers_host_vars", 1.04, 1.20),
        _projected("single", 2.00, 2.00),
    ]
    rec = recommend.projected(entries_of(entries), ["replicated", "towers_host_vars", "single"], "toy")
    assert (rec.variant, rec.fastest, rec.within_noise) == (
        "towers_host_vars",
        "replicated",
        ("towers_host_vars",),
    )
    assert rec.reason == (
        "projected within 5% of the fastest (replicated, 1.000 s) on toy, and simpler than replicated"
    )
    assert rec.brief() == {"variant": "towers_host_vars", "reason": rec.reason}


def test_projection_treats_a_variant_file_as_user_simplicity() -> None:
    entries = [_projected("replicated", 1.00, 1.10), _projected("mine", 1.01, 1.01)]
    rec = recommend.projected(entries_of(entries), ["replicated", "mine"], "toy", {"mine": "file:/x/mine.py"})
    assert rec.variant == "replicated"  # mine counts as 2, not simpler
    rec = recommend.projected(
        entries_of(entries),
        ["replicated", "mine"],
        "toy",
        {"mine": "file:/x/mine.py", "replicated": "file:/x/replicated.py"},
    )
    assert rec.variant == "replicated"


def test_measured_and_projected_agree_on_the_same_numbers() -> None:
    """Same times, a spread that overlaps: both bases pick the simpler variant."""
    summary = {
        "topology": {"kind": "gpu"},
        "ranking": ["replicated", "towers_host_vars"],
        "variants": [
            {
                "name": "replicated",
                "status": "ok",
                "source": "builtin",
                "step_time_s": {"median": 1.00, "p10": 0.98, "p90": 1.05, "n": 5},
            },
            {
                "name": "towers_host_vars",
                "status": "ok",
                "source": "builtin",
                "step_time_s": {"median": 1.04, "p10": 1.01, "p90": 1.06, "n": 5},
            },
        ],
    }
    entries = [_projected("replicated", 1.00, 1.0), _projected("towers_host_vars", 1.04, 1.04)]
    assert recommend.measured(typed.summary(summary)).variant == "towers_host_vars"
    assert (
        recommend.projected(entries_of(entries), ["replicated", "towers_host_vars"], "toy").variant
        == "towers_host_vars"
    )


def test_recommendation_json_round_trip() -> None:
    rec = recommend.Recommendation("single", "why", fastest="replicated", within_noise=("single",))
    assert recommend.Recommendation.from_json(rec.to_json()) == rec
    assert set(rec.to_json()) == {
        "variant",
        "fastest",
        "runner_up",
        "speedup_vs_single",
        "median_step_s",
        "within_noise",
        "basis",
        "reason",
    }


# -- the headline of a run on logical CPU devices comes from the projection


def compact(*rows: tuple[str, float, float], error: str | None = None) -> dict:
    """summary.json's compact projection: variants ranked by their overlapped bound."""
    variants = [{"name": n, "rank": i + 1, "projected_step_s": {"overlapped": lo, "serial": hi},
                 "bottleneck": "accelerator compute (/device:GPU:0)"} for i, (n, lo, hi) in enumerate(rows)]
    return {"label": "projected", "hardware": "2x-gtx1060-pcie3", "preset": {"name": "seed"},
            "variants": variants, "ranking": [n for n, _, _ in rows]}


def cpu_summary(projection: dict | None, *names: str, kind: str = "logical-cpu") -> Summary:
    variants = [{"name": n, "status": "ok", "source": "builtin",
                 "step_time_s": {"median": 0.001 * (i + 1), "p10": 0.001 * (i + 1), "p90": 0.001 * (i + 1),
                                 "n": 5}} for i, n in enumerate(names)]
    return typed.summary({"topology": {"kind": kind}, "variants": variants, "ranking": list(names),
                          "projection": projection})


def test_logical_cpu_runs_recommend_from_the_projection() -> None:
    proj = compact(("replicated", 0.375, 0.408), ("towers_host_vars", 0.381, 0.432), ("single", 0.744, 0.749))
    rec = recommend.headline(cpu_summary(proj, "single", "towers_host_vars", "replicated"))
    assert (rec.basis, rec.hardware, rec.preset, rec.label) == (
        "projected", "2x-gtx1060-pcie3", "seed", "projected on 2x-gtx1060-pcie3")
    assert (rec.variant, rec.fastest, rec.measured_pick) == ("towers_host_vars", "replicated", "single")
    assert rec.speedup_vs_baseline == pytest.approx(0.744 / 0.381)
    assert rec.projected_step_s == {"overlapped": 0.381, "serial": 0.432}
    assert rec.reason == (
        "At the seed preset (not measured): projected within 5% of the fastest (replicated, 375.00 ms) on "
        "2x-gtx1060-pcie3, and simpler than replicated.")
    doc = rec.to_json()
    assert (doc["basis"], doc["hardware"], doc["preset"], doc["label"]) == (
        "projected", "2x-gtx1060-pcie3", "seed", "projected on 2x-gtx1060-pcie3")
    assert recommend.Recommendation.from_json(doc) == rec


def test_a_cluster_without_gpus_recommends_from_the_projection_too() -> None:
    """Loopback tasks on CPUs are stand-ins like logical CPU devices: the multi-host projection decides."""
    proj = {**compact(("multi_worker", 0.0048, 0.0074), ("parameter_server", 0.0096, 0.0129)),
            "hardware": "2 x 8x-a100-100gbe"}
    summary = cpu_summary(proj, "parameter_server", "multi_worker", kind="cpu")
    rec = recommend.headline(summary)
    assert (rec.basis, rec.variant, rec.hardware, rec.measured_pick) == (
        "projected", "multi_worker", "2 x 8x-a100-100gbe", "parameter_server")
    assert recommend.stand_in_why(recommend.run_kind(summary)).startswith("the tasks here ran on CPUs")
    without = recommend.headline(cpu_summary(None, "parameter_server", "multi_worker", kind="cpu"))
    assert without.basis == "measured" and "The tasks here ran on CPUs, without GPUs" in without.reason
    assert "so this ranks CPU cost, not GPU scaling" in without.reason


def test_gpu_runs_recommend_from_measured_times_even_with_a_projection() -> None:
    proj = compact(("replicated", 0.375, 0.408), ("single", 0.744, 0.749))
    rec = recommend.headline(cpu_summary(proj, "single", "replicated", kind="gpu"))
    assert (rec.basis, rec.variant, rec.hardware) == ("measured", "single", None)
    assert "hardware" not in rec.to_json() and rec.label == "measured here"


def test_the_projected_fastest_is_passed_over_when_excluded() -> None:
    proj = compact(("towers_bug", 0.300, 0.310), ("replicated", 0.375, 0.408), ("single", 0.744, 0.749))
    why = "heavy compute on the host while accelerators are available (high-severity finding host_compute)"
    rec = recommend.headline(cpu_summary(proj, "single", "towers_bug", "replicated"), {"towers_bug": why})
    assert (rec.variant, rec.fastest, rec.excluded) == ("replicated", "towers_bug", {"towers_bug": why})
    assert rec.reason.startswith(
        "At the seed preset (not measured): towers_bug is projected fastest (300.00 ms) but is not "
        f"recommended: {why}; projected fastest of the others on 2x-gtx1060-pcie3: 375.00 ms to 408.00 ms "
        "per step")


def test_a_variant_only_the_projection_has_is_never_the_headline() -> None:
    proj = compact(("replicated", 0.375, 0.408), ("single", 0.744, 0.749))
    rec = recommend.headline(cpu_summary(proj, "single"))
    assert rec.variant == "single"
    assert rec.excluded == {"replicated": "not run here, so its placement and math were not checked"}


def test_a_failed_projection_gives_no_recommendation_not_the_cpu_ranking() -> None:
    failed = {"label": "projected", "hardware": "2x-gtx1060-pcie3", "preset": {"name": "seed"},
              "error": "building the graphs failed: boom"}
    rec = recommend.headline(cpu_summary(failed, "single", "replicated"))
    assert (rec.variant, rec.basis, rec.error, rec.measured_pick) == (
        None, "projected", "building the graphs failed: boom", "single")
    assert rec.reason.startswith("No recommendation: the projection on 2x-gtx1060-pcie3 failed (building the "
                                 "graphs failed: boom). The CPU stand-in timings below rank CPU cost")


def test_a_run_without_any_projection_keeps_the_measured_basis() -> None:
    rec = recommend.headline(cpu_summary(None, "single", "replicated"))
    assert (rec.basis, rec.variant) == ("measured", "single")
    assert rec.reason.endswith("profile on the GPU machine before changing production code.")


def test_schema_2_free_text_basis_reads_as_measured() -> None:
    old = {"variant": "single", "reason": "why", "basis": "median un-profiled step time"}
    assert recommend.Recommendation.from_json(old).basis == "measured"


# ------------------------------------------------------------------------------------------
# memory: a placement that does not fit the target is never recommended


GIB = 1 << 30


def _fit(entry: dict, peak_gib: float, capacity_gib: float = 6.0, device: str = "/device:GPU:0") -> dict:
    peak, cap = int(peak_gib * GIB), int(capacity_gib * GIB)
    fits = peak <= cap * 0.9
    verdict = (f"fits: peak {peak_gib:.2f} GiB of {capacity_gib:g} GiB on GPU:0" if fits
               else f"does not fit: {peak_gib:.2f} GiB on GPU:0 of {capacity_gib:g} GiB")
    return {**entry, "memory_fit": {"fits": fits, "verdict": verdict, "device": device, "peak_bytes": peak,
                                    "capacity_bytes": cap, "why": ""}}


def test_a_placement_that_does_not_fit_is_never_recommended_and_stays_ranked() -> None:
    entries = [_fit(_projected("single", 1.00, 1.00), 7.2),
               _fit(_projected("towers_host_vars", 1.45, 1.60), 3.1),
               _fit(_projected("replicated", 1.40, 1.70), 3.2)]
    ranking = ["single", "replicated", "towers_host_vars"]
    rec = recommend.projected(entries_of(entries), ranking, "toy")
    assert rec.variant == "towers_host_vars"  # within 5% of replicated and simpler; single does not fit
    assert rec.fastest == "single"
    assert rec.excluded == {"single": "does not fit: 7.20 GiB on GPU:0 of 6 GiB"}
    assert rec.reason.startswith("single is projected fastest (1.000 s) but is not recommended: does not "
                                 "fit: 7.20 GiB on GPU:0 of 6 GiB; ")
    assert rec.reason.endswith("; memory: fits: peak 3.10 GiB of 6 GiB on GPU:0")


def test_when_nothing_fits_there_is_no_recommendation_and_the_smallest_peak_is_named() -> None:
    entries = [_fit(_projected("single", 1.00, 1.00), 7.2), _fit(_projected("replicated", 1.40, 1.70), 6.5)]
    rec = recommend.projected(entries_of(entries), ["single", "replicated"], "toy")
    assert rec.variant is None and rec.fastest == "single"
    assert rec.reason == ("no variant fits the memory of toy, so none is recommended: the smallest peak is "
                          "replicated's, 6.50 GiB on GPU:0 of 6 GiB")
    assert set(rec.excluded) == {"single", "replicated"}


def test_fits_unknown_does_not_exclude() -> None:
    unknown = {**_projected("single", 1.00, 1.00),
               "memory_fit": {"fits": None,
                              "verdict": "memory fit not checked: the hardware profile gives no memory_gb"}}
    both = entries_of([unknown, _projected("replicated", 2.0, 2.0)])
    rec = recommend.projected(both, ["single", "replicated"], "toy")
    assert rec.variant == "single" and rec.excluded == {}
    assert rec.reason.endswith("; memory: memory fit not checked: the hardware profile gives no memory_gb")


def _may_not_fit(entry: dict, peak_gib: float, high_gib: float) -> dict:
    fit = _fit(entry, peak_gib)
    verdict = f"may not fit: peak {peak_gib:.2f} GiB to {high_gib:.2f} GiB on GPU:0 of 6 GiB"
    return {**fit, "memory_fit": {**fit["memory_fit"], "verdict": verdict, "may_not_fit": True,
                                  "peak_high_bytes": int(high_gib * GIB)}}


def test_a_placement_that_may_not_fit_is_not_recommended_over_one_that_fits() -> None:
    """replicated is fastest but only the low end of its range fits: towers_host_vars, which fits, is
    recommended; replicated is excluded with its own verdict, never called "does not fit"."""
    entries = [_may_not_fit(_projected("replicated", 1.00, 1.00), 5.0, 5.6),
               _fit(_projected("towers_host_vars", 1.45, 1.60), 3.1)]
    rec = recommend.projected(entries_of(entries), ["replicated", "towers_host_vars"], "toy")
    assert rec.variant == "towers_host_vars"
    assert rec.excluded == {"replicated": "may not fit: peak 5.00 GiB to 5.60 GiB on GPU:0 of 6 GiB"}
    assert rec.reason.startswith("replicated is projected fastest (1.000 s) but is not recommended: may not "
                                 "fit: peak 5.00 GiB to 5.60 GiB on GPU:0 of 6 GiB; ")
    # where nothing fits for sure, one that may not fit is recommended (it is not "does not fit")
    alone = recommend.projected(entries_of([entries[0], _fit(_projected("single", 2.0, 2.0), 7.2)]),
                                ["replicated", "single"], "toy")
    assert alone.variant == "replicated" and set(alone.excluded) == {"single"}
    assert alone.reason.endswith("; memory: may not fit: peak 5.00 GiB to 5.60 GiB on GPU:0 of 6 GiB")
