"""A user's Keras model under a tf2-strategy variant: one training step traced, never run; its graph and work.

:func:`keras_step_graph` builds and compiles the ``--keras-model`` file's model in the
variant's strategy scope, over logical CPU devices standing in for the target's
accelerators (``/cpu:0`` the host, ``/cpu:1..N``), and traces one step of Keras' own
train step (``model.train_step`` under ``strategy.run``, the outputs reduced as
``fit`` reduces them) into a ``tf.function`` graph.  ``get_concrete_function`` runs
nothing: no weight is initialised on a device that does not exist, no batch is read.

The batch: ``make_dataset(global batch)`` is called for its element spec only (the
shapes and dtypes of one ``(x, y)`` batch); a zero-cost stand-in batch of those
shapes lives on the host and is split there over the replicas, as the seed's
tf2-strategy graphs are fed (:mod:`.strategy_graphs`), so the input's host->device
copies are on the links.  The global batch is the file's ``GLOBAL_BATCH_SIZE``
unless the caller gives one.

The graph is then placed and costed exactly as the seed's strategies' graphs
(:func:`.graphcost.extract_work`, devices renamed to the layout's), and on a GPU
layout its memory per device comes from :func:`.graphcost.estimate_memory`.

Imports TensorFlow and Keras: :func:`.api.build_graphs` runs it in a child
(``python -P -m tfprof_towers.projection.keras_graphs SPEC.json``), as :mod:`.strategy_graphs`.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.vocab.errors import VariantError


@dataclass(frozen=True)
class KerasGraph:
    """One Keras training step traced under a strategy: the graph, what a step fetches, its work on
    the layout (JSON-able, as :func:`.graphcost.extract_work` gives it) and the global batch."""

    graph: Any
    fetches: list[Any]
    work: dict[str, Any]
    global_batch: int
    keep: tuple[Any, ...]  # the model, strategy and concrete function whose variables the graph captures


def stand_in_devices(count: int) -> tuple[str, tuple[str, ...]]:
    """The logical CPU devices a graph for ``count`` accelerators is traced on: host and accelerators."""
    return "/cpu:0", tuple(f"/cpu:{i + 1}" for i in range(count))


def configure_logical_devices(count: int) -> None:
    """Split the CPU into ``1 + count`` logical devices, if TensorFlow has not started yet.

    Raises :class:`VariantError` when the runtime already runs with fewer devices than needed.
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        config = [tf.config.LogicalDeviceConfiguration() for _ in range(1 + count)]
        tf.config.set_logical_device_configuration(cpu, config)
    except RuntimeError:  # already initialised: enough devices is all that matters
        have = len(tf.config.list_logical_devices("CPU"))
        if have < 1 + count:
            raise VariantError(f"cannot trace for {count} accelerators: TensorFlow already runs with "
                               f"{have} logical CPU devices") from None


def _strategy(variant: str, host: str, accelerators: tuple[str, ...]) -> Any:
    """The tf2-strategy built-in ``variant``'s strategy over the stand-in devices."""
    from tfprof_towers.capture.devices import Devices
    from tfprof_towers.variants import registry
    from tfprof_towers.variants.config import get_preset

    builder = registry.builtin_of(variant, registry.TF2_STRATEGY).load_builder()
    return builder(Devices(host, accelerators, "logical-cpu", get_preset("tiny")))


def batch_spec(dataset: Any, global_batch: int, origin: str) -> Any:
    """The dataset's element spec with every unknown dimension (the batch's) set to ``global_batch``."""
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise VariantError(f"{origin}: make_dataset() must return a tf.data.Dataset, "
                           f"got {type(dataset).__name__}")

    def known(spec: Any) -> Any:
        if not isinstance(spec, tf.TensorSpec) or spec.shape.rank is None:
            raise VariantError(f"{origin}: make_dataset() yields {spec}; the projection needs tensors "
                               "of known rank")
        return tf.TensorSpec([global_batch if d is None else d for d in spec.shape.as_list()], spec.dtype)

    return tf.nest.map_structure(known, dataset.element_spec)


def trace_train_step(model: Any, strategy: Any, host: str, spec: Any) -> Any:
    """One step of ``model.train_step`` under ``strategy`` as ``fit`` runs it, on a stand-in batch of
    ``spec`` held on ``host`` and split over the replicas there: the concrete function (not run)."""
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    for s in tf.nest.flatten(spec):
        if not s.shape or s.shape[0] % n:
            size = s.shape[0] if s.shape else 0
            raise VariantError(f"the global batch {size} does not split over {n} replicas")
    with tf.device(host):
        inputs = tf.nest.map_structure(lambda s: tf.zeros(s.shape, s.dtype), spec)
    try:
        from keras.src.backend.tensorflow.trainer import reduce_per_replica
    except ImportError:  # another Keras layout: the replicas' outputs as they are
        def reduce_per_replica(outputs: Any, strategy: Any, reduction: str) -> Any:
            return strategy.experimental_local_results(outputs)

    @tf.function(autograph=False)  # as Keras' own train function (do_not_convert), and much faster
    def train_step() -> Any:
        flat = tf.nest.flatten(inputs)
        with tf.device(host):
            shards = [tf.split(t, n, axis=0, name="split_batch") if n > 1 else [t] for t in flat]
        per_replica = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.nest.pack_sequence_as(inputs, [s[ctx.replica_id_in_sync_group] for s in shards]))
        outputs = strategy.run(model.train_step, args=(per_replica,))
        return reduce_per_replica(outputs, strategy, reduction="auto")

    return train_step.get_concrete_function()


def keras_cause(exc: BaseException, limit: int = 300) -> str:
    """The line of a Keras/TensorFlow tracing error that says what went wrong: the layer whose call
    failed and the first sentence of its message, without the traceback and the terminal's colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    calling = re.compile(r"when calling (\S+?)\.call")
    calls = [(i, m.group(1)) for i, line in enumerate(lines) if (m := calling.search(line))]
    if calls:  # the message follows the "Exception encountered when calling X.call()." line
        at, layer = calls[0]
        rest = [line for line in lines[at + 1:] if not line.startswith(("Arguments received", "•"))]
        cause = f"{layer}: {rest[0] if rest else ''}"
    else:
        cause = next((line for line in reversed(lines) if re.match(r"\w+(Error|Exception): ", line)),
                     lines[-1] if lines else type(exc).__name__)
    first = re.split(r"(?<=[a-z])\.(?=[A-Z ])", cause, maxsplit=1)[0]
    return " ".join(first.split())[:limit]


def build_compiled(model_file: str, strategy: Any) -> tuple[Any, Any]:
    """The file's model built and compiled in ``strategy``'s scope, and the loaded file."""
    import keras

    from tfprof_towers.capture.tf2.files import load_keras_file

    f = load_keras_file(model_file)
    with strategy.scope():
        model = f.build_model()
        if not isinstance(model, keras.Model):
            raise VariantError(f"keras model file {model_file}: build_model() must return a keras.Model, "
                               f"got {type(model).__name__}")
        kwargs = f.compile_arguments()
        kwargs.pop("steps_per_execution", None)  # one step is traced whatever the file asks
        model.compile(**kwargs)
    return model, f


def keras_step_graph(model_file: str, variant: str, layout: dict[str, Any],
                     batch: int | None = None) -> KerasGraph:
    """The Keras model of ``model_file`` under the tf2-strategy built-in ``variant`` on ``layout``'s
    accelerators (``{"host", "accelerators", "kind"}``, as :func:`.api.builder_layout` gives), one
    training step at the global ``batch`` (default: the file's ``GLOBAL_BATCH_SIZE``): its graph,
    fetches and work, devices named as ``layout`` names them.

    On a ``"gpu"`` layout the work carries ``memory`` (:func:`.graphcost.estimate_memory`).  Traced on
    logical CPU devices, configured here if TensorFlow has not started yet.  The model file's own errors
    are one-line :class:`VariantError`.
    """
    from tfprof_towers.projection.graphcost import estimate_memory, extract_work
    from tfprof_towers.projection.strategy_graphs import capture_devices, rename_devices, strategy_variables
    from tfprof_towers.vocab.device_names import canonical_device

    count = len(layout["accelerators"])
    configure_logical_devices(count)
    host, accelerators = stand_in_devices(count)
    strategy = _strategy(variant, host, accelerators)
    model, f = build_compiled(model_file, strategy)
    global_batch = batch or f.global_batch_size
    spec = batch_spec(f.make_dataset(global_batch), global_batch, f"keras model file {model_file}")
    try:
        with strategy.scope():  # the model's, metrics' and optimizer's variables, as fit builds them
            model._symbolic_build(data_batch=spec)
        concrete = trace_train_step(model, strategy, host, spec)
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as exc:  # the model under this strategy
        raise VariantError(f"Keras cannot build the model's training step under {variant}: "
                           f"{keras_cause(exc)}") from None
    graph = concrete.graph
    fetches = [*graph.outputs, *graph.control_outputs]
    work = extract_work(graph, fetches, host, accelerators, default_to_accelerator=(layout["kind"] == "gpu"),
                        preplaced=capture_devices(concrete, host), group_control_edges=True)
    mapping = {canonical_device(host): canonical_device(layout["host"])}
    mapping.update({canonical_device(c): canonical_device(g)
                    for c, g in zip(accelerators, layout["accelerators"])})
    work = rename_devices(work, mapping)
    if layout["kind"] == "gpu":
        work["memory"] = estimate_memory(graph, fetches, work, strategy_variables(concrete, mapping))
    work["variant"] = variant
    work["keras_model"] = {"file": str(model_file), "global_batch": int(global_batch)}
    return KerasGraph(graph, fetches, work, int(global_batch), (model, strategy, concrete))


def main(argv: list[str]) -> int:
    """Child entry, as :func:`.strategy_graphs.main`: SPEC.json names the layouts, the variants and
    ``keras`` (``{"file", "batch", "scale"}``); each variant's work goes to ``spec["out"]``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spec = json.loads(Path(argv[0]).read_text())
    import tensorflow as tf

    from tfprof_towers.capture.tf2.files import load_keras_file
    from tfprof_towers.projection.graphcost import write_works

    layouts = [spec.get(key) for key in ("layout", "check_layout")]
    configure_logical_devices(max(len(layout["accelerators"]) for layout in layouts if layout))
    keras, preset = spec["keras"], spec["preset"]["name"]

    def work_of(v: dict[str, Any], layout: dict[str, Any]) -> dict[str, Any]:
        batch = keras.get("batch") or load_keras_file(keras["file"]).global_batch_size
        work = keras_step_graph(keras["file"], v["name"], layout, batch * int(keras.get("scale") or 1)).work
        # the child's CPU time so far (all its threads): on a busy machine the wall time says little
        return {**work, "preset": preset, "build_cpu_s": time.process_time()}

    return write_works(spec, tf.__version__, work_of)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
