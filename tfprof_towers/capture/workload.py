"""The seed workload of design.md, defined once and shared by every variant.

Six blocks of ``sigmoid(x @ W + b)`` on an input ``[batch, dim, dim]`` reshaped
to ``[-1, dim]`` for each matmul; the loss is the mean of the last block's
output; gradients clipped by global norm 5.0; Adam(1e-4, beta1=0.5, beta2=0.9).

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from ..config import Preset

tf1 = tf.compat.v1

LEARNING_RATE = 1e-4
BETA1 = 0.5
BETA2 = 0.9
CLIP_NORM = 5.0


@dataclass(frozen=True)
class Params:
    """The model's variables, in block order: (W, b) per block."""

    weights: tuple[tf.Variable, ...]
    biases: tuple[tf.Variable, ...]

    @property
    def all(self) -> list[tf.Variable]:
        return [v for pair in zip(self.weights, self.biases) for v in pair]


def make_params(preset: Preset, suffix: str = "") -> Params:
    """Create one set of variables.

    Initialisers have fixed op-level seeds, so every replica of the ``replicated``
    variant starts from the same values.
    """
    weights, biases = [], []
    for i in range(preset.blocks):
        w_init = tf1.glorot_uniform_initializer(seed=i)
        weights.append(tf1.get_variable(f"block{i}/W{suffix}", [preset.dim, preset.dim], initializer=w_init))
        biases.append(
            tf1.get_variable(f"block{i}/b{suffix}", [preset.dim], initializer=tf1.zeros_initializer())
        )
    return Params(tuple(weights), tuple(biases))


def make_input(preset: Preset) -> tuple[tf.Tensor, np.ndarray]:
    """The input placeholder ``[batch, dim, dim]`` and a fixed random batch to feed it."""
    x = tf1.placeholder(tf.float32, [preset.batch, preset.dim, preset.dim], name="input")
    rng = np.random.default_rng(0)
    value = rng.standard_normal((preset.batch, preset.dim, preset.dim), dtype=np.float32)
    return x, value


def split_batch(x: tf.Tensor, parts: int) -> list[tf.Tensor]:
    """Split the batch dimension into ``parts`` equal shards (one per tower)."""
    if parts == 1:
        return [x]
    return tf.split(x, parts, axis=0, name="split_batch")


def tower_loss(x: tf.Tensor, params: Params, dim: int) -> tf.Tensor:
    """Forward pass of the seed model and its scalar loss."""
    shape = tf.shape(x)
    h = x
    for i, (w, b) in enumerate(zip(params.weights, params.biases)):
        with tf.name_scope(f"block{i}"):
            flat = tf.reshape(h, [-1, dim])
            h = tf.reshape(tf.sigmoid(tf.matmul(flat, w) + b), shape)
    return tf.reduce_mean(h, name="loss")


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
    clipped, _ = tf.clip_by_global_norm(list(grads), CLIP_NORM)
    opt = tf1.train.AdamOptimizer(LEARNING_RATE, beta1=BETA1, beta2=BETA2, name=name)
    return opt.apply_gradients(list(zip(clipped, params.all)))
