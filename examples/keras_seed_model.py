"""A ``--keras-model`` file: the seed workload written as a Keras model.

    tfprof-towers profile --keras-model examples/keras_seed_model.py \
        --variants one_device,mirrored,central_storage

The harness calls, under each tf2-strategy variant's strategy:

* ``build_model()`` inside ``strategy.scope()``: returns a ``keras.Model``;
* ``make_dataset(global_batch_size)``: a ``tf.data.Dataset`` of ``(x, y)`` batches;
* ``compile_kwargs()`` (optional), called inside the scope too: the keyword arguments of ``model.compile``;
* ``GLOBAL_BATCH_SIZE`` (optional, default 32): the global batch every strategy splits.

The sizes are this file's own (the harness's ``--preset`` only sets the step counts).
This one is the seed workload at the ``tiny`` preset's sizes -- six ``Dense`` blocks
with a sigmoid on ``[batch, dim, dim]``, the loss the mean of the last block's output,
Adam(1e-4, 0.5, 0.9) -- started from the same initial values and batch as the
built-in variants, so its first two losses equal theirs.  Write your own model here;
the only rule that matters under a strategy is the next one.

**Return a loss per sample.**  Keras divides the summed per-sample losses by the
*global* batch size.  A loss function that returns one scalar for the whole batch is
averaged per replica and then summed across replicas: under ``MirroredStrategy`` or
``CentralStorageStrategy`` both the reported loss and the gradient come out multiplied
by the number of replicas (the harness's loss check shows it: the losses disagree).
"""

import keras
import numpy as np
import tensorflow as tf

from tfprof_towers.capture.seed_values import BETA1, BETA2, EPSILON, LEARNING_RATE, seed_values

BATCH, DIM, BLOCKS = 4, 16, 6
GLOBAL_BATCH_SIZE = BATCH
VALUES = seed_values(BATCH, DIM, BLOCKS)  # the built-ins' initial values and batch


def build_model() -> keras.Model:
    inputs = keras.Input((DIM, DIM))
    h = inputs
    for i in range(BLOCKS):
        dense = keras.layers.Dense(DIM, activation="sigmoid", name=f"block{i}")  # on the last axis
        h = dense(h)
        dense.set_weights([VALUES.weights[i], VALUES.biases[i]])
    return keras.Model(inputs, h)


def mean_output(y_true, y_pred):
    """The seed's loss, per sample: the mean of each sample's last-block output (y is unused)."""
    return keras.ops.mean(y_pred, axis=(1, 2))


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = VALUES.x
    y = np.zeros((x.shape[0], 1), np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size, drop_remainder=True).repeat()


def compile_kwargs() -> dict:
    # Keras clips each replica's gradient before the all-reduce; at these sizes the global
    # norm (0.14) is far below 5, so clipping never bites and the math equals the seed's.
    optimizer = keras.optimizers.Adam(LEARNING_RATE, beta_1=BETA1, beta_2=BETA2, epsilon=EPSILON,
                                      global_clipnorm=5.0)
    return {"optimizer": optimizer, "loss": mean_output}
