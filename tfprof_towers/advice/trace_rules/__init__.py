"""Findings from one trace alone: rules that run on an :class:`~tfprof_towers.trace.analysis.Analysis`.

A trace captured anywhere (the Keras ``TensorBoard(profile_batch=...)`` callback,
``tf.profiler.experimental``, ``jax.profiler``) has no run directory: no placement, no baseline, no
losses.  These rules need only the trace.  They run on the same engine as the run's rules
(:mod:`tfprof_towers.advice.engine`): a :class:`~.findings.Rule` with named parameters, a tier raised
to high at ``high_at``, and ``needs`` (keys of :data:`~.findings.NEEDS`) that say when a rule *could not
be evaluated*, and why.  Each :class:`~.findings.Finding` names its devices, states its measured numbers
and one ``Suggestion:`` worded for the framework and vendor that wrote the trace
(``analysis.trace.producer``; the words are in :mod:`.suggestions`), with the numbers in ``evidence``.

The package, by concern:

* :class:`~tfprof_towers.trace.facts.TraceFacts` (made in the trace layer) -- what every rule reads,
  joined from each host's compact ``HostFacts`` (per-accelerator figures, kernels and their launches,
  the host's activity in the device's gaps): no rule reads events;
* :mod:`.devices` (``idle_accelerators``, ``accelerator_imbalance``), :mod:`.host` (``host_bound``,
  ``launch_bound``), :mod:`.transfers` (``exposed_copies``, ``collective_bound``), :mod:`.precision`
  (``precision``): one module per family of rules; ``straggler`` is :mod:`..cluster`'s, the same rule a
  run's cluster variants use;
* :mod:`.suggestions` -- one table of suggestions per framework, one of words per vendor;
* here: :data:`TRACE_RULES` (a plain tuple: other rule modules append theirs), :func:`cutoffs_of` (the
  cut-offs the facts' scan takes from the rules' parameters), :func:`evaluate_trace`, which builds the
  facts and runs :mod:`..engine` on them, and :func:`run_status`, the rules' status over a run's
  variants.  No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tfprof_towers.advice import engine
from tfprof_towers.advice.cluster import STRAGGLER
from tfprof_towers.advice.findings import (
    ACCELERATOR_PLANES,
    KERNELS,
    LAUNCHES,
    LOW,
    MEDIUM,
    PRECISION_NAMES,
    TWO_ACCELERATORS,
    Rule,
    RuleStatus,
)
from tfprof_towers.advice.memory_rules import MEMORY_RULES
from tfprof_towers.advice.trace_rules.devices import check_accelerator_imbalance, check_idle_accelerators
from tfprof_towers.advice.trace_rules.host import check_host_bound, check_launch_bound
from tfprof_towers.advice.trace_rules.precision import check_precision, kernel_precision
from tfprof_towers.advice.trace_rules.transfers import check_collective_bound, check_exposed_copies
from tfprof_towers.rundir.fields import Record
from tfprof_towers.rundir.rule_docs import TraceFinding
from tfprof_towers.trace.facts import DEFAULT_CUTOFFS, Cutoffs, TraceFacts, known_accelerators

if TYPE_CHECKING:
    from tfprof_towers.trace.analysis import Analysis

__all__ = [
    "NO_TRACE",
    "TRACE_RULES",
    "TraceEvaluation",
    "TraceFacts",
    "cutoffs_of",
    "evaluate_trace",
    "kernel_precision",
    "known_accelerators",
    "run_status",
]


# DEFAULT_CUTOFFS: the cut-offs of a host's scan (trace.facts) are the defaults of these rules' parameters
TRACE_RULES: tuple[Rule, ...] = (
    Rule("idle_accelerators", "accelerators in the trace that ran no kernel",
         severity=MEDIUM, high_at=0.5, check=check_idle_accelerators,
         params={"min_idle_accelerators": 1}, primary="min_idle_accelerators", needs=(ACCELERATOR_PLANES,)),
    Rule("host_bound", "an accelerator idles, waiting on the host",
         severity=MEDIUM, high_at=0.7, check=check_host_bound,
         params={"min_idle_share": DEFAULT_CUTOFFS.min_idle_share,
                 "min_host_wait_share": DEFAULT_CUTOFFS.min_host_wait_share, "untraced_share": 0.50},
         primary="min_idle_share",
         needs=(ACCELERATOR_PLANES, KERNELS, LAUNCHES)),
    # Holistic Trace Analysis's cut-offs (hta/trace_analysis.py, TraceAnalysis.get_cuda_kernel_launch_stats:
    # runtime_cutoff=50 us for CUDA runtime (launch) calls, launch_delay_cutoff=100 us for the delay from
    # a launch call's end to its kernel's start).  A kernel shorter than 50 us is shorter than a slow
    # launch call: "short" here.  Launch bound means each kernel runs as soon as it is launched and the
    # device waits for the next launch: where the median launch delay exceeds 100 us the kernels queue
    # instead (a backlog on the device), and the rule does not fire; the share of HTA's outliers
    # (delay over 100 us) is in the evidence.
    Rule("launch_bound", "many short kernels with gaps between them: launch overhead sets the pace",
         severity=MEDIUM, high_at=0.5, check=check_launch_bound,
         params={"short_kernel_s": DEFAULT_CUTOFFS.short_kernel_s,
                 "launch_delay_cutoff_s": DEFAULT_CUTOFFS.launch_delay_cutoff_s, "min_kernels_per_step": 20,
                 "min_gap_share": 0.20},
         primary="short_kernel_s", needs=(ACCELERATOR_PLANES, KERNELS)),
    # the one exposed_copies: every kind of copy counts (peer and device-to-device too), read from the trace
    Rule("exposed_copies", "copies not hidden behind compute are a large share of the step",
         severity=MEDIUM, high_at=0.40, check=check_exposed_copies,
         params={"min_exposed_share": 0.20, "slow_gbps": 1.0}, primary="min_exposed_share",
         needs=(ACCELERATOR_PLANES,)),
    Rule("accelerator_imbalance", "accelerators are busy for different times; the slowest sets the step",
         severity=LOW, high_at=2.0, check=check_accelerator_imbalance,
         params={"min_busy_ratio": 1.25}, primary="min_busy_ratio",
         needs=(ACCELERATOR_PLANES, TWO_ACCELERATORS)),
    Rule("collective_bound", "a large share of the step is spent in collectives",
         severity=MEDIUM, high_at=0.40, check=check_collective_bound,
         params={"min_collective_share": 0.20, "min_overlap_share": 0.50}, primary="min_collective_share",
         needs=(ACCELERATOR_PLANES, KERNELS)),
    Rule("precision", "compute runs mostly in 32-bit kernels",
         severity=LOW, check=check_precision,
         params={"min_fp32_share": 0.80, "min_known_share": 0.25}, primary="min_fp32_share",
         needs=(ACCELERATOR_PLANES, KERNELS, PRECISION_NAMES)),
    STRAGGLER,  # advice/cluster.py: the same rule as a run's cluster variants'
    *MEMORY_RULES,  # advice/memory_rules.py: the allocators' memory
)


# ------------------------------------------------------------------------------------------
# Running the rules


def cutoffs_of(rules: Sequence[Rule]) -> Cutoffs:
    """The scan's cut-offs from ``rules``' parameters (a rule not among them: its default)."""
    by_name = {r.name: r for r in rules}

    def param(rule: str, key: str, default: float) -> float:
        return float(by_name[rule].param(key)) if rule in by_name else default

    return Cutoffs(param("launch_bound", "short_kernel_s", DEFAULT_CUTOFFS.short_kernel_s),
                   param("launch_bound", "launch_delay_cutoff_s", DEFAULT_CUTOFFS.launch_delay_cutoff_s),
                   param("host_bound", "min_idle_share", DEFAULT_CUTOFFS.min_idle_share),
                   param("host_bound", "min_host_wait_share", DEFAULT_CUTOFFS.min_host_wait_share))


@dataclass(frozen=True)
class TraceEvaluation(Record):
    """The trace rules' findings on one trace, and each rule's status (``analyze --json``'s
    ``findings`` and ``rules``)."""

    findings: tuple[TraceFinding, ...]
    rules: tuple[RuleStatus, ...]  # each rule's parameters, with evaluated / why_not


def evaluate_trace(analysis: Analysis | TraceFacts, rules: Sequence[Rule] | None = None) -> TraceEvaluation:
    """Every trace rule (``rules``, default :data:`TRACE_RULES`) on ``analysis`` (one analysis, or the
    facts a pod's reduce joined: :mod:`tfprof_towers.trace.pod`); findings most severe first, and each
    rule's status."""
    rules = TRACE_RULES if rules is None else rules
    f = analysis if isinstance(analysis, TraceFacts) else TraceFacts.of(analysis, cutoffs_of(rules))
    evaluation = engine.evaluate(rules, (f,))
    return TraceEvaluation(tuple(TraceFinding.of(x) for x in evaluation.findings),
                           tuple(engine.status(rules, evaluation, per_subject=False)))


#: Why a trace rule was not evaluated on a run's variant that has no analysed trace.
NO_TRACE = "no trace analysed"


def run_status(traces: Mapping[str, TraceEvaluation | None], rules: Sequence[Rule] | None = None,
               skip: Collection[str] = ()) -> list[RuleStatus]:
    """Each trace rule's status over a run's variants, shaped as a run rule's (``not_evaluated`` per
    variant): ``traces`` maps each successful variant to its trace's evaluation (None: no trace
    analysed); rules named in ``skip`` (already in the run's list) are left out.  Where every variant
    gives one reason, ``why_not`` is that reason."""
    rules = [r for r in (TRACE_RULES if rules is None else rules) if r.name not in skip]
    skipped: dict[str, dict[str, str]] = {r.name: {} for r in rules}
    for variant, ev in traces.items():
        why = {r.name: NO_TRACE for r in rules} if ev is None else {
            s.rule: s.why_not for s in ev.rules if not s.evaluated}
        for name, w in why.items():
            if name in skipped:
                skipped[name][variant] = w

    def common(rule: Rule) -> str | None:  # one reason on every variant: that reason, as a run-level gap
        whys = set(skipped[rule.name].values())
        return whys.pop() if traces and len(skipped[rule.name]) == len(traces) and len(whys) == 1 else None

    return engine.status(rules, engine.Evaluation((), skipped), common)
