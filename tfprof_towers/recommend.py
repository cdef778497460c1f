"""The one recommender: the fastest variant, unless a simpler one is within noise of it.

Used by the measured ranking (``summary.json`` -> ``recommendation``) and by the
what-if projection (``projection.json`` -> ``recommendation``), with:

* one notion of **simpler**: the registry's ``simplicity`` (:mod:`tfprof_towers.registry`;
  a user's variant file counts as :data:`~tfprof_towers.registry.USER_SIMPLICITY`);
* one notion of **within noise** per basis: for measured step times, the
  p10–p90 ranges of the un-profiled steps overlap (:func:`overlap`); for
  projected times, which have no spread, the simpler variant's overlapped bound
  is within :data:`PROJECTED_WITHIN` of the fastest's (:func:`within_fraction`).

:func:`choose` is the rule; :func:`measured` and :func:`projected` turn each
basis's entries into :class:`Candidate` values and the choice into words.
No TensorFlow, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import registry
from .fields import Fields
from .fmt import fmt_ratio, fmt_seconds

#: The measured basis, as summary.json names it.
MEASURED_BASIS = "median un-profiled step time"
#: The projected basis: a simpler variant whose projected (overlapped) step is within this
#: fraction of the fastest's counts as within noise.
PROJECTED_WITHIN = 0.05
PROJECTED_BASIS = "projected step time (copies overlapped with compute)"


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


@dataclass(frozen=True)
class Recommendation:
    """The variant to use and why, with the numbers behind it."""

    variant: str | None
    reason: str
    basis: str = MEASURED_BASIS
    fastest: str | None = None
    runner_up: str | None = None
    speedup_vs_single: float | None = None
    median_step_s: float | None = None
    within_noise: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "fastest": self.fastest, "runner_up": self.runner_up,
            "speedup_vs_single": self.speedup_vs_single, "median_step_s": self.median_step_s,
            "within_noise": list(self.within_noise), "basis": self.basis, "reason": self.reason,
        }

    def brief(self) -> dict[str, Any]:
        """``{"variant", "reason"}``: what projection.json keeps."""
        return {"variant": self.variant, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: Any, where: str = "recommendation") -> Recommendation:
        f = Fields.of(doc, where)
        return cls(
            variant=f.text("variant"), reason=f.text("reason", default=""),
            basis=f.text("basis", default=MEASURED_BASIS), fastest=f.text("fastest"),
            runner_up=f.text("runner_up"), speedup_vs_single=f.number("speedup_vs_single"),
            median_step_s=f.number("median_step_s"), within_noise=f.texts("within_noise"),
        )


NOTHING_MEASURED = Recommendation(
    None, "No variant finished successfully, so there is nothing to recommend; the failed variants below "
          "say why.")


# ------------------------------------------------------------------------------------------
# Measured: summary.json entries


def measured_candidate(entry: Mapping[str, Any]) -> Candidate:
    st = entry["step_time_s"]
    source = entry.get("source") or "builtin"
    return Candidate(entry["name"], st["median"], registry.simplicity(entry["name"], source),
                     st.get("p10"), st.get("p90"), source)


def within_noise(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when the p10–p90 ranges of two summary entries' un-profiled step times overlap."""
    return overlap(measured_candidate(a), measured_candidate(b))


def measured(summary: Mapping[str, Any]) -> Recommendation:
    """The recommendation from measured step times (the summary document's ranked entries)."""
    entries = {e["name"]: e for e in summary.get("variants") or []}
    ok = [entries[n] for n in summary.get("ranking") or [] if entries[n]["status"] == "ok"
          and entries[n]["step_time_s"].get("median") is not None]
    choice = choose([measured_candidate(e) for e in ok], overlap)
    if choice is None:
        return NOTHING_MEASURED
    chosen, fastest = entries[choice.chosen.name], entries[choice.fastest.name]
    runner = entries[choice.runner_up.name] if choice.runner_up else None
    close = {c.name for c in choice.close}
    reason = [_describe_fastest(fastest)]
    if chosen is not fastest:
        reason.append(
            f"{chosen['name']} is within measured noise ({_med(chosen)}, p10–p90 ranges overlap) and "
            f"simpler, so it is the recommendation."
        )
    elif runner is not None:
        gap = runner["step_time_s"]["median"] / fastest["step_time_s"]["median"]
        noise = " (within measured noise, but not simpler)" if runner["name"] in close else ""
        reason.append(f"Runner-up: {runner['name']} at {_med(runner)}, {fmt_ratio(gap)} slower{noise}.")
    if (summary.get("topology") or {}).get("kind") == "logical-cpu":
        reason.append(
            "The accelerators here are logical CPU devices sharing the same cores, so this ranks "
            "CPU cost, not GPU scaling: profile on the GPU machine before changing production code."
        )
    return Recommendation(
        variant=chosen["name"], reason=" ".join(reason), basis=MEASURED_BASIS, fastest=fastest["name"],
        runner_up=runner["name"] if runner else None, speedup_vs_single=chosen.get("speedup_vs_single"),
        median_step_s=chosen["step_time_s"]["median"],
        within_noise=tuple(c.name for c in choice.close),
    )


def _med(e: Mapping[str, Any]) -> str:
    return fmt_seconds(e["step_time_s"]["median"])


def _family_baseline(entry: Mapping[str, Any]) -> str:
    return registry.baseline_name(entry.get("family") or registry.TF1_GRAPH)


def _describe_fastest(e: Mapping[str, Any]) -> str:
    st = e["step_time_s"]
    text = f"{e['name']} has the fastest median un-profiled step: {_med(e)}"
    if st.get("p10") is not None and st.get("p90") is not None:
        text += f" (p10–p90 {fmt_seconds(st['p10'])}–{fmt_seconds(st['p90'])}, {st.get('n')} steps)"
    if e.get("speedup_vs_single") is not None and not registry.is_baseline(e["name"], e.get("source")):
        text += f", {fmt_ratio(e['speedup_vs_single'])} the speed of {_family_baseline(e)}"
    return text + "."


# ------------------------------------------------------------------------------------------
# Projected: projection.json entries


def projected(
    entries: Sequence[Mapping[str, Any]], ranking: Sequence[str], hardware: str,
    sources: Mapping[str, str] | None = None,
) -> Recommendation:
    """The recommendation from projected step times (``project.api`` entries, ranked)."""
    if not ranking:
        return Recommendation(None, "no variant could be projected; see the errors", PROJECTED_BASIS)
    sources = sources or {}
    by_name = {e["name"]: e for e in entries}

    def candidate(name: str) -> Candidate:
        step = by_name[name]["projected_step_s"]
        source = sources.get(name, "builtin")
        return Candidate(name, step["overlapped"], registry.simplicity(name, source), source=source)

    choice = choose([candidate(n) for n in ranking], within_fraction(PROJECTED_WITHIN))
    best = by_name[choice.fastest.name]
    t_best = best["projected_step_s"]["overlapped"]
    base_name = registry.baseline_name()
    base = by_name.get(base_name)
    if base is not None and not registry.is_baseline(base_name, sources.get(base_name, "builtin")):
        base = None  # a variant file that happens to share the baseline's name
    if choice.chosen is not choice.fastest:
        name = choice.chosen.name
        reason = (f"projected within {PROJECTED_WITHIN:.0%} of the fastest ({best['name']}, {_fmt(t_best)}) "
                  f"on {hardware}")
        if registry.is_baseline(name, choice.chosen.source):
            reason += ", with one device: multi-device placement does not pay"
        else:
            reason += f", and simpler than {best['name']}"
        return Recommendation(name, reason, PROJECTED_BASIS, fastest=best["name"],
                              within_noise=tuple(c.name for c in choice.close))
    lo, hi = best["projected_step_s"]["overlapped"], best["projected_step_s"]["serial"]
    reason = f"projected fastest on {hardware}: {_fmt(lo)} to {_fmt(hi)} per step (overlapped to serial)"
    if base and "projected_step_s" in base and best["name"] != base_name:
        reason += f", {base['projected_step_s']['overlapped'] / lo:.2f}x {base_name}"
    reason += f"; bottleneck: {best['bottleneck']['text']}"
    by_serial = min((by_name[n] for n in ranking), key=lambda e: e["projected_step_s"]["serial"])
    if by_serial["name"] != best["name"]:
        reason += f" (if copies never overlap compute, {by_serial['name']} is faster)"
    if len(ranking) > 1:
        runner = by_name[ranking[1]]
        gap = runner["projected_step_s"]["overlapped"] / lo - 1
        reason += f"; next: {runner['name']} ({gap:+.1%})"
    return Recommendation(best["name"], reason, PROJECTED_BASIS, fastest=best["name"],
                          runner_up=ranking[1] if len(ranking) > 1 else None,
                          within_noise=tuple(c.name for c in choice.close))


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"
