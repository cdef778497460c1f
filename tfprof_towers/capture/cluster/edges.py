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

from tfprof_towers.capture.cluster.spec import Cluster
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
    from tfprof_towers.trace.locate import (
        host_name,  # the trace package: trace_edges reads these files with it next
    )

    runs = sorted(p for p in (logdir / "plugins" / "profile").glob("*") if p.is_dir())
    if not runs:
        return {}
    by_host = {host_name(p): p for p in runs[-1].glob("*.xplane.pb")}
    return {str(t): by_host[cluster.host_file(t)] for t in cluster.tasks() if cluster.host_file(t) in by_host}


def ps_placement(chief: Mapping[str, Any], logdir: Path, cluster: Cluster) -> dict[str, Any]:
    """A parameter_server variant's placement: the chief's (strategy, variables and their devices)
    with the cross-task edges its traces hold (module docstring) and their transfers."""
    from tfprof_towers.capture.tf2.placement import all_transfers

    op_bytes = {str(k): int(v) for k, v in (chief.get("op_bytes") or {}).items()}
    edges = edges_with_bytes(trace_edges(host_files(logdir, cluster)), op_bytes)
    return {"strategy": chief.get("strategy"), "variables": list(chief.get("variables") or ()),
            "edges": edges, "transfers": all_transfers(edges, ()), "op_bytes": op_bytes}
