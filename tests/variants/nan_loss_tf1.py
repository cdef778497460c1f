"""A TF1 variant file whose loss is NaN (its input holds NaN): its timings are still valid."""

import numpy as np
import tensorflow as tf

from tfprof_towers.capture.mathcheck import expose_math

tf1 = tf.compat.v1


def build_variant(devices):
    with tf.device(devices.accelerators[0]):
        x = tf1.placeholder(tf.float32, [4, 4], name="x")
        w = tf1.get_variable("w", [4, 4], initializer=tf1.ones_initializer())
        loss = tf.reduce_mean(tf.matmul(x, w))
        expose_math(loss=loss)
        train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return train_op, {x: np.full((4, 4), np.nan, np.float32)}
