"""Findings from one trace alone: rules that run on an :class:`~tfprof_towers.trace.analysis.Analysis`.

A trace captured anywhere (the Keras ``TensorBoard(profile_batch=...)`` callback,
``tf.profiler.experimental``, ``jax.profiler``) has no run directory: no placement, no baseline, no
losses.  These rules need only the trace.  They use the same machinery as the run's rules
(:mod:`tfprof_towers.advice.findings`): a :class:`~.findings.Rule` with named parameters, a tier raised
to high at ``high_at``, and ``needs`` (keys of :data:`~.findings.NEEDS`) that say when a rule *could not
be evaluated*, and why.  Each :class:`~.findings.Finding` names its devices, states its measured numbers
and one ``Suggestion:`` worded for the framework and vendor that wrote the trace
(``analysis.trace.producer``; the words are in :mod:`.suggestions`), with the numbers in ``evidence``.

The package, by concern:

* :mod:`.facts` -- :class:`TraceFacts`, what every rule reads, joined from each host's compact
  :class:`HostFacts` (per-accelerator figures, kernels and their launches, the host's activity in the
  device's gaps): no rule reads events;
* :mod:`.devices` (``idle_accelerators``, ``accelerator_imbalance``), :mod:`.host` (``host_bound``,
  ``launch_bound``), :mod:`.transfers` (``exposed_copies``, ``collective_bound``), :mod:`.precision`
  (``precision``), :mod:`.tasks` (``straggler``): one module per family of rules;
* :mod:`.suggestions` -- one table of suggestions per framework, one of words per vendor;
* here: :data:`TRACE_RULES` (a plain tuple: other rule modules append theirs), :func:`unmet` and
  :func:`evaluate_trace`.  No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfprof_towers.advice.findings import (
    ACCELERATOR_PLANES,
    KERNELS,
    LAUNCHES,
    LOW,
    MEDIUM,
    PRECISION_NAMES,
    TASKS,
    TWO_ACCELERATORS,
    Finding,
    Rule,
    by_severity,
)
from tfprof_towers.advice.memory_rules import MEMORY_RULES, memory_unmet
from tfprof_towers.advice.trace_rules.devices import check_accelerator_imbalance, check_idle_accelerators
from tfprof_towers.advice.trace_rules.facts import (
    HOST_ACTIVITY,
    Cutoffs,
    HostFacts,
    HostScan,
    TraceFacts,
    cutoffs_of,
    device_gaps,
    heaviest_ops,
    host_activity,
    known_accelerators,
    launch_times,
)
from tfprof_towers.advice.trace_rules.host import check_host_bound, check_launch_bound
from tfprof_towers.advice.trace_rules.precision import (
    Precision,
    check_precision,
    kernel_precision,
    precision_of,
)
from tfprof_towers.advice.trace_rules.suggestions import suggestion
from tfprof_towers.advice.trace_rules.tasks import check_straggler
from tfprof_towers.advice.trace_rules.transfers import check_collective_bound, check_exposed_copies
from tfprof_towers.analysis.cluster_view import STRAGGLER_PARAMS, stepping_tasks
from tfprof_towers.vocab.fmt import fmt_percent, fmt_seconds

if TYPE_CHECKING:
    from tfprof_towers.trace.analysis import Analysis

__all__ = [
    "CUTOFFS",
    "HOST_ACTIVITY",
    "TRACE_RULES",
    "Cutoffs",
    "HostFacts",
    "HostScan",
    "Precision",
    "TraceEvaluation",
    "TraceFacts",
    "check_accelerator_imbalance",
    "check_collective_bound",
    "check_exposed_copies",
    "check_host_bound",
    "check_idle_accelerators",
    "check_launch_bound",
    "check_precision",
    "check_straggler",
    "cutoffs_of",
    "device_gaps",
    "evaluate_trace",
    "heaviest_ops",
    "host_activity",
    "kernel_precision",
    "known_accelerators",
    "launch_times",
    "precision_of",
    "suggestion",
    "unmet",
]


CUTOFFS = Cutoffs()  # the cut-offs a host's scan needs: their defaults are these rules' defaults

TRACE_RULES: tuple[Rule, ...] = (
    Rule("idle_accelerators", "accelerators in the trace that ran no kernel",
         severity=MEDIUM, high_at=0.5, check=check_idle_accelerators,
         params={"min_idle_accelerators": 1}, primary="min_idle_accelerators", needs=(ACCELERATOR_PLANES,)),
    Rule("host_bound", "an accelerator idles, waiting on the host",
         severity=MEDIUM, high_at=0.7, check=check_host_bound,
         params={"min_idle_share": CUTOFFS.min_idle_share, "min_host_wait_share": CUTOFFS.min_host_wait_share,
                 "untraced_share": 0.50},
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
         params={"short_kernel_s": CUTOFFS.short_kernel_s,
                 "launch_delay_cutoff_s": CUTOFFS.launch_delay_cutoff_s, "min_kernels_per_step": 20,
                 "min_gap_share": 0.20},
         primary="short_kernel_s", needs=(ACCELERATOR_PLANES, KERNELS)),
    Rule("exposed_copies", "host↔device copies not hidden behind compute are a large share of the step",
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
    Rule("straggler", "one task reaches the all-reduce late, step after step, and the others wait for it",
         severity=MEDIUM, high_at=0.25, check=check_straggler,
         params=dict(STRAGGLER_PARAMS), primary="min_late_share", needs=(TASKS,)),
    *MEMORY_RULES,  # advice/memory_rules.py: the allocators' memory
)


# ------------------------------------------------------------------------------------------
# Running the rules


def unmet(rule: Rule, f: TraceFacts) -> str | None:
    """Why ``rule`` could not be evaluated on this trace (None: it can)."""
    if (why := memory_unmet(rule, f)) is not None:
        return why
    if ACCELERATOR_PLANES in rule.needs and not f.accelerators:
        why = "the trace has no accelerator plane (a CPU-only capture"
        if f.kind == "logical-cpu":
            why += "; its accelerators are logical CPU devices, whose time is the host's"
        return why + ")"
    if KERNELS in rule.needs and not f.working:
        return "no accelerator ran a kernel in the analysed steps"
    if TWO_ACCELERATORS in rule.needs and len(f.working) < 2:
        return f"only {len(f.working)} accelerator ran kernels ({', '.join(f.working) or 'none'})"
    if LAUNCHES in rule.needs and not f.launches_known:
        return ("no kernel is joined to its host launch (no correlation_id on the launches): host wait "
                "cannot be told from other idle time")
    if PRECISION_NAMES in rule.needs and f.producer.vendor == "google-tpu":
        return ("the accelerators are TPUs: their matrix units compute in bfloat16 natively, and their op "
                "names do not tell a precision")
    if PRECISION_NAMES in rule.needs:
        p = precision_of(f)
        if p.compute_s <= 0:
            return "no compute kernel ran on an accelerator (collectives only)"
        if p.known_share < rule.param("min_known_share"):
            return (f"the kernel names tell the precision of only {fmt_percent(p.known_share)} of "
                    f"{fmt_seconds(p.compute_s)} of compute time (fused or generic kernels do not), under "
                    f"{fmt_percent(rule.param('min_known_share'))}")
    if TASKS in rule.needs:
        tasks = stepping_tasks(f.tasks, None)
        if len(tasks) < 2:
            return ("fewer than two tasks ran steps (a single-host trace; a multi-host logdir holds one "
                    "trace per task)")
    return None


@dataclass(frozen=True)
class TraceEvaluation:
    findings: tuple[Finding, ...]
    rules: tuple[dict[str, Any], ...]  # each rule's to_json() with evaluated / why_not

    def to_json(self) -> dict[str, Any]:
        return {"findings": [{**x.to_json(), "devices": list(x.devices)} for x in self.findings],
                "rules": [dict(r) for r in self.rules]}



def evaluate_trace(analysis: Analysis | TraceFacts, rules: Sequence[Rule] | None = None) -> TraceEvaluation:
    """Every trace rule (``rules``, default :data:`TRACE_RULES`) on ``analysis`` (one analysis, or the
    facts a pod's reduce joined: :mod:`tfprof_towers.trace.pod`); findings most severe first, and each
    rule's status."""
    rules = TRACE_RULES if rules is None else rules
    f = analysis if isinstance(analysis, TraceFacts) else TraceFacts.of(analysis, cutoffs_of(rules))
    findings: list[Finding] = []
    status = []
    for rule in rules:
        why = unmet(rule, f)
        doc = {**rule.to_json(), "evaluated": why is None, "why_not": why}
        status.append(doc)
        if why is None:
            found = rule.check(rule, f)
            if found is not None:
                findings.append(found)
    return TraceEvaluation(tuple(by_severity(findings)), tuple(status))
