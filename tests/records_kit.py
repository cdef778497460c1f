"""Small typed run records built in code, for the summary, pipeline and record tests (no TensorFlow).

``record(...)`` makes a :class:`VariantRecord` with step times and an optional
placement; ``run_doc(...)`` a :class:`RunDoc` asking for some variants;
``write_run(root, run, records)`` writes them as a run directory (no traces).
For a run directory with traces, see ``report_kit.make_run_dir``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.paths import RunDir, write_json
from tfprof_towers.rundir.records import RunConfig, RunDoc, StepStats, Timings, Topology, VariantRecord
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import Preset, VariantSpec

HOST, ACC0, ACC1 = "/device:CPU:0", "/device:CPU:1", "/device:CPU:2"
LOGICAL = Topology("logical-cpu", HOST, (ACC0, ACC1))
GPU = Topology("gpu", HOST, ("/device:GPU:0", "/device:GPU:1"))
TINY = Preset("tiny", batch=4, dim=16)


def stats(median: float, p10: float | None = None, p90: float | None = None, n: int = 5) -> StepStats:
    lo = median if p10 is None else p10
    hi = median if p90 is None else p90
    return StepStats(median=median, p10=lo, p90=hi, min=lo, max=hi, n=n)


def placement(
    devices: Mapping[str, tuple[int, int]], transfers: Iterable[tuple[str, str, int, int]] = ()
) -> dict[str, Any]:
    """``{device: (ops, flops_per_step)}`` and ``(src, dst, bytes_per_step, tensors)`` links."""
    return {
        "nodes": [],
        "edges": [],
        "devices": {d: {"ops": ops, "flops_per_step": flops} for d, (ops, flops) in devices.items()},
        "transfers": [{"src": s, "dst": d, "bytes_per_step": b, "tensors": t} for s, d, b, t in transfers],
    }


def record(
    name: str,
    median: float | None = 0.01,
    p10: float | None = None,
    p90: float | None = None,
    status: str = "ok",
    source: str = "builtin",
    topology: Topology | None = LOGICAL,
    place: Mapping[str, Any] | None = None,
    error: str | None = None,
    xplane_files: tuple[str, ...] = (),
) -> VariantRecord:
    """A variant record as the runner leaves it (a failed one without timings)."""
    if status != "ok":
        return VariantRecord.failed(name, error or "boom", source=source, stderr_tail="boom", xplane_files=())
    if median is None:  # finished, but without timed steps
        timings = Timings()
    else:
        timings = Timings(step_time_s=stats(median, p10, p90), profiled_step_time_s=stats(median * 1.1, n=3))
    return VariantRecord(
        name=name,
        status="ok",
        source=source,
        family="tf1-graph",
        topology=topology,
        timings=timings,
        placement=place if place is not None else placement({ACC0: (3, 1000)}),
        versions={"python": "3.11.0", "tensorflow": "2.99.0"},
        stderr_tail="",
        xplane_files=xplane_files,
        wall_s=1.0,
    )


def run_doc(
    names: Iterable[str],
    topology: Topology | None = LOGICAL,
    preset: Preset | None = TINY,
    accelerators: int | None = None,
    interrupted: bool = False,
) -> RunDoc:
    specs = tuple(
        VariantSpec.builtin(n) if registry.builtin(n) is not None else VariantSpec(n, f"/x/{n}.py")
        for n in names
    )
    config = RunConfig(
        preset=preset, variants=specs, accelerators=accelerators, warmup=1, steps=5, profile_steps=3
    )
    return RunDoc(
        started="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:01:00+00:00",
        interrupted=interrupted,
        config=config,
        topology=topology,
        versions={"python": "3.11.0", "tensorflow": "2.99.0"},
    )


def write_run(root: Path, run: RunDoc, records: Iterable[VariantRecord]) -> RunDir:
    """``run.json`` and each ``variants/<name>/record.json`` under ``root``."""
    rd = RunDir(root)
    root.mkdir(parents=True, exist_ok=True)
    write_json(rd.run_json, run.to_json())
    for r in records:
        write_json(rd.record_json(r.name), r.to_json())
    return rd


def edit_record(run: Path, name: str, change: Callable[[dict[str, Any]], object]) -> None:
    """Rewrite ``run``'s ``variants/NAME/record.json`` through ``change``, which edits its JSON in place."""
    path = run / "variants" / name / "record.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
