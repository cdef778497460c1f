"""A run directory's scaling sweep read back: ``scaling.json`` + the points' records and traces ->
``summary.json`` -> ``scaling`` (:func:`with_scaling`).

Each planned point's record (``variants/<name>@<count>/record.json``) gives its status and step
times; its trace (``tensorboard/<name>@<count>/``) the per-step wall time per group
(:func:`tfprof_towers.analysis.scaling.wall_groups`).  A point whose record is missing or
unreadable is failed, saying why; a trace that cannot be analysed leaves ``wall_per_step`` null.
No TensorFlow.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tfprof_towers.analysis.scaling import FAILED, SKIPPED, Point, Sweep, measured_section, wall_groups
from tfprof_towers.rundir.fields import RecordError
from tfprof_towers.rundir.paths import RunDir, read_json
from tfprof_towers.rundir.records import StepStats, Topology, VariantRecord
from tfprof_towers.rundir.scaling import (
    PlannedPoint,
    PointRunDir,
    ProjectedScaling,
    RecommendationFor,
    ScalingDoc,
    ScalingSection,
    scaling_json,
)
from tfprof_towers.rundir.summary import Summary
from tfprof_towers.rundir.trace_doc import TraceDoc
from tfprof_towers.vocab.device_names import device_role
from tfprof_towers.vocab.errors import TowersError

LOGICAL_CPU = "logical-cpu"


def load_scaling(run_dir: RunDir) -> ScalingDoc | str | None:
    """``scaling.json``; None without one; why, when it cannot be read."""
    path = scaling_json(run_dir)
    if not path.is_file():
        return None
    try:
        return ScalingDoc.from_json(read_json(path), str(path))
    except TowersError as exc:
        return exc.message


def point_record(run_dir: RunDir, p: PlannedPoint) -> VariantRecord | str:
    """A point's record, or why there is none to use."""
    path = PointRunDir(run_dir.root, count=p.count).record_json(p.variant)
    if not path.is_file():
        return "record.json is missing (the sweep did not reach it?)"
    try:
        return VariantRecord.from_json(read_json(path), str(path))
    except RecordError as exc:
        return f"record.json is invalid: {exc.detail}"
    except TowersError as exc:
        return f"record.json is unreadable: {exc.message}"


def point_walls(run_dir: RunDir, p: PlannedPoint, record: VariantRecord,
                topology: Topology | None) -> dict[str, float] | None:
    """The point's per-step wall time per group, from its trace (None when it cannot be analysed)."""
    if not record.xplane_files:
        return None
    try:
        from tfprof_towers.analysis.run_traces import RunContext, analyze_logdir

        rd = PointRunDir(run_dir.root, count=p.count)
        kind = topology.kind if topology is not None else None
        analysis = analyze_logdir(rd.logdir(p.variant), RunContext.of(record, kind), record.name)
        devices = TraceDoc.from_json(analysis.to_doc(per_step=True)).devices
    except Exception:
        return None
    # each point ran with its own count of devices: the role from the point's own topology
    topo = _roles(record.topology or topology)
    return wall_groups(devices, {d: device_role(d, topo) for d in devices})


def _roles(topology: Topology | None) -> dict[str, Any]:
    """What :func:`device_role` reads of a topology: its host and its accelerators."""
    if topology is None:
        return {}
    return {"host": topology.host, "accelerators": topology.accelerators}


def point_of(run_dir: RunDir, p: PlannedPoint, topology: Topology | None) -> Point:
    """A planned point as the arithmetic sees it."""
    base = Point(p.variant, p.count, family=p.family, baseline=p.baseline, global_batch=p.global_batch)
    record = point_record(run_dir, p)
    if isinstance(record, str):
        return replace(base, status=SKIPPED, reason=p.skipped) if p.skipped else \
            replace(base, status=FAILED, reason=record)
    st = record.timings.step_time_s or StepStats()
    return replace(base, status=record.status, reason=record.error,
                   step_median_s=st.median, step_p10_s=st.p10, step_p90_s=st.p90,
                   wall_per_step=point_walls(run_dir, p, record, topology) if record.ok else None)


def scaling_section(run_dir: RunDir, topology: Topology | None) -> ScalingSection | None:
    """``summary.json`` -> ``scaling``; None for a run without a sweep."""
    doc = load_scaling(run_dir)
    if doc is None:
        return None
    if isinstance(doc, str):
        return ScalingSection(error=doc)
    stand_in = topology is not None and topology.kind == LOGICAL_CPU
    label = "CPU stand-in (logical CPU devices: speed is not GPU speed)" if stand_in else "measured here"
    points = tuple(point_of(run_dir, p, topology) for p in doc.points)
    notes = doc.notes + (() if doc.finished else ("the sweep did not finish: points it did not reach are "
                                                  "failed",))
    section = measured_section(Sweep(doc.mode, doc.counts, doc.batch, points, "accelerators", label, notes))
    projected = doc.projected
    # on logical CPU devices the projection is the headline; the measured curve is the CPU stand-in
    headline = "projected" if stand_in and projected and projected.error is None else "measured"
    return replace(section, stand_in=stand_in, projected=projected, headline=headline)


def recommendation_for(summary: Summary, section: ScalingSection) -> RecommendationFor | None:
    """The count the run's recommendation is for, and whether the sweep picks differently at other
    counts (None without a recommendation)."""
    rec = summary.recommendation
    if rec.variant is None:
        return None
    projected = section.projected or ProjectedScaling()
    if rec.is_projected:
        count = summary.projection.accelerator_count if summary.projection is not None else None
        unit, picks, by_count = "GPUs", projected.best_by_count, projected.recommendation
        where = f" on {rec.hardware}"
    else:
        count = len(summary.topology.accelerators) if summary.topology is not None else None
        unit, picks, by_count, where = "accelerators", section.best_by_count, section.recommendation, ""
    if not count:
        return None
    differs = any(p.variant != rec.variant for p in picks if p.count != 1)
    text = f"the recommendation ({rec.variant}) is for {count} {unit if count > 1 else unit.rstrip('s')}"
    text += where
    above = sorted({p.count for p in picks if p.count > 1})
    if by_count and differs:
        text += f"; the fastest at each count of the sweep: {by_count}"
    elif by_count and above:
        text += f"; it is the fastest at every count of the sweep from {above[0]} up ({by_count})"
    elif by_count:  # `--scaling 1,1`: nothing ran above one, so nothing can be said of more
        text += f"; the sweep measured no count above 1 ({by_count})"
    return RecommendationFor(rec.variant, count, unit, rec.basis, text)


def with_scaling(summary: Summary, run_dir: RunDir) -> Summary:
    """The summary with its ``scaling`` section (unchanged for a run without a sweep)."""
    section = scaling_section(run_dir, summary.topology)
    if section is None:
        return summary
    if section.error is None:
        section = replace(section, recommendation_for=recommendation_for(summary, section))
    return replace(summary, scaling=section)
