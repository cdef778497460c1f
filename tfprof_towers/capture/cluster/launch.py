"""Starts an attempt's tasks and profiler client, each on its GPUs, and stops them all.

The tasks run ``tfprof_towers worker`` -- the very command a real cluster's machines run.
With ``attached`` (``profile --cluster``) the tasks run elsewhere and only the client is started
here.  :func:`stop` marks ``driver.abort`` after a failure (tasks in a bounded wait leave within
milliseconds), then stops every process (SIGTERM, then SIGKILL: MultiWorkerMirroredStrategy's
tasks catch SIGTERM).

Never imports TensorFlow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tfprof_towers.capture.cluster.attempt import Attempt
from tfprof_towers.capture.cluster.coord import CAPTURE, DRIVER
from tfprof_towers.capture.cluster.docs import CLUSTER_JSON, SPEC_JSON, task_dir
from tfprof_towers.capture.cluster.spec import TaskId
from tfprof_towers.capture.runner import nvidia_smi
from tfprof_towers.procs import supervise
from tfprof_towers.rundir.paths import write_json

CLIENT_MODULE = "tfprof_towers.capture.cluster.client"
TOOL_MODULE = "tfprof_towers"
FAILURE_GRACE_S = 1.0
ABORT_GRACE_S = 0.5
POLL_S = 0.05


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
    """Start every task we run, first task first; the capture coordinator now only when the tasks run
    elsewhere (``attached``), else once they have all started (:func:`start_client`)."""
    env = child_env()
    if not a.attached:
        for t in a.tasks:
            gpus = {"CUDA_VISIBLE_DEVICES": a.gpus[str(t)]} if str(t) in a.gpus else {}
            a.procs[str(t)] = supervise.start(task_command(a, t, {**env, **gpus}))
    else:
        start_client(a, env)
    a.phases["spawn"] = time.monotonic() - a.t0


def client_due(a: Attempt) -> bool:
    """Whether to start the capture coordinator now: not started yet, and every task we run has marked
    ``started`` (its interpreter and imports done).  It has nothing to do before the tasks are ready,
    many seconds later; started beside them it would only slow their start on a busy machine."""
    return CAPTURE not in a.procs and all(a.coord.has(t, "started") for t in a.tasks)


def start_client(a: Attempt, env: Mapping[str, str] | None = None) -> None:
    """Start the capture coordinator (it waits for the stepping tasks' ``ready``)."""
    env = child_env() if env is None else env
    a.procs[CAPTURE] = supervise.start(client_command(a, {**env, "CUDA_VISIBLE_DEVICES": ""}))


def settle(a: Attempt, grace_s: float = FAILURE_GRACE_S) -> None:
    end = time.monotonic() + grace_s
    while time.monotonic() < end and any(p.poll() is None for p in a.procs.values()):
        time.sleep(POLL_S)


def stop(a: Attempt, failed: bool) -> None:
    """Stop every process of the attempt: after ``abort`` a short grace to leave on their own, then
    SIGTERM and SIGKILL through their guards (all at once); every descendant goes with them."""
    if failed:
        a.coord.mark(DRIVER, "abort")
        settle(a, ABORT_GRACE_S)
    t0 = time.monotonic()
    supervise.stop_all(a.procs.values())
    a.phases["stop"] = time.monotonic() - t0
