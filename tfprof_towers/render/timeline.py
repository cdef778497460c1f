"""One profiled step of a trace, shaped for the report's timeline chart.

``step_timeline(trace, variant, topology)`` picks the profiled step whose window
is the median length, keeps the events that count as time, and lays them out
with devices as rows and one lane per thread or stream.  Events go to the page
as compact rows ``[row, lane, start_us, dur_us, label, category, bytes]``; a step
with very many events keeps the longest ones and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tfprof_towers.vocab.categories import TIME_CATEGORIES
from tfprof_towers.vocab.device_names import HOST_THREADS

MAX_EVENTS = 2500
#: Categories drawn on the timeline: those that count as time.
DRAWN = TIME_CATEGORIES


def median_step(steps: pd.DataFrame) -> int | None:
    """The step number whose window length is the (lower) median; ties go to the earlier step."""
    if not len(steps):
        return None
    length = (steps["end_ps"] - steps["start_ps"]).to_numpy()
    order = np.lexsort((steps["start_ps"].to_numpy(), length))
    return int(steps["step"].to_numpy()[order[(len(order) - 1) // 2]])


def device_rank(devices: list[str], topology: Mapping[str, Any] | None) -> list[str]:
    """Host threads first, then the host device, accelerators in order, then anything else."""
    topo = topology or {}
    first = [HOST_THREADS, topo.get("host"), *(topo.get("accelerators") or ())]
    rank = {d: i for i, d in enumerate(first) if d}
    return sorted(devices, key=lambda d: (rank.get(d, len(first)), d))


def step_timeline(
    trace: Any, variant: str, topology: Mapping[str, Any] | None = None, max_events: int = MAX_EVENTS
) -> dict[str, Any] | None:
    """The chart document for one step of ``trace`` (a :class:`tfprof_towers.trace.load.Trace`)."""
    step = median_step(trace.steps)
    if step is None:
        return None
    window = trace.steps[trace.steps["step"] == step].iloc[0]
    w0, w1 = int(window["start_ps"]), int(window["end_ps"])
    ev = trace.events
    sel = ev[(ev["step"] == step) & ev["category"].isin(DRAWN) & (ev["dur_ps"] >= 0)]
    total = len(sel)
    if total > max_events:
        sel = sel.nlargest(max_events, "dur_ps", keep="first")
    sel = sel.sort_values(["start_ps", "dur_ps"], kind="stable")
    devices = device_rank(sel["device"].astype(str).unique().tolist(), topology)
    row_of = {d: i for i, d in enumerate(devices)}
    device = sel["device"].astype(str)
    line = sel["line"].astype(str)
    keys = pd.DataFrame({"device": device, "line": line})
    lanes = keys.drop_duplicates().sort_values(["device", "line"], kind="stable")
    lanes["lane"] = lanes.groupby("device").cumcount()
    lane = keys.merge(lanes, on=["device", "line"], how="left")["lane"]
    start = sel["start_ps"].to_numpy() - w0
    dur = np.minimum(sel["dur_ps"].to_numpy(), np.maximum(w1 - sel["start_ps"].to_numpy(), 0))
    name = sel["name"].astype(str).reset_index(drop=True)
    tf_op = sel["tf_op"].astype(str).reset_index(drop=True)
    redundant = (tf_op == "") | (name.str.split(":", n=1).str[0] == tf_op)
    label = name.where(redundant, name + " — " + tf_op)
    rows = pd.DataFrame({
        "row": device.map(row_of).to_numpy(),
        "lane": lane.to_numpy(),
        "start_us": np.round(start / 1e6, 4),
        "dur_us": np.round(dur / 1e6, 4),
        "label": label.to_numpy(),
        "category": sel["category"].astype(str).to_numpy(),
        "bytes": sel["bytes"].to_numpy(),
    })
    n_lanes = lanes.groupby("device")["lane"].max() + 1
    return {
        "variant": variant,
        "step": step,
        "duration_us": (w1 - w0) / 1e6,
        "rows": [{"label": d, "lanes": int(n_lanes.get(d, 1))} for d in devices],
        "events": rows.values.tolist(),
        "total_events": total,
        "truncated": total > len(rows),
    }
