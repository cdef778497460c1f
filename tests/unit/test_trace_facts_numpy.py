"""The rules' facts without pandas: the group-bys they need, each launch's earliest call, and the same
breakdown on one thread or two."""

from __future__ import annotations

import numpy as np
from trace_kit import US, TraceBuilder

from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.attribute import attribute
from tfprof_towers.trace.facts import HostFacts, first_seen_groups, sums_by_first_seen
from tfprof_towers.trace.idle import Launches
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.xplane import DEVICE


def test_groups_come_in_the_order_their_key_is_first_seen() -> None:
    keys = np.array([7, 3, 7, 9, 3, 7])
    groups = [(k, rows.tolist()) for k, rows in first_seen_groups(keys)]
    assert groups == [(7, [0, 2, 5]), (3, [1, 4]), (9, [3])]
    assert list(first_seen_groups(np.zeros(0, np.int64))) == []


def test_sums_are_exact_most_first_ties_in_first_seen_order() -> None:
    keys = np.array([5, 1, 5, 2, 1, 8])
    big = 2**60  # past float64's exact integers: summed as integers
    values = np.array([big, 4, 1, 3, 2, 6], dtype=np.int64)
    k, s = sums_by_first_seen(keys, values)
    assert k.tolist() == [5, 1, 8, 2] and s.tolist() == [big + 1, 6, 6, 3]


def two_launches_trace() -> TraceBuilder:
    """One step [0, 100) us: kernel K (correlation id 4) on GPU:0 at 50 us, its id launched twice on
    the host (at 30 us for 5 us, then at 10 us for 2 us); kernel L (id 9) with no launch."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 100 * US, {"step_num": 0, "_r": 1})
    api = host.line("tf_gpu_private_0")
    api.event("cudaLaunchKernel", 30 * US, 5 * US, {"correlation_id": 4})
    api.event("cudaLaunchKernel", 10 * US, 2 * US, {"correlation_id": 4})
    gpu = b.plane("/device:GPU:0").line("Stream #7(Compute)")
    gpu.event("K", 50 * US, 10 * US, {"correlation_id": 4})
    gpu.event("L", 70 * US, 4 * US, {"correlation_id": 9})
    return b


def test_a_kernel_s_launch_is_the_earliest_call_of_its_id_on_its_host() -> None:
    trace = trace_from_bytes(two_launches_trace().to_bytes())
    c = trace.columns
    rows = np.flatnonzero(c.line_kind[c.line] == DEVICE)  # the GPU's events
    rows = rows[np.argsort(c.start_ps[rows])]
    start, end = Launches.of(trace).found(trace, rows)
    assert (start // US).tolist() == [10, -1] and (end // US).tolist() == [12, -1]
    assert Launches.of(trace) is Launches.of(trace)  # made once per trace
    facts = HostFacts.of(analyze_trace(trace))
    k = facts.launch["/device:GPU:0"]
    assert (k["kernels"], k["known"], k["median_delay_ps"]) == (2, 1, 38.0 * US)  # K starts 38 us after 12 us
    assert facts.kernel_ps == (("K", 10 * US), ("L", 4 * US))


def test_the_breakdown_is_the_same_on_one_thread_or_two() -> None:
    from tfprof_towers.testing.synth import copy_heavy_trace

    trace = trace_from_bytes(copy_heavy_trace(6000, gpus=3).to_bytes())
    one, two = attribute(trace, threads=1), attribute(trace, threads=2)
    assert one.devices == two.devices and len(one.devices) == 4
    for field in ("wall_ps", "idle_ps", "window_ps"):
        assert np.array_equal(getattr(one, field), getattr(two, field))
    for field in ("device", "window", "category", "count", "dur_ps", "bytes"):
        assert np.array_equal(getattr(one.totals, field), getattr(two.totals, field))
    assert one.wall_ps.sum() > 0
