"""A device's exclusive wall time per window, and each event's step, against plain-Python oracles on random
windows and intervals: starts in no window, intervals leaving their window or spanning several, zero-length
ones, any order, and the sweep in slices of time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfprof_towers.trace import attribute
from tfprof_towers.trace.attribute import RANK, wall_times
from tfprof_towers.trace.idle import IDLE_KINDS, in_windows
from tfprof_towers.trace.steps import DeviceEvents, StepTable, assign_steps, windows
from tfprof_towers.vocab.categories import WALL_ORDER

TIME_CODES = np.flatnonzero(RANK >= 0).tolist()


def table(spans: list[tuple[int, int]]) -> StepTable:
    """Windows numbered 10, 11, ... from (gap before, length) pairs, one after the other."""
    start, at = [], 0
    for gap, length in spans:
        start.append(at + gap)
        at += gap + length
    end = [s + length for s, (_, length) in zip(start, spans)]
    return windows(np.arange(10, 10 + len(spans)), np.array(start), np.array(end))


def holding(steps: StepTable, t: int) -> int:
    """The index of the window holding instant ``t``, -1 when none."""
    return next((k for k in range(len(steps)) if steps.start_ps[k] <= t < steps.end_ps[k]), -1)


def brute_wall(steps: StepTable, cats: list[int], starts: list[int], ends: list[int]) -> np.ndarray:
    """Instant by instant: the lowest active rank in each window."""
    out = np.zeros((len(steps), len(WALL_ORDER)), dtype=np.int64)
    for k in range(len(steps)):
        for t in range(int(steps.start_ps[k]), int(steps.end_ps[k])):
            active = [int(RANK[c]) for c, s, e in zip(cats, starts, ends) if s <= t < e]
            if active:
                out[k, min(active)] += 1
    return out


spans = st.lists(st.tuples(st.integers(0, 6), st.integers(1, 12)), min_size=1, max_size=5)
events = st.lists(
    st.tuples(st.sampled_from(TIME_CODES), st.integers(0, 70), st.integers(0, 20)), min_size=1, max_size=30
)


@pytest.mark.parametrize("chunk", [4, 1 << 19])
@settings(max_examples=120, deadline=None)
@given(spans=spans, items=events)
def test_wall_times_match_instant_by_instant(chunk: int, spans, items) -> None:
    steps = table(spans)
    cats = [c for c, _, _ in items]
    starts = [s for _, s, _ in items]
    ends = [s + d for _, s, d in items]
    window = np.array([holding(steps, s) for s in starts], dtype=np.int64)
    n = len(items)
    ev = DeviceEvents(
        np.arange(n), np.array(cats, dtype=np.int8), np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64), np.where(window >= 0, steps.step[np.maximum(window, 0)], -1),
        np.zeros(n, dtype=np.int64), window,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(attribute, "CHUNK", chunk)  # 4: swept in slices of time
        got = wall_times(ev, steps)
    assert got.tolist() == brute_wall(steps, cats, starts, ends).tolist()


@settings(max_examples=200, deadline=None)
@given(spans=spans, starts=st.lists(st.integers(-5, 90), min_size=1, max_size=40))
def test_assign_steps_is_the_window_holding_the_start(spans, starts) -> None:
    steps = table(spans)
    got = assign_steps(np.array(starts, dtype=np.int64), steps)
    want = [int(steps.step[k]) if (k := holding(steps, s)) >= 0 else -1 for s in starts]
    assert got.tolist() == want
    assert got.dtype == np.int32


gaps = st.lists(st.tuples(st.integers(0, 8), st.integers(0, 9), st.integers(0, 2)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(spans=spans, items=gaps)
def test_idle_gaps_in_windows_match_instant_by_instant(spans, items) -> None:
    """Gaps (in order, apart; each after a pause, of some length, of one kind) cut to the windows."""
    steps = table(spans)
    a, b, at = [], [], -3
    for pause, length, _ in items:
        a.append(at + pause)
        b.append(at + pause + length)
        at += pause + length
    kind = [k for _, _, k in items]
    got = in_windows(np.array(a), np.array(b), np.array(kind), steps.start_ps, steps.end_ps)
    want = np.zeros((len(steps), len(IDLE_KINDS)), dtype=np.int64)
    for w in range(len(steps)):
        for t in range(int(steps.start_ps[w]), int(steps.end_ps[w])):
            for lo, hi, k in zip(a, b, kind):
                want[w, k] += lo <= t < hi
    assert got.tolist() == want.tolist()


@settings(max_examples=60, deadline=None)
@given(items=events)
def test_wall_times_of_windows_too_long_for_one_key_scale_exactly(items) -> None:
    """Two windows of 2**61 ps each are too long for one sort key (the sweep's other path): the answer
    is the small one's, times the scale."""
    small, scale = table([(0, 40), (0, 40)]), 1 << 56  # [0, 40), [40, 80): x 2**56 -> 2**61 ps each
    big = StepTable(small.step, small.start_ps * scale, small.end_ps * scale)
    cats = np.array([c for c, _, _ in items], dtype=np.int8)
    starts = np.array([s for _, s, _ in items], dtype=np.int64)
    ends = starts + np.array([d for _, _, d in items], dtype=np.int64)
    window = np.array([holding(small, int(s)) for s in starts], dtype=np.int64)

    def wall(steps: StepTable, k: int) -> np.ndarray:
        n = starts.size
        ev = DeviceEvents(np.arange(n), cats, starts * k, ends * k, np.where(window >= 0, 10 + window, -1),
                          np.zeros(n, dtype=np.int64), window)
        return wall_times(ev, steps)

    assert (wall(big, scale) == wall(small, 1) * scale).all()
