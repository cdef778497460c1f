"""Same math: does every variant compute what the others compute?

Every variant of a run starts from the same initial values and trains on the same
batch (:mod:`tfprof_towers.capture.seed_values`) and records its first two
losses and its step-1 global gradient norm (``summary.json`` ->
``variants[].losses``, ``variants[].grad_norm``).  Placement alone must not
change them beyond float rounding; the ``changed_math`` rule owns the tolerances.

* The reference is the family baseline (``single``: one device, no towers to
  get wrong) when it exposed its losses; otherwise the element-wise median of
  three or more variants; otherwise there is none and nothing is compared.
* Both checks are needed: Adam's first steps hardly depend on the gradient's
  size, so a variant that drops one tower's gradient moves its step-2 loss by
  about 1e-8 (below float32 noise), while its gradient norm halves.
* A step that draws random numbers (Dropout, random augmentation: ``random_ops``
  recorded from its graph) cannot match exactly -- each replica draws its own -- so
  it is "not compared", and named so; it is no reference either.

The summary's entries in, a :class:`~tfprof_towers.rundir.math_table.MathTable` out; no TensorFlow.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.math_table import (
    DIFFERS,
    NOT_COMPARED,
    REFERENCE,
    SAME,
    MathReference,
    MathRow,
    MathTable,
    MathTolerance,
)
from tfprof_towers.rundir.summary import SummaryEntry
from tfprof_towers.variants import registry

#: Fewest variants whose median can stand in for a missing baseline.
MIN_FOR_MEDIAN = 3
NO_LOSS = "its graph exposes no loss (see docs/variants.md: same math)"
#: Random ops named in the "not compared" note.
RANDOM_OPS_SHOWN = 2


@dataclass(frozen=True)
class Reference:
    """What the variants are compared with: a variant's numbers, or the median of several."""

    variant: str | None  # None for a median
    losses: tuple[float, ...]
    grad_norm: float | None
    label: str  # "single (the baseline)" / "the median of 4 variants"


@dataclass(frozen=True)
class Comparison:
    """One variant against the reference: relative differences and whether they exceed the tolerances."""

    loss_rel_diff: tuple[float, ...]
    grad_norm_rel_diff: float | None
    loss_differs: bool
    grad_norm_differs: bool

    @property
    def differs(self) -> bool:
        return self.loss_differs or self.grad_norm_differs


def entry_losses(entry: SummaryEntry) -> tuple[float, ...]:
    """The entry's losses (a NaN one is NaN: the codec restores what ``not_finite`` names)."""
    return tuple(float(x) for x in entry.losses or ())


def entry_grad_norm(entry: SummaryEntry) -> float | None:
    return None if entry.grad_norm is None else float(entry.grad_norm)


def not_finite(entry: SummaryEntry) -> str | None:
    """"loss is NaN at step 1" (or the gradient norm's) when the variant's math holds a NaN or an
    infinity -- the model diverged or its inputs hold NaN -- else None."""
    first = nonfinite.first_not_finite(entry_losses(entry))
    if first is not None:
        return f"loss is {first[1]} at step {first[0]}"
    norm = entry_grad_norm(entry)
    if norm is not None and not nonfinite.is_finite(norm):
        return f"the step-1 gradient norm is {nonfinite.word(norm)}"
    return None


def random_ops(entry: SummaryEntry) -> tuple[str, ...]:
    """The ops of the variant's step that draw random numbers (none: its math can be compared)."""
    return entry.random_ops


def draws_random(entry: SummaryEntry) -> str | None:
    """"the step draws random numbers (`dropout/...`)" when it does, else None."""
    names = random_ops(entry)
    if not names:
        return None
    shown = ", ".join(f"`{n}`" for n in names[:RANDOM_OPS_SHOWN])
    more = f" and {len(names) - RANDOM_OPS_SHOWN} more" if len(names) > RANDOM_OPS_SHOWN else ""
    return f"the step draws random numbers ({shown}{more})"


def compared_entries(entries: Sequence[SummaryEntry]) -> list[SummaryEntry]:
    """Successful variants that recorded their losses, all finite (a diverged one is no reference), from
    a step that draws no random numbers."""
    return [e for e in entries if e.ok and entry_losses(e) and not_finite(e) is None and not random_ops(e)]


def reference(entries: Sequence[SummaryEntry]) -> Reference | None:
    """The family baseline's numbers; else the median of three or more variants; else None."""
    with_math = compared_entries(entries)
    baselines = [e for e in with_math if e.baseline]
    baselines.sort(key=lambda e: e.family != registry.TF1_GRAPH)
    if baselines:
        b = baselines[0]
        norm = entry_grad_norm(b)
        what = "one worker per task" if b.family == registry.CLUSTER else "one device"
        return Reference(b.name, entry_losses(b), norm, f"{b.name} (the baseline: {what})")
    if len(with_math) < MIN_FOR_MEDIAN:
        return None
    steps = min(len(entry_losses(e)) for e in with_math)
    losses = tuple(statistics.median(entry_losses(e)[i] for e in with_math) for i in range(steps))
    norms = [n for e in with_math if (n := entry_grad_norm(e)) is not None]
    norm = statistics.median(norms) if len(norms) >= MIN_FOR_MEDIAN else None
    return Reference(None, losses, norm, f"the median of {len(with_math)} variants (no baseline ran)")


def relative_difference(a: float, b: float) -> float:
    """``|a - b| / |b|`` (``inf`` when only ``b`` is zero; NaN stays NaN, and differs)."""
    if a == b:
        return 0.0
    return abs(a - b) / abs(b) if b != 0 else math.inf


def _exceeds(diff: float, rtol: float) -> bool:
    return not diff <= rtol  # NaN exceeds


def compare(entry: SummaryEntry, ref: Reference, loss_rtol: float, grad_norm_rtol: float) -> Comparison:
    """``entry``'s losses (step by step) and gradient norm against ``ref``'s."""
    return compare_numbers(entry_losses(entry), entry_grad_norm(entry), ref, loss_rtol, grad_norm_rtol)


def compare_numbers(losses: Sequence[float], norm: float | None, ref: Reference, loss_rtol: float,
                    grad_norm_rtol: float) -> Comparison:
    """``losses`` (step by step) and the gradient norm ``norm`` against ``ref``'s."""
    diffs = tuple(relative_difference(a, b) for a, b in zip(losses, ref.losses))
    norm_diff = None if norm is None or ref.grad_norm is None else relative_difference(norm, ref.grad_norm)
    return Comparison(
        loss_rel_diff=diffs,
        grad_norm_rel_diff=norm_diff,
        loss_differs=any(_exceeds(d, loss_rtol) for d in diffs),
        grad_norm_differs=norm_diff is not None and _exceeds(norm_diff, grad_norm_rtol),
    )


def not_compared_why(entry: SummaryEntry, ref: Reference | None) -> str | None:
    """Why ``entry`` cannot be compared (None: it can)."""
    if not entry_losses(entry):
        return NO_LOSS
    random = draws_random(entry)
    if random is not None:
        return random
    if not_finite(entry) is not None:
        return None  # a NaN loss needs no reference to be wrong
    if ref is None:
        return (f"no reference: the baseline did not record its losses and fewer than {MIN_FOR_MEDIAN} "
                "variants did")
    return None


def table(entries: Sequence[SummaryEntry], loss_rtol: float, grad_norm_rtol: float) -> MathTable:
    """``summary.json`` -> ``math``: the reference, the tolerances and one row per successful variant."""
    ref = reference(entries)
    rows = [_row(e, ref, loss_rtol, grad_norm_rtol) for e in entries if e.ok]
    reference_doc = None if ref is None else MathReference(ref.variant, ref.label, ref.losses, ref.grad_norm)
    return MathTable(reference_doc, MathTolerance(loss_rtol, grad_norm_rtol), tuple(rows))


def _row(e: SummaryEntry, ref: Reference | None, loss_rtol: float, grad_norm_rtol: float) -> MathRow:
    """One successful variant's row of :func:`table`."""
    row = MathRow(e.name, NOT_COMPARED, entry_losses(e), entry_grad_norm(e))
    why = not_compared_why(e, ref)
    if why is not None:
        return replace(row, why=why, random_ops=random_ops(e))
    nan = not_finite(e)
    if ref is None:  # not_compared_why let it through: its own NaN says it differs
        return replace(row, status=DIFFERS, why=nan)
    c = compare(e, ref, loss_rtol, grad_norm_rtol)
    status = REFERENCE if e.name == ref.variant else (DIFFERS if c.differs else SAME)
    return replace(row, status=status, why=nan, loss_rel_diff=c.loss_rel_diff,
                   grad_norm_rel_diff=c.grad_norm_rel_diff)
