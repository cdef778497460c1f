"""Watches one attempt of a cluster variant until its capture is done or it fails, and runs the attempt.

:func:`run_attempt` prepares and starts every task and the profiler client (:mod:`.launch`),
watches them, stops them all and writes ``attempt.json`` (:mod:`.attempt`).

The watch loop (:func:`watch`) ends the attempt at the first of: a task or the capture
coordinator failing (exit code, signal, ``failed`` marker), a task leaving before it was
released, a trace file missing after the capture (TensorFlow 2.21's profiler can crash a task
while it collects), a task whose profiled steps ended after the capture did (only possible
with a fixed capture window, which the in-task sessions no longer have), the tasks not all
ready in time, or the attempt's deadline.  Otherwise, once every
trace is there, it marks ``driver.release`` and waits for the tasks to leave.  On a failure it
names the root cause (:mod:`.diagnose`) and :func:`.launch.stop` ends every process.

Never imports TensorFlow.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.attempt import Attempt, Outcome, attempt_doc, task_records, task_rows
from tfprof_towers.capture.cluster.coord import CAPTURE, DRIVER, END_POLL_S, Coord, least_progress
from tfprof_towers.capture.cluster.diagnose import killed_by_signal, root_cause
from tfprof_towers.capture.cluster.docs import ATTEMPT_JSON, TaskRecord
from tfprof_towers.capture.cluster.launch import (
    FAILURE_GRACE_S,
    POLL_S,
    client_due,
    prepare,
    start,
    start_client,
    stop,
)
from tfprof_towers.capture.cluster.spec import TaskId
from tfprof_towers.rundir.paths import write_json

#: How long tasks get to leave on their own after the release before they are stopped.
EXIT_GRACE_S = 15.0


def watch(a: Attempt) -> Outcome:
    """Until the capture is done and every task has left after the release; see the module docstring."""
    coord = a.coord
    released_at: float | None = None
    while True:
        now = time.monotonic()
        out = _failure(a, coord, released_at)
        if out is not None:
            return out
        if client_due(a):
            start_client(a)
        if "until_ready" not in a.phases and all(coord.has(t, "ready") for t in a.stepping):
            a.phases["until_ready"] = now - a.t0
        if released_at is None and coord.has(CAPTURE, "done"):
            a.phases.setdefault("capture_done", now - a.t0)
            out = _check_capture(a, coord)
            if out is not None:
                return out
            if all(coord.has(t, "done") for t in a.stepping):
                coord.mark(DRIVER, "release")
                released_at = now
        if released_at is not None and (_all_left(a, coord) or now - released_at > EXIT_GRACE_S):
            a.phases["exit_after_release"] = now - released_at
            return Outcome(None)  # everything is captured; past the grace, the stop below ends the stragglers
        if now > a.deadline or ("until_ready" not in a.phases and now - a.t0 > a.spec.timeouts.startup_s):
            return _timed_out(a, coord, now)
        time.sleep(END_POLL_S if released_at is not None or coord.has(CAPTURE, "stop") else POLL_S)


def _all_left(a: Attempt, coord: Coord) -> bool:
    local = all(p.poll() is not None for p in a.procs.values())
    remote = not a.attached or all(coord.has(t, "left") for t in a.tasks)
    return local and remote


def _failure(a: Attempt, coord: Coord, released_at: float | None) -> Outcome | None:
    """A failed task or client, or a task that left before its release; None while all is well."""
    bad, early = [], []
    for name, p in a.procs.items():
        e = p.poll()
        if e is None:
            continue
        if not e.ok:
            bad.append(name)
        elif name != CAPTURE and released_at is None:
            early.append(name)
    marked = [str(t) for t in a.tasks if coord.has(t, "failed")]
    if bad or early or marked or coord.has(CAPTURE, "failed"):
        return root_cause(a, coord, early)
    return None


def _check_capture(a: Attempt, coord: Coord) -> Outcome | None:
    missing = missing_traces(a, coord)
    if missing:
        time.sleep(FAILURE_GRACE_S)  # the task that lost its trace usually dies now: name its crash
        crashed = [n for n, p in a.procs.items() if n != CAPTURE and p.poll() is not None and not p.poll().ok]
        if crashed or any(killed_by_signal(a, str(t)) for t in a.tasks):
            return root_cause(a, coord, [])
        return Outcome(f"no trace from {', '.join(missing)} although the profiler client reported success",
                       missing[0], retry="a trace file was missing")
    late = late_tasks(a, coord)
    if late:
        return Outcome(f"the capture window closed before {', '.join(late)} finished the profiled steps",
                       late[0], retry="the capture window was too short")
    return None


def _timed_out(a: Attempt, coord: Coord, now: float) -> Outcome:
    ready = "until_ready" in a.phases
    why = f"timed out after {now - a.t0:.0f} s" if ready or now > a.deadline else \
        f"the cluster was not ready after {now - a.t0:.0f} s"
    stuck, last, best = least_progress(coord, a.tasks)
    if stuck:
        return Outcome(f"{why}: {', '.join(stuck)} stuck after {last!r} (the furthest task reached {best!r})",
                       stuck[0])
    running = [n for n, p in a.procs.items() if p.poll() is None]
    return Outcome(f"{why}; still running: {', '.join(running) or 'none'} (every task reached {last!r})",
                   running[0] if running else None)


def missing_traces(a: Attempt, coord: Coord) -> list[str]:
    """Captured tasks without their ``<host>_<port>.xplane.pb`` among the capture's files."""
    files = (coord.read(CAPTURE, "done") or {}).get("files") or []
    hosts = {Path(str(f)).name.split(".xplane.")[0] for f in files}
    return [t for t in a.spec.capture_tasks if a.cluster.host_file(TaskId.parse(t)) not in hosts]


def late_tasks(a: Attempt, coord: Coord) -> list[str]:
    """Step-running tasks whose profiled steps ended after the capture window closed."""
    end = (coord.read(CAPTURE, "done") or {}).get("trace_end_unix")
    if end is None:
        return []
    return [str(t) for t in a.stepping if float((coord.read(t, "done") or {}).get("unix", 0.0)) > float(end)]


def run_attempt(a: Attempt) -> tuple[Outcome, dict[str, TaskRecord], dict[str, Any]]:
    """Prepare, start, watch and stop one attempt; ``attempt.json`` written whatever happened.  An
    exception (Ctrl-C, the driver's SIGTERM) stops every process first, then goes on unwinding."""
    prepare(a)
    outcome = Outcome("the attempt did not start", None)
    try:
        start(a)
        outcome = watch(a)
    except BaseException as exc:
        outcome = Outcome(f"interrupted ({_interruption(exc)}) while the cluster ran; every task was stopped",
                          None)
        raise
    finally:
        stop(a, failed=outcome.error is not None)
        records = task_records(a)
        doc = attempt_doc(a, outcome, task_rows(a, records, outcome))
        try:
            write_json(a.folder / ATTEMPT_JSON, doc)
        except OSError as exc:  # a full disk: the variant's record still says how the attempt ended
            print(f"cannot write {a.folder / ATTEMPT_JSON} ({exc.strerror or exc})", file=sys.stderr)
    return outcome, records, doc


def _interruption(exc: BaseException) -> str:
    if isinstance(exc, KeyboardInterrupt):
        return "SIGINT"
    return str(exc) or type(exc).__name__
