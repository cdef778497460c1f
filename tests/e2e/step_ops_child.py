"""Child of ``test_memory_replay``: the step's ops as the memory walk reads them, one JSON document per
family.  ``python step_ops_child.py FAMILY PRESET NAMES OUT``: each variant's ops (``liveness.OpTensors``
fields) and host, built on the run's logical CPU devices as the projection builds them."""

from __future__ import annotations

import dataclasses
import json
import os
import sys


def main(family: str, preset_name: str, names: list[str], out: str) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import tfprof_towers.projection.liveness as liveness
    from tfprof_towers.variants.config import get_preset

    seen: dict[str, object] = {}
    walk = liveness.walk_peaks

    def spy(ops, host, order=None):  # the ops estimate_memory walks, kept
        seen["ops"], seen["host"] = list(ops), host
        return walk(ops, host, order)

    liveness.walk_peaks = spy
    preset = get_preset(preset_name)
    host, accelerators = "/device:CPU:0", ("/device:CPU:1", "/device:CPU:2")
    if family == "tf1-graph":
        tf.compat.v1.disable_eager_execution()
        from tfprof_towers.projection.graphcost import work_for

        def build(name: str) -> None:
            work_for({"name": name}, preset, host, accelerators, "logical-cpu")
    else:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)
        from tfprof_towers.projection.strategy_graphs import work_for as strategy_work

        def build(name: str) -> None:
            strategy_work({"name": name}, preset,
                          {"host": host, "accelerators": list(accelerators), "kind": "logical-cpu"})
    doc = {}
    for name in names:
        build(name)
        doc[name] = {"host": seen["host"], "ops": [dataclasses.asdict(op) for op in seen["ops"]]}
    with open(out, "w") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4])
