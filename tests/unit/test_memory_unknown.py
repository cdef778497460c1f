"""Allocator figures that cannot be true are unknown, never numbers (trace/allocator_events.py): a NaN or
string
``bytes_available`` is no capacity (no ``memory_pressure``), an overflowing, negative or absurd bytes in
use is left out of the peak, a string or out-of-range ``fragmentation`` is no fragmentation, a negative
``memory_size`` no device memory, and each is said in ``analyze``'s notes.  ``memory_imbalance`` does not
compare with a median of a few bytes.
"""

from __future__ import annotations

import io
import math

import pytest
from trace_kit import US, TraceBuilder

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.commands.analyze import print_memory
from tfprof_towers.testing.synth import Alloc, allocator_events
from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes

GIB = 1 << 30


def trace(events: list[dict], memory_size: float | None = 16 * GIB) -> TraceBuilder:
    """One step [0, 1000) us; GPU 0 runs a kernel; its allocator ``GPU_0_bfc`` writes ``events`` (each
    the stats of one MemoryAllocation, 100 us apart, at addresses 1, 2, ...)."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    line = host.line("tf_Compute/0")
    for i, stats in enumerate(events):
        base = {"allocator_name": "GPU_0_bfc", "bytes_reserved": 0, "requested_bytes": 1 << 20,
                "allocation_bytes": 1 << 20, "addr": i + 1, "tf_op": "big/alloc"}
        line.event("MemoryAllocation", (100 + 100 * i) * US, 0, {**base, **stats})
    plane = b.plane("/device:GPU:0")
    if memory_size is not None:
        plane.stats({"memory_size": memory_size})
    plane.line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 100 * US, {"tf_op": "mm:MatMul"})
    return b


def memory_of(b: TraceBuilder):
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    [d] = a.memory
    found = {f.rule: f for f in evaluate_trace(a).findings}
    return d, found


@pytest.mark.parametrize("available", [math.nan, math.inf, -math.inf, "lots", -5.0])
def test_a_capacity_that_cannot_be_true_is_unknown(available: object) -> None:
    d, found = memory_of(trace([{"bytes_allocated": 8 * GIB, "bytes_available": available}]))
    assert d.peak_bytes == 8 * GIB
    assert d.capacity_bytes is None  # not the peak (a NaN read as 0), not the plane's memory
    assert any("capacity unknown" in u for u in d.unknown)
    assert "memory_pressure" not in found


def test_a_real_capacity_still_fires() -> None:
    d, found = memory_of(trace([{"bytes_allocated": 8 * GIB, "bytes_available": 0}]))
    assert d.capacity_bytes == 8 * GIB and not d.unknown
    assert found["memory_pressure"].severity == "high"


def test_overflowing_and_negative_in_use_are_left_out_of_the_peak() -> None:
    events = [{"bytes_allocated": 3 * GIB, "bytes_available": GIB},
              {"bytes_allocated": (1 << 63) - 1, "bytes_reserved": 2, "bytes_available": 0},  # overflows
              {"bytes_allocated": -7, "bytes_available": 0},
              {"bytes_allocated": math.nan},
              {"bytes_allocated": "12"}]
    d, found = memory_of(trace(events))
    assert d.peak_bytes == 3 * GIB and d.capacity_bytes == 4 * GIB
    assert d.unknown == ("4 of its 5 events carry bytes in use that cannot be true (negative, not a finite "
                         "number, or past 1 PiB): left out of its peaks",)
    assert "memory_pressure" not in found
    out = io.StringIO()
    print_memory({"memory": {"devices": {"/device:GPU:0": d.to_doc()}, "note": "n"}}, out)
    assert "note: /device:GPU:0: 4 of its 5 events" in out.getvalue()
    assert "-2 B" not in out.getvalue() and "EB" not in out.getvalue()


def test_an_allocator_with_no_true_figure_is_not_shown() -> None:
    a = analyze_trace(trace_from_bytes(trace([{"bytes_allocated": -2}]).to_bytes()))
    assert a.memory == ()


@pytest.mark.parametrize("frag", ["0.5", -0.25, 7.0, math.nan])
def test_a_fragmentation_that_cannot_be_true_is_unknown(frag: object) -> None:
    d, _ = memory_of(trace([{"bytes_allocated": GIB, "bytes_available": GIB, "fragmentation": frag}]))
    assert d.fragmentation is None
    out = io.StringIO()
    print_memory({"memory": {"devices": {"/device:GPU:0": d.to_doc()}, "note": "n"}}, out)
    assert "0.0000" not in out.getvalue()
    d, _ = memory_of(trace([{"bytes_allocated": GIB, "bytes_available": GIB, "fragmentation": 0.25}]))
    assert d.fragmentation == 0.25


@pytest.mark.parametrize("size", [-16.0 * GIB, math.nan, 1e30])
def test_a_memory_size_that_cannot_be_true_is_no_capacity(size: float) -> None:
    d, found = memory_of(trace([{"bytes_allocated": 8 * GIB}], memory_size=size))
    assert d.device_memory_bytes is None and d.capacity_bytes is None
    assert "memory_pressure" not in found


def test_memory_imbalance_needs_a_median_of_more_than_a_few_bytes() -> None:
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    for n, nbytes in enumerate((20_000_000_000, 1, 1)):
        allocator_events(host.line(f"tf_Compute/{n}"), f"GPU_{n}_bfc", [Alloc(100 * US, nbytes, n, "x/y")])
        b.plane(f"/device:GPU:{n}").line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 100 * US,
                                                                    {"tf_op": "mm:MatMul"})
    found = {f.rule for f in evaluate_trace(analyze_trace(trace_from_bytes(b.to_bytes()))).findings}
    assert "memory_imbalance" not in found


def test_the_memory_frame_shows_an_impossible_figure_as_unknown() -> None:
    b = trace([{"bytes_allocated": GIB, "bytes_available": math.nan, "fragmentation": "x"},
               {"bytes_allocated": -7, "bytes_available": GIB}])
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    df = a.trace.memory.frame()
    assert df["bytes_in_use"].tolist() == [GIB, -1]
    assert df["bytes_available"].tolist() == [-1, GIB]
    assert math.isnan(df["fragmentation"].iloc[0])
