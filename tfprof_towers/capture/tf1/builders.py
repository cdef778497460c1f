"""The ``tf1-graph`` placement variants: the built-ins of design.md and users' variant files.

Every built-in is assembled from the one workload in :mod:`.workload`; only the ``tf.device``
scopes differ.  A builder runs inside a fresh ``tf.Graph`` in TF1 graph mode and returns
``(fetches, feed_dict)`` for one training step.

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import tensorflow as tf

from tfprof_towers.capture.devices import Devices
from tfprof_towers.capture.tf1 import workload as wl
from tfprof_towers.capture.tf2.files import user_function
from tfprof_towers.capture.user_files import import_user_file
from tfprof_towers.vocab.errors import VariantError

Built = tuple[Any, dict]
Builder = Callable[[Devices], Built]


def _towers(devices: Devices, vars_on: str, stray_host_scope: bool = False) -> Built:
    """One tower per accelerator, variables and update on ``vars_on``.

    With ``stray_host_scope`` the tower's loss is wrapped in a nested host scope,
    exactly as in the classic buggy tutorial code: the forward pass runs on the
    host, while ``tf.gradients`` (outside that scope) runs on the accelerators.
    """
    preset = devices.preset
    with tf.device(devices.host):
        x, value = wl.make_input(devices)
        shards = wl.split_batch(x, len(devices.accelerators))
    with tf.device(vars_on):
        params = wl.make_params(devices)
    tower_grads = []
    for i, accel in enumerate(devices.accelerators):
        with tf.device(accel), tf.name_scope(f"tower_{i}"):
            if stray_host_scope:
                with tf.device(devices.host):  # the stray host scope (towers_bug)
                    loss = wl.tower_loss(shards[i], params, preset.dim)
            else:
                loss = wl.tower_loss(shards[i], params, preset.dim)
            tower_grads.append(wl.tower_gradients(loss, params))
    with tf.device(vars_on):
        grads = wl.average_gradients(tower_grads)
        train_op = wl.apply_update(grads, params)
    return train_op, {x: value}


def build_single(devices: Devices) -> Built:
    preset = devices.preset
    with tf.device(devices.host):
        x, value = wl.make_input(devices)
    with tf.device(devices.accelerators[0]):
        params = wl.make_params(devices)
        loss = wl.tower_loss(x, params, preset.dim)
        train_op = wl.apply_update(wl.tower_gradients(loss, params), params)
    return train_op, {x: value}


def build_towers_host_vars(devices: Devices) -> Built:
    return _towers(devices, vars_on=devices.host)


def build_towers_accel0_vars(devices: Devices) -> Built:
    return _towers(devices, vars_on=devices.accelerators[0])


def build_towers_bug(devices: Devices) -> Built:
    return _towers(devices, vars_on=devices.host, stray_host_scope=True)


def _all_reduce(grads_per_replica: list[list[tf.Tensor]], devices: Devices) -> list[list[tf.Tensor]]:
    """Sum each variable's gradient across replicas; one result per replica, on its device.

    NCCL (``nccl_ops.all_sum``) on GPUs; elsewhere each replica sums every
    replica's gradient with ``add_n`` on its own device, which moves the same
    bytes as an all-gather.
    """
    n = len(grads_per_replica)
    by_var = list(zip(*grads_per_replica))
    if devices.kind == "gpu":
        from tensorflow.python.ops import nccl_ops

        summed = [nccl_ops.all_sum(list(gs)) for gs in by_var]  # [var][replica]
    else:
        summed = [[_sum_on(accel, gs) for accel in devices.accelerators] for gs in by_var]
    averaged = []
    for r, accel in enumerate(devices.accelerators):
        with tf.device(accel):
            averaged.append([summed[v][r] / float(n) for v in range(len(by_var))])
    return averaged


def _sum_on(device: str, tensors) -> tf.Tensor:
    with tf.device(device):
        return tf.add_n(list(tensors))


def build_replicated(devices: Devices) -> Built:
    preset = devices.preset
    with tf.device(devices.host):
        x, value = wl.make_input(devices)
        shards = wl.split_batch(x, len(devices.accelerators))
    replicas: list[wl.Params] = []
    grads = []
    for i, accel in enumerate(devices.accelerators):
        with tf.device(accel), tf.name_scope(f"replica_{i}"):
            params = wl.make_params(devices, suffix=f"_r{i}")
            replicas.append(params)
            loss = wl.tower_loss(shards[i], params, preset.dim)
            grads.append(wl.tower_gradients(loss, params))
    reduced = _all_reduce(grads, devices)
    updates = []
    for i, accel in enumerate(devices.accelerators):
        with tf.device(accel):
            updates.append(wl.apply_update(reduced[i], replicas[i], name=f"adam_r{i}"))
    return tf.group(*updates, name="train_step"), {x: value}


def load_variant_file(path: str | Path) -> Builder:
    """Import a user's variant file and return its ``build_variant``; one-line errors."""
    module = import_user_file(path, "variant file")
    return user_function(module, "build_variant", path, "variant file", "build_variant(devices)")


def check_built(result: Any, origin: str) -> Built:
    """Check a builder returned ``(fetches, feed_dict)``; one-line error otherwise."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise VariantError(f"{origin}: build_variant must return (fetches, feed_dict), "
                           f"got {type(result).__name__}")
    fetches, feed = result
    feed = {} if feed is None else feed
    if not isinstance(feed, dict):
        raise VariantError(f"{origin}: feed_dict must be a dict, got {type(feed).__name__}")
    if fetches is None or (isinstance(fetches, list | tuple | dict) and len(fetches) == 0):
        raise VariantError(f"{origin}: build_variant returned no fetches")
    return fetches, feed
