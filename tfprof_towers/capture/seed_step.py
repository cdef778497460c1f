"""The seed workload as a TF2 step under any ``tf.distribute`` strategy (the tf2-strategy built-ins).

:func:`build_seed_step` is a ``build_step(strategy, devices)`` for the seed workload: the
same model, clipping and optimizer as the TF1 variants, from the same initial values and
batch, so every variant's first losses agree.

Why plain ``tf.Variable`` and Adam written out rather than a Keras optimizer: Keras 3 clips
each replica's gradient *before* it all-reduces them (``BaseOptimizer._backend_apply_gradients``
clips, then ``_backend_update_step`` all-reduces) and always all-reduces in replica context, so
it cannot clip the averaged gradient as TF1's towers do.  The update is TF1's
``AdamOptimizer`` formula (beta powers as variables, epsilon outside the sqrt).

The batch lives on the host and is split there, as the TF1 towers feed it.  The gradient
norm returned is replica 0's copy: every replica holds the same reduced gradients.

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from tfprof_towers.capture.devices import Devices
from tfprof_towers.capture.seed_values import (
    BETA1,
    BETA2,
    CLIP_NORM,
    EPSILON,
    LEARNING_RATE,
    SeedValues,
)


def forward(x: tf.Tensor, params: Sequence[tf.Variable], dim: int) -> tf.Tensor:
    """The seed model's forward pass and loss, ``params`` as (W, b) per block: the one model
    definition (the TF1 towers' :func:`.workload.tower_loss` builds it too)."""
    shape = tf.shape(x)
    h = x
    for i in range(len(params) // 2):
        w, b = params[2 * i], params[2 * i + 1]
        with tf.name_scope(f"block{i}"):
            flat = tf.reshape(h, [-1, dim])
            h = tf.reshape(tf.sigmoid(tf.matmul(flat, w) + b), shape)
    return tf.reduce_mean(h, name="loss")


def build_seed_step(strategy: tf.distribute.Strategy, devices: Devices) -> Callable[[], Any]:
    """The seed step at ``devices.preset``'s sizes, from the shared seed values (``devices.seed_values``)."""
    return seed_step(strategy, devices.seed_values, devices.host)


def seed_step(strategy: tf.distribute.Strategy, values: SeedValues, host: str,
              batch: tf.Tensor | None = None, takes_input: bool = False) -> Callable[..., Any]:
    """A zero-argument ``tf.function``: one training step; returns ``{"loss", "grad_norm"}``.

    ``batch`` replaces the captured input tensor (the projection builds graphs without
    materialising the values); by default it is ``values.x`` as a constant on the host.
    ``takes_input``: the step takes its batch as its one argument instead (a
    ``ParameterServerStrategy`` coordinator schedules it with each worker's shard).
    """
    dim = values.x.shape[-1]
    n = strategy.num_replicas_in_sync
    if values.x.shape[0] % n:
        raise ValueError(f"batch {values.x.shape[0]} does not split over {n} replicas")
    with strategy.scope():
        params = [tf.Variable(a, name=("W" if a.ndim == 2 else "b") + str(k // 2))
                  for k, a in enumerate(values.params)]
        slots_m = [tf.Variable(tf.zeros_like(a), name=f"adam_m{k}") for k, a in enumerate(values.params)]
        slots_v = [tf.Variable(tf.zeros_like(a), name=f"adam_v{k}") for k, a in enumerate(values.params)]
        beta1_power = tf.Variable(BETA1, name="beta1_power")
        beta2_power = tf.Variable(BETA2, name="beta2_power")
    x = None
    if not takes_input:
        with tf.device(host):
            x = tf.constant(values.x, name="input") if batch is None else batch

    def adam_update(var, g, m, v, b1_power, b2_power):
        # runs on the variable's device, with that device's copies of the slots and beta powers
        lr_t = LEARNING_RATE * tf.sqrt(1 - b2_power) / (1 - b1_power)
        m_t = m.assign(BETA1 * m + (1 - BETA1) * g)
        v_t = v.assign(BETA2 * v + (1 - BETA2) * tf.square(g))
        return var.assign_sub(lr_t * m_t / (tf.sqrt(v_t) + EPSILON))

    def apply(distribution, grads):
        # cross-replica context: grads are mirrored (one reduced copy per replica)
        ext = distribution.extended
        updates = [ext.update(var, adam_update, args=(g, m, v, beta1_power, beta2_power), group=False)
                   for var, g, m, v in zip(params, grads, slots_m, slots_v)]
        with tf.control_dependencies(tf.nest.flatten(updates)):
            ext.update(beta1_power, lambda b: b.assign(b * BETA1), group=False)
            ext.update(beta2_power, lambda b: b.assign(b * BETA2), group=False)

    def replica_step(shard):
        with tf.GradientTape() as tape:
            scaled = forward(shard, params, dim) / n  # equal shards: the replicas' sum is the mean
        grads = tape.gradient(scaled, params)
        ctx = tf.distribute.get_replica_context()
        grads = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)  # = the single-device gradient
        clipped, norm = tf.clip_by_global_norm(grads, CLIP_NORM)
        ctx.merge_call(apply, args=(clipped,))
        return scaled, norm

    def step_on(inputs):
        with tf.device(host):
            shards = tf.split(inputs, n, axis=0, name="split_batch") if n > 1 else [inputs]
        per_replica = strategy.experimental_distribute_values_from_function(
            lambda ctx: shards[ctx.replica_id_in_sync_group])
        scaled, norm = strategy.run(replica_step, args=(per_replica,))
        loss = strategy.reduce(tf.distribute.ReduceOp.SUM, scaled, axis=None)
        return {"loss": loss, "grad_norm": strategy.experimental_local_results(norm)[0]}

    if takes_input:
        return tf.function(step_on)

    @tf.function
    def train_step():
        return step_on(x)

    return train_step
