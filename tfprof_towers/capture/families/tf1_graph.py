"""The ``tf1-graph`` family: a ``tf.compat.v1`` graph run in a ``Session`` (the seed's dialect).

A variant's builder (a built-in from :mod:`tfprof_towers.capture.tf1.builders`, or a
user's file with ``build_variant(devices)``) runs inside a fresh ``tf.Graph`` and
returns ``(fetches, feed_dict)`` for one training step.  The first two steps fetch the
exposed loss and gradient norm (:mod:`..mathcheck`) and count as warm-up; one ``FULL_TRACE``
step after the warm-up gives the partition graphs (not timed).

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from tfprof_towers.capture.devices import Devices, plan_devices
from tfprof_towers.capture.families import Draft, timed_calls, timed_then_profiled
from tfprof_towers.capture.families import import_tensorflow as _import_tensorflow
from tfprof_towers.rundir.records import OK, ChildSpec
from tfprof_towers.variants import registry
from tfprof_towers.vocab import phase


def import_tensorflow() -> Any:
    tf = _import_tensorflow()
    tf.compat.v1.disable_eager_execution()
    return tf


def builder(name: str, file: str | None) -> tuple[Any, str]:
    """The variant's builder function and where it comes from (for error messages)."""
    from tfprof_towers.capture.tf1 import builders as variants

    if file:
        return variants.load_variant_file(file), f"variant file {file}"
    return registry.builtin_of(name, registry.TF1_GRAPH).load_builder(), f"built-in variant {name}"


def build_graph(tf: Any, name: str, file: str | None, devices: Devices) -> tuple[Any, Any, dict, Any]:
    """The variant's training step in a fresh ``tf.Graph``: ``(graph, fetches, feed, init)``."""
    from tfprof_towers.capture.tf1.builders import check_built

    build, origin = builder(name, file)
    graph = tf.Graph()
    with graph.as_default():
        fetches, feed = check_built(build(devices), origin)
        init = tf.compat.v1.global_variables_initializer()
    return graph, fetches, feed, init


def new_session(tf: Any, graph: Any, devices: Devices) -> Any:
    """A TF1 session on ``graph`` with one extra CPU device per logical-CPU accelerator."""
    n_cpu = 1 + (len(devices.accelerators) if devices.kind == "logical-cpu" else 0)
    config = tf.compat.v1.ConfigProto(device_count={"CPU": n_cpu}, allow_soft_placement=True)
    return tf.compat.v1.Session(graph=graph, config=config)


def held_bytes(tf: Any, graph: Any, placement: dict[str, Any]) -> dict[str, int]:
    """Bytes of the graph's variables (and optimizer slots) per device, where the step placed them."""
    from tfprof_towers.capture.placement import variable_bytes

    placed = {n["name"]: n["device"] for n in placement["nodes"]}
    return variable_bytes(graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES), placed)


def run(spec: ChildSpec, draft: Draft) -> None:
    """Run one TF1-graph variant, filling ``draft`` as each phase completes."""
    phases = draft.phases
    draft.stage = "import"
    tf = phases.run(phase.TF_IMPORT, import_tensorflow)
    draft.versions["tensorflow"] = tf.__version__
    from tfprof_towers.capture.placement import extract_placement

    gpus = len(tf.config.list_physical_devices("GPU"))
    devices = plan_devices(gpus, spec.accelerators, spec.preset)
    draft.topology = devices.topology()

    draft.stage = "build"
    graph, fetches, feed, init = phases.run(phase.BUILD, build_graph, tf, spec.name, spec.file, devices)

    draft.stage = "session"
    sess = phases.run(phase.SESSION_INIT, new_session, tf, graph, devices)
    phases.run(phase.SESSION_INIT, sess.run, init)
    from tfprof_towers.capture.mathcheck import MATH_STEPS, first_steps, load_initial_values

    phases.run(phase.LOAD_VALUES, load_initial_values, sess, graph)

    draft.stage = "math"
    draft.math = phases.run(phase.MATH, first_steps, sess, fetches, feed, graph)
    done = MATH_STEPS if draft.math is not None else 0

    step = partial(sess.run, fetches, feed)
    draft.stage = "warmup"
    phases.run(phase.WARMUP, timed_calls, step, max(spec.warmup - done, 0))

    draft.stage = "placement"
    options = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True
    )
    meta = tf.compat.v1.RunMetadata()
    phases.run(phase.PLACEMENT_TRACE, sess.run, fetches, feed, options=options, run_metadata=meta)
    draft.placement = phases.run(phase.PLACEMENT_EXTRACT, extract_placement, graph, meta)
    draft.placement = {**draft.placement, "variable_bytes": held_bytes(tf, graph, draft.placement)}

    timed_then_profiled(tf, spec, draft, step)
    sess.close()
    draft.stage = "done"
    draft.status = OK
