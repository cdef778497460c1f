"""Coordination of a cluster attempt by marker files, with bounded waits.

Each task marks its progress as a small JSON file ``coord/<job>-<i>.<event>`` in the
attempt directory (on a real cluster: a folder every machine shares), written
atomically by rename; the driver marks ``driver.release`` (the tasks may leave) and
``driver.abort`` (stop now), the capture coordinator ``capture.start`` / ``capture.stop`` (every
captured task's profiler on / the serving tasks' off) and ``capture.done`` / ``capture.failed``.
Every wait is bounded and ends at once when any task marked ``failed`` or the driver
marked ``abort``: a task never waits forever for a peer that is gone.

A task's events, in order (:data:`PROGRESS`): ``started`` -> ``imported`` (TensorFlow)
-> ``strategy`` (entering the strategy's constructor, which returns only when every
peer is there) -> ``server_up`` -> ``ready`` (timed steps done; ``median_step_s``)
-> ``tracing`` (the profiler's session is active in this process) -> ``done``
(profiled steps done) -> ``traced`` (its trace written) -> ``left``; ``failed`` (with ``error``)
instead, at any point.

Pure Python; never imports TensorFlow.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.spec import ClusterError, TaskId
from tfprof_towers.rundir.paths import finite

PROGRESS: tuple[str, ...] = (
    "started", "imported", "strategy", "server_up", "ready", "tracing", "done", "traced", "left")
DRIVER, CAPTURE = "driver", "capture"
#: The poll of every wait once the profiled steps are over (the tasks' ``done`` and ``traced``, the
#: driver's ``release``, the tasks' exit): what is left takes a few tens of ms, nothing is profiled any
#: more, and every poll interval is added to the run.
END_POLL_S = 0.005
Who = TaskId | str


class CoordTimeout(ClusterError):
    """A bounded wait ended before every task marked the event (``missing`` names them)."""

    def __init__(self, event: str, missing: list[str], waited_s: float, reason: str = "timed out") -> None:
        names = ", ".join(missing)
        super().__init__(f"waited {waited_s:.1f} s for {event!r} from {names} ({reason})")
        self.event, self.missing, self.waited_s, self.reason = event, missing, waited_s, reason

    @property
    def timed_out(self) -> bool:
        return self.reason == "timed out"


def write_marker(path: Path, doc: Mapping[str, Any]) -> None:
    """``doc`` as JSON at ``path``, atomically (a reader sees the whole file or none)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(marker_text(doc), encoding="utf-8")
    os.replace(tmp, path)


def marker_text(doc: Mapping[str, Any]) -> str:
    """``doc`` as strict JSON, as every document of the run directory: a stray NaN becomes null, never
    ``NaN``; a numpy number a number; anything else JSON cannot hold its ``str``.  Encoded as it is
    (a task's record is ~300 KB); only a document with a NaN or an infinity is rebuilt first."""
    try:
        return json.dumps(dict(doc), default=_marker_default, allow_nan=False)
    except ValueError:
        return json.dumps(finite(dict(doc)), default=str, allow_nan=False)


def _marker_default(obj: Any) -> Any:
    """What :func:`~tfprof_towers.rundir.paths.finite` makes of a value JSON cannot hold (a numpy
    scalar or array), else its ``str``."""
    if hasattr(obj, "item") or hasattr(obj, "tolist"):
        return finite(obj)
    return str(obj)


@dataclass(frozen=True)
class Coord:
    """Marker files under ``<root>/coord/``; the driver's own are ``driver.<event>``."""

    root: Path

    @property
    def folder(self) -> Path:
        return Path(self.root) / "coord"

    def path(self, who: Who, event: str) -> Path:
        name = who.slug if isinstance(who, TaskId) else who
        return self.folder / f"{name}.{event}"

    def mark(self, who: Who, event: str, **info: Any) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        write_marker(self.path(who, event), {"unix": time.time(), "pid": os.getpid(), **info})

    def read(self, who: Who, event: str) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.path(who, event).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def has(self, who: Who, event: str) -> bool:
        return self.path(who, event).exists()

    def wait(self, whos: Iterable[Who], event: str, timeout_s: float, poll_s: float = 0.02,
             abort: Callable[[], str | None] | None = None) -> float:
        """Block until every one of ``whos`` has marked ``event``; the seconds waited.  Raises
        :class:`CoordTimeout` naming the missing ones after ``timeout_s``, or as soon as ``abort()``
        gives a reason (a peer failed, the driver aborted)."""
        whos = list(whos)
        t0 = time.monotonic()
        while True:
            missing = [w for w in whos if not self.has(w, event)]
            if not missing:
                return time.monotonic() - t0
            waited = time.monotonic() - t0
            reason = abort() if abort else None
            if reason or waited >= timeout_s:
                raise CoordTimeout(event, [str(m) for m in missing], waited, reason or "timed out")
            time.sleep(poll_s)

    def failure(self, whos: Iterable[TaskId]) -> str | None:
        """Why to stop waiting: the driver marked ``abort``, or one of ``whos`` marked ``failed``."""
        reason = self.aborted()
        if reason:
            return reason
        for w in whos:
            doc = self.read(w, "failed")
            if doc is not None:
                return f"{w} failed: {doc.get('error') or '?'}"
        return None

    def aborted(self) -> str | None:
        return "the driver aborted the run" if self.has(DRIVER, "abort") else None

    def progress(self, task: TaskId) -> int:
        """Index in :data:`PROGRESS` of the furthest event ``task`` marked (-1: none)."""
        return max((i for i, e in enumerate(PROGRESS) if self.has(task, e)), default=-1)


def progress_name(level: int) -> str:
    return PROGRESS[level] if level >= 0 else "spawn"


#: Where a task was, in words, from the last event it marked.
WHERE: dict[str, str] = {
    "spawn": "before it started", "started": "while importing TensorFlow",
    "imported": "before its strategy started",
    "strategy": "while its strategy started (waiting for its peers)",
    "server_up": "while building and warming up its step", "ready": "while waiting for the capture",
    "tracing": "during its profiled steps", "done": "after its profiled steps",
    "traced": "after its trace was written", "left": "as it left",
}


def where(coord: Coord, task: TaskId) -> str:
    """``during its profiled steps``: where ``task`` was, from its markers."""
    return WHERE[progress_name(coord.progress(task))]


def least_progress(coord: Coord, tasks: Iterable[TaskId]) -> tuple[list[str], str, str]:
    """The tasks that got least far, the last event they marked, and the furthest any task got;
    no tasks when all got equally far (then nobody in particular is to blame)."""
    levels = {t: coord.progress(t) for t in tasks}
    if not levels:
        return [], "spawn", "spawn"
    lo, hi = min(levels.values()), max(levels.values())
    if lo == hi:
        return [], progress_name(lo), progress_name(hi)
    return [str(t) for t, v in levels.items() if v == lo], progress_name(lo), progress_name(hi)
