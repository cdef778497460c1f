"""The ``tf2-strategy`` built-ins' strategies, the devices they run on, and what the machine offers.

Each built-in of the family names one function here, ``(devices) -> tf.distribute.Strategy``;
they all run the seed step (:mod:`.seed_step`).  A user's TF2 variant file without its own
``build_strategy(devices)`` runs under :func:`one_device`.

What a variant needs (``registry.NEEDS``) is checked against what the machine
offers (:func:`machine_offers`, then ``registry.skip_reason``) before anything is built: ``NcclAllReduce``
constructs on CPUs but fails at its first step ("No OpKernel was registered to
support Op 'NcclAllReduce'"), so ``mirrored_nccl`` is *skipped* there, with the reason.

Imported only inside a capture child: it imports TensorFlow.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfprof_towers.capture.devices import Devices


def configure_devices(devices: Devices) -> None:
    """Split the CPU into the host and ``len(devices.accelerators)`` logical accelerators.

    Nothing to do on GPUs.  Must run before TensorFlow executes any op (it raises
    ``RuntimeError`` once the runtime is initialised).
    """
    if devices.kind != "logical-cpu":
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    config = [tf.config.LogicalDeviceConfiguration() for _ in range(1 + len(devices.accelerators))]
    tf.config.set_logical_device_configuration(cpu, config)


def kernel_device_types(op_type: str) -> set[str]:
    """Device types with a registered kernel for ``op_type`` (``set()`` for NcclAllReduce on a CPU build)."""
    from tensorflow.python.framework import kernels

    return {k.device_type for k in kernels.get_registered_kernels_for_op(op_type).kernel}


def machine_offers(devices: Devices) -> frozenset[str]:
    """Keys of ``registry.NEEDS`` this machine provides to one process."""
    offers = set()
    if devices.kind == "gpu":
        offers.add("gpu")
        if len(devices.accelerators) >= 2 and "GPU" in kernel_device_types("NcclAllReduce"):
            offers.add("nccl")
    return frozenset(offers)


def one_device(devices: Devices) -> tf.distribute.Strategy:
    """``OneDeviceStrategy`` on accelerator 0: the family's baseline (and a variant file's default)."""
    return tf.distribute.OneDeviceStrategy(devices.accelerators[0])


def _mirrored(devices: Devices, cross_device_ops: Any = None) -> tf.distribute.Strategy:
    return tf.distribute.MirroredStrategy(devices=list(devices.accelerators),
                                          cross_device_ops=cross_device_ops)


def mirrored(devices: Devices) -> tf.distribute.Strategy:
    """TensorFlow's default cross-device ops: a collective all-reduce (NCCL on GPUs, a ring on CPUs)."""
    return _mirrored(devices)


def mirrored_nccl(devices: Devices) -> tf.distribute.Strategy:
    return _mirrored(devices, tf.distribute.NcclAllReduce())


def mirrored_hierarchical(devices: Devices) -> tf.distribute.Strategy:
    return _mirrored(devices, tf.distribute.HierarchicalCopyAllReduce())


def mirrored_reduce_host(devices: Devices) -> tf.distribute.Strategy:
    return _mirrored(devices, tf.distribute.ReductionToOneDevice(reduce_to_device=devices.host))


def central_storage(devices: Devices) -> tf.distribute.Strategy:
    return tf.distribute.experimental.CentralStorageStrategy(compute_devices=list(devices.accelerators),
                                                             parameter_device=devices.host)


def describe(strategy: tf.distribute.Strategy) -> dict[str, Any]:
    """The strategy's class, replicas and cross-device ops, for the record."""
    ext = strategy.extended
    ops = getattr(ext, "_cross_device_ops", None)
    doc: dict[str, Any] = {"strategy": type(strategy).__name__,
                           "replicas": int(strategy.num_replicas_in_sync),
                           "cross_device_ops": type(ops).__name__ if ops is not None else None}
    options = getattr(ext, "_communication_options", None)
    impl = getattr(options, "implementation", None)
    if doc["cross_device_ops"] == "CollectiveAllReduce" and impl is not None:
        doc["communication"] = str(getattr(impl, "value", impl))
    return doc
