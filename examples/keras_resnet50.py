"""A ``--keras-model`` file: ResNet-50 from ``keras.applications`` with random weights, ImageNet-sized.

    tfprof-towers project --keras-model examples/keras_resnet50.py --hardware 8x-a100-nvlink \
        --variants mirrored,central_storage

The projection calls ``make_dataset`` for the shapes of one batch only; this one is a
repeated batch of zeros, so it costs nothing to build (a real input pipeline works too).
``GLOBAL_BATCH_SIZE`` is the global batch (32 images per GPU on 8 GPUs, as TensorFlow's
published benchmarks ran); ``project --batch N`` overrides it.
"""

import keras
import tensorflow as tf

GLOBAL_BATCH_SIZE = 256
IMAGE = (224, 224, 3)
CLASSES = 1000


def build_model() -> keras.Model:
    return keras.applications.ResNet50(weights=None, input_shape=IMAGE, classes=CLASSES)


def make_dataset(global_batch_size: int) -> tf.data.Dataset:
    x = tf.zeros((global_batch_size, *IMAGE))
    y = tf.zeros((global_batch_size,), tf.int64)
    return tf.data.Dataset.from_tensors((x, y)).repeat()


def compile_kwargs() -> dict:
    return {"optimizer": keras.optimizers.SGD(0.1, momentum=0.9), "loss": "sparse_categorical_crossentropy"}
