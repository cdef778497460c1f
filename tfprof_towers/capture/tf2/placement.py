"""Placement of a TF2 step (a ``tf.function``) after Grappler, through :func:`.placement.extract_placement`.

Partition graphs of a function are only emitted at its first call (:func:`collect_partition_graphs`),
with empty ``step_stats``: every byte count here is *static* (from the FuncGraph's shapes).
Partition node names equal the FuncGraph's op names, and ops of nested functions (Keras'
``one_step_on_data`` called from ``multi_step_on_iterator``) are named ``<call op>/<op>`` once
Grappler inlines them, which :class:`InlinedGraph` mirrors.

What TF2 adds to the TF1 placement document:

* ``collectives``: one row per collective op (``CollectiveReduceV2``, ``NcclAllReduce``...),
  which are not ``_Send``/``_Recv`` edges: its device, kernel, the bytes its replica
  contributes per step (its input), the group it reduces with and the implementation hint;
* ``transfers`` rows of ``kind: "collective"``: the all-reduce traffic between devices
  (:func:`ring_bytes` from each to the next, in group order); send/recv rows carry
  ``kind: "send_recv"``;
* ``sources``: an op's creation traceback restricted to the user's files, innermost
  first (``{"file", "line", "function"}``).  In TF2 every ``tf.device`` assignment that
  ``_device_assignments`` records points at TensorFlow's own ``ops.py``.

The arithmetic (groups, ring bytes, transfer rows) works on plain values, tested without TensorFlow.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfprof_towers.capture.placement import (
    PLUMBING_OPS,
    extract_placement,
    static_tensor_bytes,
    summarise_transfers,
)
from tfprof_towers.vocab.device_names import canonical_device, device_sort_key

#: Kernels of TF2 cross-device ops that are not _Send/_Recv edges.
COLLECTIVE_OPS = frozenset({
    "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveReduceScatterV2",
    "CollectiveGather", "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastSendV2",
    "CollectiveBcastRecv", "CollectiveBcastRecvV2", "CollectiveAllToAllV2", "CollectiveAllToAllV3",
    "NcclAllReduce", "NcclReduce", "NcclBroadcast",
})
#: Ops that call a function (Grappler inlines the callee under ``<call op>/``).
CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})
SEND_RECV, COLLECTIVE = "send_recv", "collective"


def group_keys(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """Which collective ops reduce together, one key per row.

    NCCL ops by shared name; collectives by group and instance key.  TF2 feeds a
    collective's instance key at call time (a by-reference capture), so it is often
    unknown statically: then the k-th collective of a group on one device goes with
    the k-th of the same group on every other device (collectives of a group run in
    the same order on every member, which their ordering tokens enforce).
    """
    seen: dict[tuple[Any, str], int] = defaultdict(int)
    keys = []
    for r in rows:
        if r.get("shared_name"):
            keys.append(("nccl", r["shared_name"]))
        elif r.get("instance_key") is not None:
            keys.append(("collective", r.get("group_key"), r["instance_key"]))
        elif r.get("group_key") is not None:
            k = seen[(r["group_key"], r["device"])]
            seen[(r["group_key"], r["device"])] += 1
            keys.append(("collective", r["group_key"], f"#{k}"))
        else:
            keys.append(("alone", r["name"]))
    return keys


def ring_bytes(payload: int, members: int) -> int:
    """Bytes each member of a ring all-reduce sends to the next: ``2 (n-1)/n x payload``."""
    return round(2 * (members - 1) * payload / members) if members > 1 else 0


def collective_transfers(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The all-reduce traffic of ``rows`` (see :func:`collectives`) as ``kind: "collective"`` links.

    Members of a group are ordered by device; each sends :func:`ring_bytes` of the
    group's payload to the next.  Links are summed over groups, largest first.
    """
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for key, r in zip(group_keys(rows), rows):
        groups[key].append(r)
    links: dict[tuple[str, str], dict[str, Any]] = {}
    for members in groups.values():
        devices = sorted({m["device"] for m in members}, key=device_sort_key)
        n = len(devices)
        if n < 2:
            continue
        payload = max(int(m["bytes"]) for m in members)
        for k, src in enumerate(devices):
            dst = devices[(k + 1) % n]
            link = links.setdefault((src, dst), {"src": src, "dst": dst, "bytes_per_step": 0, "tensors": 0,
                                                 "kind": COLLECTIVE})
            link["bytes_per_step"] += ring_bytes(payload, n)
            link["tensors"] += 1
    return sorted(links.values(), key=lambda x: (-x["bytes_per_step"], x["src"], x["dst"]))


def all_transfers(
    edges: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Send/recv links (from ``edges``) and collective links (from ``rows``), each with its ``kind``."""
    p2p = [{**t, "kind": SEND_RECV} for t in summarise_transfers(edges)]
    return p2p + collective_transfers(rows)


@functools.lru_cache(maxsize=4096)
def _real(path: str) -> str:
    return os.path.realpath(path)


def user_frames(traceback: Iterable[Any], user_files: Iterable[str]) -> list[dict[str, Any]]:
    """Frames of ``traceback`` (outermost first, as ``op.traceback``) in ``user_files``, innermost first."""
    files = {_real(f) for f in user_files}
    frames = [{"file": f.filename, "line": int(f.lineno), "function": f.name}
              for f in traceback if _real(f.filename) in files]
    return frames[::-1]


def collect_partition_graphs(step: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Run the step's FIRST call with graph collection on: ``(RunMetadata, the call's result)``."""
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_graph_collection()
    try:
        result = step(*args, **kwargs)
    finally:
        meta = ctx.export_run_metadata()
        ctx.disable_graph_collection()
    return meta, result


class _Tensor:
    """A tensor of a nested FuncGraph seen under its call op's prefix (what extract_placement reads)."""

    def __init__(self, tensor: Any, prefix: str) -> None:
        self.tensor, self._prefix = tensor, prefix
        self.shape, self.dtype = tensor.shape, tensor.dtype
        self.name = prefix + tensor.name

    def consumers(self) -> list[_Op]:
        return [_Op(c, self._prefix) for c in self.tensor.consumers()]


class _Op:
    """An op of a nested FuncGraph, named as Grappler names it once inlined: ``<call op>/<name>``."""

    def __init__(self, op: Any, prefix: str) -> None:
        self.op, self._prefix = op, prefix
        self.name = prefix + op.name
        self.type, self.device = op.type, op.device

    @property
    def inputs(self) -> list[_Tensor]:
        return [_Tensor(t, self._prefix) for t in self.op.inputs]

    @property
    def outputs(self) -> list[_Tensor]:
        return [_Tensor(t, self._prefix) for t in self.op.outputs]

    def get_attr(self, key: str) -> Any:
        return self.op.get_attr(key)

    @property
    def traceback(self) -> Any:
        return self.op.traceback


class InlinedGraph:
    """The ops of a FuncGraph and, recursively, of the functions its call ops call, under the
    names the inlined partition graphs use.  Quacks like a ``tf.Graph`` for ``extract_placement``.

    ``feeds`` maps each (prefixed) placeholder name to what feeds it: the eager tensor a
    top-level placeholder captures, or the call op's input for a nested function's
    argument; :meth:`static_int` follows it to a value (collective keys are captured).
    """

    def __init__(self, graph: Any) -> None:
        self._ops: list[Any] = []
        self.feeds: dict[str, Any] = {
            internal.op.name: external for external, internal in getattr(graph, "captures", ())
        }
        self._walk(graph, "")

    def _walk(self, graph: Any, prefix: str) -> None:
        for op in graph.get_operations():
            self._ops.append(op if not prefix else _Op(op, prefix))
            if op.type in CALL_OPS:
                inner = getattr(getattr(graph, "_functions", {}).get(op.get_attr("f").name), "graph", None)
                if inner is not None:
                    inner_prefix = f"{prefix}{op.name}/"
                    for arg, fed in zip(inner.inputs, op.inputs):
                        self.feeds[inner_prefix + arg.op.name] = fed if not prefix else _Tensor(fed, prefix)
                    self._walk(inner, inner_prefix)

    def get_operations(self) -> list[Any]:
        return self._ops

    def static_int(self, tensor: Any, depth: int = 8) -> int | None:
        """The integer value of ``tensor`` when it is a constant, or fed (capture by capture) by one."""
        for _ in range(depth):
            raw = _unwrap(tensor)
            value = _value(raw)
            if value is not None:
                return int(value) if value.size == 1 else None
            if raw.op.type != "Placeholder":
                return None
            prefix = tensor._prefix if isinstance(tensor, _Tensor) else ""
            tensor = self.feeds.get(prefix + raw.op.name)
            if tensor is None:
                return None
        return None


def _value(raw: Any) -> Any:
    """A numpy value of an eager tensor or a graph constant; None otherwise."""
    import numpy as np
    import tensorflow as tf

    if not hasattr(raw, "op"):  # an eager tensor: the value a placeholder captures
        return np.asarray(raw.numpy())
    try:
        value = tf.get_static_value(raw)
    except (TypeError, ValueError):
        return None
    return None if value is None else np.asarray(value)


def select_partitions(meta: Any, names: set[str], min_share: float = 0.5) -> Any:
    """A RunMetadata with only the function graphs whose real nodes are mostly ``names``.

    ``model.fit`` instantiates dozens of small helper functions (dataset, metrics,
    iterators) besides the train step; a single ``tf.function`` step has one.
    """
    from tensorflow.core.protobuf import config_pb2

    out = config_pb2.RunMetadata()
    for fg in meta.function_graphs:
        nodes = [n for p in fg.partition_graphs for n in p.node]
        real = [n for n in nodes if n.op not in PLUMBING_OPS and n.op != "Const"]
        if real and sum(n.name in names for n in real) >= min_share * len(real):
            out.partition_graphs.extend(fg.partition_graphs)
    if not out.partition_graphs:
        out.partition_graphs.extend(meta.partition_graphs)
    return out


def _unwrap(t: Any) -> Any:
    return getattr(t, "tensor", t)


def _static_size(t: Any) -> int | None:
    return static_tensor_bytes(_unwrap(t))


def collectives(meta: Any, graph: InlinedGraph, graph_ops: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every collective node of the partition graphs, with the bytes its replica contributes."""

    def key(op: Any, index: int) -> int | None:
        return graph.static_int(op.inputs[index]) if op is not None and len(op.inputs) > index else None

    rows = []
    for p in meta.partition_graphs:
        for node in p.node:
            if node.op not in COLLECTIVE_OPS:
                continue
            op = graph_ops.get(node.name)
            nbytes = _static_size(op.inputs[0]) if op is not None and op.inputs else None
            attr = node.attr
            reduce_v2 = node.op.startswith("CollectiveReduce") and node.op != "CollectiveReduce"
            rows.append({
                "name": node.name, "device": canonical_device(node.device), "kernel": node.op,
                "bytes": int(nbytes or 0), "bytes_source": "static" if nbytes is not None else "unknown",
                "group_size": key(op, 1) if reduce_v2
                else (int(attr["num_devices"].i) if "num_devices" in attr else None),
                "group_key": key(op, 2) if reduce_v2 else None,
                "instance_key": key(op, 3) if reduce_v2 else None,
                "shared_name": attr["shared_name"].s.decode() if "shared_name" in attr else "",
                "communication_hint": attr["communication_hint"].s.decode()
                if "communication_hint" in attr else ("nccl" if node.op.startswith("Nccl") else ""),
                "tensor": op.inputs[0].name if op is not None and op.inputs else "",
            })
    return rows


def _arg_sizes(cf: Any) -> dict[str, int]:
    """Partition ``_Arg`` node name -> static bytes of the FuncGraph input it feeds (resources: none)."""
    import tensorflow as tf

    sig = [a.name for a in cf.function_def.signature.input_arg]
    out = {}
    for name, t in zip(sig, cf.graph.inputs):
        if t.dtype != tf.resource:
            size = _static_size(t)
            if size is not None:
                out[name] = size
    return out


def strategy_placement(cf: Any, meta: Any, user_files: Iterable[str] = ()) -> dict[str, Any]:
    """Placement of a concrete function's step (nested function calls included); see the module docstring."""
    graph = InlinedGraph(cf.graph)
    ops = graph.get_operations()
    graph_ops = {op.name: op for op in ops}
    meta = select_partitions(meta, set(graph_ops))
    placement = extract_placement(graph, meta)
    sizes = _arg_sizes(cf)
    for e in placement["edges"]:  # captured inputs: the _Arg's FuncGraph placeholder has the shape
        if e["bytes_source"] == "unknown":
            arg = e["tensor"].rsplit(":", 1)[0]
            if arg in sizes:
                e["bytes"], e["bytes_source"] = sizes[arg], "static"
    files = list(user_files)
    for n in placement["nodes"]:
        op = graph_ops.get(n["name"])
        n["sources"] = user_frames(op.traceback or (), files) if op is not None else []
    rows = collectives(meta, graph, graph_ops)
    placement["collectives"] = rows
    placement["transfers"] = all_transfers(placement["edges"], rows)
    return placement
