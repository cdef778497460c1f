"""Holds what one attempt of a cluster variant runs and how it ended, and builds the attempt's record.

:class:`Attempt` and :class:`Outcome` are shared by the launch, the watch and the diagnosis;
the rest reads what the tasks left in the attempt's folder (their ``record.json`` and
stderr) and turns it, with how each process ended, into ``attempt.json``'s document.

Never imports TensorFlow.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.coord import CAPTURE, Coord, least_progress
from tfprof_towers.capture.cluster.docs import TaskRecord, TaskSpec, task_dir
from tfprof_towers.capture.cluster.spec import Cluster, TaskId
from tfprof_towers.procs import supervise
from tfprof_towers.rundir.paths import read_json
from tfprof_towers.vocab import textcap


@dataclass
class Attempt:
    """What one attempt runs (the driver fills ``procs`` as it starts them)."""

    number: int
    folder: Path
    cluster: Cluster
    spec: TaskSpec
    deadline: float  # monotonic time by which everything must have ended
    attached: bool = False
    gpus: dict[str, str] = field(default_factory=dict)  # task -> CUDA_VISIBLE_DEVICES (loopback)
    procs: dict[str, supervise.Supervised] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    @property
    def coord(self) -> Coord:
        return Coord(self.folder)

    @property
    def stepping(self) -> list[TaskId]:
        return [TaskId.parse(t) for t in self.spec.ready_tasks]

    @property
    def tasks(self) -> list[TaskId]:
        return self.cluster.tasks()


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended: ``error`` None on success; ``failed_task`` the one to blame (or None)."""

    error: str | None
    failed_task: str | None = None
    retry: str | None = None  # why another attempt may succeed (None: it would fail the same way)


def exit_reason(e: supervise.Ended | None) -> str:
    if e is None:
        return "still running"
    if e.lost:
        return e.lost
    if e.timed_out:
        return "past its deadline (killed)"
    rc = e.returncode
    if rc is None:
        return "ended with no exit code"
    if rc < 0:
        known = -rc in signal.valid_signals()
        return f"killed by {signal.Signals(-rc).name}" if known else f"killed by signal {-rc}"
    return f"exit code {rc}"


def task_record_doc(a: Attempt, name: str) -> dict[str, Any] | None:
    if name == CAPTURE:
        return None
    path = task_dir(a.folder, TaskId.parse(name)) / "record.json"
    try:
        doc = read_json(path) if path.is_file() else None
    except Exception:
        return None
    return doc if isinstance(doc, dict) else None


def stderr_tail(a: Attempt, name: str) -> str:
    """The end of a process's output: ours, or a hand-started task's (from the attempt's task folder)."""
    p = a.procs.get(name)
    if p is not None:
        return textcap.read_tail(p.command.stderr_path)
    if name == CAPTURE:
        return ""
    path = task_dir(a.folder, TaskId.parse(name)) / "stderr.txt"
    return textcap.read_tail(path) if path.is_file() else ""


def record_problem(a: Attempt, name: str) -> str:
    """Why task ``name`` has no usable record: it wrote none, or what is wrong with the one it wrote."""
    doc = task_record_doc(a, name)
    if doc is None:
        return f"{name} wrote no record"
    try:
        TaskRecord.from_json(doc, "record.json")
    except Exception as exc:
        return f"{name}'s record.json is invalid: {textcap.one_line(str(exc), 300)}"
    return f"{name}'s record.json was written after the attempt ended"


def task_records(a: Attempt) -> dict[str, TaskRecord]:
    out = {}
    for t in a.tasks:
        doc = task_record_doc(a, str(t))
        if doc is None:
            continue
        try:
            out[str(t)] = TaskRecord.from_json(doc, str(task_dir(a.folder, t) / "record.json"))
        except Exception:  # a half-written or foreign record: the task is reported without it
            continue
    return out


def task_rows(a: Attempt, records: Mapping[str, TaskRecord], outcome: Outcome) -> list[dict[str, Any]]:
    """One row per task for the variant's record: address, pid, how it ended, its stage and error."""
    coord = a.coord
    rows = []
    for t in a.tasks:
        name, p, rec = str(t), a.procs.get(str(t)), records.get(str(t))
        e = p.poll() if p is not None else None
        marker = coord.read(t, "failed") or {}
        status = "ok" if (rec is not None and rec.ok and (e is None or e.ok)) else "failed"
        if outcome.error and status == "ok" and not (rec and rec.ok):
            status = "failed"
        row: dict[str, Any] = {
            "task": name, "address": a.cluster.address(t), "status": status,
            "pid": p.pid if p is not None else (rec.pid if rec else None),
            "exit": exit_reason(e) if p is not None else "remote: " + (
                str(marker.get("exit") or "left") if coord.has(t, "left") else "not seen leaving"),
            "returncode": e.returncode if e is not None else None,
            "stage": (rec.stage if rec else None) or marker.get("stage"),
            "error": (rec.error if rec else None) or marker.get("error"),
            "progress": least_progress(coord, [t])[1],
            "stderr_tail": textcap.tail_text(stderr_tail(a, name)) if status != "ok" else "",
        }
        if rec is not None:
            row["phases_s"] = dict(rec.phases_s)
        rows.append(row)
    return rows


def attempt_doc(a: Attempt, outcome: Outcome, rows: list[dict[str, Any]]) -> dict[str, Any]:
    capture = a.coord.read(CAPTURE, "done")
    client = a.procs.get(CAPTURE)
    return {
        "attempt": a.number, "folder": a.folder.name, "status": "failed" if outcome.error else "ok",
        "error": outcome.error, "failed_task": outcome.failed_task, "retry": outcome.retry,
        "wall_s": time.monotonic() - a.t0, "phases_s": dict(a.phases), "cluster": a.cluster.to_dict(),
        "attached": a.attached, "tasks": rows, "capture": capture,
        "capture_exit": exit_reason(client.poll()) if client is not None else None,
    }
