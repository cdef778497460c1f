"""Users' TF2 files, imported inside the capture child: a strategy variant file and a Keras model file.

* A **TF2 variant file** defines ``build_step(strategy, devices)``, which returns a
  zero-argument ``tf.function`` that runs one training step and returns the loss
  (a scalar tensor, or a mapping with ``"loss"`` and optionally ``"grad_norm"``), and
  optionally ``build_strategy(devices)``; without it the step runs under
  ``OneDeviceStrategy`` on accelerator 0.
* A **Keras model file** (``--keras-model``) defines ``build_model()`` (called inside
  ``strategy.scope()``), ``make_dataset(global_batch_size)`` returning a
  ``tf.data.Dataset`` of ``(x, y)`` batches, and optionally ``compile_kwargs()`` (the
  keyword arguments of ``model.compile``; default Adam and mean squared error) and
  ``GLOBAL_BATCH_SIZE`` (default :data:`DEFAULT_GLOBAL_BATCH`): the sizes are the file's own.

The parent checks these files without importing them (:mod:`tfprof_towers.variants.variant_files`);
here they are imported, and anything wrong is a one-line :class:`VariantError`.

**The same start everywhere.**  Every variant runs in a process of its own, so a model that draws its
initial weights, or a dataset that shuffles, without a seed would start each variant from different
numbers.  :func:`same_start` seeds Python, NumPy, TensorFlow and Keras with :data:`USER_SEED` right
before the harness calls ``build_model()``/``build_step()`` and again right before ``make_dataset()``,
so every variant draws the same initial weights and the same batches: users need not seed anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tfprof_towers.capture.user_files import import_user_file
from tfprof_towers.vocab.errors import VariantError

DEFAULT_GLOBAL_BATCH = 32
#: The seed every variant's user code starts from (:func:`same_start`).
USER_SEED = 1234
DEFAULT_COMPILE = {"optimizer": "adam", "loss": "mse"}


def same_start(seed: int = USER_SEED) -> None:
    """Seed Python's ``random``, NumPy, TensorFlow (global seed and op seeds) and, where it is loaded,
    Keras' own seed generator: what the user's code draws next is the same in every variant."""
    import random
    import sys

    import numpy as np
    import tensorflow as tf

    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)
    keras = sys.modules.get("keras")
    if keras is not None:  # also resets Keras' global SeedGenerator (layers' default seeds)
        keras.utils.set_random_seed(seed)


def user_function(module: ModuleType, name: str, path: str | Path, what: str, signature: str,
                  required: bool = True) -> Callable[..., Any] | None:
    """``module.name``; a one-line error when it is missing (unless not ``required``) or not callable."""
    fn = getattr(module, name, None)
    if fn is None and not required:
        return None
    if not callable(fn):
        raise VariantError(f"{what} {path}: defines no {signature} function")
    return fn


@dataclass(frozen=True)
class StepFile:
    """A TF2 variant file's functions."""

    path: str
    build_step: Callable[[Any, Any], Any]
    build_strategy: Callable[[Any], Any] | None


def load_step_file(path: str | Path) -> StepFile:
    what = "variant file"
    module = import_user_file(path, what)
    build_step = user_function(module, "build_step", path, what, "build_step(strategy, devices)")
    build_strategy = user_function(module, "build_strategy", path, what, "build_strategy(devices)",
                               required=False)
    return StepFile(str(path), build_step, build_strategy)


@dataclass(frozen=True)
class KerasFile:
    """A ``--keras-model`` file's functions and its global batch size."""

    path: str
    build_model: Callable[[], Any]
    make_dataset: Callable[[int], Any]
    compile_kwargs: Callable[[], dict[str, Any]] | None
    global_batch_size: int

    def compile_arguments(self) -> dict[str, Any]:
        if self.compile_kwargs is None:
            return dict(DEFAULT_COMPILE)
        kwargs = self.compile_kwargs()
        if not isinstance(kwargs, dict):
            raise VariantError(f"keras model file {self.path}: compile_kwargs() must return a dict, "
                               f"got {type(kwargs).__name__}")
        return dict(kwargs)


def load_keras_file(path: str | Path) -> KerasFile:
    what = "keras model file"
    module = import_user_file(path, what)
    build_model = user_function(module, "build_model", path, what, "build_model()")
    make_dataset = user_function(module, "make_dataset", path, what, "make_dataset(global_batch_size)")
    compile_kwargs = user_function(module, "compile_kwargs", path, what, "compile_kwargs()", required=False)
    batch = getattr(module, "GLOBAL_BATCH_SIZE", DEFAULT_GLOBAL_BATCH)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise VariantError(f"keras model file {path}: GLOBAL_BATCH_SIZE must be a positive int, "
                           f"got {batch!r}")
    return KerasFile(str(path), build_model, make_dataset, compile_kwargs, batch)
