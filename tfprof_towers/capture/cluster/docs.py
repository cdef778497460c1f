"""Documents of one cluster attempt: what every task is asked to do, and what each task reports.

An attempt directory (``variants/<name>/attempt-<k>/``; on a real cluster a folder every
machine can read and write) holds::

    cluster.json                 the cluster spec (clusterspec.Cluster)
    spec.json                    TaskSpec: family, workload, step counts, timeouts
    coord/<job>-<i>.<event>      progress markers (coord.py)
    tasks/<job>-<i>/record.json  TaskRecord, written by the task itself
    tasks/<job>-<i>/stderr.txt   the task's output (head and tail, when the driver started it)
    capture/stderr.txt           the capture coordinator's output
    tasks/<job>-<i>/profile/     the task's own profiler log directory (emptied as its trace moves)
    tensorboard/plugins/profile/<ts>/<host>_<port>.xplane.pb   one trace per task
    attempt.json                 how the attempt ended (the driver's)

Pure Python: the driver, which never imports TensorFlow, reads and writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.spec import TaskId
from tfprof_towers.rundir.fields import Fields, Record, meta
from tfprof_towers.rundir.records import MathCheck
from tfprof_towers.variants.config import Preset

MULTI_WORKER, PARAMETER_SERVER = "multi_worker", "parameter_server"
CLUSTER_FAMILIES = (MULTI_WORKER, PARAMETER_SERVER)
SPEC_JSON, CLUSTER_JSON = "spec.json", "cluster.json"
ATTEMPT_JSON, ATTACH_JSON = "attempt.json", "attach.json"


@dataclass(frozen=True)
class Timeouts(Record):
    """Every bounded wait of an attempt, in seconds (see coord.py for the events)."""

    startup_s: float = 120.0  # until every step-running task is ready (TensorFlow imports, the strategy)
    capture_start_s: float = 60.0  # from ready until the profiler's session is active in every task
    peer_s: float = 60.0  # for every peer's 'done' after this task's own
    release_s: float = 120.0  # for the driver's 'release' after the capture
    serve_s: float = 300.0  # ps and parameter-server workers: serving until 'release'
    collective_s: float = 60.0  # one collective op (a peer that hangs mid-step fails the others)
    task_s: float = 300.0  # the whole task (its own deadline: it ends itself)

    @classmethod
    def within(cls, budget_s: float) -> Timeouts:
        b = max(20.0, budget_s)
        return cls(startup_s=min(120.0, 0.6 * b), capture_start_s=min(60.0, 0.4 * b),
                   peer_s=min(60.0, 0.4 * b), release_s=min(120.0, 0.5 * b), serve_s=b,
                   collective_s=min(60.0, max(8.0, 0.25 * b)), task_s=b)


@dataclass(frozen=True)
class TaskSpec(Record):
    """``spec.json``: what every task of the attempt runs."""

    family: str = meta(choices=CLUSTER_FAMILIES)
    variant: str
    preset: Preset
    warmup: int
    steps: int
    profile_steps: int
    capture_tasks: tuple[str, ...]  # traced (each by its own profiler session)
    ready_tasks: tuple[str, ...]  # whose 'ready' starts the capture (they run the steps)
    timeouts: Timeouts = field(default_factory=Timeouts)
    capture_duration_ms: int | None = None  # a fixed capture window's; unused by in-task sessions
    capture_min_ms: int = 1000  # likewise
    file: str | None = None  # a user's build_step file (multi_worker)
    keras_model: str | None = None  # a user's Keras model file (multi_worker)
    accelerators: int | None = None  # GPUs per task (None: all it sees)
    faults: Mapping[str, str] = field(default_factory=dict)  # tests: {"worker:1": "segv@profiled_step_1"}
    straggle_s: Mapping[str, float] = field(default_factory=dict)  # tests and demos: a delay per step
    # the bench's paired blocks (multi_worker): rounds of an un-profiled and a profiled block of
    # ``overhead_block_steps`` steps each, between the timed steps and ``ready`` (none: 0)
    overhead_rounds: int = 0
    overhead_block_steps: int = 0

    WHERE = SPEC_JSON

    def fault(self, task: TaskId) -> tuple[str, str]:
        """``(kind, where)`` of the test fault injected into ``task``, ``("", "")`` for none."""
        kind, _, where = self.faults.get(str(task), "").partition("@")
        return kind, where


def _spans(f: Fields, key: str) -> tuple[tuple[float, float], ...]:
    pairs = (s for s in f.items(key) if isinstance(s, list) and len(s) == 2)
    return tuple((float(a), float(b)) for a, b in pairs)


@dataclass(frozen=True)
class TaskRecord(Record):
    """``tasks/<job>-<i>/record.json``: what one task did (written by the task, read by the driver)."""

    task: str
    address: str = meta(missing="")
    status: str = meta(choices=("ok", "failed"))
    pid: int | None = None
    error: str | None = None
    stage: str | None = None
    phases_s: Mapping[str, float] = field(default_factory=dict)
    step_times_s: tuple[float, ...] = ()  # timed, no profiler
    profiled_step_times_s: tuple[float, ...] = ()
    profiled_spans_unix: tuple[tuple[float, float], ...] = meta((), read=_spans)
    step_cpu_s: tuple[float, ...] = ()  # each timed step's process CPU time (all threads)
    profiled_step_cpu_s: tuple[float, ...] = ()
    math: MathCheck | None = None
    loss: float | None = None  # after the profiled steps
    placement: Mapping[str, Any] | None = None
    strategy: Mapping[str, Any] | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    waited_for: Mapping[str, Any] | None = None
    clock_unix: Mapping[str, float] | None = None
    WHERE = "task record.json"

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def read_spec(attempt_dir: Path) -> TaskSpec:
    from tfprof_towers.rundir.paths import read_json

    return TaskSpec.from_json(read_json(attempt_dir / SPEC_JSON), str(attempt_dir / SPEC_JSON))


def task_dir(attempt_dir: Path, task: TaskId) -> Path:
    return Path(attempt_dir) / "tasks" / task.slug


#: The attempt's TensorBoard log directory: every task's trace, as the hosts of one run.
TENSORBOARD = "tensorboard"


def trace_path(attempt_dir: Path, run: str, host_file: str) -> Path:
    """Where a task's trace goes: ``tensorboard/plugins/profile/<run>/<host>_<port>.xplane.pb``."""
    return Path(attempt_dir) / TENSORBOARD / "plugins" / "profile" / run / f"{host_file}.xplane.pb"


def roles(family: str, tasks: list[TaskId]) -> tuple[list[TaskId], list[TaskId]]:
    """(tasks the profiler captures, tasks whose steps are timed and whose 'ready' starts the capture).

    ``multi_worker``: the workers (a chief, if any, trains as a worker too).  ``parameter_server``:
    every task is captured; the chief (the coordinator) runs the steps.
    """
    if family == MULTI_WORKER:
        stepping = [t for t in tasks if t.job in ("chief", "worker")]
        return stepping, stepping
    return list(tasks), [t for t in tasks if t.job == "chief"]
