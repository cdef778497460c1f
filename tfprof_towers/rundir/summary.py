"""``summary.json`` (:class:`Summary`, one :class:`SummaryEntry` per variant) and its first step.

The JSON keeps the field names docs/output.md documents and the report reads.  Scaling efficiency
has one denominator everywhere: the accelerators the variant used (accelerator devices its
placement put ops on, ``accelerators_used``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.cluster_doc import ClusterView
from tfprof_towers.rundir.fields import (
    Fields,
    Record,
    RecordError,
    decode,
    if_empty,
    if_none,
    meta,
)
from tfprof_towers.rundir.math_table import MathTable
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.placement_audit import Audit, LinkModel
from tfprof_towers.rundir.placement_doc import PlacedDevice, PlacedTransfer
from tfprof_towers.rundir.projection_doc import ProjectionSummary
from tfprof_towers.rundir.records import (
    OK,
    STATUSES,
    RunConfig,
    RunDoc,
    StepStats,
    Topology,
    VariantRecord,
)
from tfprof_towers.rundir.rule_docs import Finding, RuleStatus, TraceFinding
from tfprof_towers.rundir.scaling import ScalingSection
from tfprof_towers.rundir.trace_doc import TraceDoc
from tfprof_towers.variants import registry
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.device_names import device_role
from tfprof_towers.vocab.fmt import fmt_gib

SUMMARY_SCHEMA = 4  # 4: variants[].memory (per device: measured or estimated peak, capacity, fits)
# 3: recommendation.basis is "measured" or "projected"; losses, grad_norm, math
# 2: typed documents; rules carry named parameters; no link_models per audit


#: Where a recommendation's numbers come from (``summary.json`` -> ``recommendation.basis``).
MEASURED, PROJECTED = "measured", "projected"
BASES = (MEASURED, PROJECTED)

def _basis(f: Fields, key: str) -> str:
    basis = f.text(key, default=MEASURED) or MEASURED
    if basis not in BASES:  # schema 2 held free text here
        basis = PROJECTED if basis.startswith("projected") else MEASURED
    return basis


#: Written only for a projected recommendation.
_PROJECTED_ONLY = ("hardware", "preset", "label", "projected_step_s", "measured_pick")


@dataclass(frozen=True)
class Recommendation(Record):
    """The variant to use and why, with the numbers behind it."""

    variant: str | None
    reason: str = meta(missing="")
    basis: str = meta(MEASURED, read=_basis)  # BASES
    fastest: str | None = None  # the fastest variant on this basis, eligible or not
    runner_up: str | None = None
    # over the family's baseline (``single``, ``one_device``); the JSON keeps its older name
    speedup_vs_baseline: float | None = meta(None, key="speedup_vs_single")
    median_step_s: float | None = None
    within_noise: tuple[str, ...] = ()
    hardware: str | None = None  # projected: the hardware profile
    preset: str | None = None  # projected: the preset the graphs were built at
    projected_step_s: Mapping[str, float] | None = None  # projected: {"overlapped", "serial"} of the pick
    # variant -> why it is not recommended
    excluded: Mapping[str, str] = meta(factory=dict, omit=if_empty, read=Fields.text_map)
    error: str | None = meta(None, omit=if_none)  # projected: why there is no projection to recommend from
    measured_pick: str | None = None  # projected: what the measured (CPU stand-in) ranking would pick
    WHERE = "recommendation"
    JSON_ORDER = ("variant", "fastest", "runner_up", "speedup_vs_baseline", "median_step_s", "within_noise",
                  "basis", "reason", *_PROJECTED_ONLY)

    @property
    def is_projected(self) -> bool:
        return self.basis == PROJECTED

    @property
    def label(self) -> str:
        """``"projected on NAME"`` or ``"measured here"``: what the terminal, report and JSON say."""
        return f"projected on {self.hardware}" if self.is_projected else "measured here"

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        return doc if self.is_projected else {k: v for k, v in doc.items() if k not in _PROJECTED_ONLY}

    def brief(self) -> dict[str, Any]:
        """``{"variant", "reason"}``: what projection.json keeps."""
        return {"variant": self.variant, "reason": self.reason}


#: Before the advice step has run.
NOT_ADVISED = Recommendation(None, "not advised yet")

#: Where a device's peak memory comes from (``variants[].memory[device].basis``).
MEMORY_BASES = ("measured", "estimated")


@dataclass(frozen=True)
class MemoryPeak(Record):
    """One device's peak memory for a variant: measured (its trace's allocator events) or estimated
    (the projection's walk of the step's tensors on the target), against that device's capacity."""

    peak_bytes: int
    basis: str = meta(choices=MEMORY_BASES)
    persistent_bytes: int | None = None  # estimated: variables, slots; measured: held from before the trace
    capacity_bytes: int | None = None  # measured: the allocator's limit; estimated: the target's memory
    fits: bool | None = meta(None, read=lambda f, key: None if f.data.get(key) is None else f.flag(key))
    # fits None: no capacity to check against
    estimated_peak_bytes: int | None = meta(None, omit=if_none)  # measured rows: the estimate as well
    label: str | None = meta(None, omit=if_none)  # measured on logical devices: where and at what size
    # measured on logical devices: the peak with the blocks the allocator handed out (peak_bytes: the
    # requests, each rounded up to 256 bytes)
    allocated_bytes: int | None = meta(None, omit=if_none)
    # estimated on the target: the estimate times measured / estimated at the run's size on the device in
    # the same role (``fits`` is then judged on it; ``peak_bytes`` stays the uncalibrated estimate)
    calibrated_peak_bytes: int | None = meta(None, omit=if_none)
    calibration: str | None = meta(None, omit=if_none)  # "calibrated on the measured peak at the cpu preset"
    # the range of the estimate over the executor's orders (``projection.liveness.ORDERS``): estimated rows,
    # their own; measured rows, the estimate's at the run's size (``estimated_peak_bytes`` is the queue's)
    estimate_low_bytes: int | None = meta(None, omit=if_none)
    estimate_high_bytes: int | None = meta(None, omit=if_none)
    may_not_fit: bool | None = meta(None, omit=if_none,  # estimated: only the range's low end fits
                                    read=lambda f, key: None if f.data.get(key) is None else f.flag(key))
    WHERE = "summary.json: variants[].memory"

    @property
    def estimate_vs_measured(self) -> float | None:
        """How far apart the two figures are: estimated / measured (None without both)."""
        if self.basis != "measured" or self.estimated_peak_bytes is None or not self.peak_bytes:
            return None
        return self.estimated_peak_bytes / self.peak_bytes

    @property
    def inside_range(self) -> bool | None:
        """Whether a measured peak lies within the estimate's range, give or take 10% (:func:`in_range`;
        None without a measured peak and a range)."""
        low, high = self.estimate_low_bytes, self.estimate_high_bytes
        if self.basis != "measured" or low is None or high is None or not self.peak_bytes:
            return None
        return in_range(self.peak_bytes, low, high)


#: How far outside the estimate's range a measured peak may be and still agree: 10% either way, and one
#: 256-byte unit of the BFC allocator (the walk in a run's own order agrees with its peak to one unit).
RANGE_SLACK_LOW, RANGE_SLACK_HIGH, RANGE_SLACK_BYTES = 0.9, 1.1, 256


def in_range(measured: int, low: int, high: int) -> bool:
    """Whether ``measured`` lies in [0.9 x low, 1.1 x high], give or take 256 bytes."""
    slack = RANGE_SLACK_BYTES
    return RANGE_SLACK_LOW * low - slack <= measured <= RANGE_SLACK_HIGH * high + slack


def judged(low: int, high: int, capacity: int | None, headroom: float) -> tuple[bool | None, bool]:
    """(fits, may_not_fit) of a peak between ``low`` and ``high`` (the executor's orders) against
    ``capacity`` less ``headroom``: fits unless the low end is over; may not fit when only the low end
    fits.  (None, False) without a capacity."""
    if not capacity:
        return None, False
    usable = capacity * (1 - headroom)
    return low <= usable, low <= usable < high


#: Why a verdict says "may not fit", in one line.
MAY_NOT_FIT_WHY = ("in some of the orders TensorFlow's executor may run the step's kernels in, not in all: "
                   "a kernel that waits for a thread, or for another device, keeps its inputs alive")


def may_not_fit_verdict(low: int, high: int, where: str, cap: str) -> str:
    """The one line of a verdict whose low end fits and high end does not."""
    return f"may not fit: peak {fmt_gib(low)} to {fmt_gib(high)} on {where} of {cap}: fits {MAY_NOT_FIT_WHY}"


Row = Mapping[str, Any]


def verdict_device(checked: Mapping[str, Row], peak: Callable[[Row], int], high: Callable[[Row], int]) -> str:
    """The device a memory verdict names: the one most over its capacity, else the one most at risk of
    not fitting, else the fullest at its high end.  ``checked``: device rows that have a capacity."""
    over = [(peak(r) / r["capacity_bytes"], d) for d, r in checked.items() if r.get("fits") is False]
    maybe = [(high(r) / r["capacity_bytes"], d) for d, r in checked.items() if r.get("may_not_fit")]
    tight = max((high(r) / r["capacity_bytes"], d) for d, r in checked.items())
    return (max(over) if over else max(maybe) if maybe else tight)[1]


def fit_verdict(row: Row, peak: int, high: int, where: str, headroom: float) -> str:
    """The one line of the verdict on ``row``, the device :func:`verdict_device` named (``peak`` and
    ``high``: its peak and high end): does not fit, may not fit, or fits."""
    capacity = int(row["capacity_bytes"])
    cap = f"{fmt_gib(capacity)} ({fmt_gib(capacity * (1 - headroom))} usable)"
    if row.get("fits") is False:
        return f"does not fit: {fmt_gib(peak)} on {where} of {cap}"
    if row.get("may_not_fit"):
        return may_not_fit_verdict(int(row.get("peak_low_bytes", peak)), high, where, cap)
    span = f" (up to {fmt_gib(high)} in another executor order)" if high > peak else ""
    return f"fits: peak {fmt_gib(peak)}{span} of {cap} on {where}"


@dataclass(frozen=True)
class EstimateGap:
    """How far a variant's memory estimate was from what its run measured on the same device, at the
    run's size: the device farthest apart."""

    ratio: float  # estimated / measured
    device: str
    where: str  # "the cpu preset" (measured on logical devices), else "the run's size"
    inside_range: bool | None = None  # every measured peak inside the estimate's range (MemoryPeak)

    def text(self) -> str:
        """One sentence: "the estimate was 3% under the measured peak at the cpu preset (CPU:1, ...)"."""
        from tfprof_towers.vocab.device_names import short_device

        side = "over" if self.ratio >= 1 else "under"
        text = (f"the estimate was {abs(self.ratio - 1):.0%} {side} the measured peak at {self.where} "
                f"({short_device(self.device)}, estimated / measured {self.ratio:.2f})")
        if self.inside_range is not None:
            text += ("; the measured peak is inside the range of the executor's orders" if self.inside_range
                     else "; the measured peak is outside the range of the executor's orders")
        return text


def estimate_gap(memory: Mapping[str, MemoryPeak]) -> EstimateGap | None:
    """The :class:`EstimateGap` of a variant's memory rows; None where nothing measured has an estimate."""
    apart = [(abs(r.estimate_vs_measured - 1), d, r.estimate_vs_measured, r) for d, r in memory.items()
             if r.estimate_vs_measured is not None]
    if not apart:
        return None
    _, dev, ratio, r = max(apart, key=lambda x: (x[0], x[1]))
    where = r.label.removeprefix("measured at ").split(",")[0] if r.label else "the run's size"
    ranged = [m.inside_range for m in memory.values() if m.inside_range is not None]
    return EstimateGap(ratio, dev, where, all(ranged) if ranged else None)


def _profiled_median(f: Fields, key: str) -> float | None:
    return f.obj_as(key, lambda profiled: profiled.number("median"))


@dataclass(frozen=True)
class SummaryEntry(Record):
    """One variant in ``summary.json``: timings, placement totals, and what the later steps add."""

    name: str
    status: str = meta(choices=STATUSES)
    source: str = "builtin"
    family: str = registry.TF1_GRAPH
    error: str | None = None
    stderr_tail: str = ""
    step_time_s: StepStats = field(default_factory=StepStats)
    profiled_median_s: float | None = meta(None, key="profiled_step_time_s", read=_profiled_median,
                                          write=lambda median: {"median": median})
    examples_per_s: float | None = None
    devices: Mapping[str, PlacedDevice] = meta(factory=dict)  # device -> its ops and FLOPs per step
    transfers: tuple[PlacedTransfer, ...] = ()  # the placement's links: bytes and tensors per step
    xplane_files: tuple[str, ...] = ()
    # over the family's baseline (``single``, ``one_device``); the JSON keeps its older name
    speedup_vs_baseline: float | None = meta(None, key="speedup_vs_single")
    scaling_efficiency: float | None = None  # speedup / accelerators_used
    accelerators_used: int | None = None  # accelerator devices the placement put ops on
    losses: tuple[float, ...] | None = meta(None, read=nonfinite.read_numbers)  # the first steps' losses
    grad_norm: float | None = meta(None, read=nonfinite.read_number)  # step 1's global norm, before clipping
    random_ops: tuple[str, ...] = meta((), omit=if_empty)  # the step draws random numbers: not compared
    rank: int | None = None
    breakdown: TraceDoc | None = None  # the trace analysis per step, or why there is none
    audit: Audit | None = None  # analysis.audit.audit_variant
    chrome_trace: str | None = None  # variants/<name>/trace.json, relative to the run directory
    chrome_trace_error: str | None = None
    trace_findings: tuple[TraceFinding, ...] = ()  # the trace rules' findings on its trace (trace_rules)
    cluster: ClusterView | None = meta(None, omit=if_none)  # a cluster variant: tasks, network, ...
    memory: Mapping[str, MemoryPeak] = meta(factory=dict)  # device -> its peak (pipeline.with_memory)
    WHERE = "summary.json: variants[]"
    JSON_ORDER = ("name", "source", "family")

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def median_s(self) -> float | None:
        return self.step_time_s.median

    @property
    def baseline(self) -> bool:
        return registry.is_baseline(self.name, self.source)

    def to_json(self) -> dict[str, Any]:
        # a diverging model's NaN loss: null plus a "not_finite" flag (strict JSON; rundir/nonfinite.py)
        return nonfinite.strict(super().to_json(), ("losses", "grad_norm"))


@dataclass(frozen=True)
class Summary(Record):
    """``summary.json``."""

    run_dir: str = meta(missing="")
    variants: tuple[SummaryEntry, ...] = meta(own_where=True)
    ranking: tuple[str, ...] = ()
    recommendation: Recommendation = meta(NOT_ADVISED, own_where=True)
    topology: Topology | None = None
    config: RunConfig | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    started: str | None = None
    finished: str | None = None
    partial: bool = False
    interrupted_by: str | None = None
    findings: tuple[Finding, ...] = ()  # advice.rules.advise
    rules: tuple[RuleStatus, ...] = ()  # advice.rules.rules_status, then the trace rules' (trace_rules)
    link_models: tuple[LinkModel, ...] = ()  # the link bandwidths modeled times use
    projection: ProjectionSummary | None = None  # pipeline.compact_projection, or why there is none
    math: MathTable | None = None  # samemath.table: reference, tolerances, one row per variant
    problems: tuple[str, ...] = ()  # documents of the run directory that were skipped, and why
    scaling: ScalingSection | None = meta(None, omit=if_none)  # profile --scaling (analysis.scaling_run)
    schema: int = SUMMARY_SCHEMA
    WHERE = "summary.json"
    JSON_ORDER = ("schema", "run_dir", "partial", "interrupted_by", "topology", "config", "versions",
                  "started", "finished", "ranking")

    def entry(self, name: str) -> SummaryEntry | None:
        return next((e for e in self.variants if e.name == name), None)

    def map_entries(self, fn: Callable[[SummaryEntry], SummaryEntry]) -> Summary:
        """A new summary with ``fn`` applied to every entry."""
        return replace(self, variants=tuple(fn(e) for e in self.variants))

    @classmethod
    def from_fields(cls, f: Fields) -> Summary:
        summary = decode(cls, f)
        unknown = [n for n in summary.ranking if summary.entry(n) is None]
        if unknown:
            raise RecordError(f.where, "ranking", f"names variants the summary lacks: {', '.join(unknown)}")
        return summary


# ------------------------------------------------------------------------------------------
# Building it from the records


def accelerators_used(devices: Mapping[str, PlacedDevice], topology: Topology | None) -> int:
    """How many accelerator devices a placement's ``devices`` table put ops on."""
    roles = {} if topology is None else topology.roles
    return sum(1 for d, v in devices.items() if device_role(d, roles) == "accelerator" and int(v.ops or 0))


def variant_entry(record: VariantRecord, batch: int | None, topology: Topology | None = None) -> SummaryEntry:
    """A record's line in the summary (before speedups, ranks and the analysis)."""
    placed = record.placed
    devices = {} if placed is None else placed.devices
    math = record.math
    used = accelerators_used(devices, record.topology or topology) if placed is not None else None
    median = record.median_step_s
    profiled = record.timings.profiled_step_time_s
    known = registry.lookup(record.name, record.source)
    return SummaryEntry(
        name=record.name,
        status=record.status,
        source=record.source,
        family=record.family or (known.family if known else registry.TF1_GRAPH),
        error=None if record.error is None else textcap.one_line(record.error),
        stderr_tail=textcap.tail_text(record.stderr_tail or ""),
        step_time_s=record.timings.step_time_s or StepStats(),
        profiled_median_s=None if profiled is None else profiled.median,
        examples_per_s=(batch / median) if (batch and median) else None,
        devices=dict(devices),
        accelerators_used=used,
        losses=tuple(math.losses) if math is not None and math.losses else None,
        grad_norm=None if math is None else math.grad_norm,
        random_ops=() if math is None else math.random_ops,
        transfers=() if placed is None else placed.transfers,
        xplane_files=record.xplane_files or (),
    )


def with_speedups(entries: Sequence[SummaryEntry], accelerators: int) -> list[SummaryEntry]:
    """Speedup over the family's baseline, and scaling efficiency (speedup / accelerators used).

    The denominator is the variant's ``accelerators_used`` (what its placement used);
    ``accelerators`` (the run's) only where a variant recorded no placement.
    """
    base = {e.family: e.median_s for e in entries if e.baseline and e.ok and e.median_s}

    def one(e: SummaryEntry) -> SummaryEntry:
        b, m = base.get(e.family), e.median_s
        speedup = (b / m) if (b and m and e.ok) else None
        uses = e.accelerators_used or (1 if e.baseline else max(accelerators, 1))
        efficiency = (speedup / uses) if speedup else None
        return replace(e, speedup_vs_baseline=speedup, scaling_efficiency=efficiency)

    return [one(e) for e in entries]


def rank(entries: Sequence[SummaryEntry]) -> list[str]:
    """Successful variants by median un-profiled step time, fastest first; the others last."""
    ok = sorted((e for e in entries if e.ok and e.median_s is not None), key=lambda e: e.median_s)
    ranked = {e.name for e in ok}
    return [e.name for e in ok] + [e.name for e in entries if e.name not in ranked]


def with_ranks(entries: Sequence[SummaryEntry], ranking: Sequence[str]) -> list[SummaryEntry]:
    """Each ranked variant's place (1 = fastest); None for those without a measured median."""
    position = {n: i + 1 for i, n in enumerate(ranking)}
    return [replace(e, rank=position[e.name] if e.ok and e.median_s is not None else None) for e in entries]


def accelerator_count(run: RunDoc, topology: Topology | None) -> int:
    """Accelerators the run had: the topology's, else the config's, else 1."""
    if topology is not None and topology.accelerators:
        return len(topology.accelerators)
    asked = run.config.accelerators if run.config is not None else None
    return asked or 1


def build_summary(
    run_dir: RunDir, run: RunDoc, records: Mapping[str, VariantRecord], problems: Sequence[str] = ()
) -> Summary:
    """The summary of ``records`` (from :func:`tfprof_towers.rundir.records.load_records`), ranked."""
    topology = run.topology or next((r.topology for r in records.values() if r.topology), None)
    batch = run.preset.batch if run.preset is not None else None
    entries = [variant_entry(r, batch, topology) for r in records.values()]
    entries = with_speedups(entries, accelerator_count(run, topology))
    ranking = rank(entries)
    return Summary(
        run_dir=str(run_dir.root), variants=tuple(with_ranks(entries, ranking)), ranking=tuple(ranking),
        topology=topology, config=run.config, versions=run.versions, started=run.started,
        finished=run.finished, partial=run.partial, interrupted_by=run.interrupted_by,
        problems=tuple(problems),
    )
