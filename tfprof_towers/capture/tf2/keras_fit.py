"""A user's Keras model (``--keras-model FILE``) trained with ``model.fit`` under a strategy variant.

The file's API is in :mod:`.files`.  Two ``fit`` calls, each phase timed:

1. ``fit(epochs=2, steps_per_epoch=1)`` with graph collection on: the train
   function's first instantiation gives the partition graphs after Grappler
   (placement), and -- metrics reset every epoch -- each epoch's ``logs["loss"]``
   is exactly that step's loss: losses 1 and 2.  (Two epochs of one step, not one
   epoch of two: under ``CentralStorageStrategy`` Keras' running mean within an
   epoch weighs the first step twice.)  Both steps train on the dataset's first
   batch, read right after seeding (:func:`first_batch_again`): the same in every variant.
2. One ``fit`` for the warm-up, timed and profiled batches, with the :class:`Phases` callback
   (overriding ``on_train_batch_end`` makes Keras call the callbacks synchronously; Keras 3
   emits no step markers, so it does).  One call, because the first batch of every ``fit``
   pays for iterator set-up.

Placement: ``model.train_function`` is a closure over ``multi_step_on_iterator``
(a ``tf.function``) that calls ``one_step_on_data``; :func:`train_concrete_function`
picks the outer one, and :class:`.placement.InlinedGraph` names the inner ops as
the inlined partition graphs do.  The input batches do not appear there: a
distributed dataset prefetches them to the devices in its own functions.

Imported only inside a capture child: it imports TensorFlow and Keras.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import keras
import tensorflow as tf

from tfprof_towers.capture.families import PROFILER_OPTIONS, Draft
from tfprof_towers.capture.stats import step_stats
from tfprof_towers.rundir.records import OK, ChildSpec, MathCheck
from tfprof_towers.vocab import phase
from tfprof_towers.vocab.errors import VariantError


class LossPerEpoch(keras.callbacks.Callback):
    """``logs["loss"]`` at the end of every epoch (of one step each: that step's loss)."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.losses.append(float((logs or {})["loss"]))


class Phases(keras.callbacks.Callback):
    """Warm-up batches ``[0, w)``, timed ``[w, w+t)``, profiled ``[w+t, w+t+p)`` of one ``fit`` call."""

    def __init__(self, warmup: int, timed: int, profiled: int, logdir: str, options: Any) -> None:
        super().__init__()
        self.warmup, self.timed, self.profiled = warmup, timed, profiled
        self.logdir, self.options = logdir, options
        self.times: list[float] = []
        self.profiler_s = {phase.PROFILER_START: 0.0, phase.COLLECT: 0.0}
        self._marker: Any = None
        self._on = False
        self._t0 = 0.0

    def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        first_profiled = self.warmup + self.timed
        if batch == first_profiled:
            t = time.perf_counter()
            tf.profiler.experimental.start(self.logdir, options=self.options)
            self.profiler_s[phase.PROFILER_START] = time.perf_counter() - t
            self._on = True
        if self._on:
            self._marker = tf.profiler.experimental.Trace("train", step_num=batch - first_profiled, _r=1)
            self._marker.__enter__()
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        self.times.append(time.perf_counter() - self._t0)
        if self._marker is not None:
            self._marker.__exit__(None, None, None)
            self._marker = None
        if self._on and batch == self.warmup + self.timed + self.profiled - 1:
            self.stop()

    def stop(self) -> None:
        if self._on:
            t = time.perf_counter()
            tf.profiler.experimental.stop()
            self.profiler_s[phase.COLLECT] = time.perf_counter() - t
            self._on = False

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        self.stop()

    def split(self) -> tuple[list[float], list[float], list[float]]:
        w, t = self.warmup, self.timed
        return self.times[:w], self.times[w:w + t], self.times[w + t:]


def train_concrete_function(model: Any) -> Any:
    """The concrete function ``fit`` ran: ``multi_step_on_iterator``, traced exactly once."""
    for cell in getattr(model.train_function, "__closure__", None) or ():
        fn = cell.cell_contents
        name = str(getattr(fn, "__name__", ""))
        if "multi_step_on_iterator" in name and hasattr(fn, "get_concrete_function"):
            concrete = fn._list_all_concrete_functions()
            if len(concrete) != 1:
                raise VariantError(f"the Keras train function was traced {len(concrete)} times; "
                                   "its placement would be ambiguous")
            return concrete[0]
    raise VariantError("the Keras train function is not a tf.function (compiled with run_eagerly=True?): "
                       "no graph to read the placement from")


def build_and_compile(path: str, strategy: Any) -> tuple[Any, Any, Any]:
    """The file's model built and compiled in ``strategy.scope()``, its dataset, and the dataset the
    first two steps train on (:func:`first_batch_again`)."""
    from tfprof_towers.capture.tf2.files import load_keras_file, same_start

    f = load_keras_file(path)
    same_start()  # the same initial weights in every variant, seeded or not
    with strategy.scope():  # the model's and the optimizer's variables belong to the strategy
        model = f.build_model()
        if not isinstance(model, keras.Model):
            raise VariantError(f"keras model file {path}: build_model() must return a keras.Model, "
                               f"got {type(model).__name__}")
        kwargs = f.compile_arguments()
        if kwargs.setdefault("steps_per_execution", 1) != 1:
            raise VariantError(f"keras model file {path}: compile_kwargs() sets steps_per_execution="
                               f"{kwargs['steps_per_execution']}; profiling needs 1 (a marker per step)")
        model.compile(**kwargs)
    same_start()  # the same batches, in the same order, in every variant
    dataset = f.make_dataset(f.global_batch_size)
    if not isinstance(dataset, tf.data.Dataset):
        raise VariantError(f"keras model file {path}: make_dataset() must return a tf.data.Dataset, "
                           f"got {type(dataset).__name__}")
    first = _first_batch(dataset)
    if first is None:  # else fit ends at once and the placement reads "StopIteration"
        raise VariantError(f"keras model file {path}: make_dataset({f.global_batch_size}) yielded no batch")
    return model, dataset, first_batch_again(dataset, first)


def _first_batch(dataset: Any) -> Any:
    """The dataset's first element, read right after seeding (the same in every variant); None when
    it has none (an empty dataset is known at once)."""
    if int(dataset.cardinality()) == 0:
        return None
    for batch in dataset.take(1):
        return batch
    return None


def first_batch_again(dataset: Any, first: Any) -> Any:
    """A dataset that yields ``first`` (the dataset's first batch) again and again, with the dataset's own
    element spec -- so ``fit``'s train function, traced on it, is the one the timed steps reuse.

    Why: a dataset shuffled without a seed reshuffles at every new iterator, and Keras creates a
    different number of them before the first step under different strategies (under
    ``OneDeviceStrategy`` one more than under ``MirroredStrategy``), so the first batch each strategy
    trained on would differ.  The first two steps (the math check's) train on this batch instead;
    the timed steps on the dataset itself.  A dataset of anything but dense tensors is returned as it is.
    """
    import itertools

    spec = dataset.element_spec
    if not all(isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(spec)):
        return dataset
    values = tf.nest.map_structure(lambda t: t.numpy(), first)
    return tf.data.Dataset.from_generator(lambda: itertools.repeat(values), output_signature=spec)


def run_keras(spec: ChildSpec, draft: Draft, strategy: Any, strategy_doc: Mapping[str, Any]) -> None:
    from tfprof_towers.capture.tf2.placement import collect_partition_graphs, strategy_placement

    phases = draft.phases
    path = str(spec.keras_model)
    model, dataset, first_steps = phases.run(phase.BUILD, build_and_compile, path, strategy)

    draft.stage = "placement"
    losses = LossPerEpoch()
    meta, _ = phases.run(phase.FIRST_CALL_PLACEMENT, collect_partition_graphs, model.fit, first_steps,
                         epochs=2, steps_per_epoch=1, callbacks=[losses], verbose=0)
    concrete = train_concrete_function(model)
    placement = phases.run(phase.PLACEMENT_EXTRACT, strategy_placement, concrete, meta, [path])
    from tfprof_towers.capture.placement import variable_bytes
    from tfprof_towers.capture.random_ops import random_ops

    draft.placement = {**placement, "strategy": dict(strategy_doc), "keras_model": path,
                       "variable_bytes": variable_bytes(concrete.variables)}
    draft.math = MathCheck(tuple(losses.losses), None, random_ops(concrete.graph.as_graph_def()))

    draft.stage = "timed"
    options = tf.profiler.experimental.ProfilerOptions(**PROFILER_OPTIONS)
    warmup = max(spec.warmup - 2, 1)  # every fit call's first batch pays for its iterator's set-up
    cb = Phases(warmup, spec.steps, spec.profile_steps, spec.logdir, options)
    total = warmup + spec.steps + spec.profile_steps
    phases.run(phase.FIT_PHASES, model.fit, dataset, epochs=1, steps_per_epoch=total, callbacks=[cb],
               verbose=0)
    for key, seconds in cb.profiler_s.items():
        phases.seconds[key] = seconds
    _, times, ptimes = cb.split()
    draft.timings = replace(draft.timings, step_times_s=tuple(times), step_time_s=step_stats(times),
                            profiled_step_times_s=tuple(ptimes), profiled_step_time_s=step_stats(ptimes))
    draft.profiler_options = dict(PROFILER_OPTIONS)
    if train_concrete_function(model) is not concrete:
        raise VariantError("the Keras train function was traced again after the placement step")
    draft.stage = "done"
    draft.status = OK
