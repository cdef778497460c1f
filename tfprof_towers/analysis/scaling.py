"""Scaling arithmetic: step time, throughput, speedup and efficiency per variant and accelerator count.

Pure functions on :class:`Point` (one variant at one count, measured or projected); no TensorFlow,
no files.  ``profile --scaling COUNTS`` (:mod:`tfprof_towers.session.scaling`) runs the sweep and
:mod:`tfprof_towers.analysis.scaling_run` reads it back into points; this module turns them into
``summary.json`` -> ``scaling``.

The definitions of every figure (throughput, speedup, the efficiencies and their basis,
``wall_per_step``, the headline) are docs/scaling.md's table.  ``host`` in :data:`GROUPS` is input
and framework time on the accelerator's own rows (time an accelerator waits for the host shows
as its ``idle``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tfprof_towers.rundir.scaling import (
    BestPick,
    ProjectedPoint,
    ProjectedScaling,
    ProjectedVariant,
    ScalingPoint,
    ScalingSection,
    ScalingVariant,
    StepSpread,
)
from tfprof_towers.rundir.trace_doc import DeviceTime
from tfprof_towers.vocab.fmt import fmt_seconds

WEAK, STRONG = "weak", "strong"
MODES = (WEAK, STRONG)
OK, FAILED, SKIPPED = "ok", "failed", "skipped"
#: The efficiency the headline asks to keep (a TensorFlow maintainer's rule of thumb, tensorflow #26392).
TARGET_EFFICIENCY = 0.9

#: What a step's time is made of, in groups of the trace's wall categories (vocab/categories.py).
GROUPS: dict[str, tuple[str, ...]] = {
    "compute": ("compute", "host_compute"),  # host_compute: a logical CPU device's own ops
    "copies": ("p2p", "d2d", "h2d", "d2h", "memset"),
    "collectives": ("collective",),
    "send_recv": ("send_recv",),
    "host": ("input", "framework"),
    "idle": ("idle",),
}
GROUP_LABELS: dict[str, str] = {"compute": "compute", "copies": "copy", "collectives": "collective",
                                "send_recv": "send/recv", "host": "host", "idle": "idle"}


@dataclass(frozen=True)
class Point:
    """One variant at one accelerator count: what was measured (or projected) there."""

    variant: str
    count: int
    status: str = OK  # OK | FAILED | SKIPPED
    family: str = ""
    baseline: bool = False  # the family's 1-accelerator reference
    reason: str | None = None  # failed or skipped: why
    step_median_s: float | None = None
    step_p10_s: float | None = None
    step_p90_s: float | None = None
    global_batch: int | None = None
    wall_per_step: Mapping[str, float] | None = None  # GROUPS -> seconds per step
    bottleneck: str | None = None  # projected: the busiest resource
    bottleneck_kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK and bool(self.step_median_s) and bool(self.global_batch)

    @property
    def throughput(self) -> float | None:
        """Examples per second: the global batch over the median step time."""
        if not self.ok:
            return None
        return self.global_batch / self.step_median_s  # type: ignore[operator]


def global_batch(mode: str, batch: int, count: int) -> int:
    """The global batch at ``count`` accelerators: ``batch`` per replica (weak) or in all (strong)."""
    if mode not in MODES:
        raise ValueError(f"scaling mode {mode!r}: choose weak or strong")
    return batch * count if mode == WEAK else batch


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if (a is not None and b) else None


@dataclass(frozen=True)
class Scored:
    point: Point
    speedup: float | None = None
    speedup_vs_baseline: float | None = None
    efficiency: float | None = None
    efficiency_basis: str | None = None  # "baseline" | "own"
    efficiency_vs_baseline: float | None = None

    @property
    def headline_efficiency(self) -> float | None:
        return self.efficiency_vs_baseline if self.efficiency_vs_baseline is not None else self.efficiency


def score(mode: str, points: Sequence[Point], baselines: Mapping[str, Point]) -> list[Scored]:
    """Speedups and efficiencies of one variant's ``points`` (any order); ``baselines``: family ->
    the family's baseline point (at 1 accelerator)."""
    ran = sorted((p for p in points if p.ok), key=lambda p: p.count)
    first = ran[0] if ran else None
    out = []
    for p in points:
        if not p.ok or first is None:
            out.append(Scored(p))
            continue
        base = baselines.get(p.family)
        base = base if base is not None and base.ok and not p.baseline else None
        own = _ratio(p.throughput, first.throughput)
        vs_base = 1.0 if p.baseline else _ratio(p.throughput, None if base is None else base.throughput)
        per_own = own / (p.count / first.count) if own is not None else None
        vs_base_eff = vs_base / (p.count / (base.count if base is not None else p.count)) \
            if vs_base is not None else None
        if mode == WEAK and vs_base_eff is not None:
            eff, basis = vs_base_eff, "baseline"
        else:
            eff, basis = per_own, "own"
        out.append(Scored(p, own, vs_base, eff, basis, vs_base_eff))
    return out


def point_json(s: Scored) -> ScalingPoint:
    """``scaling.variants[].points[]`` of summary.json."""
    p = s.point
    return ScalingPoint(
        count=p.count, status=p.status, step_time_s=StepSpread(p.step_median_s, p.step_p10_s, p.step_p90_s),
        global_batch=p.global_batch, examples_per_s=p.throughput, speedup=s.speedup,
        speedup_vs_baseline=s.speedup_vs_baseline, efficiency=s.efficiency,
        efficiency_basis=s.efficiency_basis, efficiency_vs_baseline=s.efficiency_vs_baseline,
        wall_per_step=None if p.wall_per_step is None else dict(p.wall_per_step), reason=p.reason or None)


def by_variant(points: Iterable[Point]) -> dict[str, list[Point]]:
    """Points grouped by variant, variants in order of first appearance, points by count."""
    out: dict[str, list[Point]] = {}
    for p in points:
        out.setdefault(p.variant, []).append(p)
    return {v: sorted(ps, key=lambda p: p.count) for v, ps in out.items()}


def family_baselines(points: Iterable[Point]) -> dict[str, Point]:
    """Each family's baseline point (the smallest count it ran at; normally 1)."""
    out: dict[str, Point] = {}
    for p in sorted(points, key=lambda p: p.count):
        if p.baseline and p.ok and p.family not in out:
            out[p.family] = p
    return out


def curves(mode: str, points: Sequence[Point]) -> dict[str, list[Scored]]:
    bases = family_baselines(points)
    return {v: score(mode, ps, bases) for v, ps in by_variant(points).items()}


# ------------------------------------------------------------------------------------------
# What grows with N


def wall_groups(devices: Mapping[str, DeviceTime], roles: Mapping[str, str]) -> dict[str, float] | None:
    """Per-step wall seconds per group (:data:`GROUPS`), the mean over the accelerator devices of a
    per-step breakdown's ``devices`` (``roles``: device -> its role; every device when none is an
    accelerator)."""
    rows = [d for name, d in devices.items() if roles.get(name) == "accelerator"] or list(devices.values())
    if not rows:
        return None
    out = dict.fromkeys(GROUPS, 0.0)
    for d in rows:
        for group, cats in GROUPS.items():
            out[group] += sum(d.seconds(c) for c in cats)
    return {g: s / len(rows) for g, s in out.items()}


#: A group's growth is named when it grew by at least this share of the larger step, and by 5%.
GROWTH_SHARE = 0.05


def _groups(wall: Mapping[str, float] | None) -> dict[str, float]:
    """Seconds per step of every group, 0 where ``wall`` has none."""
    return {**dict.fromkeys(GROUPS, 0.0), **(wall or {})}


def growth(points: Sequence[Point], unit: str = "accelerators", most: int = 2) -> list[str]:
    """Sentences saying what grew between consecutive counts a variant ran at:
    "from 2 to 4 accelerators, collective time per step grew from 1.10 ms to 3.00 ms and idle from
    400 µs to 2.20 ms" (the ``most`` groups that grew most, compute excepted unless alone)."""
    ran = [p for p in sorted(points, key=lambda p: p.count) if p.ok and p.wall_per_step]
    out = []
    for a, b in itertools.pairwise(ran):
        wa, wb = _groups(a.wall_per_step), _groups(b.wall_per_step)
        step = sum(wb.values()) or 1.0
        grew = sorted(((wb[g] - wa[g], g) for g in GROUPS
                       if wb[g] - wa[g] >= max(GROWTH_SHARE * step, 0.05 * wa[g]) and wb[g] > wa[g]),
                      reverse=True)
        named = [g for _, g in grew if g != "compute"][:most] or [g for _, g in grew][:1]
        if not named:
            out.append(f"from {a.count} to {b.count} {unit}, no part of the step grew by "
                       f"{GROWTH_SHARE:.0%} of it or more")
            continue
        parts = [f"{GROUP_LABELS[g]}{' time per step' if i == 0 else ''} from {fmt_seconds(wa[g])}"
                 f" to {fmt_seconds(wb[g])}" for i, g in enumerate(named)]
        head, *rest = parts
        head = head.replace(" time per step from", " time per step grew from", 1)
        out.append(f"from {a.count} to {b.count} {unit}, {head}" + "".join(f" and {r}" for r in rest))
    return out


# ------------------------------------------------------------------------------------------
# Headline and the count-dependent recommendation


def keeps_target(scored: Sequence[Scored],
                 target: float = TARGET_EFFICIENCY) -> tuple[int | None, Scored | None]:
    """The largest count before efficiency first drops under ``target`` (None: under it from the
    start), and the first point under it (None: it never drops)."""
    ran = [s for s in sorted(scored, key=lambda s: s.point.count) if s.headline_efficiency is not None]
    kept = None
    for s in ran:
        if s.headline_efficiency < target:  # type: ignore[operator]
            return kept, s
        kept = s.point.count
    return kept, None


def headline(variant: str, scored: Sequence[Scored], unit: str = "GPUs",
             target: float = TARGET_EFFICIENCY) -> str | None:
    """One sentence: the largest count keeping ``target`` efficiency, and what stops it beyond."""
    ran = [s for s in scored if s.headline_efficiency is not None]
    if not ran or all(s.point.baseline for s in ran):
        return None
    kept, drop = keeps_target(scored, target)
    top = max(s.point.count for s in ran)
    if drop is None:
        return f"{variant} keeps ≥ {target:.0%} efficiency up to {top} {unit} (the largest count here)"
    why = drop.point.bottleneck or _largest_growth(drop.point)
    eff = f"{drop.headline_efficiency:.0%}"
    limit = f", limited by {why}" if why else ""
    if kept is None:
        return f"{variant} is under {target:.0%} efficiency from {drop.point.count} {unit} ({eff}{limit})"
    return (f"{variant} keeps ≥ {target:.0%} efficiency up to {kept} {unit}; at {drop.point.count} {unit} "
            f"it is {eff}{limit}")


def _largest_growth(p: Point) -> str | None:
    """The largest non-compute part of a measured step (what a measured point is limited by)."""
    wall = {g: s for g, s in (p.wall_per_step or {}).items() if g != "compute" and s > 0}
    if not wall:
        return None
    g = max(wall, key=lambda k: wall[k])
    return f"{GROUP_LABELS[g]} time ({fmt_seconds(wall[g])} per step)"


def best_by_count(all_scored: Mapping[str, Sequence[Scored]]) -> list[tuple[int, str]]:
    """At each count, the variant with the highest throughput there."""
    best: dict[int, tuple[float, str]] = {}
    for v, scored in all_scored.items():
        for s in scored:
            t = s.point.throughput
            if t is not None and (s.point.count not in best or t > best[s.point.count][0]):
                best[s.point.count] = (t, v)
    return [(n, best[n][1]) for n in sorted(best)]


def count_recommendation(picks: Sequence[tuple[int, str]], unit: str = "GPUs") -> str | None:
    """``[(2, "a"), (4, "b"), (8, "b")]`` -> ``"at 2 GPUs a; from 4 GPUs up, b"``."""
    if not picks:
        return None
    runs = [list(run) for _, run in itertools.groupby(picks, key=lambda pick: pick[1])]
    parts = []
    for i, run in enumerate(runs):
        first, last, v = run[0][0], run[-1][0], run[0][1]
        one = unit.rstrip("s") if first == 1 and len(run) == 1 else unit
        if len(run) == 1:
            parts.append(f"at {first} {one} {v}")
        elif i == len(runs) - 1:
            parts.append(f"from {first} {unit} up, {v}")
        else:
            parts.append(f"from {first} to {last} {unit} {v}")
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------
# summary.json -> scaling


@dataclass(frozen=True)
class Sweep:
    """What the sweep ran: mode, counts, the per-replica (weak) or global (strong) batch, points."""

    mode: str
    counts: tuple[int, ...]
    batch: int
    points: tuple[Point, ...] = ()
    unit: str = "accelerators"
    label: str = "measured here"
    notes: tuple[str, ...] = field(default_factory=tuple)


def variants_json(mode: str, points: Sequence[Point], unit: str) -> tuple[list[ScalingVariant],
                                                                       dict[str, list[Scored]]]:
    scored = curves(mode, points)
    families = {p.variant: (p.family, p.baseline) for p in points}
    out = []
    for v, ss in scored.items():
        fam, base = families[v]
        out.append(ScalingVariant(v, fam, base, tuple(point_json(s) for s in ss),
                                  tuple(growth([s.point for s in ss], unit)), headline(v, ss, unit)))
    return out, scored


def measured_section(sweep: Sweep) -> ScalingSection:
    """``summary.json`` -> ``scaling`` (without ``projected``)."""
    variants, scored = variants_json(sweep.mode, sweep.points, sweep.unit)
    picks = best_by_count(scored)
    return ScalingSection(
        mode=sweep.mode, counts=tuple(sweep.counts), batch=sweep.batch,
        batch_is="per replica" if sweep.mode == WEAK else "global",
        label=sweep.label, variants=tuple(variants), best_by_count=tuple(BestPick(n, v) for n, v in picks),
        recommendation=count_recommendation(picks, sweep.unit), notes=tuple(sweep.notes),
    )


def projected_point_json(s: Scored) -> ProjectedPoint:
    """``scaling.projected.variants[].points[]``."""
    p = s.point
    return ProjectedPoint(
        count=p.count, step_time_s=p.step_median_s, global_batch=p.global_batch,
        examples_per_s=p.throughput, speedup=s.speedup, speedup_vs_baseline=s.speedup_vs_baseline,
        efficiency=s.efficiency, efficiency_basis=s.efficiency_basis,
        efficiency_vs_baseline=s.efficiency_vs_baseline, bottleneck=p.bottleneck,
        bottleneck_kind=p.bottleneck_kind, error=p.reason or None)


def projected_section(mode: str, hardware: str, preset: str, points: Sequence[Point],
                      notes: Sequence[str] = ()) -> ProjectedScaling:
    """``summary.json`` -> ``scaling.projected``."""
    scored = curves(mode, points)
    families = {p.variant: (p.family, p.baseline) for p in points}
    variants = tuple(ProjectedVariant(v, families[v][0], families[v][1],
                                      tuple(projected_point_json(s) for s in ss), headline(v, ss, "GPUs"))
                     for v, ss in scored.items())
    picks = best_by_count(scored)
    return ProjectedScaling(hardware=hardware, preset=preset, mode=mode, label=f"projected on {hardware}",
                            variants=variants, best_by_count=tuple(BestPick(n, v) for n, v in picks),
                            recommendation=count_recommendation(picks, "GPUs"), notes=tuple(notes))
