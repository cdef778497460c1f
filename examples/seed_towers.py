"""The classic multi-GPU "towers" training code, as a tfprof-towers variant file.

This is the tower loop of TensorFlow's multi-GPU tutorial (the CIFAR-10 /
Inception ``*_multi_gpu_train.py`` scripts) applied to the seed workload: six
blocks of ``sigmoid(x @ W + b)``, the mean of the last block as the loss,
gradients clipped by global norm 5.0, Adam(1e-4, beta1=0.5, beta2=0.9).  As in
the tutorial, the variables live on the CPU, each GPU runs one tower on its
share of the batch, and the towers' gradients are averaged on the CPU.

It also keeps the bug that made the two-GPU version about five times slower
than one GPU: a stray ``with tf.device('/cpu:0')`` around the tower's loss (see
``build_variant``).  The whole forward pass then runs on the CPU, while the
gradients -- computed outside that scope, in the tower's GPU scope -- run on the
GPUs, so every activation crosses the bus.  Profile it with::

    tfprof-towers profile --variant-file examples/seed_towers.py

The only changes from the tutorial are ``devices.accelerators[i]`` for
``'/gpu:%d' % i`` and ``devices.host`` for ``'/cpu:0'``, so that the same file
also runs without GPUs (logical CPU devices stand in for them), and three lines
that let tfprof-towers check that it computes what the built-in placements
compute: the variables start from ``devices.seed_values`` (loaded after
initialisation) with the shared batch fed, and the towers' losses and the
gradient norm are exposed (``expose_math``).
"""

import tensorflow as tf

from tfprof_towers.capture.mathcheck import expose_math, load_after_init

tf1 = tf.compat.v1

TOWER_NAME = "tower"
LEARNING_RATE = 1e-4
CLIP_NORM = 5.0


def _variable_on_cpu(name, shape, initializer, host):
    """Helper to create a Variable stored on CPU memory."""
    with tf.device(host):
        var = tf1.get_variable(name, shape, initializer=initializer)
    return var


def inference(images, dim, blocks, host):
    """Build the model: ``blocks`` layers of sigmoid(x @ W + b) on [-1, dim] rows."""
    shape = tf.shape(images)
    h = images
    for i in range(blocks):
        with tf1.variable_scope(f"block{i}"):
            weights = _variable_on_cpu("W", [dim, dim], tf1.zeros_initializer(), host)
            biases = _variable_on_cpu("b", [dim], tf1.zeros_initializer(), host)
            flat = tf.reshape(h, [-1, dim])
            h = tf.reshape(tf.sigmoid(tf.matmul(flat, weights) + biases), shape)
    return h


def tower_loss(images, dim, blocks, host):
    """Calculate the total loss on a single tower running the model."""
    output = inference(images, dim, blocks, host)
    return tf.reduce_mean(output, name="total_loss")


def average_gradients(tower_grads):
    """Calculate the average gradient for each shared variable across all towers.

    Args:
      tower_grads: List of lists of (gradient, variable) tuples, one list per tower.
    Returns:
      List of pairs of (gradient, variable) where the gradient has been averaged
      across all towers.
    """
    average_grads = []
    for grad_and_vars in zip(*tower_grads):
        grads = []
        for g, _ in grad_and_vars:
            expanded_g = tf.expand_dims(g, 0)
            grads.append(expanded_g)
        grad = tf.concat(axis=0, values=grads)
        grad = tf.reduce_mean(grad, 0)
        v = grad_and_vars[0][1]
        average_grads.append((grad, v))
    return average_grads


def build_variant(devices):
    """One training step over all towers: returns (train_op, feed_dict)."""
    preset = devices.preset
    batch, dim, blocks = preset.batch, preset.dim, preset.blocks
    num_gpus = len(devices.accelerators)
    with tf.device(devices.host):
        opt = tf1.train.AdamOptimizer(LEARNING_RATE, beta1=0.5, beta2=0.9)
        images = tf1.placeholder(tf.float32, [batch, dim, dim], name="images")
        image_batches = tf.split(images, num_gpus, axis=0)
        tower_grads = []
        with tf1.variable_scope(tf1.get_variable_scope()):
            for i in range(num_gpus):
                with tf.device(devices.accelerators[i]):  # noqa: SIM117 (the tutorial's nesting)
                    with tf.name_scope(f"{TOWER_NAME}_{i}"):
                        with tf.device(devices.host):
                            loss = tower_loss(image_batches[i], dim, blocks, devices.host)
                        expose_math(loss=loss)
                        tf1.get_variable_scope().reuse_variables()
                        params = tf1.trainable_variables()
                        # TF1's tf.gradients did not colocate gradient ops with their forward
                        # ops: the backward pass runs in this tower's device scope.
                        grads = tf1.gradients(loss, params, colocate_gradients_with_ops=False)
                        tower_grads.append(list(zip(grads, params)))
        grads_and_vars = average_gradients(tower_grads)
        grads, variables = zip(*grads_and_vars)
        clipped, global_norm = tf.clip_by_global_norm(list(grads), CLIP_NORM)
        expose_math(grad_norm=global_norm)
        train_op = opt.apply_gradients(list(zip(clipped, variables)))
    load_after_init(tf1.trainable_variables(), devices.seed_values.params)
    return train_op, {images: devices.seed_values.x}
