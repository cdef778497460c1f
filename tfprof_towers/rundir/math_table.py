"""The same-math table (``summary.json`` -> ``math``): each variant's first losses against a reference.

Built by :func:`tfprof_towers.analysis.samemath.table` with the ``changed_math`` rule's tolerances; the
report shows it.  A NaN loss is written as ``null`` plus a ``not_finite`` flag (:mod:`.nonfinite`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.fields import Fields, Record, meta

SAME, DIFFERS, NOT_COMPARED, REFERENCE = "same", "differs", "not compared", "reference"
MATH_STATUSES = (SAME, DIFFERS, NOT_COMPARED, REFERENCE)


@dataclass(frozen=True)
class MathReference(Record):
    """What the variants are compared with: a variant's numbers, or the median of several."""

    variant: str | None = None  # None for a median
    label: str = ""  # "single (the baseline: one device)" / "the median of 4 variants (no baseline ran)"
    losses: tuple[float, ...] = ()
    grad_norm: float | None = None


@dataclass(frozen=True)
class MathTolerance(Record):
    """The ``changed_math`` rule's relative tolerances."""

    losses: float = 0.0
    grad_norm: float = 0.0


def _difference(f: Fields, key: str) -> float | None:
    """A relative difference: a number, where a NaN (a NaN loss) or an infinity (a zero reference) may be."""
    value = f.data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        f.fail(key, "must be a number")
    return None if value is None else float(value)


def _differences(f: Fields, key: str) -> tuple[float, ...] | None:
    """Relative differences step by step (a null, which was a NaN, is NaN again)."""
    if f.data.get(key) is None:
        return None
    items = Fields.of(dict(enumerate(f.items(key))), f.where, f.name(key))
    return tuple(math.nan if (x := _difference(items, i)) is None else x for i in items.data)


@dataclass(frozen=True)
class MathRow(Record):
    """One successful variant's losses and gradient norm, and how they compare with the reference."""

    variant: str
    status: str = meta(choices=MATH_STATUSES)
    losses: tuple[float, ...] = meta((), read=lambda f, k: nonfinite.read_numbers(f, k) or ())
    grad_norm: float | None = meta(None, read=nonfinite.read_number)
    why: str | None = None  # not compared: why; a NaN loss: what it is
    random_ops: tuple[str, ...] = ()  # not compared: the ops that draw random numbers
    loss_rel_diff: tuple[float, ...] | None = meta(None, read=lambda f, k: _differences(f, k))
    grad_norm_rel_diff: float | None = meta(None, read=lambda f, k: _difference(f, k))

    @property
    def compared(self) -> bool:
        """Compared with a reference (its relative differences are known)."""
        return self.loss_rel_diff is not None

    def to_json(self) -> dict[str, Any]:
        doc = nonfinite.strict({"variant": self.variant, "losses": list(self.losses),
                                "grad_norm": self.grad_norm}, ("losses", "grad_norm"))
        if not self.compared:  # not compared (with its random ops), or a NaN without a reference
            drawn = {"random_ops": list(self.random_ops)} if self.random_ops else {}
            return {**doc, "status": self.status, "why": self.why, **drawn}
        if self.why is not None:
            doc["why"] = self.why
        return {**doc, "status": self.status, "loss_rel_diff": list(self.loss_rel_diff or ()),
                "grad_norm_rel_diff": self.grad_norm_rel_diff}


@dataclass(frozen=True)
class MathTable(Record):
    """The reference, the tolerances and one row per successful variant."""

    reference: MathReference | None = None
    tolerance: MathTolerance = meta(factory=MathTolerance)
    variants: tuple[MathRow, ...] = ()
    WHERE = "summary.json: math"

    def row(self, variant: str) -> MathRow | None:
        return next((r for r in self.variants if r.variant == variant), None)
