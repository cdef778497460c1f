"""Pods built in code, shared by tests/unit/test_pod.py, test_frames_pod.py and tests/e2e/test_dask_e2e.py.

:func:`four_hosts`: one trace file per task, with host-to-device copies, a kernel, an NCCL all-reduce
and send/recv edges between tasks, and the document the map and the reduce give for it;
:func:`copy_heavy_logdir`: a logdir of copy-heavy hosts
(:func:`~tfprof_towers.testing.synth.copy_heavy_trace`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_kit import US, Ref, TraceBuilder, memcpy_details

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.testing.synth import copy_heavy_trace
from tfprof_towers.trace.pod import PodAnalysis

T0 = 1_700_000_000_000_000_000  # ns since the epoch: host 0's clock at step 0
RUN = "2024_06_01_12_00_00"
KEY = "/job:worker/replica:0/task:{}/device:CPU:0;1;/job:worker/replica:0/task:{}/device:CPU:0;{};0:0"
EDGE_BYTES = {"edge_a": 4096, "edge_b": 128}


def task(i: int) -> str:
    return f"/job:worker/task:{i}"


def host(i: int, steps: int = 3, step_us: int = 1000, compute_us: int = 300, offset_us: int = 0,
         sends: tuple[tuple[int, str], ...] = (), recvs: tuple[tuple[int, str], ...] = ()) -> TraceBuilder:
    """Host ``h<i>`` (task ``i``): ``steps`` steps of ``step_us`` from its clock's ``offset_us``; per step
    an H2D copy, a compute kernel of ``compute_us`` from 100 us into the step, then an NCCL all-reduce
    until 100 us before the step's end (waiting for the slowest); ``_Send``\\s to and ``_Recv``\\s from
    other tasks (``(peer, edge)``) on a host thread."""
    b = TraceBuilder(hostname=f"h{i}")
    ts = T0 + offset_us * 1000
    cpu = b.plane("/host:CPU")
    py = cpu.line("python", timestamp_ns=ts)
    ex = cpu.line("tf_Compute/1", timestamp_ns=ts)
    gpu = b.plane("/device:GPU:0")
    comp = gpu.line("Stream #1(Compute)", timestamp_ns=ts)
    h2d = gpu.line("Stream #2(MemcpyH2D)", timestamp_ns=ts)
    for step in range(steps):
        t = ts * 1000 + step * step_us * US
        py.event("train", t, step_us * US, {"step_num": step, "_r": 1})
        h2d.event("MemcpyH2D", t + 10 * US, 40 * US,
                  {"memcpy_details": memcpy_details(1000 + 100 * i, 0, "pinned", "device")})
        comp.event("volta_sgemm", t + 100 * US, compute_us * US, {"tf_op": Ref("mm:MatMul")})
        ar_start = 100 + compute_us
        comp.event("ncclKernel_AllReduce_RING_LL_Sum_float", t + ar_start * US,
                   (step_us - 100 - ar_start) * US, {"tf_op": "ar:NcclAllReduce"})
        for k, (peer, edge) in enumerate(sends):
            ex.event(f"{edge}/_{k}:_Send", t + (20 + k) * US, 2 * US, {"key": Ref(KEY.format(i, peer, edge))})
        for k, (peer, edge) in enumerate(recvs):
            ex.event(f"{edge}/_{k}:_Recv", t + (30 + k) * US, 3 * US, {"key": Ref(KEY.format(peer, i, edge))})
    return b


def four_hosts(root: Path) -> Path:
    """h0 sends edge_a to task 1 (h1 holds the receive too) and h2 receives edge_b from task 0, whose
    send no host holds; the hosts' clocks start 0, 7, 14 and 21 us apart; h3 computes longest."""
    host(0, sends=((1, "edge_a"),)).write_logdir(root, run=RUN, host="h0")
    host(1, offset_us=7, compute_us=320, recvs=((0, "edge_a"),)).write_logdir(root, run=RUN, host="h1")
    host(2, offset_us=14, compute_us=250, recvs=((0, "edge_b"),)).write_logdir(root, run=RUN, host="h2")
    host(3, offset_us=21, compute_us=450).write_logdir(root, run=RUN, host="h3")
    return root


TASKS4 = {f"h{i}": task(i) for i in range(4)}


def devices_of(hosts: Any) -> list[str]:
    """The devices of ``four_hosts``' hosts: each its GPU, and its host CPU where it ran host ops (h3's
    CPU holds only step markers)."""
    both = ("host:CPU", "device:GPU:0")
    return [f"{task(i)}/{d}" for i in hosts for d in both if (i, d) != (3, "host:CPU")]


def full_doc(pod: PodAnalysis) -> dict[str, Any]:
    doc = pod.to_doc()
    doc.update(evaluate_trace(pod.facts).to_json())
    return doc


def text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)


#: The hosts of :func:`copy_heavy_logdir`.
HOSTS = ("h0", "h1", "h2")


def copy_heavy_logdir(root: Path, events: int = 30000) -> Path:
    """A logdir of one run whose hosts (:data:`HOSTS`) each wrote a copy-heavy trace of two GPUs."""
    for h, name in enumerate(HOSTS):
        b = copy_heavy_trace(events, gpus=2, seed=h)
        b.space.hostnames[:] = [name]
        b.write(root / "plugins" / "profile" / "r" / f"{name}.xplane.pb")
    return root
