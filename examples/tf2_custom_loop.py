"""A TF2 variant file: your own strategy and custom training step.

    tfprof-towers profile --variant-file examples/tf2_custom_loop.py --variants one_device,mirrored

The harness calls ``build_strategy(devices)`` (optional; without it the step runs
under ``OneDeviceStrategy`` on accelerator 0), then ``build_step(strategy, devices)``,
which returns a zero-argument ``tf.function`` that runs one training step and returns
its loss (or ``{"loss": ..., "grad_norm": ...}``).  ``devices.host`` is the host device,
``devices.accelerators`` the accelerators (``/gpu:i``, or logical ``/cpu:i`` stand-ins
without GPUs), ``devices.preset`` the workload sizes and ``devices.seed_values`` the
initial values and batch every variant starts from.  The variant's name is the file's stem.

This one is the seed workload written as most custom loops are: a Keras model of six
``Dense(dim, activation="sigmoid")`` blocks and Keras' Adam, trained by a custom loop
under ``MirroredStrategy`` with the gradients summed on the host
(``ReductionToOneDevice``).  It starts from ``devices.seed_values`` and computes what the
built-ins compute, so the math check compares it with them (``same``).  What such a loop
needs under a strategy:

* create the model *and the optimizer's variables* (``optimizer.build``) inside
  ``strategy.scope()`` -- otherwise the first ``apply_gradients`` fails with "You must
  feed a value for placeholder tensor";
* scale each replica's loss so that the replicas' gradients *sum* to the whole batch's
  (here: its mean over a shard, divided by the number of replicas);
* clip by the norm of the summed gradient: Keras sums the replicas' gradients inside
  ``apply_gradients`` (and its ``global_clipnorm`` clips each replica's share before
  that), so the loop sums them once to get the norm and scales each share by the
  clipping factor; Keras' sum of the scaled shares is then the clipped gradient.
"""

import keras
import tensorflow as tf

# The seed workload's optimizer and clipping (TF1's AdamOptimizer: epsilon 1e-8).
LEARNING_RATE, BETA1, BETA2, EPSILON, CLIP_NORM = 1e-4, 0.5, 0.9, 1e-8, 5.0


def build_strategy(devices):
    return tf.distribute.MirroredStrategy(
        devices=list(devices.accelerators),
        cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device=devices.host),
    )


def build_step(strategy, devices):
    values = devices.seed_values  # x: [batch, dim, dim]; params: (W, b) per block
    batch, dim = values.x.shape[0], values.x.shape[-1]
    replicas = strategy.num_replicas_in_sync
    with strategy.scope():
        blocks = [keras.layers.Dense(dim, activation="sigmoid", name=f"block{i}")
                  for i in range(len(values.weights))]
        model = keras.Sequential([keras.Input(values.x.shape[1:]), *blocks])
        model.set_weights(values.params)
        optimizer = keras.optimizers.Adam(LEARNING_RATE, beta_1=BETA1, beta_2=BETA2, epsilon=EPSILON)
        optimizer.build(model.trainable_variables)
    dataset = tf.data.Dataset.from_tensor_slices(values.x).batch(batch, drop_remainder=True).repeat()
    batches = iter(strategy.experimental_distribute_dataset(dataset))  # each replica gets its shard

    def replica_step(features):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(features, training=True)) / replicas
        grads = tape.gradient(loss, model.trainable_variables)
        summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
        norm = tf.linalg.global_norm(summed)
        scale = CLIP_NORM / tf.maximum(norm, CLIP_NORM)  # tf.clip_by_global_norm's factor
        optimizer.apply_gradients(zip([g * scale for g in grads], model.trainable_variables))
        return loss, norm

    @tf.function
    def step():
        losses, norms = strategy.run(replica_step, args=(next(batches),))
        return {"loss": strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None),
                "grad_norm": strategy.experimental_local_results(norms)[0]}

    return step
