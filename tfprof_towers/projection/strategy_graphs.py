"""tf2-strategy variants' graphs at full size, traced but never run: per-op work, copies and all-reduces.

The graph of a TF2 step is its ``tf.function``'s FuncGraph, traced under the
variant's strategy (``step.get_concrete_function()`` runs nothing).  It is traced
on logical CPU devices -- ``/cpu:0`` the host and ``/cpu:1..N`` standing in for the
profile's ``N`` accelerators -- and the devices are renamed to the layout's
(``/device:GPU:i``) afterwards, so a CPU-only machine can build it for any profile.
Ops are placed as :func:`.graphcost.resolve_device` does, with each function input
placed where the value it captures lives (a variable's handle on its device).

What each strategy's cross-device choice becomes in the model (:mod:`.model`):

* ``mirrored`` / ``mirrored_nccl``: one packed all-reduce per step (``CollectiveReduceV2``
  or ``NcclAllReduce``), modeled as a ring over the peer links -- direct (NVLink), or
  staged through the host where the profile has no peer access.  (Traced on CPUs the
  default is TensorFlow's RING collective; on GPUs it would be NCCL: both are rings.)
* ``mirrored_hierarchical``: the copies and sums ``HierarchicalCopyAllReduce`` builds
  between the accelerators, each a peer copy on its route.
* ``mirrored_reduce_host``: every gradient copied to the host, summed there, and the
  sums copied back: host links.
* ``central_storage``: variables on the host, read by every accelerator each step and
  updated on the host: host links both ways.

Imports TensorFlow: :func:`.api.build_graphs` runs it in a child, as :mod:`.graphcost`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def build_step(spec: dict[str, Any], devices: Any) -> tuple[Any, Any, Any]:
    """The variant's strategy, its step and the traced step: ``(strategy, tf.function, concrete function)``
    (the step holds the variables the concrete function captures: keep it while they are read)."""
    import tensorflow as tf

    from tfprof_towers.capture import seed_step
    from tfprof_towers.capture.tf2 import strategies
    from tfprof_towers.capture.tf2.files import load_step_file
    from tfprof_towers.variants import registry

    if spec.get("file"):
        f = load_step_file(spec["file"])
        strategy = (f.build_strategy or strategies.one_device)(devices)
        step = f.build_step(strategy, devices)
    else:
        strategy = registry.builtin_of(spec["name"], registry.TF2_STRATEGY).load_builder()(devices)
        values = devices.seed_values
        with tf.device(devices.host):
            batch = tf.zeros(values.x.shape, tf.float32)
        step = seed_step.seed_step(strategy, values, devices.host, batch=batch)
    return strategy, step, step.get_concrete_function()


def capture_devices(concrete: Any, host: str) -> dict[str, str]:
    """Each captured input's placeholder -> the device of the value it captures.

    Values captured by reference (a collective's instance key, read at each call) are
    host tensors.
    """
    from tfprof_towers.vocab.device_names import canonical_device

    out = {}
    for external, internal in concrete.graph.captures:
        device = getattr(external, "device", "")
        if device:
            out[internal.op.name] = canonical_device(device)
    by_ref = getattr(getattr(concrete.graph, "function_captures", None), "by_ref_internal", {}) or {}
    for internal in by_ref.values():
        if hasattr(internal, "op"):
            out[internal.op.name] = canonical_device(host)
    return out


def rename_devices(work: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """``work`` with every device name replaced through ``mapping`` (names not in it stay)."""
    def name(d: str) -> str:
        return mapping.get(d, d)

    return {
        **work,
        "host": name(work["host"]),
        "accelerators": [name(a) for a in work["accelerators"]],
        "ops": [{**op, "device": name(op["device"])} for op in work["ops"]],
        "copies": [{**c, "src": name(c["src"]), "dst": name(c["dst"])} for c in work["copies"]],
    }


def strategy_variables(concrete: Any, mapping: dict[str, str]) -> list[tuple[str, str, int]]:
    """(name, device, bytes) of each variable the traced step captures (a mirrored variable: one per
    replica), on the layout's device (``mapping`` renames the stand-ins)."""
    import math

    from tfprof_towers.vocab.device_names import canonical_device

    out = []
    for v in concrete.variables:
        if v.shape.is_fully_defined() and getattr(v, "device", ""):
            dev = canonical_device(v.device)
            out.append((v.name, mapping.get(dev, dev), v.dtype.size * math.prod(v.shape.as_list())))
    return out


def work_for(spec: dict[str, Any], preset: Any, layout: dict[str, Any]) -> dict[str, Any]:
    """One variant's work on ``layout``, traced on logical CPU devices standing in for its accelerators."""
    from tfprof_towers.capture.devices import Devices
    from tfprof_towers.capture.seed_values import stand_in_values
    from tfprof_towers.projection.graphcost import estimate_memory, extract_work
    from tfprof_towers.vocab.device_names import canonical_device

    n = len(layout["accelerators"])
    # never run: zero-cost stand-ins of the shared values (the seed batch alone is 256 MB)
    values = stand_in_values(preset.batch, preset.dim, preset.blocks)
    cpu = Devices("/cpu:0", tuple(f"/cpu:{i + 1}" for i in range(n)), "logical-cpu", preset, values)
    _strategy, step, concrete = build_step(spec, cpu)
    fetches = [*concrete.graph.outputs, *concrete.graph.control_outputs]
    work = extract_work(concrete.graph, fetches, cpu.host, cpu.accelerators,
                        default_to_accelerator=(layout["kind"] == "gpu"),
                        preplaced=capture_devices(concrete, cpu.host), group_control_edges=True)
    mapping = {canonical_device(cpu.host): canonical_device(layout["host"])}
    mapping.update({canonical_device(c): canonical_device(g) for c, g in zip(cpu.accelerators,
                                                                            layout["accelerators"])})
    work = rename_devices(work, mapping)
    # the memory the target's GPUs (or the run's own devices) would need, on the strategy's own graph
    work["memory"] = estimate_memory(concrete.graph, fetches, work, strategy_variables(concrete, mapping))
    del step
    work["variant"] = spec["name"]
    work["preset"] = preset.name
    return work


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spec = json.loads(Path(argv[0]).read_text())
    import tensorflow as tf

    from tfprof_towers.projection.graphcost import write_works
    from tfprof_towers.variants.config import Preset

    layouts = [spec.get(key) for key in ("layout", "check_layout")]
    most = max(len(layout["accelerators"]) for layout in layouts if layout)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * (1 + most))
    preset = Preset(**spec["preset"])
    return write_works(spec, tf.__version__, lambda v, layout: work_for(v, preset, layout))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
