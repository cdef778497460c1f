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
    # plain Python lists, column by column (iterating Arrow-backed strings row by row is slow)
    columns = (
        _strings(ev["name"]), _strings(ev["category"]),
        ((ev["start_ps"].to_numpy() - t0) / 1e6).tolist(), (ev["dur_ps"].to_numpy() / 1e6).tolist(),
        device.map(pid_of).to_numpy().astype(np.int64).tolist(), tid.to_numpy().astype(np.int64).tolist(),
        _strings(ev["tf_op"]), _strings(ev["op_type"]),
        ev["bytes"].to_numpy().astype(np.int64).tolist(), ev["step"].to_numpy().astype(np.int64).tolist(),
    )
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
    for name, cat, ts, dur, pid, tid_, tf_op, op_type, nbytes, step in zip(*columns):
        args: dict[str, Any] = {"category": cat, "step": step}
        if tf_op:
            args["tf_op"] = tf_op
        if op_type:
            args["op_type"] = op_type
        if nbytes:
            args["bytes"] = nbytes
        events.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid_,
                       "ts": ts, "dur": dur, "args": args})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"source": str(getattr(trace, "source", "")), "exported_by": "tfprof-towers",
                      "variant": label},
    }


def _strings(column: pd.Series) -> list[str]:
    return column.astype(str).to_numpy(dtype=object).tolist()


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def write_chrome_trace(trace: Any, path: Path, topology: Mapping[str, Any] | None = None,
                       label: str = "") -> Path:
    """Write the export to ``path`` (atomically) and return it."""
    doc = chrome_trace(trace, topology, label)
    atomic_write_text(Path(path), json.dumps(doc, separators=(",", ":")))
    return Path(path)
