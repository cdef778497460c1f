"""Attribution: exact totals and wall breakdown on the synthetic two-GPU trace; the sweep
cross-checked against a brute-force computation on random intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_kit import sweep_float
from trace_kit import US, TraceBuilder, two_gpu_trace

from tfprof_towers.trace.attribute import WALL_CATEGORIES, WALL_ORDER, attribute
from tfprof_towers.trace.load import trace_from_bytes


@pytest.fixture(scope="module")
def breakdown():
    return attribute(trace_from_bytes(two_gpu_trace().to_bytes()))


def wall(b, device: str, step: int) -> dict[str, int]:
    w = b.wall[(b.wall["device"] == device) & (b.wall["step"] == step)]
    return {c: v // US for c, v in zip(w["category"], w["dur_ps"]) if v}


def test_devices(breakdown) -> None:
    assert breakdown.devices == ("/host:CPU", "/device:GPU:0", "/device:GPU:1")


def test_wall_gpu0_exclusive_by_precedence(breakdown) -> None:
    # step 0: compute [0,100)+[150,250); collective [300,400); p2p [120,150) exposed;
    # h2d [100,120) exposed; d2h [260,290); memset [420,440); d2d [450,470)
    assert wall(breakdown, "/device:GPU:0", 0) == {
        "compute": 200,
        "collective": 100,
        "p2p": 30,
        "d2d": 20,
        "h2d": 20,
        "d2h": 30,
        "memset": 20,
        "idle": 80,
    }
    assert wall(breakdown, "/device:GPU:0", 1) == {"compute": 100, "h2d": 50, "idle": 350}


def test_wall_gpu1_and_host(breakdown) -> None:
    assert wall(breakdown, "/device:GPU:1", 0) == {"compute": 200, "h2d": 50, "idle": 250}
    assert wall(breakdown, "/device:GPU:1", 1) == {"idle": 500}
    assert wall(breakdown, "/host:CPU", 0) == {"host_compute": 10, "framework": 10, "idle": 480}


def test_wall_sums_to_window(breakdown) -> None:
    sums = breakdown.wall.groupby(["device", "step"])["dur_ps"].sum()
    assert set(sums.tolist()) == {500 * US}
    assert set(breakdown.wall["category"]) == set(WALL_CATEGORIES)


def test_totals_count_overlap_in_full(breakdown) -> None:
    t = (
        breakdown.total[breakdown.total["device"] == "/device:GPU:0"]
        .groupby("category")[["count", "dur_ps", "bytes"]]
        .sum()
    )
    got = {c: (int(r["count"]), int(r["dur_ps"]) // US, int(r["bytes"])) for c, r in t.iterrows()}
    assert got == {
        "compute": (3, 300, 0),
        "collective": (1, 100, 0),
        "p2p": (1, 80, 4000),
        "d2d": (1, 20, 64),
        "h2d": (2, 180, 3000),
        "d2h": (1, 30, 500),
        "memset": (1, 20, 0),
    }
    assert breakdown.total["count"].dtype == np.int64


def brute_force(groups, ranks, starts, ends, n_groups, n_rank):
    """Unit-by-unit: for each integer instant, the lowest active rank of its group."""
    out = np.zeros(n_groups * n_rank)
    for g in range(n_groups):
        sel = [i for i in range(len(groups)) if groups[i] == g]
        if not sel:
            continue
        for t in range(min(starts[i] for i in sel), max(ends[i] for i in sel)):
            active = [ranks[i] for i in sel if starts[i] <= t < ends[i]]
            if active:
                out[g * n_rank + min(active)] += 1
    return out


intervals = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 40), st.integers(1, 15)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(intervals)
def test_sweep_matches_brute_force(items) -> None:
    g = np.array([i[0] for i in items])
    r = np.array([i[1] for i in items])
    s = np.array([i[2] for i in items])
    e = s + np.array([i[3] for i in items])
    got = sweep_float(g, r, s, e, 3, len(WALL_ORDER))
    want = brute_force(g.tolist(), r.tolist(), s.tolist(), e.tolist(), 3, len(WALL_ORDER))
    assert got.tolist() == want.tolist()


def test_event_spanning_two_windows_is_split() -> None:
    b = TraceBuilder()
    py = b.plane("/host:CPU").line("python")
    py.event("train", 0, 100 * US, {"step_num": 1})
    py.event("train", 100 * US, 100 * US, {"step_num": 2})
    b.plane("/device:GPU:0").line("Stream #1(Compute)").event("k", 80 * US, 40 * US)
    bd = attribute(trace_from_bytes(b.to_bytes()))
    w = bd.wall[(bd.wall["device"] == "/device:GPU:0") & (bd.wall["category"] == "compute")]
    assert dict(zip(w["step"], w["dur_ps"] // US)) == {1: 20, 2: 20}
    assert bd.total["count"].tolist() == [1] and bd.total["step"].tolist() == [1]  # by its start
    assert isinstance(bd.wall, pd.DataFrame)


def test_sparse_step_numbers_count_each_event_in_its_own_window() -> None:
    """Step numbers far apart (a capture of steps 3 and 90,000) are searched, not tabled: the totals
    must land in the same windows as with consecutive numbers."""
    def trace(first: int, second: int):
        b = TraceBuilder()
        py = b.plane("/host:CPU").line("python")
        py.event("train", 0, 100 * US, {"step_num": first})
        py.event("train", 100 * US, 100 * US, {"step_num": second})
        comp = b.plane("/device:GPU:0").line("Stream #1(Compute)")
        comp.event("k", 10 * US, 30 * US)
        comp.event("k", 110 * US, 50 * US)
        comp.event("k", 170 * US, 20 * US)
        return attribute(trace_from_bytes(b.to_bytes()))

    def counts(bd, steps):
        t = bd.total[bd.total["device"] == "/device:GPU:0"]
        return {steps[s]: (int(c), int(d) // US) for s, c, d in zip(t["step"], t["count"], t["dur_ps"])}

    dense, sparse = trace(3, 4), trace(3, 90_000)
    assert counts(dense, {3: "first", 4: "second"}) == {"first": (1, 30), "second": (2, 70)}
    assert counts(sparse, {3: "first", 90_000: "second"}) == {"first": (1, 30), "second": (2, 70)}
