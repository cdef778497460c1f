"""Per task and step: when it started and ended, and how long it spent inside collective ops.

For the straggler view of a multi-host run: each task's step window comes from its own
``train`` markers (:class:`~.load.Host`); its collective time is the wall time during
which any of its collective events (TF collective ops on its host threads, collective
kernels on its devices) was running in that window -- mostly waiting for its peers.
Times are seconds after the earliest step start of any task.  A single-host trace is one
task, named ``""``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tfprof_towers.trace.attribute import sweep
from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.load import Host, Trace
from tfprof_towers.trace.steps import StepTable, clip_to_windows

_PS = 1e12


def hosts_of(trace: Trace) -> tuple[Host, ...]:
    if trace.hosts:
        return trace.hosts
    name = trace.hostnames[0] if trace.hostnames else ""
    return (Host(name, "", trace.step_table, trace.window),)


def task_steps(trace: Trace) -> list[dict[str, Any]]:
    """``[{"task", "host", "steps": [{"step", "start_s", "end_s", "collective_s"}]}]`` (module doc)."""
    c = trace.columns
    hosts = hosts_of(trace)
    coll = np.flatnonzero(c.category == CAT["collective"])
    host_of = c.host[coll] if len(hosts) > 1 else np.zeros(coll.size, dtype=np.int16)
    return tasks_doc([(h, collective_ps(trace, coll[host_of == i], h.steps)) for i, h in enumerate(hosts)])


def collective_ps(trace: Trace, rows: np.ndarray, steps: StepTable) -> np.ndarray:
    """Per window of ``steps``: the wall time any of the collective events ``rows`` ran in it (int64 ps)."""
    c = trace.columns
    ws, we = steps.start_ps, steps.end_ps
    inside = np.zeros(ws.size, dtype=np.int64)
    if rows.size and ws.size:
        s = c.start_ps[rows]
        win, cs, ce, _ = clip_to_windows(s, s + c.dur_ps[rows], ws, we)
        inside = sweep(win, np.zeros(win.size, np.int64), cs, ce, ws.size, 1, ws[win])
    return inside


def host_collective_ps(trace: Trace) -> np.ndarray:
    """:func:`collective_ps` of a one-host trace's collectives in its own windows."""
    coll = np.flatnonzero(trace.columns.category == CAT["collective"])
    return collective_ps(trace, coll, trace.step_table)


def tasks_doc(hosts: Sequence[tuple[Host, np.ndarray]]) -> list[dict[str, Any]]:
    """Per host (its windows on the trace's clock, and its :func:`collective_ps`): its task's steps, in
    seconds after the earliest step start of any host."""
    starts = [int(h.steps.start_ps.min()) for h, _ in hosts if len(h.steps)]
    t0 = min(starts) if starts else 0
    out = []
    for h, inside in hosts:
        ws, we = h.steps.start_ps, h.steps.end_ps
        steps = [
            {"step": int(step), "start_s": (int(a) - t0) / _PS, "end_s": (int(b) - t0) / _PS,
             "collective_s": int(busy) / _PS}
            for step, a, b, busy in zip(h.steps.step.tolist(), ws.tolist(), we.tolist(), inside.tolist())
        ]
        out.append({"task": h.task, "host": h.name, "steps": steps})
    return out
