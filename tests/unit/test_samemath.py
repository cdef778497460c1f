"""samemath.py on hand-made entries: the reference, the comparison and the losses side by side."""

from __future__ import annotations

import math

import pytest

from tfprof_towers.analysis import samemath
from tfprof_towers.rundir.summary import SummaryEntry

LOSSES = [0.47490591, 0.47462937]
NORM = 0.14417072


def entry(name: str, losses: list[float] | None = LOSSES, grad_norm: float | None = NORM,
          status: str = "ok", source: str = "builtin") -> SummaryEntry:
    return SummaryEntry(name=name, status=status, source=source, family="tf1-graph",
                        losses=None if losses is None else tuple(losses), grad_norm=grad_norm)


def test_the_baseline_is_the_reference() -> None:
    ref = samemath.reference([entry("replicated", [1.0, 2.0], 3.0), entry("single")])
    assert ref == samemath.Reference("single", tuple(LOSSES), NORM, "single (the baseline: one device)")


def test_a_variant_file_named_single_is_not_the_baseline() -> None:
    entries = [entry("single", source="file:/x/single.py"), entry("replicated")]
    assert samemath.reference(entries) is None  # two variants, no baseline: nothing to compare with


def test_without_the_baseline_the_median_of_three_or_more() -> None:
    entries = [entry("a", [1.0, 2.0], 3.0), entry("b", [1.0, 2.5], 5.0), entry("c", [4.0, 2.0], 4.0),
               entry("broken", status="failed"), entry("silent", None, None)]
    ref = samemath.reference(entries)
    assert ref == samemath.Reference(None, (1.0, 2.0), 4.0, "the median of 3 variants (no baseline ran)")


def test_a_forgotten_tower_halves_the_norm_and_barely_moves_the_losses() -> None:
    """The numbers of a real tiny run: the losses agree to float32, the norm is half."""
    ref = samemath.reference([entry("single")])
    forgot = entry("forgot", [0.47490594, 0.47462937], 0.072085708)
    c = samemath.compare(forgot, ref, 1e-4, 1e-3)
    assert c.loss_rel_diff == pytest.approx((3e-8 / 0.47490591, 0.0))
    assert c.grad_norm_rel_diff == pytest.approx(1 - 0.072085708 / NORM)
    assert (c.loss_differs, c.grad_norm_differs, c.differs) == (False, True, True)


def test_losses_beyond_the_tolerance_differ() -> None:
    ref = samemath.reference([entry("single")])
    c = samemath.compare(entry("v", [LOSSES[0] * (1 + 2e-4), LOSSES[1]], NORM), ref, 1e-4, 1e-3)
    assert (c.loss_differs, c.grad_norm_differs) == (True, False)
    c = samemath.compare(entry("v", [LOSSES[0] * (1 + 5e-5), LOSSES[1]], NORM), ref, 1e-4, 1e-3)
    assert not c.differs


def test_nan_differs_and_a_missing_norm_is_not_compared() -> None:
    ref = samemath.reference([entry("single")])
    c = samemath.compare(entry("v", [math.nan, LOSSES[1]], None), ref, 1e-4, 1e-3)
    assert c.loss_differs and c.grad_norm_rel_diff is None and not c.grad_norm_differs
    assert samemath.relative_difference(1.0, 0.0) == math.inf
    assert samemath.relative_difference(0.0, 0.0) == 0.0


def test_table_lists_every_successful_variant_with_its_status() -> None:
    entries = [entry("single"), entry("replicated"), entry("forgot", LOSSES, NORM / 2),
               entry("mine", None, None, source="file:/x/mine.py"), entry("broken", status="failed")]
    doc = samemath.table(entries, 1e-4, 1e-3).to_json()
    assert doc["reference"] == {"variant": "single", "label": "single (the baseline: one device)",
                                "losses": LOSSES, "grad_norm": NORM}
    assert doc["tolerance"] == {"losses": 1e-4, "grad_norm": 1e-3}
    rows = {r["variant"]: r for r in doc["variants"]}
    assert list(rows) == ["single", "replicated", "forgot", "mine"]
    assert {n: r["status"] for n, r in rows.items()} == {
        "single": "reference", "replicated": "same", "forgot": "differs", "mine": "not compared"}
    assert rows["forgot"]["grad_norm_rel_diff"] == 0.5 and rows["forgot"]["loss_rel_diff"] == [0.0, 0.0]
    assert rows["mine"]["why"] == samemath.NO_LOSS


def test_no_reference_means_nothing_is_compared() -> None:
    entries = [entry("replicated"), entry("towers_host_vars", [9.0, 9.0], 9.0)]
    doc = samemath.table(entries, 1e-4, 1e-3).to_json()
    assert doc["reference"] is None
    assert [r["status"] for r in doc["variants"]] == ["not compared", "not compared"]
    assert doc["variants"][0]["why"].startswith("no reference: the baseline did not record its losses")
