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
from tfprof_towers.rundir.records import StepStats, VariantRecord
from tfprof_towers.rundir.scaling import PlannedPoint, PointRunDir, ScalingDoc, scaling_json
from tfprof_towers.rundir.summary import Summary
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
                topology: dict[str, Any]) -> dict[str, float] | None:
    """The point's per-step wall time per group, from its trace (None when it cannot be analysed)."""
    if not record.xplane_files:
        return None
    try:
        from tfprof_towers.analysis.run_traces import RunContext, analyze_logdir

        rd = PointRunDir(run_dir.root, count=p.count)
        analysis = analyze_logdir(rd.logdir(p.variant), RunContext.of(record, topology.get("kind")),
                                  record.name)
        devices = analysis.to_doc(per_step=True).get("devices") or {}
    except Exception:
        return None
    # each point ran with its own count of devices: the role from the point's own topology
    topo = record.topology.to_json() if record.topology is not None else topology
    return wall_groups({d: {**v, "role": device_role(d, topo)} for d, v in devices.items()})


def point_of(run_dir: RunDir, p: PlannedPoint, topology: dict[str, Any]) -> Point:
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


def scaling_section(run_dir: RunDir, topology: dict[str, Any]) -> dict[str, Any] | None:
    """``summary.json`` -> ``scaling``; None for a run without a sweep."""
    doc = load_scaling(run_dir)
    if doc is None:
        return None
    if isinstance(doc, str):
        return {"error": doc}
    stand_in = topology.get("kind") == LOGICAL_CPU
    label = "CPU stand-in (logical CPU devices: speed is not GPU speed)" if stand_in else "measured here"
    points = tuple(point_of(run_dir, p, topology) for p in doc.points)
    notes = doc.notes + (() if doc.finished else ("the sweep did not finish: points it did not reach are "
                                                  "failed",))
    section = measured_section(Sweep(doc.mode, doc.counts, doc.batch, points, "accelerators", label, notes))
    projected = dict(doc.projected) if doc.projected is not None else None
    section["stand_in"] = stand_in
    section["projected"] = projected
    # on logical CPU devices the projection is the headline; the measured curve is the CPU stand-in
    section["headline"] = "projected" if stand_in and projected and not projected.get("error") else "measured"
    return section


def recommendation_for(summary: Summary, section: dict[str, Any]) -> dict[str, Any] | None:
    """The count the run's recommendation is for, and whether the sweep picks differently at other
    counts: ``{"variant", "count", "unit", "basis", "text"}`` (None without a recommendation)."""
    rec = summary.recommendation
    if rec.variant is None:
        return None
    if rec.is_projected:
        profile = (summary.projection or {}).get("profile") or {}
        count = ((profile.get("accelerator") or {}).get("count")) if isinstance(profile, dict) else None
        unit, picks = "GPUs", (section.get("projected") or {}).get("best_by_count") or []
        where = f" on {rec.hardware}"
    else:
        count = len(summary.topology.accelerators) if summary.topology is not None else None
        unit, picks, where = "accelerators", section.get("best_by_count") or [], ""
    if not count:
        return None
    differs = any(p.get("variant") != rec.variant for p in picks if p.get("count") != 1)
    by_count = ((section.get("projected") or {}).get("recommendation") if rec.is_projected
                else section.get("recommendation"))
    text = f"the recommendation ({rec.variant}) is for {count} {unit if count > 1 else unit.rstrip('s')}"
    text += where
    above = sorted({p["count"] for p in picks if isinstance(p.get("count"), int) and p["count"] > 1})
    if by_count and differs:
        text += f"; the fastest at each count of the sweep: {by_count}"
    elif by_count and above:
        text += f"; it is the fastest at every count of the sweep from {above[0]} up ({by_count})"
    elif by_count:  # `--scaling 1,1`: nothing ran above one, so nothing can be said of more
        text += f"; the sweep measured no count above 1 ({by_count})"
    return {"variant": rec.variant, "count": count, "unit": unit, "basis": rec.basis, "text": text}


def with_scaling(summary: Summary, run_dir: RunDir) -> Summary:
    """The summary with its ``scaling`` section (unchanged for a run without a sweep)."""
    topology = summary.topology.to_json() if summary.topology is not None else {}
    section = scaling_section(run_dir, topology)
    if section is None:
        return summary
    if "error" not in section:
        section["recommendation_for"] = recommendation_for(summary, section)
    return replace(summary, scaling=section)
