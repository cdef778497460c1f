"""The analysis steps of a run directory: each takes the typed summary and returns a new one.

A variant whose trace cannot be analysed keeps a breakdown with only ``error``
(:class:`~tfprof_towers.rundir.trace_doc.TraceDoc`); a ``projection.json`` that cannot be read becomes a
:class:`~tfprof_towers.rundir.projection_doc.ProjectionSummary` with only ``error``; without one it is
``None``.  No TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from tfprof_towers.analysis import audit
from tfprof_towers.rundir.paths import PROJECTION_JSON, RunDir, read_json
from tfprof_towers.rundir.placement_doc import Placement
from tfprof_towers.rundir.projection_doc import ProjectionSummary
from tfprof_towers.rundir.records import VariantRecord
from tfprof_towers.rundir.summary import MemoryPeak, Summary, SummaryEntry
from tfprof_towers.rundir.trace_doc import TraceDoc
from tfprof_towers.vocab.device_names import device_role
from tfprof_towers.vocab.errors import TowersError


@dataclass(frozen=True, eq=False)
class VariantTrace:
    """What the trace analysis gave one variant: its per-step document, its hosts' analysis, and how to
    read every host's events when something needs them."""

    breakdown: TraceDoc
    pod: Any = None  # trace.pod.PodAnalysis (memory, the trace rules' facts, frames/), or None on failure
    logdir: Path | None = None
    context: Any = None  # analysis.run_traces.RunContext: the record's join, for the merged events

    @cached_property
    def trace(self) -> Any:
        """Every host's events in one ``trace.load.Trace``, read on first use (the Chrome trace and the
        step timeline need the events themselves); None without an analysis.  Raises what the reader
        raises."""
        if self.pod is None or self.logdir is None:
            return None
        if self.pod.events is not None:  # kept from the analysis's own read (one host, or a few small ones)
            return self.pod.events
        from tfprof_towers.analysis.run_traces import merged_trace

        return merged_trace(self.logdir, self.context, tuple(f.name for f in self.pod.failures))

    def merged_analysis(self) -> Any:
        """The ``trace.analysis.Analysis`` of :attr:`trace` (a run's frames'); None without an analysis."""
        from tfprof_towers.trace.analysis import analyze_trace

        if self.pod is None:
            return None
        return analyze_trace(self.trace, self.context.kind, self.context.edge_bytes, label=self.pod.label)


def analyze_variant(run_dir: RunDir, record: VariantRecord, kind: str | None) -> VariantTrace:
    """The per-step breakdown of one variant's trace, host by host then reduced (as ``analyze``);
    only ``error`` when that fails.

    ``record`` (already loaded) gives the node -> device join, edge bytes and hosts' tasks;
    ``kind`` is the run's topology kind.  Neither is read again from the run directory.
    """
    try:
        from tfprof_towers.analysis.run_traces import RunContext, analyze_logdir
        from tfprof_towers.xplane.glibc_heap import prefer_heap
    except ImportError as exc:  # the trace package is optional for a report
        return VariantTrace(TraceDoc(error=f"trace analysis unavailable ({exc})"))
    prefer_heap()  # a big trace's columns reuse freed memory, not fresh pages (xplane/glibc_heap.py)
    ctx = RunContext.of(record, kind)
    logdir = run_dir.logdir(record.name)
    try:
        pod = analyze_logdir(logdir, ctx, record.name, keep_events=True)
    except TowersError as exc:
        return VariantTrace(TraceDoc(error=exc.message))
    except Exception as exc:  # a trace we cannot read must not cost the user the whole report
        return VariantTrace(TraceDoc(error=f"trace analysis failed: {type(exc).__name__}: {exc}"))
    doc = TraceDoc.from_json(pod.to_doc(per_step=True))
    # the run's record names its hosts and its trace files
    doc = replace(doc, source=None, hosts=None, failed_hosts=doc.failed_hosts or None)
    return VariantTrace(doc, pod, logdir, ctx)


def analyze_traces(
    run_dir: RunDir, summary: Summary, records: Mapping[str, VariantRecord]
) -> dict[str, VariantTrace]:
    """Each successful variant's trace analysis (those whose record names trace files)."""
    kind = summary.topology.kind if summary.topology is not None else None
    return {e.name: analyze_variant(run_dir, records[e.name], kind)
            for e in summary.variants if e.ok and e.xplane_files and e.name in records}


def topology_of(summary: Summary) -> dict[str, Any]:
    """The run's topology as :mod:`tfprof_towers.vocab.device_names` reads it (``{}`` without one)."""
    return summary.topology.roles if summary.topology is not None else {}


def with_breakdowns(summary: Summary, analyses: Mapping[str, VariantTrace]) -> Summary:
    """Each analysed variant's per-step breakdown, every device labelled host or accelerator."""
    topology = topology_of(summary)

    def one(e: SummaryEntry) -> SummaryEntry:
        t = analyses.get(e.name)
        if t is None:
            return replace(e, breakdown=None)
        devices = {dev: replace(d, role=device_role(dev, topology)) for dev, d in t.breakdown.devices.items()}
        return replace(e, breakdown=replace(t.breakdown, devices=devices))

    return summary.map_entries(one)


def with_memory(summary: Summary, analyses: Mapping[str, VariantTrace],
                records: Mapping[str, VariantRecord] | None = None) -> Summary:
    """Each variant's peak memory per device: measured where its trace has allocator events, estimated
    (the projection's target) for the devices the trace does not show; a measured device keeps the
    estimate of the same device beside it (the projection's estimate at the run's own size).

    On logical CPU devices the host's allocator serves them all: each device's measured peak is its
    ops' allocations (the placement's node -> device) plus its variables (:func:`measured_here`)."""
    projection = summary.projection or ProjectionSummary()
    projected = {v.name: v.memory or {} for v in projection.variants}
    here = {v.name: (v.memory_at_run or {}).get("devices") or {} for v in projection.variants}
    logical = summary.topology is not None and summary.topology.kind == "logical-cpu"
    headroom = projection.headroom
    preset = summary.config.preset.name if summary.config is not None and summary.config.preset else "run's"

    def one(e: SummaryEntry) -> SummaryEntry:
        rows: dict[str, MemoryPeak] = {}
        t = analyses.get(e.name)
        rec = (records or {}).get(e.name)
        if logical and t is not None and t.pod is not None and rec is not None and rec.placed is not None:
            rows.update(measured_here(t.trace, rec.placed, preset))  # the allocators' events, merged
        for d in (t.pod.memory if t is not None and t.pod is not None and not rows else ()):
            cap = d.capacity_bytes
            rows[d.device] = MemoryPeak(d.peak_bytes, "measured", d.before_trace_bytes, cap,
                                        None if cap is None else d.peak_bytes <= cap)
        for dev, r in here.get(e.name, {}).items():
            if dev in rows:
                rows[dev] = replace(rows[dev], estimated_peak_bytes=int(r["peak_bytes"]),
                                    estimate_low_bytes=_bytes_or_none(r, "peak_low_bytes"),
                                    estimate_high_bytes=_bytes_or_none(r, "peak_high_bytes"))
        for dev, r in projected.get(e.name, {}).items():
            if dev in rows and rows[dev].label is None:  # a GPU run measured the target's own device
                rows[dev] = on_target(rows[dev], r, headroom)
            else:  # the target's device (named apart where a logical device of this run has its name)
                key = dev if dev not in rows else f"{dev} ({projection.hardware or 'target'})"
                rows[key] = MemoryPeak(int(r["peak_bytes"]), "estimated", r.get("persistent_bytes"),
                                       r.get("capacity_bytes"), r.get("fits"),
                                       estimate_low_bytes=_bytes_or_none(r, "peak_low_bytes"),
                                       estimate_high_bytes=_bytes_or_none(r, "peak_high_bytes"),
                                       may_not_fit=r.get("may_not_fit"))
        return replace(e, memory=rows)

    return summary.map_entries(one)


def _bytes_or_none(row: Mapping[str, Any], key: str) -> int | None:
    """``row[key]`` as bytes, None where the row has no such figure (a projection made before it)."""
    value = row.get(key)
    return None if value is None else int(value)


def with_calibration(summary: Summary) -> Summary:
    """The verdicts at the target's size calibrated on what the run measured
    (:mod:`.memory_calibration`): per device, measured / estimated at the run's size times the target's
    estimate.  ``summary.projection.variants[]``'s rows and ``memory_fit`` and the variants' estimated
    rows carry the calibrated peak beside the uncalibrated one; the recommendation reads the calibrated
    verdicts.  Unchanged where nothing was measured on logical devices."""
    from tfprof_towers.analysis.memory_calibration import calibrated_fit, calibration_label, calibrations

    projection = summary.projection
    topology = summary.topology
    if projection is None or projection.error or not projection.variants or topology is None:
        return summary
    preset = summary.config.preset.name if summary.config is not None and summary.config.preset else "run's"
    label = calibration_label(preset)
    headroom = projection.headroom
    suffix = f" ({projection.hardware or 'target'})"
    entries = {e.name: e for e in summary.variants}
    found: dict[str, dict] = {}
    variants = []
    for v in projection.variants:
        e = entries.get(v.name)
        rows = v.memory
        if e is None or not rows or v.memory_fit is None:
            variants.append(v)
            continue
        cal = calibrations(e.memory, topology.host, topology.accelerators, list(rows))
        new_rows, fit = calibrated_fit(rows, v.memory_fit, cal, headroom, label)
        found[e.name] = {d: r for d, r in new_rows.items() if "calibrated_peak_bytes" in r}
        variants.append(replace(v, memory=new_rows, memory_fit=fit))
    if not any(found.values()):
        return summary

    def one(e: SummaryEntry) -> SummaryEntry:
        rows = found.get(e.name)
        if not rows:
            return e
        memory = dict(e.memory)
        for dev, r in rows.items():
            key = next((k for k in (dev, dev + suffix)
                        if k in memory and memory[k].basis == "estimated"), None)
            if key is not None:
                memory[key] = replace(memory[key], calibrated_peak_bytes=int(r["calibrated_peak_bytes"]),
                                      calibration=label, fits=r.get("fits"), may_not_fit=r.get("may_not_fit"),
                                      estimate_low_bytes=_bytes_or_none(r, "peak_low_bytes"),
                                      estimate_high_bytes=_bytes_or_none(r, "peak_high_bytes"))
        return replace(e, memory=memory)

    return replace(summary.map_entries(one), projection=replace(projection, variants=tuple(variants)))


def on_target(measured: MemoryPeak, projected: Mapping[str, Any], headroom: float) -> MemoryPeak:
    """A GPU run's measured peak on a device the projection's target also has: judged against the
    target's capacity less the headroom (not the run's own allocator's limit), the estimate beside it
    (unless the run's own size already gave one)."""
    cap = projected.get("capacity_bytes")
    est = measured.estimated_peak_bytes
    out = replace(measured, estimated_peak_bytes=int(projected["peak_bytes"]) if est is None else est)
    if cap:
        out = replace(out, capacity_bytes=int(cap), fits=measured.peak_bytes <= int(cap) * (1 - headroom))
    return out


def measured_label(preset: str) -> str:
    """How a logical device's measured peak is labelled: where and at what size it was measured."""
    return f"measured at the {preset} preset, logical devices on this CPU"


def measured_here(trace: Any, placement: Placement, preset: str) -> dict[str, MemoryPeak]:
    """Each logical device's measured peak (:func:`.trace.placed_memory.placed_peaks`): the host allocators'
    events by the device their op was placed on, the most within one step, plus the variables the
    placement put there."""
    from tfprof_towers.trace.placed_memory import placed_peaks

    nodes = {n.name: n.device for n in placement.nodes if n.name and n.device}
    held = {str(d): int(b) for d, b in placement.variable_bytes.items()}
    if not trace.memory.n:
        return {}
    peaks = placed_peaks(trace.memory, nodes, held, steps=trace.step_table)
    if not any(p.allocations for p in peaks):  # no host allocator's events (its BFC allocator was off)
        return {}
    label = measured_label(preset)
    return {p.device: MemoryPeak(p.peak_bytes, "measured", p.held_bytes, None, None, label=label,
                                 allocated_bytes=p.allocated_bytes)
            for p in peaks}


def link_models(summary: Summary) -> tuple[audit.LinkModel, ...]:
    """The links modeled times are quoted at: the projection's hardware profile's, so that the
    findings and the projection describe one machine; the named PCIe models without a projection."""
    projection = summary.projection
    profile = projection.profile if projection is not None else None
    if profile and not projection.error:
        try:
            return audit.link_models_from_profile(profile)
        except (KeyError, TypeError, ValueError):
            pass  # a profile without links (an older projection.json): the named models
    return audit.LINK_MODELS


def with_audits(summary: Summary, records: Mapping[str, VariantRecord]) -> Summary:
    """Each successful variant's placement audit, and the link models its modeled times use."""
    models = link_models(summary)

    def one(e: SummaryEntry) -> SummaryEntry:
        rec = records.get(e.name)
        if not e.ok or rec is None:
            return replace(e, audit=None)
        return replace(e, audit=audit.audit_variant(rec, summary.topology, e.breakdown, models))

    return replace(summary.map_entries(one), link_models=tuple(models))


def with_cluster(summary: Summary, records: Mapping[str, VariantRecord]) -> Summary:
    """Each cluster variant's view across its tasks (:mod:`tfprof_towers.analysis.cluster_view`)."""
    from tfprof_towers.analysis.cluster_view import cluster_view

    def one(e: SummaryEntry) -> SummaryEntry:
        rec = records.get(e.name)
        if rec is None or rec.cluster is None:
            return e
        breakdown = e.breakdown if e.breakdown is not None and e.breakdown.ok else None
        return replace(e, cluster=cluster_view(rec.cluster, rec.placed, breakdown))

    return summary.map_entries(one)


# ------------------------------------------------------------------------------------------
# What-if projection (projection.json) -> summary["projection"]


def with_projection(summary: Summary, projection: ProjectionSummary | None) -> Summary:
    return replace(summary, projection=projection)


def load_projection(run_dir: RunDir) -> ProjectionSummary | None:
    """``RUN_DIR/projection.json`` in compact form; ``None`` without one, only ``error`` if unreadable."""
    path = run_dir.root / PROJECTION_JSON
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return ProjectionSummary.from_json(compact_projection(read_json(path)))
    except TowersError as exc:
        return ProjectionSummary(error=exc.message)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return ProjectionSummary(error=f"{path}: not a projection document ({type(exc).__name__}: {exc})")


def compact_projection(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the report shows of a projection document (see ``project.api.project``), as the JSON of a
    :class:`~tfprof_towers.rundir.projection_doc.ProjectionSummary`.

    Raises ``KeyError``/``TypeError``/``ValueError`` on a document of the wrong shape.
    """
    if not isinstance(doc, Mapping) or doc.get("label") != "projected":
        raise ValueError('no "label": "projected"')
    if doc.get("error") is not None:  # profile could not project (see session/profile.py)
        return {"label": "projected", "hardware": _optional_text(doc.get("hardware")),
                "preset": _preset(doc.get("preset")), "error": str(doc["error"])}
    calibration = doc.get("calibration") or {}
    return {
        "label": "projected",
        "hardware": str(doc["hardware"]),
        "preset": _preset(doc.get("preset")),
        "tensorflow": _optional_text(doc.get("tensorflow")),
        "assumptions": [str(a) for a in doc["assumptions"]],
        "profile": _plain(doc.get("profile") or {}),
        "calibrated": [str(c) for c in (doc.get("rates") or {}).get("calibrated") or ()],
        "calibration_notes": [str(n) for n in calibration.get("notes") or ()],
        "variants": [_projected_variant(e) for e in doc["variants"]],
        **({"memory": _plain(doc["memory"])} if isinstance(doc.get("memory"), Mapping) else {}),
        "ranking": [str(n) for n in doc.get("ranking") or ()],
        "recommendation": {"variant": _optional_text(doc["recommendation"].get("variant")),
                           "reason": str(doc["recommendation"].get("reason") or "")},
    }


def _projected_variant(entry: Mapping[str, Any]) -> dict[str, Any]:
    name = str(entry["name"])
    if "projected_step_s" not in entry:
        return {"name": name, "error": str(entry.get("error") or "not projected")}
    step = entry["projected_step_s"]
    rank = entry.get("rank")
    out = {
        "name": name,
        "rank": None if rank is None else int(rank),
        "projected_step_s": {"overlapped": _seconds(step["overlapped"]), "serial": _seconds(step["serial"])},
        "bottleneck": str((entry.get("bottleneck") or {}).get("text") or ""),
    }
    if isinstance(entry.get("memory_fit"), Mapping):  # projection.json schema 2
        out["memory"] = {str(d): _plain(r) for d, r in (entry.get("memory") or {}).items()}
        out["memory_fit"] = _plain(entry["memory_fit"])
    if isinstance(entry.get("memory_at_run"), Mapping):  # the estimate at the run's size, its devices
        out["memory_at_run"] = _plain(entry["memory_at_run"])
    return out


def _seconds(value: Any) -> float:
    s = float(value)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"projected step time {value!r}")
    return s


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _preset(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    return {k: raw[k] for k in ("name", "batch", "dim", "blocks", "keras_model") if k in raw}


def _plain(value: Any, depth: int = 0) -> Any:
    """JSON scalars, lists and string-keyed dicts only (a profile is two levels deep)."""
    if depth > 3:
        raise ValueError("profile nested too deep")
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"unexpected {type(value).__name__} in the profile")
