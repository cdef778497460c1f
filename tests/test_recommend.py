"""The one recommender: the same "simpler" and a per-basis "within noise" for measured and projected times."""

from __future__ import annotations

from tfprof_towers import recommend
from tfprof_towers.recommend import Candidate, choose, overlap, within_fraction


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
    rec = recommend.projected(entries, ["replicated", "towers_host_vars", "single"], "toy")
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
    rec = recommend.projected(entries, ["replicated", "mine"], "toy", {"mine": "file:/x/mine.py"})
    assert rec.variant == "replicated"  # mine counts as 2, not simpler
    rec = recommend.projected(
        entries,
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
    assert recommend.measured(summary).variant == "towers_host_vars"
    assert (
        recommend.projected(entries, ["replicated", "towers_host_vars"], "toy").variant == "towers_host_vars"
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
