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

from tfprof_towers.vocab.categories import EVENT_CATEGORIES, TIME_CATEGORIES
from tfprof_towers.vocab.device_names import HOST_THREADS

MAX_EVENTS = 2500
#: Categories drawn on the timeline: those that count as time.
DRAWN = TIME_CATEGORIES
_DRAWN_CODES = np.array([EVENT_CATEGORIES.index(k) for k in DRAWN], dtype=np.int64)


def median_step(steps: Any) -> int | None:
    """The step number whose window length is the (lower) median; ties go to the earlier step
    (``steps``: a :class:`~tfprof_towers.trace.steps.StepTable`, or its ``frame()``)."""
    if not len(steps):
        return None
    start = np.asarray(steps.start_ps, dtype=np.int64)
    length = np.asarray(steps.end_ps, dtype=np.int64) - start
    order = np.lexsort((start, length))
    return int(np.asarray(steps.step)[order[(len(order) - 1) // 2]])


def groups(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows grouped by their values in ``columns`` (equal-length integer arrays): each group's first row
    (in group order) and each row's group."""
    n = int(columns[0].size) if columns else 0
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(columns[::-1])
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for col in columns:
        s = col[order]
        new[1:] |= s[1:] != s[:-1]
    group = np.empty(n, dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    return order[new], group


def device_rank(devices: list[str], topology: Mapping[str, Any] | None) -> list[str]:
    """Host threads first, then the host device, accelerators in order, then anything else."""
    topo = topology or {}
    first = [HOST_THREADS, topo.get("host"), *(topo.get("accelerators") or ())]
    rank = {d: i for i, d in enumerate(first) if d}
    return sorted(devices, key=lambda d: (rank.get(d, len(first)), d))


def step_timeline(
    trace: Any, variant: str, topology: Mapping[str, Any] | None = None, max_events: int = MAX_EVENTS
) -> dict[str, Any] | None:
    """The chart document for one step of ``trace`` (a :class:`tfprof_towers.trace.load.Trace`), from its
    columns."""
    table = trace.step_table
    step = median_step(table)
    if step is None:
        return None
    k = int(np.flatnonzero(np.asarray(table.step) == step)[0])  # the step's first window
    w0, w1 = int(table.start_ps[k]), int(table.end_ps[k])
    c = trace.columns
    items = c.strings.items
    idx = np.flatnonzero((c.step.astype(np.int64) == step) & np.isin(c.category, _DRAWN_CODES)
                         & (c.dur_ps >= 0))
    total = int(idx.size)
    if total > max_events:  # the longest events, the earlier first among equals
        idx = idx[np.argsort(-c.dur_ps[idx], kind="stable")[:max_events]]
    # by start, then duration, then the order of the trace
    idx = idx[np.lexsort((idx, c.dur_ps[idx], c.start_ps[idx]))]
    first, pair_of = groups(c.device[idx], c.line_name[c.line[idx]])
    pairs = [(items[c.device[i]], items[c.line_name[c.line[i]]]) for i in idx[first].tolist()]
    devices = device_rank(sorted({d for d, _ in pairs}), topology)
    row_of = {d: i for i, d in enumerate(devices)}
    lane_of: dict[tuple[str, str], int] = {}
    n_lanes: dict[str, int] = {}
    for d, ln in sorted(set(pairs)):  # each device's lines in order: its lanes
        lane_of[(d, ln)] = n_lanes.get(d, 0)
        n_lanes[d] = lane_of[(d, ln)] + 1
    row = np.array([row_of[d] for d, _ in pairs], dtype=np.int64)[pair_of]
    lane = np.array([lane_of[p] for p in pairs], dtype=np.int64)[pair_of]
    start_ps = c.start_ps[idx]
    start = start_ps - w0
    dur = np.minimum(c.dur_ps[idx], np.maximum(w1 - start_ps, 0))
    labels = _labels(c.name[idx], c.tf_op[idx], items)
    category = [EVENT_CATEGORIES[k] for k in c.category[idx].tolist()]
    events = [list(r) for r in zip(row.tolist(), lane.tolist(), np.round(start / 1e6, 4).tolist(),
                                   np.round(dur / 1e6, 4).tolist(), labels, category,
                                   c.bytes[idx].astype(np.int64).tolist())]
    return {
        "variant": variant,
        "step": step,
        "duration_us": (w1 - w0) / 1e6,
        "rows": [{"label": d, "lanes": int(n_lanes.get(d, 1))} for d in devices],
        "events": events,
        "total_events": total,
        "truncated": total > len(events),
    }


def _labels(names: np.ndarray, tf_ops: np.ndarray, items: list[str]) -> list[str]:
    """Each event's label: its name, with `` — <tf_op>`` where the TF op is not already its name's part
    before ``:`` (one label per distinct name and op)."""
    first, group = groups(names, tf_ops)
    out = []
    for i in first.tolist():
        name, op = items[names[i]], items[tf_ops[i]]
        out.append(name if op == "" or name.split(":", 1)[0] == op else name + " — " + op)
    return np.array(out, dtype=object)[group].tolist()
