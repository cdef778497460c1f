"""The one rule engine: why a rule cannot be evaluated on some facts, every rule over every subject,
and each rule's status.

A rule (:class:`~.findings.Rule`) reads facts: a trace's (:class:`~tfprof_towers.trace.facts.TraceFacts`,
for ``analyze`` and each analysed variant's trace) or a run variant's (:class:`~.findings.Facts`, which add
what a trace cannot have: the placement, the family's baseline, the losses).  :func:`unmet` walks the
rule's ``needs`` (keys of :data:`~.findings.NEEDS`) in one fixed order and says why the first that is
missing is missing; :func:`evaluate` runs each rule whose needs are met; :func:`status` is each rule's
parameters with whether it was evaluated.  :mod:`.rules` (a run's summary) and :mod:`.trace_rules` (one
trace) only build the facts and pick the rules.  No TensorFlow, no rendering.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfprof_towers.advice import cluster as cluster_advice
from tfprof_towers.advice.findings import (
    ACCELERATOR_PLANES,
    BASELINE,
    KERNELS,
    LAUNCHES,
    MATH,
    MEASURED_TIMINGS,
    PEER_PATH,
    PLACEMENT,
    PRECISION_NAMES,
    TASKS,
    TWO_ACCELERATORS,
    Facts,
    Finding,
    Rule,
    RuleStatus,
    by_severity,
)
from tfprof_towers.advice.memory_rules import memory_fit_unmet, memory_unmet
from tfprof_towers.vocab.fmt import fmt_percent, fmt_seconds

if TYPE_CHECKING:
    from tfprof_towers.rundir.records import Topology


def run_level_gap(rule: Rule, topology: Topology | None) -> str | None:
    """Why ``rule`` cannot be evaluated on any variant of a run on ``topology`` (None: it can)."""
    kind = None if topology is None else topology.kind
    if rule.needs_measured_timings and kind != "gpu":
        if kind == "logical-cpu":
            return "not measurable here: the accelerators are logical CPU devices sharing the same cores"
        return "needs device timings from real accelerators"
    return None


def unmet(rule: Rule, f: Any) -> str | None:
    """Why ``rule`` cannot be evaluated on the facts ``f`` (a run variant's or a trace's; None: it can)."""
    needs = rule.needs
    if isinstance(f, Facts) and (gap := run_level_gap(rule, f.topology)):
        return gap
    if PLACEMENT in needs and not f.audit:
        return "no placement recorded"
    if MEASURED_TIMINGS in needs and not f.measured_timings:
        error = f.breakdown.error if f.breakdown is not None else None
        return f"no device timings: {error}" if error else "no device timings (no trace analysed)"
    # BASELINE, PEER_PATH and MATH are a run variant's needs: their modules are imported where they are
    # met, so that `analyze` (trace rules only) does not import the run's records
    if BASELINE in needs and not f.baseline and not f.is_baseline:
        from tfprof_towers.variants.registry import baseline_name

        return f"the baseline {baseline_name(f.entry.family)} did not succeed"
    if PEER_PATH in needs and (why := _peer_path_unmet(f)) is not None:
        return why
    if (why := memory_fit_unmet(rule, f)) is not None:
        return why
    if MATH in needs:
        from tfprof_towers.analysis.samemath import not_compared_why

        return not_compared_why(f.entry, f.math_reference)
    if (why := memory_unmet(rule, f)) is not None:
        return why
    if (why := _trace_unmet(rule, f)) is not None:
        return why
    return cluster_advice.unmet_tasks(f) if TASKS in needs else None


def _peer_path_unmet(f: Facts) -> str | None:
    """Why a rule that needs the peer path cannot be evaluated on the run variant ``f`` (None: it can)."""
    from tfprof_towers.advice import strategy as strategy_advice

    if strategy_advice.reduces_across_devices(f) and strategy_advice.profile(f) is None:
        return ("it reduces across devices, and no hardware profile says how its accelerators are linked "
                "(profile --project-on NAME, or project RUN_DIR --hardware NAME)")
    return None


def _trace_unmet(rule: Rule, f: Any) -> str | None:
    """Why a rule that reads the trace's accelerators, kernels or launches cannot be evaluated."""
    needs = rule.needs
    if ACCELERATOR_PLANES in needs and not f.accelerators:
        why = "the trace has no accelerator plane (a CPU-only capture"
        if f.kind == "logical-cpu":
            why += "; its accelerators are logical CPU devices, whose time is the host's"
        return why + ")"
    if KERNELS in needs and not f.working:
        return "no accelerator ran a kernel in the analysed steps"
    if TWO_ACCELERATORS in needs and len(f.working) < 2:
        return f"only {len(f.working)} accelerator ran kernels ({', '.join(f.working) or 'none'})"
    if LAUNCHES in needs and not f.launches_known:
        return ("no kernel is joined to its host launch (no correlation_id on the launches): host wait "
                "cannot be told from other idle time")
    if PRECISION_NAMES in needs:
        return _precision_unmet(rule, f)
    return None


def _precision_unmet(rule: Rule, f: Any) -> str | None:
    """Why the kernels' names cannot tell the compute's precision (None: they can)."""
    from tfprof_towers.advice.trace_rules.precision import precision_of  # its package imports this module

    if f.producer.vendor == "google-tpu":
        return ("the accelerators are TPUs: their matrix units compute in bfloat16 natively, and their op "
                "names do not tell a precision")
    p = precision_of(f)
    if p.compute_s <= 0:
        return "no compute kernel ran on an accelerator (collectives only)"
    if p.known_share < rule.param("min_known_share"):
        return (f"the kernel names tell the precision of only {fmt_percent(p.known_share)} of "
                f"{fmt_seconds(p.compute_s)} of compute time (fused or generic kernels do not), under "
                f"{fmt_percent(rule.param('min_known_share'))}")
    return None


@dataclass(frozen=True)
class Evaluation:
    """What the rules found, and where each could not be evaluated."""

    findings: tuple[Finding, ...]
    skipped: Mapping[str, Mapping[str, str]]  # rule -> {subject (variant or trace): why not evaluated}


def evaluate(rules: Sequence[Rule], subjects: Sequence[Any]) -> Evaluation:
    """Every rule over every subject's facts where its needs are met; findings most severe first."""
    findings: list[Finding] = []
    skipped: dict[str, dict[str, str]] = {r.name: {} for r in rules}
    for f in subjects:
        for rule in rules:
            why = unmet(rule, f)
            if why is not None:
                skipped[rule.name][f.name] = why
                continue
            found = rule.check(rule, f)
            if found is not None:
                findings.append(found)
    return Evaluation(tuple(by_severity(findings)), skipped)


def status(rules: Sequence[Rule], evaluation: Evaluation,
           gap: Callable[[Rule], str | None] | None = None, per_subject: bool = True) -> list[RuleStatus]:
    """Each rule with its parameters, and whether it was evaluated.

    ``gap`` says why a rule cannot be evaluated on any subject.  ``per_subject`` (a run's variants):
    ``not_evaluated`` names each subject it was not evaluated on, with why, and ``why_not`` joins
    them; otherwise (one trace) ``why_not`` is that one subject's reason.
    """
    out = []
    for r in rules:
        why = gap(r) if gap is not None else None
        skipped = dict(evaluation.skipped.get(r.name) or {})
        if per_subject:
            if why is None and skipped:
                joined = "; ".join(f"{name}: {w}" for name, w in skipped.items())
                why = f"not evaluated on {len(skipped)} variant(s): {joined}"
        elif why is None and skipped:
            why = next(iter(skipped.values()))
        out.append(r.status(why, skipped if per_subject else None))
    return out
