"""Each logical device's measured peak from one host allocator's events (``trace/placed_memory.py``):
on a trace built in code whose ops are placed on two logical CPU devices, every allocation goes to
its op's device, every free to its allocation's, a fed input (no op) to the host, and each device's
variables are added; exact numbers."""

from __future__ import annotations

import numpy as np
from trace_kit import US, TraceBuilder

from tfprof_towers.rundir.summary import MemoryPeak
from tfprof_towers.testing.synth import Alloc, allocator_events
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.trace.placed_memory import NOT_PLACED, op_of, placed_peaks

HOST, CPU1, CPU2 = "/device:CPU:0", "/device:CPU:1", "/device:CPU:2"
PLACED = {"t0/mm": CPU1, "t0/act": CPU1, "t1/mm": CPU2, "avg/add": HOST}
HELD = {HOST: 10_000, CPU1: 0, CPU2: 0}  # the variables live on the host

#: one allocator for every logical CPU device; in use on each device after each event in the comment
#: (requests rounded up to 256 B; the allocator's blocks: the same but t1/mm's second, served whole from a
#: 6,144 B chunk)
EVENTS = [
    Alloc(10 * US, 4096, 0x1),  # the fed batch: host 4096
    Alloc(20 * US, 1000, 0x10, "t0/mm"),  # cpu1 1024
    Alloc(30 * US, 3072, 0x20, "t1/mm"),  # cpu2 3072
    Alloc(40 * US, 512, 0x30, "t0/act:Sigmoid"),  # cpu1 1536: its peak (a tf_op with its type)
    Alloc(50 * US, 1000, 0x10, free=True),  # cpu1 512
    Alloc(60 * US, 2048, 0x10, "t1/mm", block=6144),  # the address reused by the other device: cpu2 5120
    Alloc(70 * US, 256, 0x40, "avg/add"),  # host 4352: its peak
    Alloc(80 * US, 3072, 0x20, free=True),  # cpu2 2048
    Alloc(90 * US, 4096, 0x1, free=True),  # host 256
    Alloc(95 * US, 64, 0x99, free=True),  # a block allocated before the trace: counts nothing
    Alloc(100 * US, 2048, 0x10, free=True, block=6144),  # cpu2 0
]


def trace():
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 200 * US, {"step_num": 0, "_r": 1})
    allocator_events(host.line("tf_Compute/1"), "bfc_cpu_allocator_for_gpu", EVENTS, held=10_064)
    return trace_from_bytes(b.to_bytes())


def test_each_devices_peak_from_its_ops_allocations() -> None:
    got = {p.device: p for p in placed_peaks(trace().memory, PLACED, HELD)}
    assert list(got) == [HOST, CPU1, CPU2]
    assert (got[HOST].peak_bytes, got[HOST].held_bytes, got[HOST].allocations) == (10_000 + 4352, 10_000, 2)
    assert (got[CPU1].peak_bytes, got[CPU1].held_bytes, got[CPU1].allocations) == (1536, 0, 2)
    assert got[CPU1].allocated_bytes == 1000 + 512  # the blocks as the events give them
    assert (got[CPU2].peak_bytes, got[CPU2].allocated_bytes, got[CPU2].allocations) == (5120, 3072 + 6144, 2)
    assert got[CPU1].peak_ps == 40 * US and got[CPU2].peak_ps == 60 * US
    assert got[CPU1].allocators == ("bfc_cpu_allocator_for_gpu",)
    assert got[CPU2].to_doc() == {"peak_bytes": 5120, "allocated_bytes": 9216, "held_bytes": 0,
                                  "in_trace_bytes": 5120, "allocations": 2,
                                  "allocators": ["bfc_cpu_allocator_for_gpu"]}


def test_a_device_without_allocations_shows_its_variables_and_unplaced_ops_are_apart() -> None:
    got = {p.device: p.peak_bytes for p in placed_peaks(trace().memory, {"t0/mm": CPU1}, {CPU2: 777},
                                                          fallback=HOST)}
    # t0/act, t1/mm and avg/add are not placed: they are apart, and peak at 70 us with both t1/mm blocks,
    # t0/act and avg/add live; the batch (no op) is the host's
    assert got == {HOST: 4096, CPU1: 1024, CPU2: 777, NOT_PLACED: 3072 + 512 + 2048 + 256}
    assert [p.device for p in placed_peaks(trace().memory, {}, {})][-1] == NOT_PLACED  # listed last


def test_op_names_and_the_summary_row() -> None:
    assert op_of("a/b:MatMul") == "a/b" and op_of("a/b") == "a/b"
    row = MemoryPeak(1536, "measured", 0, None, None, label="measured at the cpu preset, logical devices",
                     allocated_bytes=1512)
    assert MemoryPeak.from_json(row.to_json()) == row


def test_a_variable_updated_into_a_new_buffer_counts_once_within_a_step() -> None:
    """A TF2 optimizer's assign gives a variable (1,024 B, held before the trace) a new buffer and frees
    the old one.  Over the whole trace the first free is of a block allocated before it (unmatched) and
    the new buffer would count on top of the variable for good: 1,024 + 4,096.  Within each step, over
    what the device held when the step began: the variable, the activation and the new buffer, 4,096."""
    from tfprof_towers.trace.steps import StepTable

    events = [
        Alloc(10 * US, 2048, 0x1, "act"), Alloc(20 * US, 1024, 0x2, "opt/new"),
        Alloc(30 * US, 1024, 0x9, free=True), Alloc(40 * US, 2048, 0x1, free=True),
        Alloc(110 * US, 2048, 0x1, "act"), Alloc(120 * US, 1024, 0x3, "opt/new"),
        Alloc(130 * US, 1024, 0x2, free=True), Alloc(140 * US, 2048, 0x1, free=True),
    ]
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    allocator_events(host.line("tf_Compute/1"), "bfc_cpu_allocator_for_gpu", events, held=1024)
    ev = trace_from_bytes(b.to_bytes()).memory
    placed, held = {"act": CPU1, "opt/new": CPU1}, {CPU1: 1024}
    assert [p.peak_bytes for p in placed_peaks(ev, placed, held)] == [1024 + 4096]
    steps = StepTable(np.array([0, 1]), np.array([0, 100 * US]), np.array([100 * US, 200 * US]))
    (p,) = placed_peaks(ev, placed, held, steps=steps)
    assert (p.peak_bytes, p.peak_ps) == (4096, 20 * US)  # both steps reach it: the first


def test_the_estimates_distance_from_the_measurement_is_said_next_to_the_verdict() -> None:
    """The device farthest apart names the gap: in the report's sentence and the terminal's cell."""
    from tfprof_towers.commands.console import memory_cell, peak_cell
    from tfprof_towers.rundir.summary import estimate_gap

    label = "measured at the cpu preset, logical devices on this CPU"
    rows = {CPU1: MemoryPeak(1100, "measured", 0, label=label, estimated_peak_bytes=980),
            CPU2: MemoryPeak(1000, "measured", 0, label=label, estimated_peak_bytes=880),
            "/device:GPU:0": MemoryPeak(5 << 30, "estimated", 0, 6 << 30, True)}
    gap = estimate_gap(rows)
    assert (gap.ratio, gap.device, gap.where) == (0.88, CPU2, "the cpu preset")
    assert gap.text() == ("the estimate was 12% under the measured peak at the cpu preset "
                          "(CPU:2, estimated / measured 0.88)")
    assert estimate_gap({"/device:GPU:0": rows["/device:GPU:0"]}) is None
    fit = {"fits": True, "peak_bytes": 5 << 30, "device": "/device:GPU:0"}
    assert memory_cell(fit, gap) == "5 GiB GPU:0 [dim](est. x0.88 of measured at the cpu preset)[/]"
    # the CPU table shows the largest measured logical device, not the target's estimate
    assert peak_cell(rows) == "1.10 kB CPU:1 (meas.) est. x0.89"
