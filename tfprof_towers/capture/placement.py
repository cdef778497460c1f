"""Placement facts from the partition graphs of one step.

Input: the user's ``tf.Graph`` and the ``RunMetadata`` of one step run with
``RunOptions(trace_level=FULL_TRACE, output_partition_graphs=True)``.
Output (plain JSON-able dicts, saved in the variant's record.json):

* ``nodes``: every node of every partition graph with its assigned device, the
  device the graph requested, estimated FLOPs, and the ``with tf.device(...)``
  source locations that placed it (innermost first);
* ``devices``: per device the op count and estimated FLOPs per step;
* ``edges``: every cross-device ``_Send``/``_Recv`` edge with its tensor and bytes;
* ``transfers``: edges summed per (src, dst) link.

Only the graph introspection needs TensorFlow objects; the arithmetic works on
plain values and is unit-tested without running a session.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfprof_towers.vocab.device_names import canonical_device

#: Partition-graph plumbing that is not the user's computation.
PLUMBING_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval", "NoOp"})

DTYPE_BYTES = {
    1: 4, 2: 8, 3: 4, 4: 1, 5: 2, 6: 1, 7: 0, 8: 8, 9: 8, 10: 1, 14: 2, 17: 2, 18: 16, 19: 2,
    20: 0, 21: 0, 22: 4, 23: 8,
}  # DataType enum -> bytes per element (strings/resources/variants: 0 = unknown)


def matmul_flops(a_shape: Sequence[int], b_shape: Sequence[int], transpose_a: bool, transpose_b: bool) -> int:
    """2*M*N*K (times the batch size for batched matmuls, broadcasting leading dims)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        return 0
    m, k = (a_shape[-1], a_shape[-2]) if transpose_a else (a_shape[-2], a_shape[-1])
    n = b_shape[-2] if transpose_b else b_shape[-1]
    batch_a, batch_b = list(a_shape[:-2]), list(b_shape[:-2])
    width = max(len(batch_a), len(batch_b))
    batch_a = [1] * (width - len(batch_a)) + batch_a
    batch_b = [1] * (width - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
    return 2 * batch * m * n * k


def conv2d_flops(out_shape: Sequence[int], filter_shape: Sequence[int]) -> int:
    """2 * output elements * kh * kw * in_channels."""
    if len(out_shape) != 4 or len(filter_shape) != 4:
        return 0
    kh, kw, cin, _ = filter_shape
    return 2 * math.prod(out_shape) * kh * kw * cin


def op_flops(op: Any) -> int | None:
    """Estimated FLOPs of one graph op from static shapes; None when shapes are unknown."""
    kind = op.type
    try:
        if kind in ("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a = op.inputs[0].shape.as_list()
            b = op.inputs[1].shape.as_list()
            if None in a or None in b:
                return None
            if kind == "MatMul":
                ta, tb = op.get_attr("transpose_a"), op.get_attr("transpose_b")
            else:
                ta, tb = op.get_attr("adj_x"), op.get_attr("adj_y")
            return matmul_flops(a, b, bool(ta), bool(tb))
        if kind in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
            # Backprops cost as much as the forward conv whose output is their out_backprop.
            out = (op.outputs[0] if kind == "Conv2D" else op.inputs[2]).shape.as_list()
            filt = (op.outputs[0] if kind == "Conv2DBackpropFilter" else op.inputs[1]).shape.as_list()
            if None in out or None in filt:
                return None
            return conv2d_flops(out, filt)
    except (ValueError, AttributeError, IndexError):
        return None
    return 0


def assignment_sources(op: Any) -> list[dict[str, Any]]:
    """The ``with tf.device(...)`` scopes that placed ``op``, innermost first."""
    out = []
    for a in getattr(op, "_device_assignments", ()) or ():
        obj = a.obj
        device = obj if isinstance(obj, str) else getattr(obj, "to_string", lambda o=obj: repr(o))()
        out.append({"device": str(device), "file": a.filename, "line": int(a.lineno)})
    return out


def tensor_bytes(dtype_enum: int, dims: Iterable[int]) -> int | None:
    size = DTYPE_BYTES.get(int(dtype_enum), 0)
    dims = list(dims)
    if size == 0 or any(d < 0 for d in dims):
        return None
    return size * math.prod(dims)


def output_bytes_from_step_stats(step_stats: Any) -> dict[tuple[str, int], int]:
    """(node name, output slot) -> bytes, from FULL_TRACE step stats."""
    sizes: dict[tuple[str, int], int] = {}
    for dev in step_stats.dev_stats:
        for ns in dev.node_stats:
            for out in ns.output:
                td = out.tensor_description
                n = tensor_bytes(td.dtype, [d.size for d in td.shape.dim])
                if n is not None:
                    sizes[(ns.node_name, int(out.slot))] = n
    return sizes


def split_input(name: str) -> tuple[str, int]:
    """``"node:1"`` -> ("node", 1); ``"node"`` -> ("node", 0); control inputs are ignored by callers."""
    base, _, slot = name.partition(":")
    return base, int(slot) if slot.isdigit() else 0


def executed_as(
    graph_ops: Mapping[str, Any], placed: Mapping[str, Any], max_depth: int = 4
) -> dict[str, str]:
    """Original op name -> the partition node that executes it.

    Grappler's remapper fuses patterns (MatMul + Add -> ``_FusedMatMul``) into one
    node that keeps the name of the pattern's last op, on the same device; an op
    missing from the partition graphs is found through its consumers.
    """
    found: dict[str, str] = {}
    for name, op in graph_ops.items():
        if name in placed:
            found[name] = name
            continue
        frontier = [op]
        for _ in range(max_depth):  # breadth first: the first placed consumer, in graph order
            frontier = [c for o in frontier for out in o.outputs for c in out.consumers()]
            hit = next((c.name for c in frontier if c.name in placed), None)
            if hit is not None:
                found[name] = hit
                break
    return found


def extract_placement(graph: Any, run_metadata: Any) -> dict[str, Any]:
    """Nodes, per-device totals, edges and transfers of one step (see module docstring)."""
    measured = output_bytes_from_step_stats(run_metadata.step_stats)
    graph_ops = {op.name: op for op in graph.get_operations()}
    placed = {n.name: n for p in run_metadata.partition_graphs for n in p.node}
    host_of = executed_as(graph_ops, placed)
    flops: dict[str, int] = defaultdict(int)
    unknown: set[str] = set()
    fused: dict[str, list[str]] = defaultdict(list)
    for name, op in graph_ops.items():
        f = op_flops(op)
        target = host_of.get(name)
        if target is None:
            continue  # pruned: not executed in this step
        if target != name:
            fused[target].append(name)
        if f is None:
            unknown.add(target)
        else:
            flops[target] += f
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for partition in run_metadata.partition_graphs:
        by_name = {n.name: n for n in partition.node}
        for node in partition.node:
            op = graph_ops.get(node.name)
            if node.op in ("_Send", "_HostSend"):
                edges.append(_edge(node, by_name, graph_ops, measured))
            nodes.append({
                "name": node.name, "type": op.type if op is not None else node.op, "kernel": node.op,
                "device": canonical_device(node.device),
                "requested": canonical_device(op.device) if op is not None else "",
                "flops": flops.get(node.name, 0), "flops_known": node.name not in unknown,
                "fused": fused.get(node.name, []),
                "sources": assignment_sources(op) if op is not None else [],
            })
    return {"nodes": nodes, "devices": summarise_devices(nodes), "edges": edges,
            "transfers": summarise_transfers(edges)}


def _edge(
    send: Any, by_name: Mapping[str, Any], graph_ops: Mapping[str, Any], measured: Mapping
) -> dict[str, Any]:
    src_node, slot = split_input(next((i for i in send.input if not i.startswith("^")), ""))
    # The producer may itself be plumbing (e.g. an _Arg for a fed placeholder); its
    # measured output is still the bytes that cross.
    nbytes = measured.get((src_node, slot))
    source = "measured"
    if nbytes is None:
        nbytes, source = _static_bytes(graph_ops, src_node, slot), "static"
    return {
        "src": canonical_device(send.attr["send_device"].s.decode()),
        "dst": canonical_device(send.attr["recv_device"].s.decode()),
        "tensor": f"{src_node}:{slot}", "edge": send.attr["tensor_name"].s.decode(),
        "producer_type": by_name[src_node].op if src_node in by_name else "",
        "bytes": int(nbytes or 0), "bytes_source": source if nbytes is not None else "unknown",
    }


def _static_bytes(graph_ops: Mapping[str, Any], node: str, slot: int) -> int | None:
    op = graph_ops.get(node)
    if op is None or slot >= len(op.outputs):
        return None
    return static_tensor_bytes(op.outputs[slot])


def static_tensor_bytes(t: Any) -> int | None:
    dims = t.shape.as_list() if t.shape.rank is not None else None
    if dims is None or None in dims:
        return None
    return tensor_bytes(t.dtype.as_datatype_enum, dims)


def summarise_devices(nodes: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per device: ops (excluding partition plumbing) and estimated FLOPs per step."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"ops": 0, "flops_per_step": 0, "op_types": {}})
    for n in nodes:
        if n["kernel"] in PLUMBING_OPS:
            continue
        d = out[n["device"]]
        d["ops"] += 1
        d["flops_per_step"] += int(n["flops"])
        d["op_types"][n["type"]] = d["op_types"].get(n["type"], 0) + 1
    return {k: out[k] for k in sorted(out)}


def summarise_transfers(edges: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Edges summed per (src, dst) link, largest first."""
    links: dict[tuple[str, str], dict[str, Any]] = {}
    for e in edges:
        key = (e["src"], e["dst"])
        link = links.setdefault(key, {"src": key[0], "dst": key[1], "bytes_per_step": 0, "tensors": 0})
        link["bytes_per_step"] += int(e["bytes"])
        link["tensors"] += 1
    return sorted(links.values(), key=lambda x: (-x["bytes_per_step"], x["src"], x["dst"]))


def variable_bytes(variables: Iterable[Any], placed: Mapping[str, str] | None = None) -> dict[str, int]:
    """Bytes of ``variables`` per device (canonical name): what each device holds before a step (the
    variables and optimizer slots), each as the BFC allocator takes it (rounded up to 256 bytes).  A
    variable's device: ``placed`` (node name -> device, a TF1 graph's placement) where it names its
    op, else its own ``device``; unknown shapes count nothing."""
    out: dict[str, int] = defaultdict(int)
    for v in variables:
        name = v.op.name if placed else ""  # TF1 graph variables only (eager ones have no op)
        device = (placed or {}).get(name) or canonical_device(getattr(v, "device", "") or "")
        if not device or not v.shape.is_fully_defined():
            continue
        out[device] += -(-int(v.dtype.size * math.prod(v.shape.as_list())) // 256) * 256
    return dict(sorted(out.items()))
