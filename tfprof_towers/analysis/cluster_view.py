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
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.rundir.cluster_doc import ClusterView, NetworkLink
from tfprof_towers.rundir.placement_doc import Placement
from tfprof_towers.rundir.trace_doc import TaskSteps, TraceDoc
from tfprof_towers.vocab.device_names import crosses_tasks, parse_device

if TYPE_CHECKING:
    import pandas as pd

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


def step_table(tasks: Sequence[TaskSteps]) -> pd.DataFrame:
    """One row per (task, step) for the steps that two or more tasks ran (module docstring)."""
    import pandas as pd  # only where two tasks' steps are compared: `analyze FILE` never needs it
    rows = [(str(t.task or t.host or ""), s) for t in tasks for s in t.steps]
    if len({r[0] for r in rows}) < 2:  # no step that two tasks ran (a single-process variant's one task)
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in STEP_COLUMNS})
    df = pd.DataFrame({
        "task": [r[0] for r in rows],
        "step": np.array([int(r[1].step) for r in rows], dtype=np.int64),
        "start_s": np.array([float(r[1].start_s) for r in rows]),
        "end_s": np.array([float(r[1].end_s) for r in rows]),
        "collective_s": np.array([float(r[1].collective_s or 0.0) for r in rows]),
    })
    df = df[df.groupby("step").task.transform("nunique") >= 2].copy()
    df["dur_s"] = df.end_s - df.start_s
    df["arrival_s"] = df.end_s - df.collective_s
    typical = df.groupby("step").arrival_s.transform(lambda a: _median_of_others(a.to_numpy()))
    df["late_s"] = (df.arrival_s - typical).clip(lower=0.0)
    df["straggler"] = (df.late_s == df.groupby("step").late_s.transform("max")) & (df.late_s > 0)
    return df[list(STEP_COLUMNS)].sort_values(["step", "task"]).reset_index(drop=True)


def _median_of_others(arrivals: np.ndarray) -> np.ndarray:
    """Per task of one step: the median arrival of the step's other tasks."""
    n = arrivals.size
    order = np.argsort(arrivals, kind="stable")
    ranked = arrivals[order]
    out = np.empty(n, dtype=np.float64)
    for k in range(n):  # a few dozen tasks per step
        rest = np.delete(ranked, k)
        out[order[k]] = float(np.median(rest))
    return out


def late_enough(table: pd.DataFrame, min_late_s: float, min_late_share: float) -> pd.Series:
    """Rows whose task is late by at least ``max(min_late_s, min_late_share x the step)`` (the step: the
    median of its tasks' durations).  Several tasks can be late in one step (two slow hosts of 32)."""
    step_s = table.groupby("step").dur_s.transform("median")
    return (table.late_s > 0) & (table.late_s >= np.maximum(min_late_s, min_late_share * step_s))


def stragglers(table: pd.DataFrame, min_late_s: float, min_late_share: float,
               min_steps_share: float) -> list[dict[str, Any]]:
    """Tasks late often and by enough (module docstring), most late first; each with its numbers."""
    if table.empty:
        return []
    late = late_enough(table, min_late_s, min_late_share)
    n_steps = int(table.step.nunique())
    out = []
    for task, rows in table[late].groupby("task"):
        if len(rows) < min_steps_share * n_steps:
            continue
        steps = rows.step.tolist()
        others = table[(table.task != task) & table.step.isin(steps)]
        out.append({
            "task": str(task), "late_steps": [int(s) for s in steps], "steps": n_steps,
            "late_s_median": float(rows.late_s.median()), "late_s_max": float(rows.late_s.max()),
            "step_s_median": float(table[table.step.isin(steps)].groupby("step").dur_s.median().median()),
            "others_wait_s_median": float(others.collective_s.median()) if len(others) else 0.0,
            "others": sorted({str(t) for t in others.task}),
        })
    return sorted(out, key=lambda r: (-len(r["late_steps"]), -r["late_s_median"], r["task"]))


def step_rows(table: pd.DataFrame, min_late_s: float, min_late_share: float) -> list[dict[str, Any]]:
    """The per-step table as plain rows (summary.json, the report); ``late`` marks a straggler late by
    at least the rule's threshold in that step."""
    if table.empty:
        return []
    late = late_enough(table, min_late_s, min_late_share).tolist()
    return [{"task": str(r.task), "step": int(r.step), "start_s": float(r.start_s), "end_s": float(r.end_s),
             "dur_s": float(r.dur_s), "collective_s": float(r.collective_s), "late_s": float(r.late_s),
             "straggler": bool(r.straggler), "late": bool(flag)}
            for r, flag in zip(table.itertuples(index=False), late)]


def network_links(placement: Placement | None, breakdown: TraceDoc | None,
                  loopback: bool) -> list[NetworkLink]:
    """Bytes per step between tasks: each (src, dst) of the placement's transfers that crosses tasks
    (``via``: ring all-reduce or send/recv; bytes from the graph), with the trace's event count per
    step where it has one (``network`` links of the analysis)."""
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
