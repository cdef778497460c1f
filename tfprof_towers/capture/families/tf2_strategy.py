"""The ``tf2-strategy`` family: a ``tf.function`` step under a ``tf.distribute`` strategy, eager TF2.

What runs: a built-in's strategy (:mod:`..strategies`) with the seed step
(:mod:`..seed_step`); a user's TF2 variant file's ``build_strategy(devices)``
(default ``OneDeviceStrategy``) and ``build_step(strategy, devices)``; or, with
``--keras-model``, the user's Keras model under the built-in's strategy with
``model.fit`` (:mod:`..keras_fit`).

The step's **first call**, with graph collection on, gives the partition graphs after
Grappler (placement) and loss 1; the second gives loss 2.  Both count as warm-up.

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from tfprof_towers.capture.devices import Devices, plan_devices
from tfprof_towers.capture.families import Draft, import_tensorflow, timed_calls, timed_then_profiled
from tfprof_towers.rundir.records import OK, ChildSpec, MathCheck
from tfprof_towers.variants import registry
from tfprof_towers.vocab import phase
from tfprof_towers.vocab.errors import VariantError


def plan(tf: Any, spec: ChildSpec) -> Devices:
    """The devices of this run; logical CPU devices are configured here (before any op)."""
    from tfprof_towers.capture.tf2.strategies import configure_devices

    devices = plan_devices(len(tf.config.list_physical_devices("GPU")), spec.accelerators, spec.preset)
    configure_devices(devices)
    return devices


def needs(spec: ChildSpec) -> tuple[str, ...]:
    return () if spec.file else registry.builtin_of(spec.name, registry.TF2_STRATEGY).needs


def strategy_and_step(spec: ChildSpec, devices: Devices) -> tuple[Any, Callable[..., Any], list[str]]:
    """The strategy, the ``build_step`` to call with it, and the user's files (for source lines)."""
    from tfprof_towers.capture import seed_step
    from tfprof_towers.capture.tf2 import strategies
    from tfprof_towers.capture.tf2.files import load_step_file

    if spec.file:
        f = load_step_file(spec.file)
        strategy = (f.build_strategy or strategies.one_device)(devices)
        if not hasattr(strategy, "scope") or not hasattr(strategy, "run"):
            raise VariantError(f"variant file {spec.file}: build_strategy must return a "
                               f"tf.distribute.Strategy, got {type(strategy).__name__}")
        return strategy, f.build_step, [spec.file]
    strategy = registry.builtin_of(spec.name, registry.TF2_STRATEGY).load_builder()(devices)
    return strategy, seed_step.build_seed_step, [seed_step.__file__]


def check_step(step: Any, origin: str) -> Any:
    """A ``build_step`` must return a zero-argument ``tf.function``; one-line error otherwise."""
    if not callable(getattr(step, "get_concrete_function", None)):
        raise VariantError(f"{origin}: build_step must return a tf.function (a zero-argument function "
                           f"decorated with @tf.function), got {type(step).__name__}")
    return step


def _scalar(value: Any, origin: str, what: str) -> float:
    arr = np.asarray(value)
    if arr.size != 1 or not np.issubdtype(arr.dtype, np.number):
        raise VariantError(f"{origin}: the step must return the {what} as a scalar number, "
                           f"got {arr.dtype} of shape {arr.shape}")
    return float(arr.reshape(()))


def loss_and_norm(result: Any, origin: str) -> tuple[float, float | None]:
    """The step's loss, and its step's gradient norm when it returns one (``{"loss", "grad_norm"}``)."""
    if isinstance(result, Mapping):
        if "loss" not in result:
            raise VariantError(f"{origin}: the step returned a mapping without 'loss'")
        norm = result.get("grad_norm")
        return (_scalar(result["loss"], origin, "loss"),
                None if norm is None else _scalar(norm, origin, "gradient norm"))
    return _scalar(result, origin, "loss"), None


def first_math(first: Any, second: Any, origin: str) -> MathCheck:
    """The losses of the first two calls (what each returned) and the first call's gradient norm."""
    (loss1, norm1), (loss2, _) = loss_and_norm(first, origin), loss_and_norm(second, origin)
    return MathCheck((loss1, loss2), norm1)


def fetched(step: Callable[[], Any]) -> Callable[[], None]:
    """``step`` as one training step for :func:`.timed_calls`: called, its result waited for."""
    return lambda: _fetch(step())


def _fetch(result: Any) -> None:
    """Wait for the step: read its (small) loss back, as ``Session.run`` waits for its fetches."""
    loss = result["loss"] if isinstance(result, Mapping) else result
    if hasattr(loss, "numpy"):
        loss.numpy()


def run(spec: ChildSpec, draft: Draft) -> None:
    """Run one tf2-strategy variant, filling ``draft`` as each phase completes."""
    phases = draft.phases
    draft.stage = "import"
    tf = phases.run(phase.TF_IMPORT, import_tensorflow)
    draft.versions["tensorflow"] = tf.__version__
    from tfprof_towers.capture.tf2.strategies import describe, machine_offers

    devices = phases.run(phase.DEVICES, plan, tf, spec)
    draft.topology = devices.topology()
    reason = registry.skip_reason(needs(spec), machine_offers(devices), devices.kind,
                                  draft.topology.accelerators)
    if reason:
        draft.skip(reason)
        return

    draft.stage = "build"
    strategy, build_step, user_files = phases.run(phase.BUILD, strategy_and_step, spec, devices)
    if spec.keras_model:
        from tfprof_towers.capture.tf2.keras_fit import run_keras

        run_keras(spec, draft, strategy, describe(strategy))
        return
    origin = f"variant file {spec.file}" if spec.file else f"built-in variant {spec.name}"
    from tfprof_towers.capture.tf2.files import same_start

    same_start()  # a file's variables drawn without a seed start the same in every variant
    step = check_step(phases.run(phase.BUILD, build_step, strategy, devices), origin)

    draft.stage = "placement"
    from tfprof_towers.capture.tf2.placement import collect_partition_graphs, strategy_placement

    meta, first = phases.run(phase.FIRST_CALL_PLACEMENT, collect_partition_graphs, step)
    concrete = step.get_concrete_function()
    placement = phases.run(phase.PLACEMENT_EXTRACT, strategy_placement, concrete, meta, user_files)
    from tfprof_towers.capture.placement import variable_bytes

    draft.placement = {**placement, "strategy": describe(strategy),
                       "variable_bytes": variable_bytes(concrete.variables)}

    draft.stage = "warmup"
    second = phases.run(phase.SECOND_CALL, step)
    from tfprof_towers.capture.random_ops import random_ops

    drawn = random_ops(concrete.graph.as_graph_def())
    draft.math = replace(first_math(first, second, origin), random_ops=drawn)
    call = fetched(step)
    phases.run(phase.WARMUP, timed_calls, call, max(spec.warmup - 2, 0))
    timed_then_profiled(tf, spec, draft, call)
    if step.experimental_get_tracing_count() != 1:
        raise VariantError(f"{origin}: the step was traced {step.experimental_get_tracing_count()} times; "
                           "the placement recorded is the first trace's")
    draft.stage = "done"
    draft.status = OK
