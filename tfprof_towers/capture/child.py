"""One variant, in its own process: build, warm up, time, trace placement, profile.

Run as ``python -m tfprof_towers.capture.child SPEC.json``.  The spec (written by
:mod:`.runner`) names the variant, sizes, step counts and output paths.  The
child writes ``record.json`` (atomically) whether the variant succeeds or raises;
if it crashes outright the parent writes the failed record instead.

Order of work, each phase timed: import TensorFlow, build the graph in a fresh
``tf.Graph`` (TF1 graph mode), create the session and initialise, warm-up
steps, one FULL_TRACE step for the partition graphs (not timed), timed steps
without the profiler, profiled steps under ``tf.profiler.experimental`` with
``train`` step markers, and the profiler's trace collection.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..config import Preset
from ..errors import TowersError
from ..rundir import write_json
from .stats import step_stats

#: Profiler settings: host ops (level 2: TF ops, which the analysis needs to attribute
#: CPU-device ops; not every runtime detail), no Python tracer, device (CUDA) tracer on.
#: `make bench` measures them against the alternatives: on the cpu preset every
#: variant's profiled / un-profiled median step time stays within 1.05 (about 1.01).
PROFILER_OPTIONS = {"host_tracer_level": 2, "python_tracer_level": 0, "device_tracer_level": 1}


class _Phases:
    """Wall time of each named phase, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def _import_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    return tf


def _builder(spec: dict[str, Any]):
    from . import variants

    if spec.get("file"):
        return variants.load_variant_file(spec["file"]), f"variant file {spec['file']}"
    return variants.BUILDERS[spec["name"]], f"built-in variant {spec['name']}"


def build_graph(tf, spec: dict[str, Any], devices):
    """The variant's training step in a fresh ``tf.Graph``: ``(graph, fetches, feed, init)``."""
    from .variants import check_built

    build, origin = _builder(spec)
    graph = tf.Graph()
    with graph.as_default():
        fetches, feed = check_built(build(devices), origin)
        init = tf.compat.v1.global_variables_initializer()
    return graph, fetches, feed, init


def new_session(tf, graph, devices):
    """A TF1 session on ``graph`` with one extra CPU device per logical-CPU accelerator."""
    n_cpu = 1 + (len(devices.accelerators) if devices.kind == "logical-cpu" else 0)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": n_cpu}, allow_soft_placement=True)
    return tf.compat.v1.Session(graph=graph, config=config)


def timed_steps(sess, fetches, feed, n: int, marker=None) -> list[float]:
    """Run ``n`` steps; each one's wall time (inside a ``train`` step marker when given)."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        if marker is None:
            sess.run(fetches, feed)
        else:
            with marker("train", step_num=i, _r=1):
                sess.run(fetches, feed)
        times.append(time.perf_counter() - t0)
    return times


def run_variant(spec: dict[str, Any], record: dict[str, Any]) -> None:
    """Fill ``record`` in place as each phase completes (so a failure keeps what was done)."""
    phases = _Phases()
    record["phases_s"] = phases.seconds
    record["stage"] = "import"
    tf = phases.run("tf_import", _import_tensorflow)
    record["versions"]["tensorflow"] = tf.__version__
    from .devices import plan_devices
    from .placement import extract_placement

    preset = Preset(**spec["preset"])
    gpus = len(tf.config.list_physical_devices("GPU"))
    devices = plan_devices(gpus, spec.get("accelerators"), preset)
    record["topology"] = devices.to_json()

    record["stage"] = "build"
    graph, fetches, feed, init = phases.run("build", build_graph, tf, spec, devices)

    record["stage"] = "session"
    sess = phases.run("session_init", new_session, tf, graph, devices)
    phases.run("session_init", sess.run, init)

    record["stage"] = "warmup"
    phases.run("warmup", timed_steps, sess, fetches, feed, spec["warmup"])

    record["stage"] = "placement"
    options = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True
    )
    meta = tf.compat.v1.RunMetadata()
    phases.run("placement_trace", sess.run, fetches, feed, options=options, run_metadata=meta)
    record["placement"] = phases.run("placement_extract", extract_placement, graph, meta)

    record["stage"] = "timed"
    times = phases.run("timed", timed_steps, sess, fetches, feed, spec["steps"])
    record["timings"]["step_times_s"] = times
    record["timings"]["step_time_s"] = step_stats(times)

    record["stage"] = "profiled"
    logdir = str(spec["logdir"])
    opts = tf.profiler.experimental.ProfilerOptions(**PROFILER_OPTIONS)
    phases.run("profiler_start", tf.profiler.experimental.start, logdir, options=opts)
    try:
        ptimes = phases.run(
            "profiled", timed_steps, sess, fetches, feed, spec["profile_steps"],
            tf.profiler.experimental.Trace,
        )
    finally:
        phases.run("collect", tf.profiler.experimental.stop)
    record["timings"]["profiled_step_times_s"] = ptimes
    record["timings"]["profiled_step_time_s"] = step_stats(ptimes)
    record["profiler_options"] = dict(PROFILER_OPTIONS)
    sess.close()
    record["stage"] = "done"
    record["status"] = "ok"


def new_record(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": 1,
        "name": spec["name"],
        "source": f"file:{spec['file']}" if spec.get("file") else "builtin",
        "status": "failed",
        "error": None,
        "stage": "start",
        "versions": {"python": platform.python_version()},
        "topology": None,
        "timings": {},
        "placement": None,
        "pid": os.getpid(),
    }


def main(argv: list[str]) -> int:
    started = time.time()
    spec = json.loads(Path(argv[0]).read_text())
    record = new_record(spec)
    code = 0
    try:
        run_variant(spec, record)
    except TowersError as exc:
        record["error"] = exc.message
        code = 3
    except Exception as exc:  # a variant's own bug: record it, with the traceback on stderr
        traceback.print_exc()
        first = " ".join(str(exc).split())[:300]
        record["error"] = f"{type(exc).__name__} during {record['stage']}" + (f": {first}" if first else "")
        code = 3
    # Wall-clock bounds of main(), so the parent can tell process start-up and
    # TensorFlow's shutdown apart from the phases (see runner.process_times).
    record["clock_unix"] = {"main_start": started, "main_end": time.time()}
    write_json(Path(spec["record"]), record)
    return code


def exit_now(code: int) -> None:
    """Leave without TensorFlow's interpreter teardown (about 0.6 s per child on CPU).

    Everything the child owes is on disk by then: the record is fsynced and
    renamed, the profiler has written its trace and the session is closed.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
