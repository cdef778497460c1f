"""``examples/towers_fixed.py`` with 50 ms of host sleep added to every step (the `diff` gate's test).

The same graph (loaded from the example, so the two cannot drift apart), plus a ``py_func`` that
sleeps 50 ms after the update; the step fetches both.
"""

import importlib.util
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

SLEEP_S = 0.05
_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "towers_fixed.py"


def _sleep() -> np.float32:
    time.sleep(SLEEP_S)
    return np.float32(SLEEP_S)


def build_variant(devices):
    spec = importlib.util.spec_from_file_location("towers_fixed_for_sleepy", _EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    train_op, feed = example.build_variant(devices)
    with tf.device(devices.host), tf.control_dependencies([train_op]):
        slept = tf.compat.v1.py_func(_sleep, [], tf.float32, stateful=True, name="sleep_50ms")
    return [train_op, slept], feed
