"""The one recommender: the fastest variant, unless a simpler one is within noise of it.

Every basis (measured, projected, the headline from the projection) shares:

* one notion of **simpler**: the registry's ``simplicity`` (:mod:`tfprof_towers.variants.registry`;
  a user's variant file counts as :data:`~tfprof_towers.variants.registry.USER_SIMPLICITY`);
* one notion of **within noise** per basis: for measured step times, the
  p10–p90 ranges of the un-profiled steps overlap (:func:`overlap`); for
  projected times, which have no spread, the simpler variant's overlapped bound
  is within :data:`PROJECTED_WITHIN` of the fastest's (:func:`within_fraction`);
* one notion of **not eligible**: ``excluded`` names the variants that must not
  be recommended, each with why (a high-severity finding such as heavy compute
  on the host or changed math; a variant that failed in the run).  They are
  passed over while any other variant is left, and where one of them is the
  fastest the reason says so.

``basis`` says where the numbers come from: ``"measured"`` (step times taken
here) or ``"projected"`` (``hardware`` and ``preset`` name the projection).  No TensorFlow, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from tfprof_towers.rundir.projection_doc import (
    Bottleneck,
    ProjectionEntry,
    ProjectionRow,
    ProjectionSummary,
    StepBounds,
)
from tfprof_towers.rundir.summary import MEASURED, PROJECTED, Recommendation, Summary, SummaryEntry
from tfprof_towers.variants import registry
from tfprof_towers.vocab.device_names import short_device
from tfprof_towers.vocab.fmt import fmt_gib, fmt_ratio, fmt_seconds, fmt_step

#: The projected basis: a simpler variant whose projected (overlapped) step is within this
#: fraction of the fastest's counts as within noise.
PROJECTED_WITHIN = 0.05
#: Runs whose timings are not the user's GPUs' (topology kind -> why, in words): their headline
#: comes from the projection, and their measured ranking is shown as CPU stand-in timings.
STAND_IN: dict[str, str] = {
    "logical-cpu": "the accelerators here are logical CPU devices sharing the same cores",
    "cpu": "the tasks here ran on CPUs, without GPUs (a cluster on one machine's loopback or on CPU hosts)",
}


def stand_in_why(kind: str | None) -> str | None:
    """Why the step times of a run on a topology of ``kind`` are not GPU speed, or None when they are
    (real GPUs)."""
    return STAND_IN.get(kind or "")


def run_kind(summary: Summary) -> str | None:
    """The run's topology kind (None without a topology)."""
    return None if summary.topology is None else summary.topology.kind


@dataclass(frozen=True)
class Candidate:
    """A variant that may be recommended: its ranking time, its noise band and its simplicity."""

    name: str
    time_s: float
    simplicity: int
    low_s: float | None = None  # p10 for measured times
    high_s: float | None = None  # p90 for measured times
    source: str = "builtin"


CloseTo = Callable[[Candidate, Candidate], bool]


def overlap(a: Candidate, b: Candidate) -> bool:
    """Measured noise: the p10–p90 ranges of ``a`` and ``b`` overlap (False when either is unknown)."""
    if None in (a.low_s, a.high_s, b.low_s, b.high_s):
        return False
    return a.low_s <= b.high_s and b.low_s <= a.high_s


def within_fraction(fraction: float) -> CloseTo:
    """Projected noise: ``b``'s time is at most ``fraction`` above the fastest ``a``'s."""
    def close(a: Candidate, b: Candidate) -> bool:
        return b.time_s <= a.time_s * (1 + fraction)

    return close


@dataclass(frozen=True)
class Choice:
    """The rule's outcome over candidates ranked fastest first."""

    chosen: Candidate
    fastest: Candidate
    runner_up: Candidate | None  # the best candidate other than the chosen one
    close: tuple[Candidate, ...]  # the candidates within noise of the fastest


def choose(ranked: Sequence[Candidate], close_to: CloseTo) -> Choice | None:
    """The fastest candidate, or the simplest of those within noise of it that is simpler still."""
    if not ranked:
        return None
    fastest = ranked[0]
    close = tuple(c for c in ranked[1:] if close_to(fastest, c))
    simpler = sorted((c for c in close if c.simplicity < fastest.simplicity),
                     key=lambda c: (c.simplicity, c.time_s))
    chosen = simpler[0] if simpler else fastest
    runner = next((c for c in ranked if c is not chosen), None)
    return Choice(chosen, fastest, runner, close)


NOTHING_MEASURED = Recommendation(
    None, "No variant finished successfully, so there is nothing to recommend; the failed variants below "
          "say why.")


def eligible(names: Sequence[str], excluded: Mapping[str, str]) -> tuple[list[str], bool]:
    """``names`` without the excluded ones -- or all of them, and True, when every one is excluded."""
    kept = [n for n in names if n not in excluded]
    return (kept, False) if kept else (list(names), bool(names))


def _every_one_excluded(name: str) -> str:
    return (f"Every variant here has a high-severity finding or failed, so {name} is only the best of them: "
            "fix its findings before using it.")


# ------------------------------------------------------------------------------------------
# Measured: summary.json entries


def measured_candidate(entry: SummaryEntry) -> Candidate:
    st = entry.step_time_s
    return Candidate(entry.name, st.median, registry.simplicity(entry.name, entry.source), st.p10, st.p90,
                     entry.source)


def measured(summary: Summary, excluded: Mapping[str, str] | None = None) -> Recommendation:
    """The recommendation from measured step times (the summary's ranked entries)."""
    excluded = dict(excluded or {})
    entries = {e.name: e for e in summary.variants}
    ok = [entries[n] for n in summary.ranking if entries[n].ok and entries[n].median_s is not None]
    if not ok:
        return NOTHING_MEASURED
    names, every_one = eligible([e.name for e in ok], excluded)
    choice = choose([measured_candidate(entries[n]) for n in names], overlap)
    assert choice is not None
    chosen, fastest = entries[choice.chosen.name], entries[choice.fastest.name]
    overall = ok[0]
    # the best variant other than the chosen one, eligible or not (the reason says which is which)
    runner = next((e for e in ok if e is not chosen), None)
    close = {c.name for c in choice.close}
    reason = []
    if overall is not fastest:
        reason.append(f"{overall.name} has the fastest median un-profiled step ({_med(overall)}) but is "
                      f"not recommended: {excluded[overall.name]}.")
    reason.append(_describe_fastest(fastest, "" if overall is fastest else " of the others"))
    if chosen is not fastest:
        reason.append(
            f"{chosen.name} is within measured noise ({_med(chosen)}, p10–p90 ranges overlap) and "
            f"simpler, so it is the recommendation."
        )
    elif runner is not None and runner is not overall:
        gap = runner.median_s / fastest.median_s
        noise = " (within measured noise, but not simpler)" if runner.name in close else ""
        reason.append(f"Runner-up: {runner.name} at {_med(runner)}, {fmt_ratio(gap)} slower{noise}.")
    if every_one:
        reason.append(_every_one_excluded(chosen.name))
    why = stand_in_why(run_kind(summary))
    if why:
        reason.append(
            f"{why[0].upper()}{why[1:]}, so this ranks CPU cost, not GPU scaling: profile on the GPU "
            "machine before changing production code."
        )
    return Recommendation(
        variant=chosen.name, reason=" ".join(reason), basis=MEASURED, fastest=overall.name,
        runner_up=runner.name if runner else None, speedup_vs_baseline=chosen.speedup_vs_baseline,
        median_step_s=chosen.median_s,
        within_noise=tuple(c.name for c in choice.close),
        excluded={n: why for n, why in excluded.items() if n in entries},
    )


def _med(e: SummaryEntry) -> str:
    return fmt_seconds(e.median_s)


def _describe_fastest(e: SummaryEntry, among: str = "") -> str:
    st = e.step_time_s
    text = f"{e.name} has the fastest median un-profiled step{among}: {_med(e)}"
    if st.p10 is not None and st.p90 is not None:
        text += f" (p10–p90 {fmt_seconds(st.p10)}–{fmt_seconds(st.p90)}, {st.n} steps)"
    if e.speedup_vs_baseline is not None and not e.baseline:
        text += f", {fmt_ratio(e.speedup_vs_baseline)} the speed of {registry.baseline_name(e.family)}"
    return text + "."


# ------------------------------------------------------------------------------------------
# Projected: projection.json entries, or summary.json's compact projection


#: A projected variant: a ``projection.json`` entry, or a row of summary.json's compact projection.
ProjectedRow = ProjectionEntry | ProjectionRow


def projected(
    entries: Sequence[ProjectedRow], ranking: Sequence[str], hardware: str,
    sources: Mapping[str, str] | None = None, excluded: Mapping[str, str] | None = None,
) -> Recommendation:
    """The recommendation from projected step times (``project.api`` entries, ranked)."""
    if not ranking:
        return Recommendation(None, "no variant could be projected; see the errors", PROJECTED,
                              hardware=hardware)
    sources = sources or {}
    excluded = dict(excluded or {})
    by_name = {e.name: e for e in entries}
    unfit = {n: fit["verdict"] for n in ranking
             if (fit := by_name[n].memory_fit) is not None and fit.get("fits") is False}
    if len(unfit) == len(ranking):
        return Recommendation(None, nothing_fits([by_name[n] for n in ranking], hardware), PROJECTED,
                              hardware=hardware, fastest=ranking[0], excluded=unfit)
    # one that may not fit (only the low end of its range fits) is not recommended over one that fits
    maybe = {n: fit["verdict"] for n in ranking if n not in unfit
             and (fit := by_name[n].memory_fit) is not None and fit.get("may_not_fit") is True}
    if len(unfit) + len(maybe) < len(ranking):
        unfit = {**unfit, **maybe}
    excluded = {**unfit, **excluded}  # a placement that does not fit is never recommended

    def candidate(name: str) -> Candidate:
        source = sources.get(name, "builtin")
        step = _step(by_name[name]).overlapped
        return Candidate(name, step, registry.simplicity(name, source), source=source)

    names, every_one = eligible([n for n in ranking if n not in unfit], excluded)
    choice = choose([candidate(n) for n in names], within_fraction(PROJECTED_WITHIN))
    assert choice is not None
    overall = by_name[ranking[0]]
    passed_over = ""
    if overall.name not in names:
        t = fmt_step(_step(overall).overlapped)
        passed_over = f"{overall.name} is projected fastest ({t}) but is not recommended: " \
                      f"{excluded[overall.name]}; "
    rec = _projected_choice(choice, by_name, names, hardware, sources, bool(passed_over))
    fit = by_name[rec.variant].memory_fit
    headroom = f"; memory: {fit['verdict']}" if fit and fit.get("verdict") else ""
    reason = passed_over + rec.reason + headroom
    reason += f". {_every_one_excluded(rec.variant)}" if every_one else ""
    runner = next((n for n in ranking if n != rec.variant), None)  # eligible or not, as measured()
    step = _step(by_name[rec.variant])
    return replace(rec, reason=reason, fastest=overall.name, runner_up=runner,
                   projected_step_s={"overlapped": step.overlapped, "serial": step.serial},
                   excluded={n: w for n, w in excluded.items() if n in by_name})


def _step(entry: ProjectedRow) -> StepBounds:
    """A ranked entry's bounds (every ranked entry was projected)."""
    assert entry.projected_step_s is not None
    return entry.projected_step_s


def nothing_fits(entries: Sequence[ProjectedRow], hardware: str) -> str:
    """Why there is no recommendation when no projected variant fits: say so, and name the smallest peak."""
    peaks = [(int(f["peak_bytes"]), e.name, f) for e in entries
             if (f := e.memory_fit) is not None and f.get("peak_bytes") is not None]
    if not peaks:
        return f"no variant fits the memory of {hardware}"
    peak, name, f = min(peaks, key=lambda x: (x[0], x[1]))
    where, of = short_device(str(f["device"])), fmt_gib(f.get("capacity_bytes"))
    return (f"no variant fits the memory of {hardware}, so none is recommended: the smallest peak is "
            f"{name}'s, {fmt_gib(peak)} on {where} of {of}")


def _projected_choice(choice: Choice, by_name: Mapping[str, ProjectedRow], ranking: Sequence[str],
                      hardware: str, sources: Mapping[str, str], others: bool) -> Recommendation:
    """The projected recommendation among ``ranking`` (the eligible variants, fastest first)."""
    best = by_name[choice.fastest.name]
    t_best = _step(best).overlapped
    base_name = registry.baseline_name()
    base = by_name.get(base_name)
    if base is not None and not registry.is_baseline(base_name, sources.get(base_name, "builtin")):
        base = None  # a variant file that happens to share the baseline's name
    base_step = None if base is None else base.projected_step_s
    chosen = by_name[choice.chosen.name]
    speedup = None
    if base_step is not None:
        speedup = base_step.overlapped / _step(chosen).overlapped
    close = tuple(c.name for c in choice.close)
    if choice.chosen is not choice.fastest:
        name = choice.chosen.name
        fastest = "the fastest of the others" if others else "the fastest"
        reason = (f"projected within {PROJECTED_WITHIN:.0%} of {fastest} ({best.name}, "
                  f"{fmt_step(t_best)}) on {hardware}")
        if registry.is_baseline(name, choice.chosen.source):
            reason += ", with one device: multi-device placement does not pay"
        else:
            reason += f", and simpler than {best.name}"
        return Recommendation(name, reason, PROJECTED, fastest=best.name, hardware=hardware,
                              speedup_vs_baseline=speedup, within_noise=close)
    lo, hi = _step(best).overlapped, _step(best).serial
    fastest = "fastest of the others" if others else "fastest"
    reason = (f"projected {fastest} on {hardware}: {fmt_step(lo)} to {fmt_step(hi)} per step "
              "(overlapped to serial)")
    if base_step is not None and best.name != base_name:
        reason += f", {base_step.overlapped / lo:.2f}x {base_name}"
    reason += f"; bottleneck: {_bottleneck(best)}"
    by_serial = min((by_name[n] for n in ranking), key=lambda e: _step(e).serial)
    if by_serial.name != best.name:
        reason += f" (if copies never overlap compute, {by_serial.name} is faster)"
    if len(ranking) > 1:
        runner = by_name[ranking[1]]
        gap = _step(runner).overlapped / lo - 1
        reason += f"; next: {runner.name} ({gap:+.1%})"
    return Recommendation(best.name, reason, PROJECTED, fastest=best.name, hardware=hardware,
                          runner_up=ranking[1] if len(ranking) > 1 else None, speedup_vs_baseline=speedup,
                          within_noise=close)


def _bottleneck(entry: ProjectedRow) -> str:
    """A projected entry's bottleneck: a :class:`Bottleneck` (projection.json) or its sentence (summary)."""
    b = entry.bottleneck
    return b.text if isinstance(b, Bottleneck) else str(b or "")


def from_projection(
    projection: ProjectionSummary, excluded: Mapping[str, str] | None = None,
    sources: Mapping[str, str] | None = None,
) -> Recommendation:
    """The headline of a run whose accelerators are logical CPU devices: the projection decides.

    ``projection`` is summary.json's compact projection (``pipeline.compact_projection``).
    When it failed there is no recommendation: the CPU stand-in timings rank CPU cost,
    not GPU speed, and never choose.
    """
    hardware = str(projection.hardware or "the default hardware profile")
    preset = projection.preset.name if projection.preset is not None else None
    at = f" at the {preset} preset" if preset else ""
    if projection.preset is not None and projection.preset.keras_model:
        at = f" for the Keras model {preset}"
    if projection.error:
        error = str(projection.error)
        reason = (f"No recommendation: the projection on {hardware} failed ({error}). The CPU stand-in "
                  "timings below rank CPU cost, not GPU speed, so they do not choose; retry with "
                  f"`tfprof-towers project RUN_DIR --hardware {hardware}`.")
        return Recommendation(None, reason, PROJECTED, hardware=hardware, preset=preset, error=error)
    variants = projection.variants
    entries = [v for v in variants if v.projected]
    names = {v.name for v in entries}
    ranking = [n for n in projection.ranking if n in names]
    missing = [f"{v.name} ({v.error or 'not projected'})" for v in variants if v.name not in names]
    if not ranking:
        reason = f"No recommendation: no variant could be projected on {hardware}{at}"
        reason += f": {', '.join(missing)}." if missing else "."
        return Recommendation(None, reason, PROJECTED, hardware=hardware, preset=preset,
                              error="no variant could be projected")
    rec = projected(entries, ranking, hardware, sources, excluded)
    at = at.strip()
    reason = f"{at[:1].upper() + at[1:] if at else 'Projected'} (not measured): {rec.reason}."
    if missing:
        reason += f" Not projected: {', '.join(missing)}."
    return replace(rec, reason=reason, preset=preset)


def headline(summary: Summary, excluded: Mapping[str, str] | None = None) -> Recommendation:
    """``summary.json`` -> ``recommendation``: from the projection where the timings are CPU
    stand-ins (:data:`STAND_IN`: logical CPU devices, or a cluster without GPUs) and the run was
    projected (or tried to be); from measured step times elsewhere (real GPUs, or an older run
    directory without any projection)."""
    projection = summary.projection
    here = measured(summary, excluded)
    if stand_in_why(run_kind(summary)) and projection is not None:
        variants = summary.variants
        sources = {e.name: e.source or "builtin" for e in variants}
        ran = {e.name for e in variants}
        not_run = {v.name: "not run here, so its placement and math were not checked"
                   for v in projection.variants if v.name not in ran}
        barred = dict(excluded or {})
        rec = from_projection(projection, {**not_run, **barred}, sources)
        reason, fastest = rec.reason, here.fastest
        if fastest and fastest in barred and fastest != rec.variant:
            step = next(e.median_s for e in variants if e.name == fastest)
            reason += (f" {fastest} has the fastest CPU stand-in step here ({fmt_seconds(step)}) but is not "
                       f"recommended: {barred[fastest]}.")
        return replace(rec, reason=reason, measured_pick=here.variant)
    return here
