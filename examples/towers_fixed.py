"""A variant file: the classic tower code with its placement fixed.

Run it beside the built-ins::

    tfprof-towers profile --variants single,towers_host_vars --variant-file examples/towers_fixed.py

The interface (design.md): ``build_variant(devices)`` runs inside a fresh
``tf.Graph`` in TF1 graph mode; ``devices.host`` is the host device,
``devices.accelerators`` the accelerator devices (``/gpu:N``, or logical
``/cpu:N`` stand-ins on machines without GPUs) and ``devices.preset`` the
workload sizes (``batch``, ``dim``, ``blocks``).  It returns
``(fetches, feed_dict)`` for one training step.

Same math as the built-ins: the variables start from ``devices.seed_values``
(``load_after_init`` loads them after initialisation, so they never become graph
constants), the shared batch ``devices.seed_values.x`` is fed, and each tower's
loss and the gradient norm are exposed (``expose_math``), so the report can show
that this placement computes what the others compute.

What differs from the tutorial's buggy version (``examples/seed_towers.py``):
nothing of the tower's forward pass sits in a nested host scope, so forward and
backward both run on the tower's accelerator; only the variables, the gradient
average and the update stay on the host.
"""

import tensorflow as tf

from tfprof_towers.capture.mathcheck import expose_math, load_after_init

tf1 = tf.compat.v1


def inference(x, weights, biases, dim):
    h = x
    for i, (w, b) in enumerate(zip(weights, biases)):
        with tf.name_scope(f"block{i}"):
            flat = tf.reshape(h, [-1, dim])
            h = tf.reshape(tf.sigmoid(tf.matmul(flat, w) + b), tf.shape(x))
    loss = tf.reduce_mean(h)
    expose_math(loss=loss)
    return loss


def build_variant(devices):
    p = devices.preset
    n = len(devices.accelerators)
    with tf.device(devices.host):
        images = tf1.placeholder(tf.float32, [p.batch, p.dim, p.dim], name="images")
        zeros = tf1.zeros_initializer()
        weights = [tf1.get_variable(f"W{i}", [p.dim, p.dim], initializer=zeros) for i in range(p.blocks)]
        biases = [tf1.get_variable(f"b{i}", [p.dim], initializer=zeros) for i in range(p.blocks)]
        load_after_init(weights, devices.seed_values.weights)
        load_after_init(biases, devices.seed_values.biases)
        shards = tf.split(images, n, axis=0)
    tower_grads = []
    for i, device in enumerate(devices.accelerators):
        with tf.device(device), tf.name_scope(f"tower_{i}"):
            loss = inference(shards[i], weights, biases, p.dim)
            tower_grads.append(tf1.gradients(loss, weights + biases))
    with tf.device(devices.host):
        grads = [tf.add_n(list(g)) / float(n) for g in zip(*tower_grads)]
        grads, norm = tf.clip_by_global_norm(grads, 5.0)
        expose_math(grad_norm=norm)
        opt = tf1.train.AdamOptimizer(1e-4, beta1=0.5, beta2=0.9)
        train_op = opt.apply_gradients(list(zip(grads, weights + biases)))
    return train_op, {images: devices.seed_values.x}
