"""A variant's graph at full size, built but never run: per-op work and cross-device copies.

Imports TensorFlow: run it in a child (``python -m tfprof_towers.projection.graphcost
SPEC.json``) so the commands that only read run directories stay TensorFlow-free.

Placement of a graph that is not run is worked out the way TensorFlow's placer
would for the requested devices: an op's ``tf.device`` request, overridden by its
colocation group's device (resource variable reads, optimizer slots), and the
first accelerator for an op that requests nothing.  Not modelled: soft placement
of ops that have no kernel on the requested device (a CPU-only TensorFlow build
cannot tell which GPU kernels exist) and Grappler's rewrites (fusion, constant
folding) of the real run.  With a run directory the placement is checked against
that run's partition graphs (see :mod:`.calibrate`).

Each op's work (FLOPs, bytes, class) is :func:`.opcost.op_cost`'s; this module places the ops,
groups the all-reduces, adds the copies between devices and estimates each device's peak memory.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tfprof_towers.projection.opcost import COLLECTIVE_OPS, MATMUL, VIEW, op_cost, static_int, tensor_nbytes


def executed_ops(fetches: Any) -> list[Any]:
    """Every op a ``Session.run(fetches)`` executes, in a topological order (the same every time)."""
    import tensorflow as tf

    roots = [f if isinstance(f, tf.Operation) else f.op for f in tf.nest.flatten(fetches)]
    seen: dict[str, Any] = {}
    order: list[Any] = []
    stack: list[tuple[Any, bool]] = [(op, False) for op in reversed(roots)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            order.append(op)
            continue
        if op.name in seen:
            continue
        seen[op.name] = op
        stack.append((op, True))
        # control inputs by name: a tf.function's come in no fixed order (automatic control
        # dependencies), and the order of ops decides the model's ties
        for dep in sorted(op.control_inputs, key=lambda o: o.name) + [t.op for t in op.inputs]:
            if dep.name not in seen:
                stack.append((dep, False))
    return order


def resolve_device(op: Any, graph: Any, default: str, placed: dict[str, str]) -> str:
    """The device TensorFlow's placer would pick for ``op``.

    In order: the device of the op its colocation group names; the device of the op
    producing its first resource input (a resource is used where it lives); its own
    ``tf.device`` request; ``default``.  ``placed`` holds the ops already resolved
    (callers go in topological order).
    """
    from tfprof_towers.vocab.device_names import canonical_device

    for group in op.colocation_groups():
        name = group.decode()[len("loc:@"):] if group.startswith(b"loc:@") else ""
        if name and name != op.name:
            if name in placed:
                return placed[name]
            try:
                root = graph.get_operation_by_name(name)
            except KeyError:
                continue
            if root.device:
                return canonical_device(root.device)
    for t in op.inputs:
        if t.dtype.name == "resource" and t.op.name in placed:
            return placed[t.op.name]
    return canonical_device(op.device) if op.device else default


def collective_key(op: Any, device: str, seen: dict[tuple[str, str], int]) -> tuple[str, int]:
    """Which all-reduce ``op`` belongs to, and the bytes each member contributes.

    NCCL ops by their shared name.  TF2's ``CollectiveReduceV2`` feeds its instance key
    at call time, so the k-th collective of a group key on one device goes with the
    k-th on every other (a group's collectives run in the same order on every member).
    """
    if op.type == "NcclAllReduce":
        return op.get_attr("shared_name").decode(), sum(tensor_nbytes(t) for t in op.inputs)
    group = static_int(op.inputs[2]) if len(op.inputs) > 2 else None
    k = seen.get((str(group), device), 0)
    seen[(str(group), device)] = k + 1
    return f"collective:{group}#{k}", tensor_nbytes(op.inputs[0])


def extract_work(
    graph: Any, fetches: Any, host: str, accelerators: Iterable[str], default_to_accelerator: bool = True,
    preplaced: dict[str, str] | None = None, group_control_edges: bool = False,
) -> dict[str, Any]:
    """Per-op work, dependencies and cross-device copies of one step (JSON-able; see model.GraphWork).

    An op that requests no device goes to the first accelerator when
    ``default_to_accelerator`` (TensorFlow prefers GPUs), else to the host (with
    logical CPU devices TensorFlow's default is ``/cpu:0``).  ``preplaced`` fixes the
    device of some ops (a function's placeholders live where the values they capture do).
    With ``group_control_edges`` (how a ``tf.function``'s graph is partitioned), an op's
    control inputs from another device cross as one zero-byte edge per source device,
    after the last of them; otherwise each crosses on its own (a Session's graph).
    """
    from tfprof_towers.vocab.device_names import canonical_device

    host = canonical_device(host)
    accels = [canonical_device(a) for a in accelerators]
    default = accels[0] if (accels and default_to_accelerator) else host
    order = executed_ops(fetches)
    index = {op.name: i for i, op in enumerate(order)}
    placed: dict[str, str] = {}
    for op in order:
        fixed = (preplaced or {}).get(op.name)
        placed[op.name] = fixed if fixed is not None else resolve_device(op, graph, default, placed)
    devices = [placed[op.name] for op in order]
    copies: list[dict[str, Any]] = []
    copy_of: dict[tuple[str, str], int] = {}
    collectives: dict[str, dict[str, Any]] = {}
    seen: dict[tuple[str, str], int] = {}
    ops: list[dict[str, Any]] = []
    for i, op in enumerate(order):
        dev = devices[i]
        deps: set[int] = set()
        waits: set[int] = set()
        for t in op.inputs:
            j = index[t.op.name]
            if devices[j] == dev:
                deps.add(j)
            else:
                base = _base_tensor(t, placed)
                waits.add(_copy(copies, copy_of, base.name, index[base.op.name], devices[j], dev,
                                tensor_nbytes(t)))
        remote: dict[str, int] = {}
        for c in op.control_inputs:
            j = index[c.name]
            if devices[j] == dev:
                deps.add(j)
            elif group_control_edges:
                remote[devices[j]] = max(remote.get(devices[j], -1), j)
            else:  # a control edge crosses devices as a zero-byte send/recv
                waits.add(_copy(copies, copy_of, "^" + c.name, j, devices[j], dev, 0))
        for src_dev, j in remote.items():
            waits.add(_copy(copies, copy_of, f"^{src_dev}->{op.name}", j, src_dev, dev, 0))
        cost = op_cost(op)
        entry: dict[str, Any] = {
            "name": op.name, "type": op.type, "device": dev, "flops": cost.flops, "bytes": cost.bytes,
            "matmul": cost.op_class == MATMUL, "op_class": cost.op_class, "deps": sorted(deps),
            "copies": sorted(waits),
        }
        if cost.winograd:
            entry["winograd"] = True
        if op.type in COLLECTIVE_OPS:
            key, payload = collective_key(op, dev, seen)
            group = collectives.setdefault(key, {"name": key, "ops": [], "bytes": 0})
            group["ops"].append(i)
            group["bytes"] = max(group["bytes"], payload)
            entry["collective"] = key
            entry["flops"], entry["bytes"], entry["op_class"] = 0.0, 0.0, VIEW
        ops.append(entry)
    groups = list(collectives.values())
    position = {g["name"]: k for k, g in enumerate(groups)}
    for entry in ops:
        if "collective" in entry:
            entry["collective"] = position[entry["collective"]]
    return {"host": host, "accelerators": accels, "ops": ops, "copies": copies, "collectives": groups}


#: Ops whose output is a view of their first input: TensorFlow sends the underlying
#: buffer once and the receiver sees every view of it (Grappler removes chained reshapes).
_VIEWS_OF_INPUT = frozenset({"Reshape", "Identity", "Squeeze", "ExpandDims"})


def _base_tensor(t: Any, placed: dict[str, str]) -> Any:
    """The tensor whose buffer ``t`` views, following view ops on the same device."""
    while t.op.type in _VIEWS_OF_INPUT and t.op.inputs:
        if placed.get(t.op.inputs[0].op.name) != placed[t.op.name]:
            break
        t = t.op.inputs[0]
    return t


def _copy(copies: list, copy_of: dict, tensor: str, src_op: int, src: str, dst: str, nbytes: int) -> int:
    """TensorFlow sends a tensor once per destination device, however many ops there read it."""
    key = (tensor, dst)
    if key not in copy_of:
        copy_of[key] = len(copies)
        copies.append({"tensor": tensor, "src_op": src_op, "src": src, "dst": dst, "bytes": int(nbytes)})
    return copy_of[key]


#: The live tensors at a device's peak the estimate keeps (the largest).
TOP_TENSORS = 8


def _full_name(device: str) -> str:
    """A canonical device as the virtual cluster names it (``/job:localhost/replica:0/task:0/...``)."""
    return "/job:localhost/replica:0/task:0" + device


def estimate_memory(graph: Any, fetches: Any, work: dict[str, Any],
                    variables: Iterable[tuple[str, str, int]], with_grappler: bool = False) -> dict[str, Any]:
    """Each device's peak memory in one step of ``graph``, each op on the device ``work`` placed it on:
    the step's tensors walked in order with TensorFlow's executor rules (:mod:`.liveness`: views and
    in-place ops allocate nothing, a buffer is freed after its last reader, a tensor read on another
    GPU is copied there), plus the variables on each device.

    Per device (canonical name): ``transient_bytes`` (the most bytes of the step's tensors live at
    once), ``persistent_bytes`` (``variables``: (name, device, bytes) -- the variables and optimizer
    slots on it, allocated before the step), ``peak_bytes`` (their sum), ``variables`` (how many) and
    ``top_tensors`` (the largest buffers live at the peak, named by the op that wrote them last);
    ``peak_low_bytes`` / ``peak_high_bytes``: the least and the most peak over the executor's orders
    (:func:`.liveness.peak_ranges`; ``peak_bytes`` is the queue's order), ``high_order`` the order of
    the most.
    With ``with_grappler``, ``grappler_transient_bytes``: grappler's static estimator's figure on the
    same graph (it counts every view and in-place output as a new buffer), for comparison only: it
    takes minutes on a large multi-GPU graph, so projections leave it out.  Devices that hold nothing
    are absent.  Any failure: ``{"error": why}``.
    """
    from tfprof_towers.projection.liveness import peak_ranges, rounded, walk_peaks
    from tfprof_towers.vocab.device_names import canonical_device

    try:
        ops = step_tensors(graph, fetches, {op["name"]: op["device"] for op in work["ops"]})
        peaks = walk_peaks(ops, canonical_device(work["host"]))
        ranges = peak_ranges(ops, canonical_device(work["host"]))
    except Exception as exc:  # a graph the walk cannot read: say so, the rest of the projection stands
        return {"error": f"the memory estimate failed: {type(exc).__name__}: "
                         + " ".join(str(exc).split())[:300]}
    grappler = grappler_peaks(graph, fetches, work) if with_grappler else {}
    per_var: dict[str, list[tuple[str, int]]] = {}
    for name, dev, nbytes in variables:
        per_var.setdefault(canonical_device(dev), []).append((name, rounded(int(nbytes))))
    out: dict[str, Any] = {}
    for dev in sorted(set(peaks) | set(per_var)):
        transient, live = peaks.get(dev, (0, []))
        own = per_var.get(dev, [])
        persistent = sum(b for _, b in own)
        if transient == 0 and not own:
            continue
        top = sorted(live, key=lambda x: (-x[1], x[0]))
        span = ranges.get(dev)
        out[dev] = {"peak_bytes": transient + persistent, "transient_bytes": transient,
                    "persistent_bytes": persistent, "variables": len(own),
                    "top_tensors": [list(t) for t in top[:TOP_TENSORS]],
                    "peak_low_bytes": (span.low if span else 0) + persistent,
                    "peak_high_bytes": (span.high if span else 0) + persistent,
                    "high_order": span.high_order if span else "queue"}
        if dev in grappler:
            out[dev]["grappler_transient_bytes"] = grappler[dev]
    return {"devices": out, "estimator": "liveness"}


#: Ops that call a function (a nested ``tf.function``, Keras's step): their body is walked inline.
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


def step_tensors(graph: Any, fetches: Any, placed: dict[str, str]) -> list[Any]:
    """The step's ops as :func:`.liveness.walk_peaks` reads them, in :func:`executed_ops`' order:
    each output's static bytes, its data inputs, whether it is held (a constant, a variable, a value
    a ``tf.function`` captures) or fed (a TF1 placeholder).  A call of a function (Keras's step inside
    its train function) is walked inline, its ops named ``<call op>/<op>`` as Grappler inlines them:
    each argument a view of the call's input, each of the call's outputs a view of the body's."""
    from tfprof_towers.vocab.device_names import canonical_device

    captured = {t.op.name for _, t in getattr(graph, "captures", ())}
    default = canonical_device(next(iter(placed.values()), "/device:CPU:0"))
    out: list[Any] = []
    _inline(graph, fetches, "", {}, captured, placed, default, out)
    return out


def _inline(graph: Any, fetches: Any, prefix: str, args: dict[str, tuple[int, int]], captured: set[str],
            placed: dict[str, str], default: str, out: list[Any]) -> dict[str, int]:
    """Append ``graph``'s ops run for ``fetches`` to ``out`` (names under ``prefix``; ``args``: each
    argument placeholder's name -> the (op, slot) in ``out`` that feeds it); returns name -> index."""
    from tfprof_towers.projection.liveness import HELD_TYPES, OpTensors
    from tfprof_towers.vocab.device_names import canonical_device

    index: dict[str, int] = {}

    def source(t: Any) -> tuple[int, int] | None:
        i = index.get(t.op.name)
        return None if i is None else (i, t.value_index)

    for op in executed_ops(fetches):
        name = prefix + op.name
        device = canonical_device(placed.get(name, default))
        if op.name in args:  # a function's argument: the caller's tensor
            out.append(OpTensors(name, "Identity", device, (tensor_nbytes(op.outputs[0]),), (args[op.name],)))
            index[op.name] = len(out) - 1
            continue
        inner = getattr(getattr(graph, "_functions", {}).get(op.get_attr("f").name), "graph", None) \
            if op.type in CALL_OPS else None
        inputs = tuple(src for t in op.inputs if (src := source(t)) is not None)
        after = tuple(index[c.name] for c in op.control_inputs if c.name in index)
        if inner is not None:
            fed = {arg.op.name: src for arg, t in zip(inner.inputs, op.inputs)
                   if (src := source(t)) is not None}
            body = _inline(inner, [*inner.outputs, *inner.control_outputs], f"{name}/", fed, set(), placed,
                           device, out)
            inputs = tuple((body[t.op.name], t.value_index) for t in inner.outputs if t.op.name in body)
            sizes = tuple(tensor_nbytes(t) for t in op.outputs)
            out.append(OpTensors(name, "IdentityN", device, sizes, inputs, after=tuple(
                body[c.name] for c in inner.control_outputs if c.name in body)))
            index[op.name] = len(out) - 1
            continue
        placeholder = op.type == "Placeholder"
        held = op.type in HELD_TYPES or (placeholder and (op.name in captured or bool(prefix)))
        out.append(OpTensors(
            name=name, type=op.type, device=device, outputs=tuple(tensor_nbytes(t) for t in op.outputs),
            inputs=inputs, held=held, after=after,
            fed=placeholder and not prefix and op.name not in captured, view_of=_split_on_axis0(op),
        ))
        index[op.name] = len(out) - 1
    return index


def _split_on_axis0(op: Any) -> int | None:
    """The input whose buffer a ``Split``/``SplitV`` along axis 0 slices (TensorFlow allocates no
    parts then), else None."""
    if op.type == "Split" and len(op.inputs) == 2 and static_int(op.inputs[0]) == 0:
        return 1
    if op.type == "SplitV" and len(op.inputs) == 3 and static_int(op.inputs[2]) == 0:
        return 0
    return None


def grappler_peaks(graph: Any, fetches: Any, work: dict[str, Any]) -> dict[str, int]:
    """Grappler's static estimate of each device's transient peak
    (``Cluster(devices=[NamedDevice...]).DeterminePeakMemoryUsage(Item(metagraph))`` over a virtual
    cluster of ``work``'s host and accelerators); empty where the estimator fails."""
    import tensorflow as tf
    from tensorflow.core.protobuf import device_properties_pb2, meta_graph_pb2
    from tensorflow.python.grappler import cluster as gcluster
    from tensorflow.python.grappler import item as gitem

    from tfprof_towers.vocab.device_names import canonical_device

    placed = {op["name"]: op["device"] for op in work["ops"]}
    default = work["accelerators"][0] if work["accelerators"] else work["host"]
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        node.device = _full_name(placed.get(node.name, default))
    roots = [f if isinstance(f, tf.Operation) else f.op for f in tf.nest.flatten(fetches)]
    meta = meta_graph_pb2.MetaGraphDef()  # built by hand: export_meta_graph refuses eager mode (TF2)
    meta.graph_def.CopyFrom(graph_def)
    meta.collection_def["train_op"].node_list.value.extend(sorted({op.name for op in roots}))
    named = []
    for dev, kind in [(work["host"], "CPU"), *((a, "GPU") for a in work["accelerators"])]:
        d = device_properties_pb2.NamedDevice(name=_full_name(dev))
        d.properties.type = kind
        named.append(d)
    try:
        peaks = gcluster.Cluster(devices=named).DeterminePeakMemoryUsage(gitem.Item(meta))
    except Exception:  # the estimator's own limits: the walk's figure stands alone
        return {}
    return {canonical_device(full): max(int(peak), 0) for full, (peak, _live) in peaks.items()}


def graph_variables(graph: Any, placed: dict[str, str]) -> list[tuple[str, str, int]]:
    """Each variable of a TF1 graph as (op name, device, bytes), on the device the projection placed it."""
    import tensorflow as tf

    out = []
    for v in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        op = v.op
        if op.name in placed and v.shape.is_fully_defined():
            out.append((op.name, placed[op.name], v.dtype.size * math.prod(v.shape.as_list())))
    return out


def build_variant(spec: dict[str, Any], preset: Any, host: str, accelerators: tuple[str, ...], kind: str):
    """Build one variant's graph; returns (graph, fetches)."""
    import tensorflow as tf

    from tfprof_towers.capture.devices import Devices
    from tfprof_towers.capture.families.tf1_graph import builder as tf1_builder
    from tfprof_towers.capture.seed_values import stand_in_values
    from tfprof_towers.capture.tf1 import builders as variants

    # never run: zero-cost stand-ins of the shared values (the seed batch alone is 256 MB)
    values = stand_in_values(preset.batch, preset.dim, preset.blocks)
    devices = Devices(host, accelerators, kind, preset, values)
    builder, origin = tf1_builder(spec["name"], spec.get("file"))
    graph = tf.Graph()
    with graph.as_default():
        fetches, _feed = variants.check_built(builder(devices), origin)
    return graph, fetches


def work_for(spec: dict[str, Any], preset: Any, host: str, accelerators: tuple[str, ...], kind: str):
    """One tf1-graph variant's work on a layout: its ops, copies and memory estimate (JSON-able)."""
    graph, fetches = build_variant(spec, preset, host, accelerators, kind)
    work = extract_work(graph, fetches, host, accelerators, default_to_accelerator=(kind == "gpu"))
    placed = {op["name"]: op["device"] for op in work["ops"]}  # the target's GPUs, or the run's own devices
    work["memory"] = estimate_memory(graph, fetches, work, graph_variables(graph, placed))
    work["variant"] = spec["name"]
    work["preset"] = preset.name
    return work


def main(argv: list[str]) -> int:
    """Child entry: SPEC.json names the preset, accelerators, variants and the output path.

    tf1-graph variants only: a tf2-strategy variant is built eagerly by :mod:`.strategy_graphs`.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spec = json.loads(Path(argv[0]).read_text())
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    from tfprof_towers.variants.config import Preset

    preset = Preset(**spec["preset"])
    return write_works(spec, tf.__version__, lambda v, layout: work_for(
        v, preset, layout["host"], tuple(layout["accelerators"]), layout["kind"]))


def write_works(spec: dict[str, Any], tf_version: str,
                work_of: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> int:
    """Each variant's work under the spec's layout (``variants``) and its check layout (``checks``),
    a build error in one line in its place, written to ``spec["out"]``: a graph child's output."""
    from tfprof_towers.rundir.paths import write_json
    from tfprof_towers.vocab.errors import TowersError

    out: dict[str, Any] = {"tensorflow": tf_version, "variants": {}, "checks": {}}
    for key, layout in (("variants", spec.get("layout")), ("checks", spec.get("check_layout"))):
        if layout is None:
            continue
        for v in spec["variants"]:
            try:
                out[key][v["name"]] = work_of(v, layout)
            except TowersError as exc:
                out[key][v["name"]] = {"error": exc.message}
            except Exception as exc:  # a variant's own bug: say which, in one line
                first = " ".join(str(exc).split())[:300]
                out[key][v["name"]] = {"error": f"{type(exc).__name__} while building: {first}"}
    write_json(Path(spec["out"]), out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
