"""The capture coordinator of a cluster attempt, in its own process (``python -P -m ...client DIR``).

Each captured task runs its own profiler session (:mod:`.task`); this process says when, by
markers: once every stepping task is ``ready`` it marks ``capture.start`` (naming the run folder
of the traces), every captured task starts its profiler and marks ``tracing``, and the stepping
tasks run their profiled steps once all trace.  When every stepping task is ``done`` it marks
``capture.stop`` (the serving tasks of a ``parameter_server`` run stop then; a stepping task stops
after its own steps), and once every captured task has moved its trace to
``ATTEMPT_DIR/tensorboard/plugins/profile/<run>/<host>_<port>.xplane.pb`` (``traced``) it marks
``capture.done`` with the files.  On a real cluster the attempt folder is one every machine can
write, as the markers need.

No remote capture (``tf.profiler.experimental.client.trace``): TensorFlow 2.21's profiler service
polls every millisecond in each traced task for the whole window, up to 5 % of a core per task here
(the single-process variants' local session costs well under 1 %), and it ignores ``options=``.
The tasks are traced with the harness's ``PROFILER_OPTIONS``, as every other variant.

Its own process so that the driver's watch sees a crash or hang of the coordinator as a recorded,
killable failure.  Never imports TensorFlow.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tfprof_towers.capture.child import exit_now
from tfprof_towers.capture.cluster.coord import CAPTURE, END_POLL_S, Coord, CoordTimeout
from tfprof_towers.capture.cluster.docs import CLUSTER_JSON, TENSORBOARD, TaskSpec, read_spec
from tfprof_towers.capture.cluster.spec import Cluster, TaskId
from tfprof_towers.capture.families import PROFILER_OPTIONS
from tfprof_towers.rundir.paths import logdir_xplanes
from tfprof_towers.vocab import textcap


def xplane_files(logdir: Path) -> list[str]:
    """The capture's trace files, relative to ``logdir``."""
    return [str(p.relative_to(logdir)) for p in logdir_xplanes(logdir)]


def run_folder(unix: float) -> str:
    """The run folder of the traces, as TensorBoard's profiler names one: ``2026_12_05_12_01_50``."""
    return time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(unix))


def capture(attempt_dir: Path) -> int:
    spec: TaskSpec = read_spec(attempt_dir)
    cluster = Cluster.load(attempt_dir / CLUSTER_JSON)
    coord = Coord(attempt_dir)
    targets = [TaskId.parse(t) for t in spec.capture_tasks]
    waiters = [TaskId.parse(t) for t in spec.ready_tasks]
    logdir = (attempt_dir / TENSORBOARD).resolve()
    coord.mark(CAPTURE, "started")

    def abort() -> str | None:
        return coord.failure(cluster.tasks())

    try:
        waited = coord.wait(waiters, "ready", spec.timeouts.startup_s + spec.timeouts.capture_start_s,
                            abort=abort)
        start = time.time()
        coord.mark(CAPTURE, "start", run=run_folder(start), options=PROFILER_OPTIONS)
        coord.wait(waiters, "done", spec.timeouts.task_s, abort=abort)
        coord.mark(CAPTURE, "stop")
        coord.wait(targets, "traced", spec.timeouts.peer_s, poll_s=END_POLL_S, abort=abort)
        end = time.time()
    except CoordTimeout as exc:
        coord.mark(CAPTURE, "failed", error=textcap.one_line(str(exc), 300))
        return 3
    coord.mark(CAPTURE, "done", duration_ms=int(1000 * (end - start)), trace_start_unix=start,
               trace_end_unix=end, waited_ready_s=waited, files=xplane_files(logdir),
               options=PROFILER_OPTIONS)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tfprof_towers.capture.cluster.client ATTEMPT_DIR", file=sys.stderr)
        return 2
    return capture(Path(argv[0]))


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
