"""A ``--keras-model`` file whose ``make_dataset`` yields no batch (it filters every one out)."""

import keras
import numpy as np
import tensorflow as tf

DIM = 4
GLOBAL_BATCH_SIZE = 32


def build_model() -> keras.Model:
    return keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(1)])


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = np.ones((global_batch_size, DIM), np.float32)
    y = np.zeros((global_batch_size, 1), np.float32)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size)
    return batches.filter(lambda x, y: tf.reduce_sum(x) < 0).repeat()  # never true: no batch
