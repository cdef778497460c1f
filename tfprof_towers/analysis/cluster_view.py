"""Across the tasks of a cluster variant: who is late in which step, and what crosses between tasks.

Reads plain documents (no TensorFlow, no trace decoding):

* the trace analysis's per-task step windows (``breakdown.tasks``: for each task, per
  step ``start_s``, ``end_s`` and ``collective_s``, the wall time inside collective ops --
  mostly waiting for the last peer), all on one clock;
* the variant's record (``cluster``: its tasks and how each ended; ``placement``: the
  transfers between tasks, from the step's graph) and its audit's links.

**Stragglers.**  In a synchronous step every worker leaves the all-reduce together, so a
task's *arrival* is its step's end less its time in collectives (``end_s - collective_s``);
a task is *late* in a step by its arrival less the earliest arrival of that step, and
the step's straggler is the latest.  The others' ``collective_s`` is then mostly the
wait it costs them.  :func:`stragglers` names a task late in at least ``min_steps_share``
of the steps by at least ``max(min_late_s, min_late_share x the step)``.

**Network.**  Bytes per step between tasks: the ring all-reduce's (each worker sends
``2(n-1)/n`` of the gradient bytes to the next; from the graph) and the send/recv edges
between ps and workers (bytes from the graph, counts from the trace).  On loopback
(every task at 127.0.0.1) they are labelled as such: nothing crossed a network card.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.rundir.trace_doc import TaskSteps, TraceDoc
from tfprof_towers.vocab.device_names import crosses_tasks, parse_device

if TYPE_CHECKING:
    import pandas as pd

    from tfprof_towers.rundir.cluster_doc import ClusterView, NetworkLink
    from tfprof_towers.rundir.placement_doc import Placement

#: The straggler rule's defaults (advise.RULES names them; the report's per-step view uses them).
STRAGGLER_PARAMS: dict[str, float] = {"min_late_s": 0.001, "min_late_share": 0.10, "min_steps_share": 0.6}
LOOPBACK_NOTE = ("loopback: every task ran on this machine at 127.0.0.1, so these bytes crossed the loopback "
                 "interface, not a network card; they come from the step's graph, and no time is a network "
                 "measurement")
STEP_COLUMNS = ("task", "step", "start_s", "end_s", "dur_s", "collective_s", "arrival_s", "late_s",
                "straggler")


def short_task(task: str) -> str:
    """``/job:worker/task:1`` (or a device of it) -> ``worker:1``; anything else unchanged."""
    p = parse_device(task)
    if p is None or p.job is None or p.task is None:
        return task
    return f"{p.job}:{p.task}"


def as_task_steps(tasks: Sequence[Mapping[str, Any]]) -> tuple[TaskSteps, ...]:
    """Per-task steps as :func:`tfprof_towers.trace.tasks.task_steps` gives them (a trace's facts), typed."""
    return tuple(TaskSteps.from_json(t) for t in tasks)


def stepping_tasks(tasks: Sequence[TaskSteps], stepping: Sequence[str] | None) -> list[TaskSteps]:
    """The trace's tasks that ran the steps themselves (``stepping``: ``worker:0``...; None: every task
    with steps).  A parameter_server's ps and workers have no step markers: only its chief's count."""
    wanted = None if stepping is None else {short_task(t) for t in stepping}
    return [t for t in tasks if t.steps and (wanted is None or short_task(str(t.task)) in wanted)]


@dataclass(frozen=True, eq=False)
class StepsAcross:
    """One row per (task, step) for the steps that two or more tasks ran, as numpy columns sorted by
    step, then task (module docstring): :data:`STEP_COLUMNS`."""

    task: np.ndarray  # object (str) per row
    step: np.ndarray  # int64
    start_s: np.ndarray  # float64, as every column below
    end_s: np.ndarray
    dur_s: np.ndarray
    collective_s: np.ndarray
    arrival_s: np.ndarray
    late_s: np.ndarray
    straggler: np.ndarray  # bool

    def __len__(self) -> int:
        return int(self.step.size)

    @property
    def empty(self) -> bool:
        return self.step.size == 0

    def step_groups(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's step as an index into the table's distinct steps (ascending), and where each
        step's rows start (the rows are sorted by step)."""
        if self.empty:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, self.step[1:] != self.step[:-1]])
        return np.cumsum(np.r_[False, self.step[1:] != self.step[:-1]]), starts

    def frame(self) -> pd.DataFrame:
        """The table as a pandas DataFrame (its :data:`STEP_COLUMNS`)."""
        import pandas as pd  # only where a frame is asked for

        return pd.DataFrame({c: getattr(self, c) for c in STEP_COLUMNS})


def _no_steps() -> StepsAcross:
    f = np.zeros(0, dtype=np.float64)
    return StepsAcross(np.zeros(0, dtype=object), np.zeros(0, dtype=np.int64), f, f, f, f, f, f,
                       np.zeros(0, dtype=bool))


def step_table(tasks: Sequence[TaskSteps]) -> StepsAcross:
    """One row per (task, step) for the steps that two or more tasks ran (module docstring)."""
    rows = [(str(t.task or t.host or ""), s) for t in tasks for s in t.steps]
    if len({r[0] for r in rows}) < 2:  # no step that two tasks ran (a single-process variant's one task)
        return _no_steps()
    task = np.empty(len(rows), dtype=object)
    task[:] = [r[0] for r in rows]
    step = np.array([int(r[1].step) for r in rows], dtype=np.int64)
    start = np.array([float(r[1].start_s) for r in rows], dtype=np.float64)
    end = np.array([float(r[1].end_s) for r in rows], dtype=np.float64)
    coll = np.array([float(r[1].collective_s or 0.0) for r in rows], dtype=np.float64)
    names, task_code = np.unique(task, return_inverse=True)
    steps, step_code = np.unique(step, return_inverse=True)
    pairs = np.unique(step_code * len(names) + task_code)  # the distinct (step, task)
    keep = np.bincount(pairs // len(names), minlength=len(steps))[step_code] >= 2
    order = np.flatnonzero(keep)[np.lexsort((task_code[keep], step_code[keep]))]  # stable: step, then task
    task, step, start, end, coll = task[order], step[order], start[order], end[order], coll[order]
    arrival = end - coll
    t = StepsAcross(task, step, start, end, end - start, coll, arrival, np.zeros(0), np.zeros(0, dtype=bool))
    group, starts = t.step_groups()
    late = arrival - _median_of_others(arrival, group, starts)
    late = np.where((late >= 0.0) | np.isnan(late), late, 0.0)  # as pandas' clip(lower=0.0)
    worst = np.maximum.reduceat(late, starts)[group] if late.size else late
    return replace(t, late_s=late, straggler=(late == worst) & (late > 0))


def _group_medians(values: np.ndarray, group: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per group (rows grouped and ``starts`` where each group starts): the median of its ``values``
    (the mean of the two middle ones of an even count, as numpy's and pandas' median)."""
    if values.size == 0:
        return values.copy()
    ranked = values[np.lexsort((values, group))]
    n = np.diff(np.r_[starts, values.size])
    lo, hi = ranked[starts + (n - 1) // 2], ranked[starts + n // 2]
    return np.where(n % 2 == 1, lo, (lo + hi) / 2)


def _median_of_others(values: np.ndarray, group: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per row: the median of the values of its group's other rows (the median arrival of the step's
    other tasks), as ``np.median`` of the group without that row."""
    out = np.empty(values.size, dtype=np.float64)
    if values.size == 0:
        return out
    order = np.lexsort((values, group))  # within each group, ascending (ties: in row order)
    ranked = values[order]
    n = np.diff(np.r_[starts, values.size])[group[order]]  # the row's group's size
    first = starts[group[order]]
    k = np.arange(values.size) - first  # the row's rank in its group
    m = n - 1  # the others

    def other(j: np.ndarray) -> np.ndarray:  # the j-th smallest of the others (the row itself left out)
        return ranked[first + j + (j >= k)]

    lo, hi = other(np.maximum((m - 1) // 2, 0)), other(np.maximum(m // 2, 0))
    mid = np.where(m % 2 == 1, lo, (lo + hi) / 2)
    out[order] = np.where(m > 0, mid, np.nan)  # a step of one row: no other (never in a step_table)
    return out


def late_enough(table: StepsAcross, min_late_s: float, min_late_share: float) -> np.ndarray:
    """Rows whose task is late by at least ``max(min_late_s, min_late_share x the step)`` (the step: the
    median of its tasks' durations).  Several tasks can be late in one step (two slow hosts of 32)."""
    group, starts = table.step_groups()
    step_s = _group_medians(table.dur_s, group, starts)[group]
    return (table.late_s > 0) & (table.late_s >= np.maximum(min_late_s, min_late_share * step_s))


def stragglers(table: StepsAcross, min_late_s: float, min_late_share: float,
               min_steps_share: float) -> list[dict[str, Any]]:
    """Tasks late often and by enough (module docstring), most late first; each with its numbers."""
    if table.empty:
        return []
    late = late_enough(table, min_late_s, min_late_share)
    group, starts = table.step_groups()
    step_s = _group_medians(table.dur_s, group, starts)  # per distinct step
    n_steps = int(starts.size)
    out = []
    for task in np.unique(table.task[late]).tolist():
        mine = late & (table.task == task)
        if int(mine.sum()) < min_steps_share * n_steps:
            continue
        steps, late_s = table.step[mine], table.late_s[mine]
        in_steps = np.isin(table.step, steps)
        others = in_steps & (table.task != task)
        out.append({
            "task": str(task), "late_steps": [int(s) for s in steps.tolist()], "steps": n_steps,
            "late_s_median": float(np.median(late_s)), "late_s_max": float(late_s.max()),
            "step_s_median": float(np.median(step_s[np.unique(group[in_steps])])),
            "others_wait_s_median": float(np.median(table.collective_s[others])) if others.any() else 0.0,
            "others": sorted({str(t) for t in table.task[others].tolist()}),
        })
    return sorted(out, key=lambda r: (-len(r["late_steps"]), -r["late_s_median"], r["task"]))


def step_rows(table: StepsAcross, min_late_s: float, min_late_share: float) -> list[dict[str, Any]]:
    """The per-step table as plain rows (summary.json, the report); ``late`` marks a straggler late by
    at least the rule's threshold in that step."""
    if table.empty:
        return []
    late = late_enough(table, min_late_s, min_late_share).tolist()
    cols = zip(table.task.tolist(), table.step.tolist(), table.start_s.tolist(), table.end_s.tolist(),
               table.dur_s.tolist(), table.collective_s.tolist(), table.late_s.tolist(),
               table.straggler.tolist(), late)
    return [{"task": str(task), "step": int(step), "start_s": float(start), "end_s": float(end),
             "dur_s": float(dur), "collective_s": float(coll), "late_s": float(late_s),
             "straggler": bool(strag), "late": bool(flag)}
            for task, step, start, end, dur, coll, late_s, strag, flag in cols]


def network_links(placement: Placement | None, breakdown: TraceDoc | None,
                  loopback: bool) -> list[NetworkLink]:
    """Bytes per step between tasks: each (src, dst) of the placement's transfers that crosses tasks
    (``via``: ring all-reduce or send/recv; bytes from the graph), with the trace's event count per
    step where it has one (``network`` links of the analysis)."""
    from tfprof_towers.rundir.cluster_doc import NetworkLink  # a run's cluster variant: not `analyze`'s

    counted = {(ln.src, ln.dst): ln for ln in (() if breakdown is None else breakdown.links)
               if ln.kind == "network"}
    out = []
    for t in () if placement is None else placement.transfers:
        if not crosses_tasks(t.src, t.dst):
            continue
        traced = counted.get((t.src, t.dst))
        out.append(NetworkLink(
            src=t.src, dst=t.dst, src_task=short_task(t.src), dst_task=short_task(t.dst),
            via="ring all-reduce" if t.kind == "collective" else "send/recv",
            bytes_per_step=int(t.bytes_per_step or 0), tensors=int(t.tensors or 0),
            traced_per_step=None if traced is None else traced.count,
            traced_bytes_per_step=None if traced is None else traced.bytes,
            loopback=bool(loopback),
        ))
    return sorted(out, key=lambda r: (-r.bytes_per_step, r.src, r.dst))


def cluster_view(record_cluster: Mapping[str, Any] | None, placement: Placement | None,
                 breakdown: TraceDoc | None,
                 params: Mapping[str, float] = STRAGGLER_PARAMS) -> ClusterView | None:
    """What summary.json and the report show of a cluster variant (None for other families)."""
    from tfprof_towers.rundir.cluster_doc import ClusterView  # a run's cluster variant: not `analyze`'s

    if not record_cluster:
        return None
    c = dict(record_cluster)  # the capture's cluster document: its parts are shown as written
    loopback = bool(c.get("loopback"))
    stepping = c.get("stepping_tasks")
    table = step_table(stepping_tasks(() if breakdown is None else breakdown.tasks, stepping))
    return ClusterView(
        **{k: c.get(k) for k in ("family", "loopback", "attached", "cluster", "failed_task", "tasks",
                                 "attempts", "capture", "host_tasks", "captured_tasks", "gpus", "notes")},
        stepping_tasks=None if stepping is None else tuple(stepping),
        network=tuple(network_links(placement, breakdown, loopback)),
        network_note=LOOPBACK_NOTE if loopback else (
            "bytes from the step's graph; the trace counts the transfers but not their time on the wire"),
        steps=tuple(step_rows(table, float(params["min_late_s"]), float(params["min_late_share"]))),
        stragglers=tuple(stragglers(table, **{k: float(params[k]) for k in STRAGGLER_PARAMS})),
        straggler_params=dict(params),
    )
