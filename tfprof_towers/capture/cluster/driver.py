"""The ``cluster`` family: a variant run as task processes on TensorFlow's distributed runtime.

This runner is the **driver**: it never imports TensorFlow.  ``--workers N [--ps M]`` puts
every task on 127.0.0.1 at ports free a moment before; with ``--cluster FILE`` the tasks are
started by hand (``tfprof-towers worker``) and join each attempt ``RUN_DIR/attach.json`` names.
A failed attempt is retried when another may succeed (the profiler crashing a task while it
collects, a trace missing, a capture window too short: the next one is twice as long; on
loopback, a port taken meanwhile); a failure of the step itself is not.

On success the traces (one ``<host>_<port>.xplane.pb`` per task) move into the variant's
TensorBoard log directory, where the Profile tab shows them as the hosts of one run.
SIGTERM (Ctrl-C, the variant's timeout) stops every task and the client first; the record
then says the run was interrupted and where each task was.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.attempt import Attempt, Outcome, record_problem
from tfprof_towers.capture.cluster.diagnose import PORT_RETRY
from tfprof_towers.capture.cluster.docs import (
    ATTACH_JSON,
    MULTI_WORKER,
    PARAMETER_SERVER,
    TaskRecord,
    TaskSpec,
    Timeouts,
    roles,
)
from tfprof_towers.capture.cluster.launch import gpu_plan, visible_gpus
from tfprof_towers.capture.cluster.spec import Cluster, ClusterError, TaskId, loopback_cluster
from tfprof_towers.capture.cluster.watch import run_attempt
from tfprof_towers.capture.families import PROFILER_OPTIONS, Draft
from tfprof_towers.capture.stats import step_stats
from tfprof_towers.rundir.paths import write_json
from tfprof_towers.rundir.records import OK, ChildSpec, MathCheck, Timings, Topology
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import ClusterOptions

#: Seconds a cluster variant keeps back from its timeout to stop its tasks and write its record.
DRIVER_MARGIN_S = 10.0
#: An attempt is not retried with less time than this left.
MIN_ATTEMPT_S = 30.0
#: Tests only: JSON ``{"worker:1": "segv@profiled_step_1", ...}`` injected into every attempt's tasks.
FAULTS_ENV = "TFPROF_TOWERS_CLUSTER_FAULTS"
#: Tests and the straggler demo: JSON ``{"worker:1": 0.02}``, seconds of delay in each profiled step.
STRAGGLE_ENV = "TFPROF_TOWERS_CLUSTER_STRAGGLE"
#: The profiler-overhead bench only: JSON ``{"rounds": 10, "block_steps": 4}``, paired un-profiled and
#: profiled blocks each stepping task of a ``multi_worker`` run times before its ``ready``
#: (``task.overhead_rounds``); the run's own timed and profiled steps are unchanged.
OVERHEAD_ENV = "TFPROF_TOWERS_CLUSTER_OVERHEAD"
#: The most rounds and steps per block :data:`OVERHEAD_ENV` may ask for.
MAX_OVERHEAD_ROUNDS, MAX_OVERHEAD_BLOCK = 100, 100
#: The fault that holds a task's port in the driver during attempt 1 (the loopback port race).
PORT_FAULT = "port_taken"
DEFAULT_BUDGET_S = 600.0


class Stopped(Exception):
    """SIGTERM reached the driver (the profile stops this variant)."""


def cluster_family(spec: ChildSpec) -> str:
    """``multi_worker`` or ``parameter_server`` (a ``build_step`` file runs as ``multi_worker``)."""
    if spec.file:
        return MULTI_WORKER
    known = registry.builtin(spec.name)
    if known is None or known.family != registry.CLUSTER:
        raise ClusterError(f"{spec.name!r} is not a built-in cluster variant")
    return spec.name


def budget_s(timeout_s: float | None) -> float:
    """Seconds the driver may take: the variant's timeout less a margin to stop and record."""
    if timeout_s is None:
        return DEFAULT_BUDGET_S
    return max(5.0, timeout_s - DRIVER_MARGIN_S if timeout_s >= 4 * DRIVER_MARGIN_S else 0.75 * timeout_s)


def plan_cluster(opts: ClusterOptions, family: str) -> Cluster:
    if opts.file:
        cluster = Cluster.load(opts.file)
        check_roles(cluster, family)
        return cluster
    chief = 1 if family == PARAMETER_SERVER else 0
    return loopback_cluster(opts.workers, ps=opts.ps if family == PARAMETER_SERVER else 0, chief=chief)


def check_roles(cluster: Cluster, family: str) -> None:
    if family == PARAMETER_SERVER:
        for job in ("chief", "ps", "worker"):
            if not cluster.tasks(job):
                raise ClusterError(f"parameter_server needs a chief, ps tasks and workers; the cluster has "
                                   f"no {job} task")
    elif len(cluster.tasks("chief", "worker")) < 1:
        raise ClusterError("multi_worker needs at least one worker task")


def _env_map(name: str) -> dict[str, Any]:
    raw = os.environ.get(name)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ClusterError(f"{name}: not JSON") from None
    return doc if isinstance(doc, dict) else {}


def attempt_faults(attempt: int) -> dict[str, str]:
    """Tests: the faults of :data:`FAULTS_ENV` for this attempt (``kind@point`` in every attempt,
    ``kind@point#K`` in attempt K only)."""
    out = {}
    for task, value in _env_map(FAULTS_ENV).items():
        fault, _, only = str(value).partition("#")
        if fault != PORT_FAULT and (not only or only == str(attempt)):
            out[task] = fault
    return out


def overhead_blocks(family: str) -> tuple[int, int]:
    """``(rounds, block_steps)`` of :data:`OVERHEAD_ENV` (``(0, 0)`` when unset)."""
    doc = _env_map(OVERHEAD_ENV)
    if not doc:
        return 0, 0
    rounds, block = doc.get("rounds"), doc.get("block_steps")
    limits = (("rounds", rounds, MAX_OVERHEAD_ROUNDS), ("block_steps", block, MAX_OVERHEAD_BLOCK))
    for name, value, most in limits:
        if type(value) is not int or not 1 <= value <= most:
            raise ClusterError(f"{OVERHEAD_ENV}: {name} must be a whole number from 1 to {most}, "
                               f"not {value!r}")
    if family != MULTI_WORKER:
        raise ClusterError(f"{OVERHEAD_ENV}: the paired blocks are built for multi_worker only (in a "
                           f"{family} run the serving tasks' profilers would stay on)")
    return rounds, block


def task_spec(spec: ChildSpec, family: str, cluster: Cluster, left_s: float,
              window_ms: int | None, attempt: int = 1) -> TaskSpec:
    capture, ready = roles(family, cluster.tasks())
    workers = len(cluster.tasks("worker")) if family == PARAMETER_SERVER else len(ready)
    if workers and spec.preset.batch % max(workers, 1):
        raise ClusterError(f"the preset's batch of {spec.preset.batch} does not split over {workers} workers")
    faults = attempt_faults(attempt)
    rounds, block = overhead_blocks(family)
    return TaskSpec(
        family=family, variant=spec.name, preset=spec.preset, warmup=max(spec.warmup, 2), steps=spec.steps,
        profile_steps=spec.profile_steps, capture_tasks=tuple(map(str, capture)),
        ready_tasks=tuple(map(str, ready)), timeouts=Timeouts.within(left_s), capture_duration_ms=window_ms,
        file=spec.file, keras_model=spec.keras_model, accelerators=spec.accelerators, faults=faults,
        straggle_s={k: float(v) for k, v in _env_map(STRAGGLE_ENV).items()},
        overhead_rounds=rounds, overhead_block_steps=block,
    )


@contextlib.contextmanager
def port_held(cluster: Cluster, attempt: int):
    """Tests: hold the port of the task marked ``port_taken`` in attempt 1 (the loopback port race)."""
    held = None
    victims = [TaskId.parse(t) for t, v in _env_map(FAULTS_ENV).items() if v == PORT_FAULT]
    if attempt == 1 and victims and cluster.loopback:
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("0.0.0.0", cluster.port(victims[0])))
        held.listen(1)
    try:
        yield
    finally:
        if held is not None:
            held.close()


def write_attach_pointer(run_root: Path, attempt_dir: Path, final: bool = False) -> None:
    """``RUN_DIR/attach.json`` names the attempt for hand-started tasks; ``final``: no other follows."""
    doc: dict[str, Any] = {"attempt": str(attempt_dir.relative_to(run_root))}
    if final:
        doc["final"] = True
    write_json(run_root / ATTACH_JSON, doc)


def run_attempts(spec: ChildSpec, draft: Draft,
                 family: str) -> tuple[Attempt, dict[str, TaskRecord], Outcome]:
    """Attempts until one succeeds or another would not help; the last attempt, its records and outcome."""
    opts = spec.cluster or ClusterOptions()
    deadline = time.monotonic() + budget_s(spec.timeout_s)
    vdir = Path(spec.record).parent
    tries = max(1, opts.attempts)
    window: int | None = None
    docs: list[dict[str, Any]] = []
    gpus = [] if opts.attached else visible_gpus()
    for k in range(1, tries + 1):
        left = deadline - time.monotonic()
        cluster = plan_cluster(opts, family)
        adir = vdir / f"attempt-{k}"
        shutil.rmtree(adir, ignore_errors=True)
        tspec = task_spec(spec, family, cluster, left, window, k)
        plan, note = gpu_plan(cluster.tasks(), [TaskId.parse(t) for t in tspec.ready_tasks]
                              if family == MULTI_WORKER else cluster.tasks("worker"), gpus, spec.accelerators)
        a = Attempt(k, adir, cluster, tspec, deadline, opts.attached, gpus={} if opts.attached else plan)
        notes = [note] if note else []
        draft.stage = f"attempt {k}"
        if opts.attached:
            adir.mkdir(parents=True, exist_ok=True)
            write_attach_pointer(vdir.parent.parent, adir)
        try:
            with port_held(cluster, k):
                outcome, records, doc = run_attempt(a)
            last = outcome.error is None or outcome.retry is None or k == tries \
                or deadline - time.monotonic() < MIN_ATTEMPT_S \
                or (opts.attached and outcome.retry == PORT_RETRY)  # the same ports: taken again
        except (Stopped, KeyboardInterrupt) as exc:
            if opts.attached:
                write_attach_pointer(vdir.parent.parent, adir, final=True)
            docs.append(_read_attempt(a) or {"attempt": k, "status": "failed", "error": "interrupted"})
            draft.cluster = cluster_doc(family, a, docs, {}, None, notes)
            sig = "SIGINT" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
            where = ", ".join(f"{t['task']} at {t.get('progress')!r}" for t in docs[-1].get("tasks") or ())
            raise ClusterError(f"interrupted by {sig} while the cluster ran; every task was stopped"
                               + (f" ({where})" if where else "")) from None
        docs.append(doc)
        draft.cluster = cluster_doc(family, a, docs, records, outcome, notes)
        if opts.attached and last:
            write_attach_pointer(vdir.parent.parent, adir, final=True)  # the hand-started tasks may leave
        if last:
            return a, records, outcome
        if outcome.retry == "the capture window was too short":
            done = (a.coord.read("capture", "done") or {}).get("duration_ms")
            window = 2 * int(done or a.spec.capture_min_ms)
    return a, records, outcome


def _read_attempt(a: Attempt) -> dict[str, Any] | None:
    from tfprof_towers.rundir.paths import read_json

    with contextlib.suppress(Exception):
        doc = read_json(a.folder / "attempt.json")
        return doc if isinstance(doc, dict) else None
    return None


def cluster_doc(family: str, a: Attempt, docs: Sequence[Mapping[str, Any]],
                records: Mapping[str, TaskRecord], outcome: Outcome | None,
                notes: Sequence[str] = ()) -> dict[str, Any]:
    """The record's ``cluster`` document: how the run was laid out and how each task ended."""
    last = docs[-1] if docs else {}
    capture = last.get("capture") or {}
    return {
        "family": family, "loopback": a.cluster.loopback, "attached": a.attached,
        "cluster": a.cluster.to_dict(), "host_tasks": a.cluster.host_tasks(),
        "failed_task": outcome.failed_task if outcome is not None and outcome.error
        else last.get("failed_task"),
        "tasks": list(last.get("tasks") or ()),
        "attempts": [{k: d.get(k) for k in ("attempt", "folder", "status", "error", "failed_task", "retry",
                                            "wall_s", "phases_s")} for d in docs],
        "capture": {k: capture.get(k) for k in ("service", "duration_ms", "trace_start_unix",
                                                "trace_end_unix", "options", "files") if k in capture},
        "stepping_tasks": list(a.spec.ready_tasks), "captured_tasks": list(a.spec.capture_tasks),
        "gpus": dict(a.gpus), "notes": list(notes),
    }


def move_traces(a: Attempt, logdir: Path) -> None:
    """The attempt's capture (one run folder, a file per task) into the variant's log directory."""
    runs = sorted((a.folder / "tensorboard" / "plugins" / "profile").glob("*"))
    dest = logdir / "plugins" / "profile"
    dest.mkdir(parents=True, exist_ok=True)
    for run in runs:
        if run.is_dir():
            shutil.move(str(run), str(dest / run.name))


def per_step_max(series: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Step ``i``'s time across tasks: the slowest task's (a synchronous step ends with its last task)."""
    series = [s for s in series if s]
    if not series:
        return ()
    n = min(len(s) for s in series)
    return tuple(max(s[i] for s in series) for i in range(n))


def timings(stepping: Sequence[TaskRecord]) -> Timings:
    timed = per_step_max([r.step_times_s for r in stepping])
    prof = per_step_max([r.profiled_step_times_s for r in stepping])
    return Timings(step_time_s=step_stats(timed), profiled_step_time_s=step_stats(prof),
                   step_times_s=timed, profiled_step_times_s=prof)


def merged_placement(stepping: Sequence[TaskRecord]) -> dict[str, Any]:
    """Every worker's placement as one; the all-reduce's ring traffic as ``collective`` transfers."""
    from tfprof_towers.capture.placement import summarise_devices
    from tfprof_towers.capture.tf2.placement import all_transfers

    nodes: list[Any] = []
    edges: list[Any] = []
    collectives: list[Any] = []
    strategy = None
    for r in stepping:
        p = r.placement or {}
        nodes += list(p.get("nodes") or ())
        edges += list(p.get("edges") or ())
        collectives += list(p.get("collectives") or ())
        strategy = strategy or p.get("strategy")
    return {"nodes": nodes, "edges": edges, "devices": summarise_devices(nodes), "collectives": collectives,
            "transfers": all_transfers(edges, collectives), "strategy": strategy}


def topology(family: str, cluster: Cluster, placement: Mapping[str, Any], tf: str | None) -> Topology:
    """The tasks' devices: host = the first stepping task's CPU; accelerators = every task's GPUs."""
    from tfprof_towers.vocab.device_names import parse_device

    gpus = tuple(sorted(d for d in (placement.get("devices") or {})
                        if (p := parse_device(d)) is not None and p.type == "GPU"))
    first = roles(family, cluster.tasks())[1][0]
    return Topology("gpu" if gpus else "cpu", first.cpu, gpus, tf)


def fill(draft: Draft, spec: ChildSpec, family: str, a: Attempt, records: Mapping[str, TaskRecord]) -> None:
    stepping = [records[t] for t in a.spec.ready_tasks if t in records]
    if len(stepping) != len(a.spec.ready_tasks):
        missing = [t for t in a.spec.ready_tasks if t not in records]
        raise ClusterError("the attempt succeeded but " + "; ".join(record_problem(a, t) for t in missing))
    lead = stepping[0]
    draft.versions["tensorflow"] = lead.versions.get("tensorflow")
    draft.timings = timings(stepping)
    draft.math = MathCheck(tuple(lead.math.losses), lead.math.grad_norm) if lead.math else None
    if family == MULTI_WORKER:
        placement = merged_placement(stepping)
    else:
        from tfprof_towers.capture.cluster.edges import ps_placement

        placement = ps_placement(lead.placement or {}, Path(spec.logdir), a.cluster)
    draft.placement = placement
    draft.topology = topology(family, a.cluster, placement, draft.versions.get("tensorflow"))
    draft.profiler_options = {**PROFILER_OPTIONS, "remote": False}  # each task's own session
    draft.host_tasks = a.cluster.host_tasks()
    for name, sec in a.phases.items():
        draft.phases.seconds[f"cluster_{name}"] = sec


def run(spec: ChildSpec, draft: Draft) -> None:
    """Run one cluster variant (module docstring)."""
    family = cluster_family(spec)
    draft.stage = "cluster"
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the clean-up must not be interrupted again
        raise Stopped("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    try:
        a, records, outcome = run_attempts(spec, draft, family)
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    if outcome.error is not None:
        tries = len((draft.cluster or {}).get("attempts") or ())
        more = f" (attempt {tries}; earlier attempts failed too)" if tries > 1 else ""
        raise ClusterError(outcome.error + more)
    draft.stage = "record"
    move_traces(a, Path(spec.logdir))
    fill(draft, spec, family, a, records)
    draft.cluster = replace_capture_files(draft.cluster or {}, Path(spec.logdir))
    draft.stage = "done"
    draft.status = OK


def replace_capture_files(doc: Mapping[str, Any], logdir: Path) -> dict[str, Any]:
    from tfprof_towers.capture.cluster.client import xplane_files

    return {**doc, "capture": {**(doc.get("capture") or {}), "files": xplane_files(logdir)}}

