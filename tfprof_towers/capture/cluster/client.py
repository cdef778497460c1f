"""The profiler client of a cluster attempt, in its own process (``python -P -m ...client DIR``).

Every task's profiler service (its ``TF_CONFIG`` port) is asked for one trace at once.  Each
task writes its own ``<host>_<port>.xplane.pb`` into ``ATTEMPT_DIR/tensorboard/plugins/profile/<ts>/``:
the log directory is absolute, and on a real cluster a folder every machine can write.

TensorFlow 2.21 ignores ``options=`` for a remote capture (it logs "host_tracer_level
expects an i value"): the tasks are traced at the profiler's defaults, host tracer
level 2 and device tracer level 1 -- the levels a local capture of this tool uses --
without the Python tracer.  ``num_tracing_attempts`` only retries when *no* task
answered, so one attempt is made here and the driver retries the whole attempt.

Its own process so that the driver never imports TensorFlow and a crash or hang of the
client (gRPC too) is a recorded, killable failure.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from tfprof_towers.capture.child import exit_now
from tfprof_towers.capture.cluster.coord import CAPTURE, Coord
from tfprof_towers.capture.cluster.docs import CLUSTER_JSON, TaskSpec, read_spec
from tfprof_towers.capture.cluster.spec import Cluster, TaskId
from tfprof_towers.capture.families import import_tensorflow
from tfprof_towers.rundir.paths import logdir_xplanes
from tfprof_towers.vocab import textcap

#: What the remote capture used (the profiler's defaults; see the module docstring).
REMOTE_OPTIONS = {"host_tracer_level": 2, "python_tracer_level": 0, "device_tracer_level": 1}


def xplane_files(logdir: Path) -> list[str]:
    """The capture's trace files, relative to ``logdir``."""
    return [str(p.relative_to(logdir)) for p in logdir_xplanes(logdir)]


def duration_ms(spec: TaskSpec, ready: list[dict]) -> int:
    """The capture window: the spec's, else the profiled steps at 3x the slowest task's median timed
    step plus 0.5 s for the sessions to start and the tasks to agree (at least ``capture_min_ms``)."""
    if spec.capture_duration_ms:
        return int(spec.capture_duration_ms)
    step_s = max((float(r.get("median_step_s") or 0.0) for r in ready), default=0.0)
    return int(max(spec.capture_min_ms, 1000 * 3 * step_s * spec.profile_steps + 500))


def capture(attempt_dir: Path) -> int:
    spec = read_spec(attempt_dir)
    cluster = Cluster.load(attempt_dir / CLUSTER_JSON)
    coord = Coord(attempt_dir)
    targets = [TaskId.parse(t) for t in spec.capture_tasks]
    waiters = [TaskId.parse(t) for t in spec.ready_tasks]
    logdir = (attempt_dir / "tensorboard").resolve()
    t0 = time.perf_counter()
    tf = import_tensorflow()
    import_s = time.perf_counter() - t0
    coord.mark(CAPTURE, "started", import_s=import_s)
    try:
        waited = coord.wait(waiters, "ready", spec.timeouts.startup_s + spec.timeouts.capture_start_s,
                            abort=lambda: coord.failure(cluster.tasks()))
        service = cluster.profiler_service(targets)
        window = duration_ms(spec, [coord.read(t, "ready") or {} for t in waiters])
        start = time.time()
        tf.profiler.experimental.client.trace(service, str(logdir), window, num_tracing_attempts=1)
        end = time.time()
    except Exception as exc:  # TensorFlow raises RuntimeError("UNAVAILABLE: No trace event ...") and others
        traceback.print_exc()
        coord.mark(CAPTURE, "failed", error=textcap.one_line(f"{type(exc).__name__}: {exc}", 300))
        return 3
    coord.mark(CAPTURE, "done", service=service, duration_ms=window, trace_start_unix=start,
               trace_end_unix=end, import_s=import_s, waited_ready_s=waited, files=xplane_files(logdir),
               options=REMOTE_OPTIONS)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tfprof_towers.capture.cluster.client ATTEMPT_DIR", file=sys.stderr)
        return 2
    return capture(Path(argv[0]))


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
