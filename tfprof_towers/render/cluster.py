"""The report's "across tasks" section: each cluster variant's tasks, network traffic and stragglers.

Plain strings and numbers from ``summary.json``'s ``variants[].cluster``
(:mod:`tfprof_towers.analysis.cluster_view`); the template escapes everything.  No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfprof_towers.analysis.cluster_view import short_task
from tfprof_towers.rundir.cluster_doc import ClusterView
from tfprof_towers.rundir.summary import SummaryEntry

LOOPBACK_MODE = ("loopback: every task ran on this machine at 127.0.0.1 (TensorFlow's gRPC servers listened "
                 "on every interface while the run lasted)")
ATTACHED_MODE = "a real cluster: tasks started on their machines with `tfprof-towers worker`"


def _mode(c: ClusterView) -> str:
    if c.loopback:
        return LOOPBACK_MODE
    return ATTACHED_MODE if c.attached else "tasks at the addresses of the cluster file"


def step_grid(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Steps down, tasks across: each cell the task's step (start, end, wait in collectives, late by)."""
    tasks = sorted({str(r["task"]) for r in rows}, key=lambda t: (short_task(t).split(":")[0], t))
    steps = sorted({int(r["step"]) for r in rows})
    cell = {(int(r["step"]), str(r["task"])): r for r in rows}
    return {
        "tasks": [{"task": t, "short": short_task(t)} for t in tasks],
        "rows": [{"step": s, "cells": [cell.get((s, t)) for t in tasks]} for s in steps],
    }


def cluster_views(entries: Sequence[SummaryEntry]) -> list[dict[str, Any]]:
    """One view per cluster variant (ok or failed), in the report's order."""
    out = []
    for e in entries:
        c = e.cluster
        if c is None:
            continue
        attempts = list(c.attempts or ())
        out.append({
            "name": e.name, "status": e.status, "error": e.error, "family": c.family,
            "mode": _mode(c), "failed_task": c.failed_task, "tasks": list(c.tasks or ()),
            "attempts": attempts if len(attempts) > 1 or not e.ok else [],
            "network": list(c.network), "network_note": c.network_note,
            "grid": step_grid(c.steps), "stragglers": list(c.stragglers),
            "params": c.straggler_params, "notes": [str(n) for n in c.notes or ()],
        })
    return out
