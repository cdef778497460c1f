"""Names the root cause of a failed attempt from the tasks' exits, markers and stderr.

When one task's end brings the others down, its peers fail within a fraction of a second with
``UNAVAILABLE``, so the first failure seen is often the wrong one: :func:`root_cause` weighs
crashes, hangs, early exits and errors of their own, and says whether another attempt may
succeed (a port taken, TensorFlow 2.21's profiler crashing a task while it collects).

Never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfprof_towers.capture.cluster.attempt import Attempt, Outcome, exit_reason, stderr_tail, task_record_doc
from tfprof_towers.capture.cluster.coord import CAPTURE, Coord, where
from tfprof_towers.capture.cluster.launch import settle
from tfprof_towers.capture.cluster.spec import TaskId
from tfprof_towers.vocab import textcap

#: stderr signatures of TensorFlow 2.21's profiler crash while collecting a trace
#: (``SplitEventTracker::FindStartAndMerge``; docs/cluster.md, "When things go wrong").
PROFILER_CRASH = ("munmap_chunk(): invalid pointer", "double free or corruption", "free(): invalid pointer",
                  "malloc(): ", "corrupted size vs. prev_size")
#: The retry reason of a port taken before TensorFlow bound it (loopback: fresh ports help).
PORT_RETRY = "a port was taken"
PORT_TAKEN = ("Could not start gRPC server", "Failed to add port to server", "Address already in use")


def _marker(coord: Coord, name: str) -> dict[str, Any]:
    who = name if name == CAPTURE else TaskId.parse(name)
    return coord.read(who, "failed") or {}


def describe(a: Attempt, coord: Coord, name: str) -> str:
    """``worker:1 killed by SIGSEGV during profiled: ...`` (exit, stage and error, as known)."""
    p = a.procs.get(name)
    doc = _marker(coord, name)
    parts = [name]
    if p is not None and p.poll() is not None and not (p.poll().ok):
        parts.append(exit_reason(p.poll()))
    elif p is None and doc.get("exit"):  # a hand-started task's child, as its worker process saw it end
        parts.append(str(doc["exit"]))
    stage = doc.get("stage") or (task_record_doc(a, name) or {}).get("stage")
    error = doc.get("error")
    if error:
        parts.append(f": {error}")
    elif stage and name != CAPTURE:
        parts.append(f"during {stage}")
    elif name != CAPTURE:  # where it was: as its worker process saw it die, or from its markers
        parts.append(str(doc.get("progress") or where(coord, TaskId.parse(name))))
    hint = _hint(a, name)
    if hint:
        parts.append(f"({hint})")
    return textcap.one_line(" ".join(parts).replace(" :", ":"), 600)


def _hint(a: Attempt, name: str) -> str | None:
    text = stderr_tail(a, name)
    if any(m in text for m in PORT_TAKEN) and name != CAPTURE:
        return f"port {a.cluster.address(TaskId.parse(name))} is already in use"
    if _collection_crash(a, name):
        return "TensorFlow 2.21's profiler crashes a task at times while it collects its trace"
    return None


def killed_by_signal(a: Attempt, name: str) -> bool:
    """Killed by a signal: a process of ours, or a hand-started task whose worker marked the signal."""
    p = a.procs.get(name)
    if p is None:
        return name != CAPTURE and _marker(coord=a.coord, name=name).get("signal") is not None
    e = p.poll()
    return e is not None and (e.returncode or 0) < 0


def _collection_crash(a: Attempt, name: str) -> bool:
    """A task killed by a signal once the profiled steps were over (it marked ``done``, or every
    step-running task had), or with the heap-corruption message of the profiler's known crash
    (``SplitEventTracker::FindStartAndMerge``, TensorFlow 2.21)."""
    if name == CAPTURE or not killed_by_signal(a, name):
        return False
    coord = a.coord
    steps_over = coord.has(TaskId.parse(name), "done") or all(coord.has(t, "done") for t in a.stepping)
    return steps_over or any(m in stderr_tail(a, name) for m in PROFILER_CRASH)


def _consequence(a: Attempt, coord: Coord, name: str) -> bool:
    """The task's error was caused by another's end (UNAVAILABLE, aborted, a wait stopped by a failure)."""
    doc = _marker(coord, name)
    waited = doc.get("waited_for") or {}
    if waited and waited.get("reason", "timed out") != "timed out":
        return True
    error = str(doc.get("error") or "")
    return any(m in error for m in ("Unavailable", "UNAVAILABLE", "aborted", "Aborted", "Socket closed",
                                    "Connection reset", "the driver aborted"))


def root_cause(a: Attempt, coord: Coord, early: Sequence[str]) -> Outcome:
    """The failure to report when one task's end brings the others down: its peers fail within a
    fraction of a second with ``UNAVAILABLE``, so the first failure seen is often the wrong one.
    After :data:`.launch.FAILURE_GRACE_S` it prefers, in order: a task killed by a signal (a crash), the
    peer a task timed out waiting for while it was still alive (it hung), a task that left before
    its release, a task whose error is its own (not a consequence), any failed task, and last the
    profiler client.
    """
    settle(a)
    names = [str(t) for t in a.tasks]
    failed = [n for n in names if coord.has(TaskId.parse(n), "failed")
              or (n in a.procs and a.procs[n].poll() is not None and not a.procs[n].poll().ok)]
    crashed = [n for n in failed if killed_by_signal(a, n)]
    for n in crashed:
        return _outcome(a, coord, n)
    for n in failed:
        waited = _marker(coord, n).get("waited_for") or {}
        hung = [m for m in waited.get("missing") or () if m != n and m in names and m not in failed]
        if hung and waited.get("reason") == "timed out":
            return Outcome(f"{hung[0]} hung: no {waited.get('event')!r} from it within the wait of "
                           f"{describe(a, coord, n)}", hung[0])
        if "Collective has timed out" in str(_marker(coord, n).get("error") or ""):
            alive = [m for m in names if m != n and m not in failed and m in [str(t) for t in a.stepping]]
            if alive:
                return Outcome(f"{', '.join(alive)} hung {where(coord, TaskId.parse(alive[0]))}: "
                               f"{describe(a, coord, n)}", alive[0])
    for n in early:
        if n != CAPTURE and n not in failed:
            return Outcome(f"{n} exited before the driver released it ({exit_reason(a.procs[n].poll())})", n)
    own = [n for n in failed if not _consequence(a, coord, n)]
    for group in (own, failed):
        if group:
            return _outcome(a, coord, group[0])
    if coord.has(CAPTURE, "failed") or (CAPTURE in a.procs and a.procs[CAPTURE].poll() is not None):
        return Outcome(f"the profiler client failed: {describe(a, coord, CAPTURE)}", CAPTURE,
                       retry="the profiler client failed")
    return Outcome("the attempt failed for no reason any process gave", None)


def _outcome(a: Attempt, coord: Coord, name: str) -> Outcome:
    text = describe(a, coord, name)
    retry = None
    if any(m in stderr_tail(a, name) for m in PORT_TAKEN):
        retry = PORT_RETRY
    elif _collection_crash(a, name):
        retry = "a task crashed while the profiler collected its trace"
    return Outcome(text, name, retry)
