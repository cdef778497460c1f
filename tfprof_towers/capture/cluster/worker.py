"""A task started by hand on a real cluster: ``tfprof-towers worker --run-dir RUN_DIR``.

This process serves the attempts ``RUN_DIR/attach.json`` names one after another, each in a
supervised child (the very command a loopback task runs), its output in the attempt's
``tasks/<job>-<i>/stderr.txt``, where the driver reads it as it reads a loopback task's.
When the child is killed by a signal (TensorFlow 2.21's profiler crashes a task at times
while it collects its trace) or ends without saying so, this process marks the
task ``failed`` (with the signal) and ``left`` for it, so that the driver names the crash
at once instead of waiting for a task that is gone, and retries.

Never imports TensorFlow (the child does).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from tfprof_towers.capture.cluster.attempt import exit_reason
from tfprof_towers.capture.cluster.coord import Coord, where
from tfprof_towers.capture.cluster.docs import ATTACH_JSON, SPEC_JSON, read_spec, task_dir
from tfprof_towers.capture.cluster.launch import task_argv
from tfprof_towers.capture.cluster.spec import Cluster, ClusterError, TaskId
from tfprof_towers.procs import supervise
from tfprof_towers.vocab.errors import EXIT_SIGINT, EXIT_SIGTERM

#: How long a task waits for the driver's first ``spec.json`` (the task may start first).
FIRST_ATTEMPT_WAIT_S = 300.0
#: How long a task whose attempt failed waits for the driver to name the next one.
NEXT_ATTEMPT_WAIT_S = 120.0
#: How long a task whose attempt ended well waits for the driver's word (it may still fail the attempt).
AFTER_OK_WAIT_S = 30.0
#: A child past its own deadline (``Timeouts.task_s``) by this much is stopped from outside.
DEADLINE_MARGIN_S = 30.0
#: How often ``attach.json`` is read.
POLL_S = 0.1


@dataclass(frozen=True)
class Pointer:
    """What ``attach.json`` says: the attempt to join, and whether the driver will name no other."""

    attempt: str
    final: bool = False


def read_pointer(run_dir: Path) -> Pointer | None:
    """``attach.json``, once it names an attempt whose ``spec.json`` is written; None before."""
    try:
        doc = json.loads((run_dir / ATTACH_JSON).read_text(encoding="utf-8"))
        attempt = str(doc["attempt"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (run_dir / attempt / SPEC_JSON).is_file():
        return None
    return Pointer(attempt, bool(doc.get("final", False)))


def next_attempt(run_dir: Path, served: str | None, wait_s: float) -> Pointer | None:
    """The attempt to join after ``served`` (None: the first); None when the driver said ``served``
    was its last, or named no other within ``wait_s``.  A pointer marked final is never joined:
    its attempt is over (before the first, it is a previous run's, which the next one replaces)."""
    end = time.monotonic() + wait_s
    while True:
        p = read_pointer(run_dir)
        if p is not None and not p.final and p.attempt != served:
            return p
        if p is not None and p.final and served is not None:
            return None
        if time.monotonic() > end:
            return None
        time.sleep(POLL_S)


def mark_for_child(coord: Coord, me: TaskId, e: supervise.Ended) -> None:
    """The markers a child that died could not write: ``failed`` (how it ended, its signal, where
    it was) and ``left``."""
    if not coord.has(me, "failed"):
        rc = e.returncode
        coord.mark(me, "failed", exit=exit_reason(e), signal=-rc if rc is not None and rc < 0 else None,
                   progress=where(coord, me), by="worker")
    if not coord.has(me, "left"):
        coord.mark(me, "left", status="failed", by="worker")


def serve_attempt(cluster_path: str, me: TaskId, attempt_dir: Path) -> int:
    """One attempt in a supervised child; its exit code (the child's, or 3 when it died)."""
    tdir = task_dir(attempt_dir, me)
    tdir.mkdir(parents=True, exist_ok=True)
    log = tdir / "stderr.txt"
    print(f"tfprof-towers worker {me}: joining {attempt_dir} (its output: {log})", file=sys.stderr,
          flush=True)
    deadline = read_spec(attempt_dir).timeouts.task_s + DEADLINE_MARGIN_S  # the child keeps its own first
    e = supervise.run(supervise.Command(task_argv(cluster_path, me, attempt_dir), log, deadline_s=deadline,
                                        label=str(me), env=supervise.child_env()))
    coord = Coord(attempt_dir)
    if e.returncode != 0 or not coord.has(me, "left"):
        mark_for_child(coord, me, e)
    print(f"tfprof-towers worker {me}: {attempt_dir.name} ended ({'ok' if e.ok else exit_reason(e)})",
          file=sys.stderr, flush=True)
    return 0 if e.ok else (e.returncode if e.returncode and e.returncode > 0 else 3)


class _Terminated(Exception):
    pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated()


def serve(cluster_path: str, task: str, run_dir: Path) -> int:
    """Every attempt of ``run_dir`` the driver names, until it says the last one was final or names
    no other in time; the exit code of this task's part in the last."""
    me = TaskId.parse(task)
    Cluster.load(cluster_path).address(me)  # a task the cluster file does not have: one line, now
    served: str | None = None
    code = 0
    wait_s = FIRST_ATTEMPT_WAIT_S
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    attempt_dir: Path | None = None
    try:
        if read_pointer(run_dir) is None:  # the driver has not started yet: say what this task waits for
            print(f"tfprof-towers worker {me}: waiting for {run_dir / ATTACH_JSON} (up to {wait_s:g} s)",
                  file=sys.stderr, flush=True)
        while True:
            p = next_attempt(run_dir, served, wait_s)
            if p is None:
                if served is None:
                    raise ClusterError(f"{run_dir}: no {SPEC_JSON} (nor {ATTACH_JSON}) after {wait_s:g} s; "
                                       "start `tfprof-towers profile --cluster ... --out` with this folder "
                                       "first")
                return code
            served, attempt_dir = p.attempt, run_dir / p.attempt
            code = serve_attempt(cluster_path, me, attempt_dir)
            # the driver decides whether there is another attempt: a task that did its part well
            # joins it too (another task's failure fails the attempt for all)
            wait_s = AFTER_OK_WAIT_S if code == 0 else NEXT_ATTEMPT_WAIT_S
    except (KeyboardInterrupt, _Terminated) as exc:
        sig = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
        if attempt_dir is not None:
            coord = Coord(attempt_dir)
            if not coord.has(me, "left"):
                coord.mark(me, "failed", error=f"interrupted by {sig} {where(coord, me)}", by="worker")
                coord.mark(me, "left", status="failed", by="worker")
        print(f"tfprof-towers worker {me}: interrupted by {sig}", file=sys.stderr, flush=True)
        return EXIT_SIGINT if sig == "SIGINT" else EXIT_SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
