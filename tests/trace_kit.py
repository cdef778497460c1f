"""Synthetic traces shared by the tests: the builder (re-exported from
:mod:`tfprof_towers.testing.synth`) and the TensorFlow-style traces several test modules use.

    from trace_kit import US, Ref, TraceBuilder, memcpy_details, two_gpu_trace, logical_cpu_trace
"""

from __future__ import annotations

from tfprof_towers.testing.synth import (
    DERIVED_LINE_IDS,
    LineBuilder,
    PlaneBuilder,
    Ref,
    TraceBuilder,
    group_steps,
    memcpy_details,
)

US = 1_000_000  # picoseconds in a microsecond

__all__ = [
    "DERIVED_LINE_IDS",
    "KEY",
    "US",
    "LineBuilder",
    "PlaneBuilder",
    "Ref",
    "TraceBuilder",
    "apart_trace",
    "logical_cpu_trace",
    "memcpy_details",
    "two_gpu_trace",
]


def two_gpu_trace(markers: bool = True, steps_line: bool = True) -> TraceBuilder:
    """Two GPUs, several streams, overlapping copies, a peer copy 0 -> 1, memsets, derived lines,
    host API ``Memcpy*`` events, both ``memcpy_details`` forms, ``tf_op`` and ``annotation``,
    ref and inline stats.  Times in microseconds (``US``); windows [0, 500) and [500, 1000).
    """
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python", timestamp_ns=0)
    if markers:
        py.event("train", 0, 500 * US, {"step_num": 0, "_r": 1})
        py.event("train", 500 * US, 500 * US, {"step_num": 1, "_r": 1})
    th = host.line("tf_Compute/7", timestamp_ns=0)
    th.event("x:Identity", 10 * US, 10 * US)
    th.event("MemcpyH2D", 50 * US, 10 * US)  # host-side API call: never device copy time

    g0 = b.plane("/device:GPU:0")
    comp = g0.line("Stream #1(Compute)", timestamp_ns=0)
    comp.event("volta_sgemm", 0, 100 * US, {"tf_op": Ref("a/mm:MatMul"), "id": -5, "correlation_id": 1})
    comp.event("add_kernel", 150 * US, 100 * US, {"annotation": "b/add:AddV2#shape=(f32[2])#"})
    comp.event("ncclKernel_AllReduce_RING_LL_Sum_float", 300 * US, 100 * US, {"tf_op": "ar:NcclAllReduce"})
    comp.event("volta_sgemm", 600 * US, 100 * US, {"tf_op": Ref("a/mm:MatMul")})
    cp = g0.line("Stream #2(MemcpyH2D)", timestamp_ns=40)  # a line timestamp: offsets are relative to it
    cp.event("MemcpyH2D", 50 * US, 80 * US, {"memcpy_details": memcpy_details(1000, 0, "pinned", "device")})
    cp.event("MemcpyD2H", 260 * US, 30 * US, {"memcpy_details": memcpy_details(500, 0)})
    cp.event("Memset", 420 * US, 20 * US)
    cp.event(
        "MemcpyH2D",
        650 * US,
        100 * US,
        {"memcpy_details": Ref(memcpy_details(2000, 0, "pageable", "device"))},
    )
    peer = g0.line("Stream #3(MemcpyP2P)", timestamp_ns=0)
    peer.event(
        "MemcpyP2P", 120 * US, 80 * US, {"memcpy_details": memcpy_details(4000, 1, "device", "device")}
    )
    peer.event("MemcpyD2D", 450 * US, 20 * US, {"memcpy_details": memcpy_details(64, 0)})
    ops = g0.line("TensorFlow Ops", timestamp_ns=0)  # derived: repeats the kernels
    ops.event("a/mm:MatMul", 0, 100 * US)
    ops.event("b/add:AddV2", 150 * US, 100 * US)
    if steps_line:
        steps = g0.line("Steps", timestamp_ns=0)
        steps.event("0", 0, 500 * US)
        steps.event("1", 500 * US, 500 * US)

    g1 = b.plane("/device:GPU:1")
    c1 = g1.line("Stream #5(Compute)", timestamp_ns=0)
    c1.event("volta_sgemm", 100 * US, 200 * US, {"tf_op": Ref("c/mm:MatMul")})
    o1 = g1.line("Stream #6(MemcpyOther)", timestamp_ns=0)
    o1.event(
        "MemcpyOther", 0, 50 * US, {"memcpy_details": memcpy_details(256, 1, "pageable", "device", False)}
    )
    g1.line("XLA Ops", timestamp_ns=0).event("fusion", 0, 999 * US)
    return b


KEY = "/job:localhost/replica:0/task:0/device:CPU:{};0000000000000001;/job:localhost/replica:0/task:0/device:CPU:{};{};0:0"  # noqa: E501


def logical_cpu_trace() -> TraceBuilder:
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    th = host.line("tf_Compute/1")
    for step in range(2):
        t0 = step * 1000 * US
        py.event("train", t0, 1000 * US, {"step_num": step, "_r": 1})
        th.event("x/_0:_Send", t0 + 10 * US, 5 * US, {"key": Ref(KEY.format(0, 1, "edge_1_x"))})
        th.event("h/_2:_Send", t0 + 20 * US, 5 * US, {"key": Ref(KEY.format(1, 2, "edge_2_h"))})
        th.event("mm:_MklMatMul", t0 + 30 * US, 100 * US)
        th.event(
            "ExecutorState::ProcessAsync::Start",
            t0 + 40 * US,
            3 * US,
            {"name": Ref("x/_1"), "kernel_type": Ref("_Recv")},
        )
    return b


def apart_trace() -> TraceBuilder:
    """Two GPUs that did not step together (two processes' traces merged): GPU 0 runs steps 0 and 1
    in [0, 400) and [400, 800) us, GPU 1 in [5000, 5450) and [5450, 5900) us; each has its own
    ``Steps`` line, and no host markers.  Per step and GPU: a 100 us and a 50 us kernel (GPU 1's
    second 150 us), launched from the host."""
    b = TraceBuilder()
    launches = b.plane("/host:CPU").line("tf_gpu_private_0")
    corr = 1
    windows = {"/device:GPU:0": [(0, 0, 400 * US), (1, 400 * US, 800 * US)],
               "/device:GPU:1": [(0, 5000 * US, 5450 * US), (1, 5450 * US, 5900 * US)]}
    for g, (name, wins) in enumerate(windows.items()):
        comp = b.plane(name).line(f"Stream #{g + 1}(Compute)")
        for _, t, _ in wins:
            for off, dur in ((20, 100), (200, 50 if g == 0 else 150)):  # us
                launches.event("cudaLaunchKernel", t + (off - 5) * US, 2 * US, {"correlation_id": corr})
                comp.event("volta_sgemm", t + off * US, dur * US, {"correlation_id": corr})
                corr += 1
    return group_steps(b, [], per_plane=windows)
