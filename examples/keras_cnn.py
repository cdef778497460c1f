"""A ``--keras-model`` file as most people write one: a small image classifier, nothing seeded.

    tfprof-towers project --keras-model examples/keras_cnn.py --hardware 2x-gtx1060-pcie3
    tfprof-towers profile --keras-model examples/keras_cnn.py --variants one_device,mirrored,central_storage

Three 3x3 convolutions (32, 64, 128 filters) with max pooling, global average pooling and a
10-way output on 32x32 RGB images (CIFAR-10's shape): 94,538 parameters.  The weights come
from Keras' default initialisers and the images and labels from ``np.random``, shuffled without a
seed: the harness seeds Python, NumPy, TensorFlow and Keras before ``build_model()`` and before
``make_dataset()``, so every strategy starts from the same weights and the same batches.
"""

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH_SIZE = 256
IMAGE = (32, 32, 3)
EXAMPLES = 1024


def build_model() -> keras.Model:
    return keras.Sequential([
        keras.Input(IMAGE),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(128, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = np.random.rand(EXAMPLES, *IMAGE).astype("float32")
    y = np.random.randint(0, 10, EXAMPLES)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(EXAMPLES).batch(global_batch_size).repeat()


def compile_kwargs() -> dict:
    return {"optimizer": "adam", "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
