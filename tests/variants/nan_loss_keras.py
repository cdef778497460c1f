"""A ``--keras-model`` file whose loss is NaN (its inputs hold NaN): its timings are still valid."""

import keras
import numpy as np
import tensorflow as tf

DIM = 4
GLOBAL_BATCH_SIZE = 4


def build_model() -> keras.Model:
    return keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(1)])


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = np.full((global_batch_size, DIM), np.nan, np.float32)
    y = np.zeros((global_batch_size, 1), np.float32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size, drop_remainder=True).repeat()


def compile_kwargs() -> dict:
    return {"optimizer": keras.optimizers.SGD(0.1), "loss": "mse"}
