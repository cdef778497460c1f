"""What every advice rule is made of: facts in (a run variant's :class:`Facts`, or a trace's), a
:class:`Finding` out, and the :class:`Rule` that names its parameters, its tier and what it needs;
:mod:`.engine` runs them.  The summary's records in; no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfprof_towers.rundir.rule_docs import Finding, RuleStatus

if TYPE_CHECKING:  # a run variant's records: `analyze` (trace rules only) does not import them
    from tfprof_towers.analysis import samemath
    from tfprof_towers.analysis.audit import LinkModel
    from tfprof_towers.rundir.placement_audit import Audit
    from tfprof_towers.rundir.projection_doc import ProjectionSummary
    from tfprof_towers.rundir.records import Topology
    from tfprof_towers.rundir.summary import SummaryEntry
    from tfprof_towers.rundir.trace_doc import TraceDoc

__all__ = ["Finding", "RuleStatus"]  # the documents a rule writes (tfprof_towers.rundir.rule_docs)

HIGH, MEDIUM, LOW = "high", "medium", "low"
SEVERITIES: tuple[str, ...] = (HIGH, MEDIUM, LOW)


def by_severity(items: Iterable[Any], severity: Callable[[Any], str] = lambda x: x.severity) -> list[Any]:
    """``items`` most severe first (a stable sort; an unknown severity last)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(items, key=lambda x: order.get(severity(x), len(order)))

#: What a rule may need before it can be evaluated on a variant (see :func:`.engine.unmet`).
PLACEMENT, MEASURED_TIMINGS, BASELINE, MATH = "placement", "measured_timings", "baseline", "math"
PEER_PATH, TASKS = "peer_path", "tasks"
#: What a trace rule (:mod:`.trace_rules`) may need of the one trace it reads.
ACCELERATOR_PLANES, KERNELS, LAUNCHES = "accelerator_planes", "kernels", "launches"
TWO_ACCELERATORS, PRECISION_NAMES = "two_accelerators", "precision_names"
ALLOCATOR_EVENTS = "allocator_events"  # the memory rules' (:mod:`.memory_rules`)
MEMORY_FIT = "memory_fit"  # the run's does_not_fit rule (:mod:`.memory_rules`)
NEEDS: dict[str, str] = {
    TASKS: "per-task step windows from the traces of two or more step-running tasks (a cluster variant)",
    PLACEMENT: "the variant's placement (partition graphs)",
    MEASURED_TIMINGS: "device timings from real accelerators (a GPU run whose trace was analysed)",
    BASELINE: "the family's baseline variant, succeeded in the same run",
    MATH: "the variant's first losses, and a reference's (the baseline, or the median of three variants)",
    PEER_PATH: "for a variant that reduces across devices: a hardware profile saying how its accelerators "
               "are linked (profile --project-on NAME)",
    ACCELERATOR_PLANES: "a device plane of an accelerator in the trace (a GPU trace)",
    KERNELS: "an accelerator that ran kernels in the analysed steps",
    LAUNCHES: "kernels joined to their host launches (correlation_id on both)",
    TWO_ACCELERATORS: "two or more accelerators that ran kernels",
    PRECISION_NAMES: "kernel names that tell their precision (hgemm, h884, s1688, fp16, bf16, sgemm, "
                     "fp32...) for enough of the compute time",
    MEMORY_FIT: "a projection on a hardware profile that gives its memory (memory_gb), with the variant's "
                "memory verdict (profile --project-on NAME, or a run on logical CPU devices)",
    ALLOCATOR_EVENTS: "allocator events in the trace (MemoryAllocation/MemoryDeallocation: TensorFlow's "
                      "BFC allocators)",
}


@dataclass(frozen=True)
class Facts:
    """Everything the rules may look at for one variant: its summary entry and what the run adds."""

    entry: SummaryEntry
    topology: Topology | None
    baseline: SummaryEntry | None = None  # the family's baseline entry (`single`), when it succeeded
    math_reference: samemath.Reference | None = None  # what the variant's losses are compared with
    link: LinkModel | None = None  # the projection profile's host link (summary.json -> link_models)
    projection: ProjectionSummary | None = None  # summary.json -> projection: its hardware profile's links

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def audit(self) -> Audit | None:
        return self.entry.audit

    @property
    def breakdown(self) -> TraceDoc | None:
        return self.entry.breakdown

    @property
    def is_baseline(self) -> bool:
        return self.entry.baseline

    @property
    def on_gpus(self) -> bool:
        """True where the run's step times are real accelerators' (not CPU devices standing in)."""
        return self.topology is not None and self.topology.kind == "gpu"

    @property
    def measured_timings(self) -> bool:
        """True where device timings mean what they say (real accelerators, a trace analysed)."""
        return self.on_gpus and self.breakdown is not None and bool(self.breakdown.devices)

    def share_of_step(self, seconds: float) -> float | None:
        """``seconds`` as a share of the variant's median measured step, on GPUs only (None elsewhere:
        a CPU stand-in's step says nothing of what a modeled time costs on the real machine)."""
        step = self.entry.median_s
        return seconds / step if (step and self.on_gpus) else None

    @property
    def accelerators_used(self) -> list[str]:
        return [] if self.audit is None else self.audit.accelerators_used


#: A rule's check: run rules take a variant's :class:`Facts`, trace rules a trace's
#: :class:`~.trace_rules.TraceFacts`.
Check = Callable[["Rule", Any], "Finding | None"]
Param = float | int | str


@dataclass(frozen=True)
class Rule:
    """A named check with its named parameters.

    ``primary`` names the parameter the rule's measure is compared with (shown as
    its threshold); ``high_at`` (when set) raises the tier to high; ``needs`` lists
    what must be there for the rule to be evaluated on a variant (keys of :data:`NEEDS`).
    """

    name: str
    title: str
    severity: str
    check: Check
    params: Mapping[str, Param]
    primary: str
    high_at: float | None = None
    needs: tuple[str, ...] = ()
    disqualifies: bool = False  # a high-severity finding keeps the variant from being recommended

    def __post_init__(self) -> None:
        if self.primary not in self.params:
            raise ValueError(f"rule {self.name}: primary parameter {self.primary!r} is not among its params")
        if not set(self.needs) <= set(NEEDS):
            raise ValueError(f"rule {self.name}: unknown needs {sorted(set(self.needs) - set(NEEDS))}")

    @property
    def threshold(self) -> Param:
        return self.params[self.primary]

    @property
    def needs_measured_timings(self) -> bool:
        return MEASURED_TIMINGS in self.needs

    def param(self, key: str) -> Any:
        return self.params[key]

    def tier(self, value: float, higher_is_worse: bool = True) -> str:
        if self.high_at is None:
            return self.severity
        worse = value >= self.high_at if higher_is_worse else value <= self.high_at
        return HIGH if worse else self.severity

    def medium_at(self, share: float | None, key: str) -> str:
        """The rule's severity, raised to medium when ``share`` (of a step) reaches parameter ``key``."""
        return MEDIUM if share is not None and share >= self.param(key) else self.severity

    def status(self, why_not: str | None, not_evaluated: Mapping[str, str] | None = None) -> RuleStatus:
        """The rule with its parameters, and whether it was evaluated (``why_not`` None: it was)."""
        return RuleStatus(
            rule=self.name, title=self.title, threshold=self.threshold, primary=self.primary,
            params=dict(self.params), severity=self.severity, high_at=self.high_at, needs=self.needs,
            needs_measured_timings=self.needs_measured_timings, disqualifies=self.disqualifies,
            evaluated=why_not is None, why_not=why_not, not_evaluated=not_evaluated,
        )
