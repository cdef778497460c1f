"""``summary.json``: the run's measurements put together, as typed documents (no TensorFlow).

:class:`SummaryEntry` is one variant's line (``summary.json`` -> ``variants[]``);
:class:`Summary` the whole document.  Both are frozen, with ``to_json()`` and
``from_json()`` and a schema version; the JSON keeps the field names the README
documents and the report reads.

``build_summary(run_dir, run, records)`` is the first step of the analysis
(:mod:`tfprof_towers.analysis.pipeline`): the records' timings and placement totals,
speedups over each family's baseline, and the ranking by median un-profiled
step time.  Later steps return new summaries with the projection, breakdowns,
audits and advice added (``dataclasses.replace``; nothing is edited in place).

Scaling efficiency has one denominator everywhere: the accelerators the variant
used (accelerator devices its placement put ops on, ``accelerators_used``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.fields import Fields, RecordError
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import (
    OK,
    STATUSES,
    RunConfig,
    RunDoc,
    StepStats,
    Topology,
    VariantRecord,
    check_devices,
)
from tfprof_towers.variants import registry
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.device_names import device_role

SUMMARY_SCHEMA = 3  # 3: recommendation.basis is "measured" or "projected"; losses, grad_norm, math
# 2: typed documents; rules carry named parameters; no link_models per audit



#: Where a recommendation's numbers come from (``summary.json`` -> ``recommendation.basis``).
MEASURED, PROJECTED = "measured", "projected"
BASES = (MEASURED, PROJECTED)

@dataclass(frozen=True)
class Recommendation:
    """The variant to use and why, with the numbers behind it."""

    variant: str | None
    reason: str
    basis: str = MEASURED  # BASES
    fastest: str | None = None  # the fastest variant on this basis, eligible or not
    runner_up: str | None = None
    speedup_vs_single: float | None = None
    median_step_s: float | None = None
    within_noise: tuple[str, ...] = ()
    hardware: str | None = None  # projected: the hardware profile
    preset: str | None = None  # projected: the preset the graphs were built at
    projected_step_s: Mapping[str, float] | None = None  # projected: {"overlapped", "serial"} of the pick
    excluded: Mapping[str, str] = field(default_factory=dict)  # variant -> why it is not recommended
    error: str | None = None  # projected: why there is no projection to recommend from
    measured_pick: str | None = None  # projected: what the measured (CPU stand-in) ranking would pick

    @property
    def is_projected(self) -> bool:
        return self.basis == PROJECTED

    @property
    def label(self) -> str:
        """``"projected on NAME"`` or ``"measured here"``: what the terminal, report and JSON say."""
        return f"projected on {self.hardware}" if self.is_projected else "measured here"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "variant": self.variant, "fastest": self.fastest, "runner_up": self.runner_up,
            "speedup_vs_single": self.speedup_vs_single, "median_step_s": self.median_step_s,
            "within_noise": list(self.within_noise), "basis": self.basis, "reason": self.reason,
        }
        if self.is_projected:
            step = None if self.projected_step_s is None else dict(self.projected_step_s)
            doc.update(hardware=self.hardware, preset=self.preset, label=self.label, projected_step_s=step,
                       measured_pick=self.measured_pick)
        if self.excluded:
            doc["excluded"] = dict(self.excluded)
        if self.error is not None:
            doc["error"] = self.error
        return doc

    def brief(self) -> dict[str, Any]:
        """``{"variant", "reason"}``: what projection.json keeps."""
        return {"variant": self.variant, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: Any, where: str = "recommendation") -> Recommendation:
        f = Fields.of(doc, where)
        basis = f.text("basis", default=MEASURED) or MEASURED
        if basis not in BASES:  # schema 2 held free text here
            basis = PROJECTED if basis.startswith("projected") else MEASURED
        step = f.obj("projected_step_s")
        return cls(
            variant=f.text("variant"), reason=f.text("reason", default=""), basis=basis,
            fastest=f.text("fastest"), runner_up=f.text("runner_up"),
            speedup_vs_single=f.number("speedup_vs_single"), median_step_s=f.number("median_step_s"),
            within_noise=f.texts("within_noise"), hardware=f.text("hardware"), preset=f.text("preset"),
            projected_step_s=None if step is None else {k: step.number(k, required=True) for k in step.data},
            excluded=f.text_map("excluded"), error=f.text("error"), measured_pick=f.text("measured_pick"),
        )



#: Before the advice step has run.
NOT_ADVISED = Recommendation(None, "not advised yet")

@dataclass(frozen=True)
class SummaryEntry:
    """One variant in ``summary.json``: timings, placement totals, and what the later steps add."""

    name: str
    status: str
    source: str = "builtin"
    family: str = registry.TF1_GRAPH
    error: str | None = None
    stderr_tail: str = ""
    step_time_s: StepStats = field(default_factory=StepStats)
    profiled_median_s: float | None = None
    examples_per_s: float | None = None
    devices: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # device -> {ops, flops_per_step}
    transfers: tuple[Mapping[str, Any], ...] = ()  # {src, dst, bytes_per_step, tensors}
    xplane_files: tuple[str, ...] = ()
    speedup_vs_single: float | None = None  # over the family's baseline (the name is the JSON's)
    scaling_efficiency: float | None = None  # speedup / accelerators_used
    accelerators_used: int | None = None  # accelerator devices the placement put ops on
    losses: tuple[float, ...] | None = None  # the first training steps' losses (same math)
    grad_norm: float | None = None  # the step-1 global gradient norm, before clipping
    rank: int | None = None
    breakdown: Mapping[str, Any] | None = None  # the trace analysis per step, or {"error": ...}
    audit: Mapping[str, Any] | None = None  # audit.audit_variant
    chrome_trace: str | None = None  # variants/<name>/trace.json, relative to the run directory
    chrome_trace_error: str | None = None
    cluster: Mapping[str, Any] | None = None  # a cluster variant: tasks, network, stragglers (cluster_view)

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
        return {
            "name": self.name, "source": self.source, "family": self.family, "status": self.status,
            "error": self.error, "stderr_tail": self.stderr_tail, "step_time_s": self.step_time_s.to_json(),
            "profiled_step_time_s": {"median": self.profiled_median_s}, "examples_per_s": self.examples_per_s,
            "devices": {d: dict(v) for d, v in self.devices.items()},
            "transfers": [dict(t) for t in self.transfers], "xplane_files": list(self.xplane_files),
            "speedup_vs_single": self.speedup_vs_single, "scaling_efficiency": self.scaling_efficiency,
            "accelerators_used": self.accelerators_used,
            **nonfinite.strict({"losses": None if self.losses is None else list(self.losses),
                                "grad_norm": self.grad_norm}, ("losses", "grad_norm")),
            "rank": self.rank, "breakdown": self.breakdown, "audit": self.audit,
            "chrome_trace": self.chrome_trace, "chrome_trace_error": self.chrome_trace_error,
            **({"cluster": dict(self.cluster)} if self.cluster is not None else {}),
        }

    @classmethod
    def from_json(cls, doc: Any, where: str = "summary.json: variants[]") -> SummaryEntry:
        f = Fields.of(doc, where)
        step = f.obj("step_time_s")
        profiled = f.obj("profiled_step_time_s")
        check_devices(f)
        return cls(
            name=f.text("name", required=True), status=f.choice("status", STATUSES, required=True),
            source=f.text("source", default="builtin"), family=f.text("family", default=registry.TF1_GRAPH),
            error=f.text("error"), stderr_tail=f.text("stderr_tail", default=""),
            step_time_s=StepStats() if step is None else StepStats.from_fields(step),
            profiled_median_s=None if profiled is None else profiled.number("median"),
            examples_per_s=f.number("examples_per_s"),
            devices=f.mapping("devices") or {},
            transfers=tuple(t.data for t in f.objects("transfers")), xplane_files=f.texts("xplane_files"),
            speedup_vs_single=f.number("speedup_vs_single"),
            scaling_efficiency=f.number("scaling_efficiency"),
            accelerators_used=f.integer("accelerators_used"),
            losses=nonfinite.read_numbers(f, "losses"), grad_norm=nonfinite.read_number(f, "grad_norm"),
            rank=f.integer("rank"), breakdown=f.mapping("breakdown"), audit=f.mapping("audit"),
            chrome_trace=f.text("chrome_trace"), chrome_trace_error=f.text("chrome_trace_error"),
            cluster=f.mapping("cluster"),
        )


@dataclass(frozen=True)
class Summary:
    """``summary.json``."""

    run_dir: str
    variants: tuple[SummaryEntry, ...]
    ranking: tuple[str, ...] = ()
    recommendation: Recommendation = NOT_ADVISED
    topology: Topology | None = None
    config: RunConfig | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    started: str | None = None
    finished: str | None = None
    partial: bool = False
    interrupted_by: str | None = None
    findings: tuple[Mapping[str, Any], ...] = ()  # advise.Finding.to_json()
    rules: tuple[Mapping[str, Any], ...] = ()  # advise.rules_status()
    link_models: tuple[Mapping[str, Any], ...] = ()  # the link bandwidths modeled times use
    projection: Mapping[str, Any] | None = None  # pipeline.compact_projection, or {"error": ...}
    math: Mapping[str, Any] | None = None  # samemath.table: reference, tolerances, one row per variant
    problems: tuple[str, ...] = ()  # documents of the run directory that were skipped, and why
    schema: int = SUMMARY_SCHEMA

    def entry(self, name: str) -> SummaryEntry | None:
        return next((e for e in self.variants if e.name == name), None)

    def map_entries(self, fn: Callable[[SummaryEntry], SummaryEntry]) -> Summary:
        """A new summary with ``fn`` applied to every entry."""
        return replace(self, variants=tuple(fn(e) for e in self.variants))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema, "run_dir": self.run_dir, "partial": self.partial,
            "interrupted_by": self.interrupted_by,
            "topology": None if self.topology is None else self.topology.to_json(),
            "config": None if self.config is None else self.config.to_json(),
            "versions": dict(self.versions), "started": self.started, "finished": self.finished,
            "ranking": list(self.ranking), "variants": [e.to_json() for e in self.variants],
            "recommendation": self.recommendation.to_json(),
            "findings": [dict(f) for f in self.findings], "rules": [dict(r) for r in self.rules],
            "link_models": [dict(m) for m in self.link_models], "projection": self.projection,
            "math": None if self.math is None else dict(self.math), "problems": list(self.problems),
        }

    @classmethod
    def from_json(cls, doc: Any, where: str = "summary.json") -> Summary:
        f = Fields.of(doc, where)
        config, topology, rec = f.obj("config"), f.obj("topology"), f.obj("recommendation")
        variants = tuple(SummaryEntry.from_json(v.data, f"{where}: {v.prefix}")
                         for v in f.objects("variants"))
        ranking = f.texts("ranking")
        names = {v.name for v in variants}
        unknown = [n for n in ranking if n not in names]
        if unknown:
            raise RecordError(where, "ranking", f"names variants the summary lacks: {', '.join(unknown)}")
        for item in f.objects("findings"):
            for key in ("rule", "severity", "variant", "message", "suggestion"):
                item.text(key, required=True)
        for item in f.objects("rules"):
            item.text("rule", required=True)
            item.flag("evaluated")
        return cls(
            run_dir=f.text("run_dir", default=""), variants=variants, ranking=ranking,
            recommendation=NOT_ADVISED if rec is None else Recommendation.from_json(rec.data, f"{where}: "
                                                                                               "recommendation"),
            topology=None if topology is None else Topology.from_fields(topology),
            config=None if config is None else RunConfig.from_fields(config),
            versions=f.text_map("versions"), started=f.text("started"), finished=f.text("finished"),
            partial=f.flag("partial"), interrupted_by=f.text("interrupted_by"),
            findings=tuple(x.data for x in f.objects("findings")),
            rules=tuple(x.data for x in f.objects("rules")),
            link_models=tuple(x.data for x in f.objects("link_models")), projection=f.mapping("projection"),
            math=f.mapping("math"), problems=f.texts("problems"),
            schema=f.integer("schema", default=SUMMARY_SCHEMA),
        )


# ------------------------------------------------------------------------------------------
# Building it from the records


def accelerators_used(devices: Mapping[str, Mapping[str, Any]], topology: Topology | None) -> int:
    """How many accelerator devices a placement's ``devices`` table put ops on."""
    topo = {} if topology is None else topology.to_json()
    return sum(1 for d, v in devices.items()
               if device_role(d, topo) == "accelerator" and int(v.get("ops") or 0))


def variant_entry(record: VariantRecord, batch: int | None, topology: Topology | None = None) -> SummaryEntry:
    """A record's line in the summary (before speedups, ranks and the analysis)."""
    placement = record.placement or {}
    devices = placement.get("devices") or {}
    math = record.math
    used = accelerators_used(devices, record.topology or topology) if record.placement else None
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
        devices={d: {"ops": v["ops"], "flops_per_step": v["flops_per_step"]} for d, v in devices.items()},
        accelerators_used=used,
        losses=tuple(math.losses) if math is not None and math.losses else None,
        grad_norm=None if math is None else math.grad_norm,
        transfers=tuple(placement.get("transfers") or ()),
        xplane_files=record.xplane_files or (),
    )


def with_speedups(entries: Sequence[SummaryEntry], accelerators: int) -> list[SummaryEntry]:
    """Speedup over the family's baseline, and scaling efficiency (speedup / accelerators used).

    The denominator is the variant's ``accelerators_used`` (what its placement used);
    ``accelerators`` (the run's) only where a variant recorded no placement.
    """
    base = {
        e.family: e.median_s for e in entries
        if e.baseline and e.ok and e.median_s
    }

    def one(e: SummaryEntry) -> SummaryEntry:
        b, m = base.get(e.family), e.median_s
        speedup = (b / m) if (b and m and e.ok) else None
        uses = e.accelerators_used or (1 if e.baseline else max(accelerators, 1))
        return replace(e, speedup_vs_single=speedup, scaling_efficiency=(speedup / uses) if speedup else None)

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
        run_dir=str(run_dir.root),
        variants=tuple(with_ranks(entries, ranking)),
        ranking=tuple(ranking),
        topology=topology,
        config=run.config,
        versions=run.versions,
        started=run.started,
        finished=run.finished,
        partial=run.partial,
        interrupted_by=run.interrupted_by,
        problems=tuple(problems),
    )
