"""Child of ``bench_memory``'s allocator part: the seed step's shape (BLOCKS x [MatMul, BiasAdd, Sigmoid],
mean loss, Adam) as one TF1 graph on the CPU, timed under whatever ``TF_CPU_ALLOCATOR_USE_BFC`` the
parent set.  ``python allocator_child.py BATCH DIM BLOCKS STEPS``: prints one JSON line,
``{"wall_s": [...], "cpu_s": [...]}``, each timed step's wall time and the process's CPU time in it (all
its threads: what the allocator adds shows there even when other jobs share the cores)."""

from __future__ import annotations

import json
import os
import sys
import time


def main(batch: int, dim: int, blocks: int, steps: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    rng = np.random.default_rng(0)
    x = tf.compat.v1.placeholder(tf.float32, [batch, dim])
    h = x
    for k in range(blocks):
        w = tf.Variable(rng.normal(0, dim ** -0.5, (dim, dim)).astype(np.float32), name=f"w{k}")
        b = tf.Variable(np.zeros(dim, np.float32), name=f"b{k}")
        h = tf.sigmoid(tf.nn.bias_add(tf.matmul(h, w), b))
    loss = tf.reduce_mean(tf.square(h))
    train = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
    feed = {x: rng.normal(size=(batch, dim)).astype(np.float32)}
    wall, cpu = [], []
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(3):  # warm-up
            sess.run(train, feed)
        for _ in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            sess.run(train, feed)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu}))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:5]))
