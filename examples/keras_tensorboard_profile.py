"""A Keras ``fit`` profiled by the ``TensorBoard`` callback, as most people already do it.

    python examples/keras_tensorboard_profile.py LOGDIR
    tfprof-towers analyze LOGDIR

The callback's ``profile_batch=(3, 5)`` traces batches 3 to 5 and writes
``LOGDIR/train/plugins/profile/<run>/<host>.xplane.pb``; nothing here knows of tfprof-towers.
A tiny model on the CPU (under a minute): a ``tf.data`` pipeline that maps a little
preprocessing over random images, and a small convolutional classifier.
See docs/diagnose.md.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(logdir: str) -> int:
    import numpy as np
    import tensorflow as tf

    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    images = rng.random((1024, 32, 32, 3), dtype=np.float32)
    labels = rng.integers(0, 10, size=1024)

    def augment(x, y):
        x = tf.image.random_flip_left_right(x)
        x = tf.image.per_image_standardization(x)
        return x, y

    data = (tf.data.Dataset.from_tensor_slices((images, labels))
            .map(augment)  # no num_parallel_calls and no prefetch: as written in many first versions
            .batch(64))
    model = tf.keras.Sequential([
        tf.keras.Input((32, 32, 3)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    board = tf.keras.callbacks.TensorBoard(log_dir=logdir, profile_batch=(3, 5))
    model.fit(data, epochs=1, callbacks=[board], verbose=0)
    print(f"profile written under {Path(logdir) / 'train' / 'plugins' / 'profile'}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: keras_tensorboard_profile.py LOGDIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
