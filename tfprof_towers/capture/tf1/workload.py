"""The seed workload of design.md, defined once and shared by every variant.

Six blocks of ``sigmoid(x @ W + b)`` on an input ``[batch, dim, dim]`` reshaped
to ``[-1, dim]`` for each matmul; the loss is the mean of the last block's
output; gradients clipped by global norm 5.0; Adam(1e-4, beta1=0.5, beta2=0.9).

Variables are created with a zeros initializer and registered with their shared initial
value (:mod:`..mathcheck`); each tower's loss and the step's gradient norm are exposed there.

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from tfprof_towers.capture.devices import Devices
from tfprof_towers.capture.mathcheck import expose_math, load_after_init
from tfprof_towers.capture.seed_step import forward
from tfprof_towers.capture.seed_values import BETA1, BETA2, CLIP_NORM, LEARNING_RATE

tf1 = tf.compat.v1


@dataclass(frozen=True)
class Params:
    """The model's variables, in block order: (W, b) per block."""

    weights: tuple[tf.Variable, ...]
    biases: tuple[tf.Variable, ...]

    @property
    def all(self) -> list[tf.Variable]:
        return [v for pair in zip(self.weights, self.biases) for v in pair]


def make_params(devices: Devices, suffix: str = "") -> Params:
    """Create one set of variables, to be loaded with the shared initial values after init (every
    replica of the ``replicated`` variant gets the same values)."""
    preset, values = devices.preset, devices.seed_values
    weights, biases = [], []
    zeros = tf1.zeros_initializer()
    for i in range(preset.blocks):
        weights.append(tf1.get_variable(f"block{i}/W{suffix}", [preset.dim, preset.dim], initializer=zeros))
        biases.append(tf1.get_variable(f"block{i}/b{suffix}", [preset.dim], initializer=zeros))
    params = Params(tuple(weights), tuple(biases))
    load_after_init(params.all, values.params)
    return params


def make_input(devices: Devices) -> tuple[tf.Tensor, np.ndarray]:
    """The input placeholder ``[batch, dim, dim]`` and the shared batch to feed it."""
    p = devices.preset
    x = tf1.placeholder(tf.float32, [p.batch, p.dim, p.dim], name="input")
    return x, devices.seed_values.x


def split_batch(x: tf.Tensor, parts: int) -> list[tf.Tensor]:
    if parts == 1:
        return [x]
    return tf.split(x, parts, axis=0, name="split_batch")


def tower_loss(x: tf.Tensor, params: Params, dim: int) -> tf.Tensor:
    """Forward pass of the seed model and its scalar loss (the TF2 seed step's own
    :func:`.seed_step.forward`: one model definition), exposed for the math check."""
    loss = forward(x, params.all, dim)
    expose_math(loss=loss)
    return loss


def tower_gradients(loss: tf.Tensor, params: Params) -> list[tf.Tensor]:
    """``tf.compat.v1.gradients`` without colocation, as the classic tower code had it.

    TF2's ``tf.gradients`` always colocates each gradient op with its forward op;
    the TF1 default places gradient ops in the caller's ``tf.device`` scope, which
    is what makes ``towers_bug`` run its backward pass on the accelerators.
    """
    return tf1.gradients(loss, params.all, colocate_gradients_with_ops=False)


def average_gradients(tower_grads: Sequence[Sequence[tf.Tensor]]) -> list[tf.Tensor]:
    """Average each variable's gradient across towers (in the caller's device scope)."""
    if len(tower_grads) == 1:
        return list(tower_grads[0])
    n = float(len(tower_grads))
    return [tf.add_n(list(gs)) / n for gs in zip(*tower_grads)]


def apply_update(grads: Sequence[tf.Tensor], params: Params, name: str = "adam") -> tf.Operation:
    """Clip by global norm and apply Adam (slots are colocated with the variables)."""
    clipped, norm = tf.clip_by_global_norm(list(grads), CLIP_NORM)
    expose_math(grad_norm=norm)
    opt = tf1.train.AdamOptimizer(LEARNING_RATE, beta1=BETA1, beta2=BETA2, name=name)
    return opt.apply_gradients(list(zip(clipped, params.all)))
