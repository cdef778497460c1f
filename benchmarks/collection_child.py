"""Times a TF2 variant's first ``tf.function`` call, with graph collection on or off, in one process.

The child of :mod:`.bench_collection`: it configures the devices and builds the built-in variant's
step as ``capture.families.tf2_strategy`` builds them, then makes the step's first call -- Python
tracing, Grappler, partitioning and the first step -- either as the capture child makes it
(``collect_partition_graphs``: graph collection on, the run's metadata exported) or as a plain
program makes it (``step()``), and times that call alone.  Started as
``python -m benchmarks.collection_child SPEC RESULT`` or forked from the bench's fork server
(:func:`collection_entry`), so each call is a fresh process's first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.overhead_child import Skipped, child_main, tf2_variant
from tfprof_towers.rundir.paths import write_json

ON, OFF = "on", "off"


def first_call(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``{"variant", "mode", "first_call_s", "first_call_cpu_s", "tracing_count"}`` (wall and process CPU
    seconds), or ``{"variant", "skipped"}`` where the
    machine lacks what the variant needs."""
    from tfprof_towers.capture.families import tf2_strategy
    from tfprof_towers.capture.tf2.files import same_start
    from tfprof_towers.capture.tf2.placement import collect_partition_graphs

    try:
        _, devices, child, strategy, build_step = tf2_variant(spec)
    except Skipped as exc:
        return {"variant": spec["variant"], "skipped": str(exc)}
    same_start()
    step = tf2_strategy.check_step(build_step(strategy, devices), f"built-in variant {child.name}")
    t0, c0 = time.perf_counter(), time.process_time()
    if spec["mode"] == ON:
        collect_partition_graphs(step)
    else:
        step()
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"variant": child.name, "mode": spec["mode"], "first_call_s": took, "first_call_cpu_s": cpu,
            "tracing_count": int(step.experimental_get_tracing_count())}


def collection_entry(args: Sequence[str]) -> int:
    """The child as a call (forked from the fork server): ``[SPEC, RESULT]``."""
    write_json(Path(args[1]), first_call(json.loads(Path(args[0]).read_text())))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``SPEC RESULT``: the child as a process; exits without TensorFlow's teardown."""
    return child_main(argv, collection_entry, "python -m benchmarks.collection_child SPEC.json RESULT.json "
                      "(the child of benchmarks.bench_collection)")

if __name__ == "__main__":
    sys.exit(main())
