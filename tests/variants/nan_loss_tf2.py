"""A TF2 variant file whose loss is NaN (its labels hold NaN): its timings are still valid.

Runs under any strategy (a tf2-strategy variant, or multi_worker with ``--workers``)."""

import keras
import tensorflow as tf

DIM, BATCH = 4, 4


def build_step(strategy, devices):
    with strategy.scope():
        model = keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(model.trainable_variables)
    x = tf.ones((BATCH, DIM))
    y = tf.fill((BATCH, 1), float("nan"))
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat().unbatch().batch(BATCH, drop_remainder=True)
    batches = iter(strategy.experimental_distribute_dataset(dataset))

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
