"""A variant file with a math bug: the gradient average leaves out the last tower.

Towers as in ``examples/towers_fixed.py`` (variables on the host, one tower per
accelerator), but ``tower_grads[:-1]`` drops the last tower's gradients while
still dividing by the number of towers.  Its losses hardly move (Adam's first
steps barely depend on the gradient's size) but its step-1 gradient norm is half
the others': the math check must flag it.
"""

import tensorflow as tf

from tfprof_towers.capture.mathcheck import expose_math, load_after_init

tf1 = tf.compat.v1


def build_variant(devices):
    p = devices.preset
    n = len(devices.accelerators)
    zeros = tf1.zeros_initializer()
    with tf.device(devices.host):
        images = tf1.placeholder(tf.float32, [p.batch, p.dim, p.dim], name="images")
        params = []
        for i in range(p.blocks):
            params += [tf1.get_variable(f"W{i}", [p.dim, p.dim], initializer=zeros),
                       tf1.get_variable(f"b{i}", [p.dim], initializer=zeros)]
        load_after_init(params, devices.seed_values.params)
        shards = tf.split(images, n, axis=0)
    tower_grads = []
    for i, device in enumerate(devices.accelerators):
        with tf.device(device), tf.name_scope(f"tower_{i}"):
            h = shards[i]
            for b in range(p.blocks):
                flat = tf.reshape(h, [-1, p.dim])
                h = tf.reshape(tf.sigmoid(tf.matmul(flat, params[2 * b]) + params[2 * b + 1]), tf.shape(h))
            loss = tf.reduce_mean(h)
            expose_math(loss=loss)
            tower_grads.append(tf1.gradients(loss, params))
    with tf.device(devices.host):
        grads = [tf.add_n(list(g)) / float(n) for g in zip(*tower_grads[:-1])]  # the bug
        grads, norm = tf.clip_by_global_norm(grads, 5.0)
        expose_math(grad_norm=norm)
        opt = tf1.train.AdamOptimizer(1e-4, beta1=0.5, beta2=0.9)
        train_op = opt.apply_gradients(list(zip(grads, params)))
    return train_op, {images: devices.seed_values.x}
