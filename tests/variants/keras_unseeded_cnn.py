"""A --keras-model file as most users write one: nothing seeded, the dataset shuffled without a seed.

A small CNN on 16x16x3 images: Conv2D(8, 3x3) 224 parameters, Dense(10) on the 7x7x8 pooled map
3930, 4154 in all (16616 bytes in float32).  Its weights come from Keras' default initialisers and its
data from ``np.random`` -- every variant starts from the same numbers only because the harness seeds
before ``build_model()`` and before ``make_dataset()``.
"""

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH_SIZE = 8
PARAMETERS = 3 * 3 * 3 * 8 + 8 + 7 * 7 * 8 * 10 + 10


def build_model() -> keras.Model:
    return keras.Sequential([
        keras.Input((16, 16, 3)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = np.random.rand(64, 16, 16, 3).astype("float32")
    y = np.random.randint(0, 10, 64)
    return (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64)
            .batch(global_batch_size, drop_remainder=True).repeat())


def compile_kwargs() -> dict:
    return {"optimizer": "adam", "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
