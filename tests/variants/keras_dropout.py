"""A --keras-model file whose step draws random numbers: a Dropout layer (each replica draws its own mask)."""

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH_SIZE = 8


def build_model() -> keras.Model:
    return keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dropout(0.5, name="dropout"), keras.layers.Dense(1)])


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = np.random.rand(32, 12).astype("float32")
    y = np.random.rand(32, 1).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size, drop_remainder=True).repeat()
