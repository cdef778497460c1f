"""Export a trace as Chrome trace-event JSON, which Perfetto and chrome://tracing open.

One process per device (host threads, host device, accelerators), one thread per
trace line (host thread or GPU stream), one complete (``"ph": "X"``) event per
trace event, with the TF op, op type, category, bytes and step in ``args``; step
windows go on a ``Steps`` process of their own.  Times are microseconds from the
trace's first event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tfprof_towers.render.timeline import device_rank
from tfprof_towers.rundir.paths import atomic_write_text

STEPS_PID = 0


def chrome_trace(trace: Any, topology: Mapping[str, Any] | None = None, label: str = "") -> dict[str, Any]:
    """The trace-event document of a :class:`tfprof_towers.trace.load.Trace`."""
    ev = trace.events
    starts = [ev["start_ps"].min()] if len(ev) else []
    if len(trace.steps):
        starts.append(trace.steps["start_ps"].min())
    t0 = int(min(starts)) if starts else 0
    devices = device_rank(ev["device"].astype(str).unique().tolist(), topology)
    pid_of = {d: i + 1 for i, d in enumerate(devices)}
    device = ev["device"].astype(str)
    line = ev["line"].astype(str)
    keys = pd.DataFrame({"device": device, "line": line})
    threads = keys.drop_duplicates().sort_values(["device", "line"], kind="stable")
    threads["tid"] = np.arange(1, len(threads) + 1)
    tid = keys.merge(threads, on=["device", "line"], how="left")["tid"]
    frame = pd.DataFrame({
        "name": ev["name"].astype(str).to_numpy(),
        "cat": ev["category"].astype(str).to_numpy(),
        "ts": (ev["start_ps"].to_numpy() - t0) / 1e6,
        "dur": ev["dur_ps"].to_numpy() / 1e6,
        "pid": device.map(pid_of).to_numpy(),
        "tid": tid.to_numpy(),
        "tf_op": ev["tf_op"].astype(str).to_numpy(),
        "op_type": ev["op_type"].astype(str).to_numpy(),
        "bytes": ev["bytes"].to_numpy(),
        "step": ev["step"].to_numpy(),
    })
    events: list[dict[str, Any]] = [
        _meta("process_name", STEPS_PID, 0, {"name": "Steps"}),
        _meta("process_sort_index", STEPS_PID, 0, {"sort_index": 0}),
    ]
    for d, pid in pid_of.items():
        events.append(_meta("process_name", pid, 0, {"name": d}))
        events.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
    for d, ln, t in threads.itertuples(index=False):
        events.append(_meta("thread_name", pid_of[d], int(t), {"name": ln}))
    for s in trace.steps.itertuples(index=False):
        events.append({"name": f"step {s.step}", "cat": "step", "ph": "X", "pid": STEPS_PID, "tid": 1,
                       "ts": (s.start_ps - t0) / 1e6, "dur": (s.end_ps - s.start_ps) / 1e6,
                       "args": {"step": int(s.step)}})
    for r in frame.itertuples(index=False):
        args: dict[str, Any] = {"category": r.cat, "step": int(r.step)}
        if r.tf_op:
            args["tf_op"] = r.tf_op
        if r.op_type:
            args["op_type"] = r.op_type
        if r.bytes:
            args["bytes"] = int(r.bytes)
        events.append({"name": r.name, "cat": r.cat, "ph": "X", "pid": int(r.pid), "tid": int(r.tid),
                       "ts": float(r.ts), "dur": float(r.dur), "args": args})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"source": str(getattr(trace, "source", "")), "exported_by": "tfprof-towers",
                      "variant": label},
    }


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def write_chrome_trace(trace: Any, path: Path, topology: Mapping[str, Any] | None = None,
                       label: str = "") -> Path:
    """Write the export to ``path`` (atomically) and return it."""
    doc = chrome_trace(trace, topology, label)
    atomic_write_text(Path(path), json.dumps(doc, separators=(",", ":")))
    return Path(path)
