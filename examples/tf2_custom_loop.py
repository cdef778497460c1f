"""A TF2 variant file: your own strategy and custom training step.

    tfprof-towers profile --variant-file examples/tf2_custom_loop.py --variants one_device,mirrored

The harness calls ``build_strategy(devices)`` (optional; without it the step runs
under ``OneDeviceStrategy`` on accelerator 0), then ``build_step(strategy, devices)``,
which returns a zero-argument ``tf.function`` that runs one training step and returns
its loss.  ``devices.host`` is the host device, ``devices.accelerators`` the
accelerators (``/gpu:i``, or logical ``/cpu:i`` stand-ins without GPUs) and
``devices.preset`` the workload sizes.  The variant's name is the file's stem.

This one is a Keras model trained by a custom loop under ``MirroredStrategy`` with the
gradients summed on the host (``ReductionToOneDevice``).  Two things every such
loop needs under a strategy: create the model *and the optimizer's variables*
(``optimizer.build``) inside ``strategy.scope()`` -- otherwise the first
``apply_gradients`` fails with "You must feed a value for placeholder tensor" -- and
scale each replica's loss by the *global* batch size.
"""

import keras
import tensorflow as tf

DIM, BATCH = 16, 8


def build_strategy(devices):
    return tf.distribute.MirroredStrategy(
        devices=list(devices.accelerators),
        cross_device_ops=tf.distribute.ReductionToOneDevice(reduce_to_device=devices.host),
    )


def build_step(strategy, devices):
    with strategy.scope():
        model = keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(1)])
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
    x = tf.random.stateless_normal((BATCH, DIM), seed=(1, 2))
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat().unbatch().batch(BATCH, drop_remainder=True)
    batches = iter(strategy.experimental_distribute_dataset(dataset))  # static shapes: FLOPs are counted

    def replica_step(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            per_example = tf.square(model(features, training=True) - labels)[:, 0]
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def step():
        losses = strategy.run(replica_step, args=(next(batches),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step
