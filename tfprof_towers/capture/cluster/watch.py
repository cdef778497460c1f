"""One attempt of a cluster variant: start every task and the profiler client, watch them, stop them all.

The tasks run ``tfprof_towers worker`` -- the very command a real cluster's machines run.
With ``attached`` (``profile --cluster``) the tasks run elsewhere and only the client is started
here; they are known by their markers.

The watch loop (:func:`watch`) ends the attempt at the first of: a task or the client failing
(exit code, signal, ``failed`` marker), a task leaving before it was released, a trace file
missing after the capture (TensorFlow 2.21's profiler can crash a task while it collects, and
the client still reports success), the capture window closing before the profiled steps
ended, the tasks not all ready in time, or the attempt's deadline.  Otherwise, once every
trace is there, it marks ``driver.release`` and waits for the tasks to leave.  On a failure it
marks ``driver.abort`` (tasks in a bounded wait leave within milliseconds), then stops every
process (SIGTERM, then SIGKILL: MultiWorkerMirroredStrategy's tasks catch SIGTERM).

Never imports TensorFlow.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.coord import CAPTURE, DRIVER, Coord, least_progress, where
from tfprof_towers.capture.cluster.docs import (
    ATTEMPT_JSON,
    CLUSTER_JSON,
    SPEC_JSON,
    TaskRecord,
    TaskSpec,
    task_dir,
)
from tfprof_towers.capture.cluster.spec import Cluster, TaskId
from tfprof_towers.capture.runner import nvidia_smi
from tfprof_towers.procs import supervise
from tfprof_towers.rundir.paths import read_json, write_json
from tfprof_towers.vocab import textcap

CLIENT_MODULE = "tfprof_towers.capture.cluster.client"
TOOL_MODULE = "tfprof_towers"
FAILURE_GRACE_S = 1.0
ABORT_GRACE_S = 0.5
#: How long tasks get to leave on their own after the release before they are stopped.
EXIT_GRACE_S = 15.0
POLL_S = 0.05
#: stderr signatures of TensorFlow 2.21's profiler crash while collecting a trace
#: (``SplitEventTracker::FindStartAndMerge``; docs/cluster.md, "When things go wrong").
PROFILER_CRASH = ("munmap_chunk(): invalid pointer", "double free or corruption", "free(): invalid pointer",
                  "malloc(): ", "corrupted size vs. prev_size")
#: The retry reason of a port taken before TensorFlow bound it (loopback: fresh ports help).
PORT_RETRY = "a port was taken"
PORT_TAKEN = ("Could not start gRPC server", "Failed to add port to server", "Address already in use")


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


def visible_gpus() -> list[str]:
    """The GPUs this machine lends its processes: ``CUDA_VISIBLE_DEVICES`` when set, else those
    ``nvidia-smi -L`` lists (none without the tool)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    listed = (nvidia_smi("-L") or "").splitlines()
    return [str(i) for i, line in enumerate(listed) if line.startswith("GPU ")]


def gpu_plan(tasks: Sequence[TaskId], stepping: Sequence[TaskId], gpus: Sequence[str],
             per_task: int | None = None) -> tuple[dict[str, str], str | None]:
    """``CUDA_VISIBLE_DEVICES`` of each loopback task, and a note when the GPUs cannot be shared out.

    On one machine every task would see every GPU; a ring of NCCL all-reduces needs a GPU of
    its own per worker.  So the GPUs are split evenly (``per_task`` at most) among the tasks
    that compute (the workers; a parameter_server's chief and ps keep to the CPU); with fewer
    GPUs than such tasks, every task runs on the CPU and the note says why.
    """
    computing = [t for t in stepping if t.job == "worker"] or list(stepping)
    plan = {str(t): "" for t in tasks}
    if not gpus:
        return plan, None
    each = len(gpus) // len(computing) if computing else 0
    if per_task is not None:
        each = min(each, per_task)
    if each < 1:
        return plan, (f"{len(computing)} computing tasks and {len(gpus)} GPU(s) on this machine: the "
                      "loopback tasks run on the CPU (each worker needs a GPU of its own)")
    for k, t in enumerate(computing):
        plan[str(t)] = ",".join(gpus[k * each:(k + 1) * each])
    return plan, None


def task_argv(cluster_path: str, task: TaskId, attempt_dir: Path) -> tuple[str, ...]:
    """``tfprof_towers worker``: the command of a loopback task, and of a hand-started task's child."""
    return tuple(supervise.python_argv(TOOL_MODULE, "worker", "--cluster", cluster_path, "--task", str(task),
                                       "--run-dir", str(attempt_dir)))


def task_command(a: Attempt, task: TaskId, env: Mapping[str, str]) -> supervise.Command:
    argv = task_argv(str(a.folder / CLUSTER_JSON), task, a.folder)
    return supervise.Command(argv, task_dir(a.folder, task) / "stderr.txt",
                             deadline_s=max(1.0, a.deadline - time.monotonic()), env=env, label=str(task))


def client_command(a: Attempt, env: Mapping[str, str]) -> supervise.Command:
    argv = supervise.python_argv(CLIENT_MODULE, str(a.folder))
    return supervise.Command(tuple(argv), a.folder / "capture" / "stderr.txt",
                             deadline_s=max(1.0, a.deadline - time.monotonic()), env=env, label=CAPTURE)


def child_env() -> dict[str, str]:
    env = supervise.tf_child_env()
    env.pop("TF_CONFIG", None)  # each task sets its own
    return env


def prepare(a: Attempt) -> None:
    for sub in ("coord", "capture", "tensorboard"):
        (a.folder / sub).mkdir(parents=True, exist_ok=True)
    for t in a.tasks:
        task_dir(a.folder, t).mkdir(parents=True, exist_ok=True)
    write_json(a.folder / CLUSTER_JSON, a.cluster.to_dict())
    write_json(a.folder / SPEC_JSON, a.spec.to_json())


def start(a: Attempt) -> None:
    """Start the client first (its TensorFlow import overlaps the tasks'), then every task we run."""
    env = child_env()
    a.procs[CAPTURE] = supervise.start(client_command(a, {**env, "CUDA_VISIBLE_DEVICES": ""}))
    if not a.attached:
        for t in a.tasks:
            gpus = {"CUDA_VISIBLE_DEVICES": a.gpus[str(t)]} if str(t) in a.gpus else {}
            a.procs[str(t)] = supervise.start(task_command(a, t, {**env, **gpus}))
    a.phases["spawn"] = time.monotonic() - a.t0


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


def watch(a: Attempt) -> Outcome:
    """Until the capture is done and every task has left after the release; see the module docstring."""
    coord = a.coord
    released_at: float | None = None
    while True:
        now = time.monotonic()
        out = _failure(a, coord, released_at)
        if out is not None:
            return out
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
        time.sleep(POLL_S)


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
        if crashed or any(_crashed(a, str(t)) for t in a.tasks):
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
    stage = doc.get("stage") or (_task_record_doc(a, name) or {}).get("stage")
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


def _task_record_doc(a: Attempt, name: str) -> dict[str, Any] | None:
    if name == CAPTURE:
        return None
    path = task_dir(a.folder, TaskId.parse(name)) / "record.json"
    try:
        doc = read_json(path) if path.is_file() else None
    except Exception:
        return None
    return doc if isinstance(doc, dict) else None


def _stderr(a: Attempt, name: str) -> str:
    """The end of a process's output: ours, or a hand-started task's (from the attempt's task folder)."""
    p = a.procs.get(name)
    if p is not None:
        return textcap.read_tail(p.command.stderr_path)
    if name == CAPTURE:
        return ""
    path = task_dir(a.folder, TaskId.parse(name)) / "stderr.txt"
    return textcap.read_tail(path) if path.is_file() else ""


def _hint(a: Attempt, name: str) -> str | None:
    text = _stderr(a, name)
    if any(m in text for m in PORT_TAKEN) and name != CAPTURE:
        return f"port {a.cluster.address(TaskId.parse(name))} is already in use"
    if _collection_crash(a, name):
        return "TensorFlow 2.21's profiler crashes a task at times while it collects a remote trace"
    return None


def _crashed(a: Attempt, name: str) -> bool:
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
    if name == CAPTURE or not _crashed(a, name):
        return False
    coord = a.coord
    steps_over = coord.has(TaskId.parse(name), "done") or all(coord.has(t, "done") for t in a.stepping)
    return steps_over or any(m in _stderr(a, name) for m in PROFILER_CRASH)


def _consequence(a: Attempt, coord: Coord, name: str) -> bool:
    """The task's error was caused by another's end (UNAVAILABLE, aborted, a wait stopped by a failure)."""
    doc = _marker(coord, name)
    waited = doc.get("waited_for") or {}
    if waited and waited.get("reason", "timed out") != "timed out":
        return True
    error = str(doc.get("error") or "")
    return any(m in error for m in ("Unavailable", "UNAVAILABLE", "aborted", "Aborted", "Socket closed",
                                    "Connection reset", "the driver aborted"))


def _settle(a: Attempt, grace_s: float = FAILURE_GRACE_S) -> None:
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(p.poll() is None for p in a.procs.values()):
        time.sleep(POLL_S)


def root_cause(a: Attempt, coord: Coord, early: Sequence[str]) -> Outcome:
    """The failure to report when one task's end brings the others down: its peers fail within a
    fraction of a second with ``UNAVAILABLE``, so the first failure seen is often the wrong one.
    After :data:`FAILURE_GRACE_S` it prefers, in order: a task killed by a signal (a crash), the
    peer a task timed out waiting for while it was still alive (it hung), a task that left before
    its release, a task whose error is its own (not a consequence), any failed task, and last the
    profiler client.
    """
    _settle(a)
    names = [str(t) for t in a.tasks]
    failed = [n for n in names if coord.has(TaskId.parse(n), "failed")
              or (n in a.procs and a.procs[n].poll() is not None and not a.procs[n].poll().ok)]
    crashed = [n for n in failed if _crashed(a, n)]
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
    if any(m in _stderr(a, name) for m in PORT_TAKEN):
        retry = PORT_RETRY
    elif _collection_crash(a, name):
        retry = "a task crashed while the profiler collected its trace"
    return Outcome(text, name, retry)


def stop(a: Attempt, failed: bool) -> None:
    """Stop every process of the attempt: after ``abort`` a short grace to leave on their own, then
    SIGTERM and SIGKILL through their guards (all at once); every descendant goes with them."""
    if failed:
        a.coord.mark(DRIVER, "abort")
        _settle(a, ABORT_GRACE_S)
    t0 = time.monotonic()
    supervise.stop_all(a.procs.values())
    a.phases["stop"] = time.monotonic() - t0


def record_problem(a: Attempt, name: str) -> str:
    """Why task ``name`` has no usable record: it wrote none, or what is wrong with the one it wrote."""
    doc = _task_record_doc(a, name)
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
        doc = _task_record_doc(a, str(t))
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
            "stderr_tail": textcap.tail_text(_stderr(a, name)) if status != "ok" else "",
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
