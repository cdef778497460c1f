"""The send/recv edges between tasks of a ``parameter_server`` run, from its traces.

A ``ParameterServerStrategy`` step is traced on the coordinator but partitioned and run on
the workers, so no process sees its partition graphs.  The traces do: every transfer
between tasks is a ``_Send``/``_Recv`` whose rendezvous key names the source and
destination devices (``/job:ps/task:0/device:CPU:0`` -> ``/job:worker/task:1/device:CPU:0``)
and the edge (``edge_19_block0/MatMul/ReadVariableOp``).  The edge's bytes come from
the step's function graph as the chief traced it (``op_bytes``: op name -> bytes of its
first output, static shapes), matched by the op name inside the edge name.

Each worker runs the same function graph, so its edges repeat for every closure it runs:
the distinct edges of a (source, destination) pair are one closure's traffic on that
link; the record's ``transfers`` sum them, i.e. the bytes per step when each worker runs
one closure per step (what the chief schedules; which worker runs which closure is the
coordinator's choice).  The trace analysis counts every ``_Send`` instead.

No TensorFlow: the traces are read with the package's own decoder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tfprof_towers.capture.cluster.spec import Cluster, TaskId
from tfprof_towers.vocab.device_names import canonical_device, crosses_tasks

_EDGE = re.compile(r"^edge_\d+_(.+?)(?:;\d+)?$")
SEND_RECV = ("_Send", "_Recv", "_HostSend", "_HostRecv")


def edge_op(edge: str) -> str:
    """``edge_19_block0/MatMul/ReadVariableOp`` -> ``block0/MatMul/ReadVariableOp`` (the producing op)."""
    m = _EDGE.match(edge)
    return m.group(1) if m else edge


def trace_edges(files: Mapping[str, Path]) -> set[tuple[str, str, str]]:
    """Distinct (src, dst, edge) of send/recv events between tasks in every task's trace."""
    from tfprof_towers.trace.load import load_trace

    out: set[tuple[str, str, str]] = set()
    for path in files.values():
        ev = load_trace(path).events
        rows = ev.loc[ev.op_type.astype(str).isin(SEND_RECV), ["src_device", "dst_device", "edge"]]
        for src, dst, edge in rows.astype(str).drop_duplicates().itertuples(index=False):
            if src and dst and edge and crosses_tasks(canonical_device(src), canonical_device(dst)):
                out.add((canonical_device(src), canonical_device(dst), edge))
    return out


def edges_with_bytes(found: set[tuple[str, str, str]], op_bytes: Mapping[str, int]) -> list[dict[str, Any]]:
    """Each edge with its producing op and bytes (``bytes_source`` "static", or "unknown" and 0)."""
    edges = []
    for src, dst, edge in sorted(found):
        op = edge_op(edge)
        nbytes = op_bytes.get(op)
        edges.append({"src": src, "dst": dst, "edge": edge, "tensor": f"{op}:0", "producer_type": "",
                      "bytes": int(nbytes or 0),
                      "bytes_source": "static" if nbytes is not None else "unknown"})
    return edges


def host_files(logdir: Path, cluster: Cluster) -> dict[str, Path]:
    """Task -> its trace file in the newest run folder of ``logdir``."""
    from tfprof_towers.trace.locate import host_name  # trace_edges reads these files with trace/ next

    runs = sorted(p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir())
    if not runs:
        return {}
    by_host = {host_name(p): p for p in runs[-1].glob("*.xplane.pb")}
    return {str(t): by_host[cluster.host_file(t)] for t in cluster.tasks() if cluster.host_file(t) in by_host}


def task_device(task: str, device: str) -> str:
    """A trace event's device as the task's: its host plane is the task's CPU, a device plane its own."""
    t = TaskId.parse(task)
    if device.startswith("/device:"):
        return canonical_device(t.device_prefix + device)
    return t.cpu


def trace_ops(files: Mapping[str, Path], ops: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(device, op name) -> kernel of every op of the step's graph (``ops``) that ran in a task's
    trace; an op seen on a task's host plane and on one of its devices is the device's."""
    from tfprof_towers.trace.load import load_trace

    found: dict[tuple[str, str], str] = {}
    for task, path in files.items():
        ev = load_trace(path).events
        rows = ev.loc[ev.tf_op.astype(str).isin(set(ops)), ["tf_op", "op_type", "device"]].astype(str)
        seen: dict[str, tuple[str, str]] = {}
        for name, kernel, device in rows.drop_duplicates().itertuples(index=False):
            dev = task_device(task, device)
            if name not in seen or dev != TaskId.parse(task).cpu:
                seen[name] = (dev, kernel or str(ops[name][0]))
        for name, (dev, kernel) in seen.items():
            found[(dev, name)] = kernel
    return found


def _executed_as(name: str, ops: Mapping[str, Any], ran: set[str], max_depth: int = 4) -> str | None:
    """The op that ran ``name`` on a device whose ops are ``ran``: itself, or (Grappler fused it, as
    :func:`tfprof_towers.capture.placement.executed_as` finds) a consumer within ``max_depth``."""
    if name in ran:
        return name
    frontier = [name]
    for _ in range(max_depth):
        frontier = [c for op in frontier for c in ops.get(op, (None, None, ()))[2]]
        hit = next((c for c in frontier if c in ran), None)
        if hit is not None:
            return hit
    return None


def trace_nodes(found: Mapping[tuple[str, str], str], ops: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One node per op and device it ran on, with the FLOPs of every graph op it executes (each
    worker runs its own closure: its nodes carry one shard's FLOPs)."""
    by_device: dict[str, set[str]] = {}
    for dev, name in found:
        by_device.setdefault(dev, set()).add(name)
    anywhere = set().union(*by_device.values())
    # an op that ran (on any task) is its own; one that ran nowhere was fused into its nearest
    # consumer that ran, and goes wherever that one ran
    executes = {name: _executed_as(name, ops, anywhere) for name in ops}
    nodes = []
    for dev, ran in sorted(by_device.items()):
        flops: dict[str, int] = dict.fromkeys(ran, 0)
        unknown: set[str] = set()
        fused: dict[str, list[str]] = {}
        for name, (_, f, _) in ops.items():
            target = executes[name]
            if target is None or target not in ran:
                continue
            if target != name:
                fused.setdefault(target, []).append(name)
            if f is None:
                unknown.add(target)
            else:
                flops[target] += int(f)
        for name in sorted(ran):
            nodes.append({"name": name, "type": str(ops[name][0]), "kernel": found[(dev, name)],
                          "device": dev, "requested": "", "flops": flops[name],
                          "flops_known": name not in unknown, "fused": sorted(fused.get(name, [])),
                          "sources": []})
    return nodes


def ps_placement(chief: Mapping[str, Any], logdir: Path, cluster: Cluster) -> dict[str, Any]:
    """A parameter_server variant's placement: the chief's (strategy, variables and their devices)
    with the cross-task edges its traces hold (module docstring) and their transfers, and the nodes:
    each op of the workers' closure where a task's trace shows it ran (compute on the workers,
    variables and their updates on the ps tasks)."""
    from tfprof_towers.capture.placement import summarise_devices
    from tfprof_towers.capture.tf2.placement import all_transfers

    op_bytes = {str(k): int(v) for k, v in (chief.get("op_bytes") or {}).items()}
    files = host_files(logdir, cluster)
    edges = edges_with_bytes(trace_edges(files), op_bytes)
    ops = {str(k): v for k, v in (chief.get("ops") or {}).items() if isinstance(v, list) and len(v) == 3}
    nodes = trace_nodes(trace_ops(files, ops), ops) if ops else []
    return {"strategy": chief.get("strategy"), "variables": list(chief.get("variables") or ()),
            "nodes": nodes, "devices": summarise_devices(nodes), "edges": edges,
            "transfers": all_transfers(edges, ()), "op_bytes": op_bytes}
