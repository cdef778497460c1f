"""One task of a cluster run, in its own process (``tfprof-towers worker --cluster C --task T --run-dir R``).

The same entry point serves the loopback run and a real cluster.  A task reads the attempt
directory's ``spec.json``, exchanges progress markers there and writes
``tasks/<job>-<i>/record.json``.  On a real cluster ``R`` is the run directory of
``profile --cluster``, and each attempt its ``attach.json`` names runs :func:`run_task` in a child.

Every captured task runs its own profiler session (``tf.profiler.experimental.start`` with
the harness's ``PROFILER_OPTIONS``, as a single-process variant): it starts when the capture
coordinator marks ``capture.start`` (every stepping task is ready).  A stepping task runs its
profiled steps once every other captured task marks ``tracing``, marks ``done``, stops its
profiler and moves its trace to ``tensorboard/plugins/profile/<run>/<host>_<port>.xplane.pb``
(``traced``); a ps or serving worker stops when the coordinator marks ``capture.stop`` (every
stepping task is done).  No remote capture: its gRPC handler polls every millisecond in every
task while it traces, which cost up to 5 % of a core per task here.

A ``multi_worker`` task leaves only after every peer's ``done`` and the driver's ``release``: no
ring peer loses it mid-way.  In a ``parameter_server`` run one step is one closure per worker,
each on its shard of the batch; the first two steps (the losses compared across variants) are
one closure on the whole batch.

A user's ``build_step(strategy, devices)`` runs on ``multi_worker`` only.  A task ends with
``os._exit`` after its record is written (no TensorFlow teardown, no coordination-service
shutdown barrier), keeps its own deadline and leaves as soon as the driver marks ``abort``.

Imported only inside a task process: it imports TensorFlow.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.coord import CAPTURE, END_POLL_S, Coord, CoordTimeout, write_marker
from tfprof_towers.capture.cluster.docs import (
    MULTI_WORKER,
    TENSORBOARD,
    TaskSpec,
    read_spec,
    task_dir,
    trace_path,
)
from tfprof_towers.capture.cluster.spec import Cluster, ClusterError, TaskId
from tfprof_towers.capture.families import PROFILER_OPTIONS, Phases, import_tensorflow
from tfprof_towers.rundir.paths import logdir_xplanes
from tfprof_towers.vocab import phase, textcap
from tfprof_towers.vocab.errors import TowersError


@dataclass
class TaskDraft:
    """The task's record under construction (written as ``record.json`` however the task ends)."""

    task: str
    address: str
    pid: int
    status: str = "failed"
    error: str | None = None
    stage: str = "start"
    phases: Phases = field(default_factory=Phases)
    doc: dict[str, Any] = field(default_factory=dict)  # timings, math, placement, ...

    def timed(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, its wall time added to the phase ``name`` (as a runner's phases)."""
        return self.phases.run(name, fn, *args, **kwargs)

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "address": self.address, "pid": self.pid, "status": self.status,
                "error": self.error, "stage": self.stage, "phases_s": dict(self.phases.seconds), **self.doc}


@dataclass(frozen=True)
class Ctx:
    """What every phase of a task needs."""

    spec: TaskSpec
    cluster: Cluster
    me: TaskId
    coord: Coord
    draft: TaskDraft
    tf: Any

    def abort(self) -> str | None:
        return self.coord.failure(self.cluster.tasks())

    def stage(self, name: str) -> None:
        self.draft.stage = name
        inject(self.spec, self.me, name)


# Test faults (TaskSpec.faults; the driver takes them from TFPROF_TOWERS_CLUSTER_FAULTS)
def inject(spec: TaskSpec, me: TaskId, point: str) -> None:
    """``segv``, ``abort``, ``exit``, ``raise`` or ``hang`` at ``point`` (a stage, ``profiled_step_<i>``)."""
    kind, where = spec.fault(me)
    if where != point:
        return
    sys.stderr.flush()
    if kind == "segv":
        os.kill(os.getpid(), 11)
    elif kind == "abort":
        os.abort()
    elif kind == "exit":
        os._exit(7)
    elif kind == "raise":
        raise RuntimeError(f"injected fault at {point}")
    elif kind == "hang":
        while True:
            time.sleep(3600)


def step_loop(ctx: Ctx, step: Callable[[], Any], n: int, marker: bool,
              prefix: str = "") -> tuple[list[float], list[float], list[list[float]]]:
    """``n`` calls of ``step`` (result fetched), profiled ones in ``train`` markers: each one's wall
    time, process CPU time (every thread of the task) and unix span."""
    from tfprof_towers.capture.families.tf2_strategy import _fetch

    times, cpu, spans = [], [], []
    delay = float(ctx.spec.straggle_s.get(str(ctx.me), 0.0))
    for i in range(n):
        if prefix:
            inject(ctx.spec, ctx.me, f"{prefix}_{i}")
        t0, u0, c0 = time.perf_counter(), time.time(), time.process_time()
        if marker:
            with ctx.tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                if delay:
                    time.sleep(delay)  # a deliberately slow task (tests, the straggler demo)
                _fetch(step())
        else:
            _fetch(step())
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        spans.append([u0, time.time()])
    return times, cpu, spans


def run_steps(ctx: Ctx, step: Callable[[], Any], n: int, marker: bool, prefix: str = "",
              cpu_key: str | None = None) -> list[float]:
    """``n`` calls of ``step`` (:func:`step_loop`): their wall times; profiled ones' spans in the record.

    With ``cpu_key``, each step's process CPU time (every thread of the task) goes in the record there.
    """
    times, cpu, spans = step_loop(ctx, step, n, marker, prefix)
    if cpu_key:
        ctx.draft.doc[cpu_key] = cpu
    if marker:
        ctx.draft.doc["profiled_spans_unix"] = spans
    return times


def profile_dir(ctx: Ctx) -> Path:
    """The task's own profiler log directory (its trace moves out of it once collected)."""
    return task_dir(ctx.coord.root, ctx.me) / "profile"


def profiler_on(ctx: Ctx) -> None:
    """This task's profiler session on, with the harness's options; then ``tracing``."""
    profiler = ctx.tf.profiler.experimental
    profiler.start(str(profile_dir(ctx)), options=profiler.ProfilerOptions(**PROFILER_OPTIONS))
    ctx.coord.mark(ctx.me, "tracing")


def profiler_off(ctx: Ctx) -> str:
    """This task's profiler session off: its trace collected and moved where the capture's traces go
    (the run folder ``capture.start`` names, under the task's address); ``traced``.  The file's path
    under the attempt's log directory."""
    ctx.tf.profiler.experimental.stop()
    written = logdir_xplanes(profile_dir(ctx))
    run = (ctx.coord.read(CAPTURE, "start") or {}).get("run")
    if not written or not run:
        raise ClusterError(f"the profiler wrote no trace in {profile_dir(ctx)}")
    dest = trace_path(ctx.coord.root, str(run), ctx.cluster.host_file(ctx.me))
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(written[-1], dest)
    rel = str(dest.relative_to(Path(ctx.coord.root) / TENSORBOARD))
    ctx.coord.mark(ctx.me, "traced", file=rel)
    return rel


def start_tracing(ctx: Ctx, peers: list[TaskId]) -> None:
    """Until ``capture.start``; this task's profiler on; until every other captured task traces too
    (a fine poll: the first profiled step of every task starts within a few ms of the others')."""
    d, limit = ctx.draft, ctx.spec.timeouts.capture_start_s
    d.timed(phase.WAIT_CAPTURE, ctx.coord.wait, [CAPTURE], "start", limit, poll_s=0.002, abort=ctx.abort)
    d.timed(phase.PROFILER_START, profiler_on, ctx)
    d.timed(phase.WAIT_CAPTURE, ctx.coord.wait, peers, "tracing", limit, poll_s=0.002, abort=ctx.abort)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else 0.0


def timed_and_ready(ctx: Ctx, step: Callable[[], Any], min_warmup: int = 0) -> None:
    """Warm-up (beyond the two math calls; at least ``min_warmup``), timed steps, the bench's paired
    blocks where the spec asks for them (multi_worker only: the driver refuses them elsewhere), ``ready``."""
    d = ctx.draft
    ctx.stage("warmup")
    d.timed(phase.WARMUP, run_steps, ctx, step, max(ctx.spec.warmup - 2, min_warmup), False)
    ctx.stage("timed")
    times = d.timed(phase.TIMED, run_steps, ctx, step, ctx.spec.steps, False, cpu_key="step_cpu_s")
    d.doc["step_times_s"] = times
    if ctx.spec.overhead_rounds:
        d.timed(phase.OVERHEAD, overhead_rounds, ctx, step)
    ctx.coord.mark(ctx.me, "ready", median_step_s=median(times))


def overhead_rounds(ctx: Ctx, step: Callable[[], Any]) -> None:
    """The profiler-overhead bench's paired blocks (``TaskSpec.overhead_rounds``; none by default).

    Each round is an un-profiled and a profiled block of ``overhead_block_steps`` steps, the order
    flipping every round, as the single-process variants are measured.  A profiled block runs under
    its own profiler session with the harness's options (trace discarded); every stepping task starts
    each block only once all have marked it (after the session's start, after the last one's
    collection), so neither start nor stop is in a step.  ``overhead_blocks`` in the record: wall
    and CPU times per block, by kind, and the sessions' start and stop times.
    """
    import shutil

    rounds, n = ctx.spec.overhead_rounds, ctx.spec.overhead_block_steps

    profiler = ctx.tf.profiler.experimental
    peers = [t for t in map(TaskId.parse, ctx.spec.ready_tasks) if t != ctx.me]
    scratch = task_dir(ctx.coord.root, ctx.me) / "overhead-profile"
    out: dict[str, list[Any]] = {k: [] for k in ("on", "off", "on_cpu", "off_cpu", "start_s", "stop_s")}
    ctx.stage("overhead")
    for r in range(rounds):
        for kind in ("off", "on") if r % 2 == 0 else ("on", "off"):
            if kind == "on":
                t0 = time.perf_counter()
                profiler.start(str(scratch), options=profiler.ProfilerOptions(**PROFILER_OPTIONS))
                out["start_s"].append(time.perf_counter() - t0)
            event = f"overhead-{r}-{kind}"
            ctx.coord.mark(ctx.me, event)
            ctx.coord.wait(peers, event, ctx.spec.timeouts.collective_s, poll_s=0.002, abort=ctx.abort)
            times, cpu, _ = step_loop(ctx, step, n, kind == "on")
            if kind == "on":
                t0 = time.perf_counter()
                profiler.stop()
                out["stop_s"].append(time.perf_counter() - t0)
                shutil.rmtree(scratch, ignore_errors=True)
            out[kind].append(times)
            out[f"{kind}_cpu"].append(cpu)
    ctx.draft.doc["overhead_blocks"] = out


def profiled(ctx: Ctx, step: Callable[[], Any]) -> None:
    """The profiled steps between this task's profiler start and stop; ``done`` after the steps."""
    d = ctx.draft
    peers = [t for t in map(TaskId.parse, ctx.spec.capture_tasks) if t != ctx.me]
    ctx.stage("wait_capture")
    t0 = time.monotonic()
    start_tracing(ctx, peers)
    d.doc["wait_tracing_s"] = time.monotonic() - t0
    ctx.stage("profiled")
    d.doc["profiled_step_times_s"] = d.timed(phase.PROFILED, run_steps, ctx, step, ctx.spec.profile_steps,
                                             True, "profiled_step", cpu_key="profiled_step_cpu_s")
    ctx.stage("after_profiled")
    ctx.coord.mark(ctx.me, "done")
    ctx.stage("collect")
    d.timed(phase.COLLECT, profiler_off, ctx)


def mwms(ctx: Ctx) -> Any:
    """``MultiWorkerMirroredStrategy``: RING on CPUs, NCCL where this task has GPUs; bounded waits."""
    tf = ctx.tf
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    # the constructor's barrier all-reduce waits forever by default (private API; see docs/cluster.md)
    cars.CollectiveAllReduceExtended._check_health_initial_timeout = int(ctx.spec.timeouts.startup_s)
    impl = tf.distribute.experimental.CommunicationImplementation
    gpus = tf.config.list_physical_devices("GPU")
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl.NCCL if gpus else impl.RING, timeout_seconds=ctx.spec.timeouts.collective_s)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def task_devices(ctx: Ctx) -> Any:
    """What a ``build_step`` gets: the task's host CPU and its GPUs (none on a CPU cluster)."""
    from tfprof_towers.capture.devices import Devices

    gpus = len(ctx.tf.config.list_physical_devices("GPU"))
    n = gpus if ctx.spec.accelerators is None else min(gpus, ctx.spec.accelerators)
    return Devices("/cpu:0", tuple(f"/gpu:{i}" for i in range(n)), "gpu" if n else "cpu", ctx.spec.preset)


def build_mw_step(ctx: Ctx, strategy: Any) -> tuple[Any, list[str], str]:
    """The step (seed, or the user's ``build_step``), the user's files, and where it comes from."""
    from tfprof_towers.capture import seed_step
    from tfprof_towers.capture.families.tf2_strategy import check_step

    devices = task_devices(ctx)
    if ctx.spec.file:
        from tfprof_towers.capture.tf2.files import load_step_file

        origin = f"variant file {ctx.spec.file}"
        f = load_step_file(ctx.spec.file)
        return check_step(f.build_step(strategy, devices), origin), [ctx.spec.file], origin
    step = seed_step.build_seed_step(strategy, devices)
    return step, [seed_step.__file__], f"built-in variant {ctx.spec.variant}"


def run_multi_worker(ctx: Ctx) -> None:
    from tfprof_towers.capture.families.tf2_strategy import first_math
    from tfprof_towers.capture.tf2.placement import collect_partition_graphs, strategy_placement
    from tfprof_towers.capture.tf2.strategies import describe

    d = ctx.draft
    peers = [t for t in ctx.cluster.tasks("chief", "worker") if t != ctx.me]
    ctx.stage("strategy")
    ctx.coord.mark(ctx.me, "strategy")  # the constructor returns only when every worker is there
    strategy = d.timed(phase.STRATEGY_INIT, mwms, ctx)
    ctx.coord.mark(ctx.me, "server_up", port=ctx.cluster.port(ctx.me))
    d.doc["strategy"] = describe(strategy)
    ctx.stage("build")
    step, files, origin = d.timed(phase.BUILD, build_mw_step, ctx, strategy)
    ctx.stage("placement")
    meta, first = d.timed(phase.FIRST_CALL_PLACEMENT, collect_partition_graphs, step)
    placement = d.timed(phase.PLACEMENT_EXTRACT, strategy_placement, step.get_concrete_function(), meta,
                        files)
    d.doc["placement"] = {**placement, "strategy": d.doc["strategy"]}
    second = d.timed(phase.SECOND_CALL, step)
    d.doc["math"] = first_math(first, second, origin).to_json()
    timed_and_ready(ctx, step)
    profiled(ctx, step)
    ctx.stage("wait_peers")
    d.timed(phase.WAIT_PEERS, ctx.coord.wait, peers, "done", ctx.spec.timeouts.peer_s, poll_s=END_POLL_S,
            abort=ctx.abort)


def serve(ctx: Ctx) -> None:
    """A ps or worker task: a ``tf.distribute.Server`` until the driver releases it (bounded)."""
    d = ctx.draft
    ctx.stage("server")
    server = d.timed(phase.SERVER_START, ctx.tf.distribute.Server, ctx.cluster.to_dict(), job_name=ctx.me.job,
                     task_index=ctx.me.index, protocol="grpc", start=True)
    ctx.coord.mark(ctx.me, "server_up", port=ctx.cluster.port(ctx.me), target=server.target)
    d.doc["server"] = server.target
    if ctx.spec.fault(ctx.me)[1] == "serving":  # tests: fail while the chief runs its steps
        ctx.coord.wait(ctx.cluster.tasks("chief"), "ready", ctx.spec.timeouts.serve_s, abort=ctx.abort)
        time.sleep(0.2)
    ctx.stage("serving")
    if str(ctx.me) in ctx.spec.capture_tasks:
        traced_serving(ctx)
    d.timed(phase.SERVING, ctx.coord.wait, ["driver"], "release", ctx.spec.timeouts.serve_s,
            abort=ctx.coord.aborted)


def traced_serving(ctx: Ctx) -> None:
    """A captured server: its profiler on from ``capture.start`` to ``capture.stop`` (the chief's
    profiled steps run in between, once every captured task traces)."""
    d, limit = ctx.draft, ctx.spec.timeouts.serve_s
    d.timed(phase.SERVING, ctx.coord.wait, [CAPTURE], "start", limit, poll_s=0.005, abort=ctx.coord.aborted)
    d.timed(phase.PROFILER_START, profiler_on, ctx)
    d.timed(phase.SERVING, ctx.coord.wait, [CAPTURE], "stop", limit, abort=ctx.coord.aborted)
    ctx.stage("collect")
    d.timed(phase.COLLECT, profiler_off, ctx)
    d.stage = "serving"


def op_bytes(graph: Any) -> dict[str, int]:
    """Bytes of each op's first output in a step's function graph (static shapes only).

    The trace's cross-task ``_Send``/``_Recv`` name their rendezvous edge ``edge_<n>_<op>``:
    this table gives those edges their bytes (the trace's events carry none)."""
    out = {}
    for op in graph.get_operations():
        if op.outputs and op.outputs[0].shape.is_fully_defined() and op.outputs[0].dtype.size:
            out[op.name] = int(op.outputs[0].shape.num_elements() * op.outputs[0].dtype.size)
    return out


def op_table(graph: Any) -> dict[str, list[Any]]:
    """Each op of a step's function graph (nested functions inlined, under Grappler's names):
    ``[type, FLOPs (None: shapes unknown), consumers]``.  The driver finds in the tasks' traces which
    of them ran where (the ops Grappler fused away through their consumers; :mod:`.edges`)."""
    from tfprof_towers.capture.placement import op_flops
    from tfprof_towers.capture.tf2.placement import InlinedGraph

    out: dict[str, list[Any]] = {}
    for op in InlinedGraph(graph).get_operations():
        try:
            consumers = sorted({c.name for t in op.outputs for c in t.consumers()})
        except (AttributeError, ValueError):
            consumers = []
        out[op.name] = [op.type, op_flops(op), consumers]
    return out


def ps_placement(ctx: Ctx, strategy: Any, step: Any, x: Any, shard: Any) -> dict[str, Any]:
    """Where the variables live (the ps tasks), the bytes of the step graph's tensors, and the ops of
    the closure each worker runs per step (its shard of the batch) for the driver to place."""
    from tfprof_towers.capture.tf2.strategies import describe
    from tfprof_towers.vocab.device_names import canonical_device

    graph = step.get_concrete_function(x).graph  # the coordinator's trace (no retrace)
    variables = [{"name": v.name, "device": canonical_device(v.device),
                  "bytes": int(v.shape.num_elements() * v.dtype.size)}
                 for v in graph.variables]
    return {"strategy": {**describe(strategy), "workers": len(ctx.cluster.tasks("worker")),
                         "ps": len(ctx.cluster.tasks("ps"))},
            "variables": variables, "op_bytes": op_bytes(graph),
            "ops": op_table(step.get_concrete_function(shard).graph)}


def run_chief(ctx: Ctx) -> None:
    tf = ctx.tf
    from tfprof_towers.capture import seed_step
    from tfprof_towers.capture.families.tf2_strategy import first_math
    from tfprof_towers.capture.seed_values import shared_seed_values

    d = ctx.draft
    servers = ctx.cluster.tasks("ps", "worker")
    workers = ctx.cluster.tasks("worker")
    ctx.stage("wait_servers")
    d.timed(phase.WAIT_SERVERS, ctx.coord.wait, servers, "server_up", ctx.spec.timeouts.startup_s,
            abort=ctx.abort)
    ctx.stage("strategy")
    ctx.coord.mark(ctx.me, "strategy")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = d.timed(phase.STRATEGY_INIT, tf.distribute.experimental.ParameterServerStrategy, resolver)
    coordinator = d.timed(phase.COORDINATOR_INIT, tf.distribute.experimental.coordinator.ClusterCoordinator,
                          strategy)
    ctx.coord.mark(ctx.me, "server_up", port=ctx.cluster.port(ctx.me))
    ctx.stage("build")
    p = ctx.spec.preset
    values = shared_seed_values(p.batch, p.dim, p.blocks)
    step = d.timed(phase.BUILD, seed_step.seed_step, strategy, values, "/cpu:0", takes_input=True)
    x = tf.constant(values.x)
    shards = tf.split(x, len(workers), axis=0) if len(workers) > 1 else [x]

    def whole() -> Any:
        r = coordinator.schedule(step, args=(x,))
        coordinator.join()
        return r.fetch()

    def one() -> Any:  # one step: every worker's shard, scheduled and joined
        rvs = [coordinator.schedule(step, args=(s,)) for s in shards]
        coordinator.join()
        return rvs[-1].fetch()

    ctx.stage("placement")
    first = d.timed(phase.FIRST_CALL, whole)
    d.doc["placement"] = d.timed(phase.PLACEMENT_EXTRACT, ps_placement, ctx, strategy, step, x, shards[0])
    d.doc["strategy"] = d.doc["placement"]["strategy"]
    second = d.timed(phase.SECOND_CALL, whole)
    origin = f"built-in variant {ctx.spec.variant}"
    d.doc["math"] = first_math(first, second, origin).to_json()
    timed_and_ready(ctx, one, min_warmup=1)  # the math calls ran the whole batch: trace the shards' step
    profiled(ctx, one)


def dispatch(ctx: Ctx) -> None:
    job, family = ctx.me.job, ctx.spec.family
    if family == MULTI_WORKER and job in ("chief", "worker"):
        run_multi_worker(ctx)
    elif family != MULTI_WORKER and job in ("ps", "worker"):
        serve(ctx)
        return
    elif family != MULTI_WORKER and job == "chief":
        run_chief(ctx)
    else:
        raise ClusterError(f"{family}: no role for task {ctx.me} (jobs: chief, ps, worker)")
    # stay up (ring peers, the ps tasks' servers) until the driver has every trace
    ctx.stage("wait_release")
    ctx.draft.timed(phase.WAIT_RELEASE, ctx.coord.wait, ["driver"], "release", ctx.spec.timeouts.release_s,
                    poll_s=END_POLL_S, abort=ctx.coord.aborted)


def error_line(exc: BaseException, limit: int = 300) -> str:
    """TensorFlow's error text without its stack ("Graph execution error", "Detected at node ...",
    ``[[{{node X}}]]``, "The error could be from a previous operation")."""
    keep = []
    for ln in str(exc).splitlines():
        s = ln.strip()
        if not s or ln[:1].isspace() or s.startswith((
                "Graph execution error", "Detected at node", 'File "', "[[{{node",
                "The error could be from a previous operation", "Additional GRPC error information")):
            continue
        keep.append(s)
    return textcap.one_line(" ".join(keep), limit) or type(exc).__name__


def watchdog(deadline_s: float, on_expire: Callable[[], None]) -> threading.Timer:
    """The task's own deadline: record why, then ``os._exit(124)`` (works while TensorFlow blocks)."""

    def expire() -> None:
        try:
            on_expire()
        finally:
            os._exit(124)

    timer = threading.Timer(deadline_s, expire)
    timer.daemon = True
    timer.start()
    return timer


def run_task(cluster_path: str, task: str, run_dir: str) -> int:
    """One task, start to end (``worker`` command); the exit code.  Writes its record however it ends."""
    started = time.time()
    faulthandler.enable(all_threads=True)  # a crash leaves every thread's Python stack in stderr
    cluster = Cluster.load(cluster_path)
    me = TaskId.parse(task)
    cluster.address(me)
    adir = Path(run_dir)  # the attempt folder (a run directory is served by cluster_worker)
    spec = read_spec(adir)
    coord = Coord(adir)
    tdir = task_dir(adir, me)
    tdir.mkdir(parents=True, exist_ok=True)
    draft = TaskDraft(str(me), cluster.address(me), os.getpid())

    def finish(code: int) -> int:
        draft.doc["clock_unix"] = {"main_start": started, "main_end": time.time()}
        write_marker(tdir / "record.json", draft.to_json())
        if code:
            coord.mark(me, "failed", error=draft.error, stage=draft.stage,
                       waited_for=draft.doc.get("waited_for"))
        coord.mark(me, "left", status=draft.status)
        return code

    def expire() -> None:
        draft.error = f"task deadline of {spec.timeouts.task_s:g} s passed during {draft.stage}"
        finish(124)

    watchdog(spec.timeouts.task_s, expire)
    coord.mark(me, "started")
    os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config(me))
    code = 0
    try:
        draft.stage = "import"
        tf = draft.timed(phase.TF_IMPORT, import_tensorflow)
        draft.doc["versions"] = {"tensorflow": tf.__version__}
        coord.mark(me, "imported")
        ctx = Ctx(spec, cluster, me, coord, draft, tf)
        inject(spec, me, "imported")
        dispatch(ctx)
        draft.stage, draft.status = "done", "ok"
    except CoordTimeout as exc:
        draft.error = f"{exc} during {draft.stage}"
        draft.doc["waited_for"] = {"event": exc.event, "missing": exc.missing, "reason": exc.reason}
        code = 3
    except TowersError as exc:
        draft.error = f"{exc.message} (during {draft.stage})"
        code = 3
    except Exception as exc:  # TensorFlow's errors too: one line in the record, the traceback on stderr
        traceback.print_exc()
        draft.error = f"{type(exc).__name__} during {draft.stage}: {error_line(exc)}"
        code = 3
    return finish(code)


