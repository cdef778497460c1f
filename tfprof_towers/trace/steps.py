"""Step windows: from step markers, else the profiler's ``Steps`` line, else the whole trace.

* ``markers``: host events with a ``step_num`` stat (``tf.profiler.experimental.Trace(
  "train", step_num=i)``); a step's window runs from its markers' earliest start to
  their latest end.
* ``steps-line``: the events of the derived ``Steps`` line, named by step number
  (numbered in order of name when the names are not numbers).
* ``whole-trace``: one window over every event that counts as time.

Windows are sorted by start, and each ends no later than the next one starts.  An
event belongs to the window holding its start.  They are a :class:`StepTable` (numpy;
``.frame()`` makes the pandas frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.trace.codes import CAT
from tfprof_towers.vocab.categories import EVENT_CATEGORIES, TIME_CATEGORIES
from tfprof_towers.xplane import HOST, RawSpace, StatColumn, dense_unique, used_codes

if TYPE_CHECKING:
    import pandas as pd

STEPS_LINE = "Steps"


@dataclass(frozen=True, eq=False)
class StepTable:
    """Step windows: per window its step number, start and end (int64 picoseconds), sorted by start."""

    step: np.ndarray
    start_ps: np.ndarray
    end_ps: np.ndarray

    def __len__(self) -> int:
        return int(self.step.size)

    @property
    def window_ps(self) -> np.ndarray:
        return self.end_ps - self.start_ps

    def shifted(self, delta: int) -> StepTable:
        return StepTable(self.step, self.start_ps + delta, self.end_ps + delta)

    def frame(self) -> pd.DataFrame:
        """``step``, ``start_ps``, ``end_ps`` (int64)."""
        import pandas as pd

        return pd.DataFrame({"step": self.step, "start_ps": self.start_ps, "end_ps": self.end_ps}).astype(
            {"step": "int64", "start_ps": "int64", "end_ps": "int64"}
        )

    @staticmethod
    def join(tables: list[StepTable]) -> StepTable:
        """The windows of several tables, one per step number (earliest start, latest end)."""
        tables = [t for t in tables if len(t)]
        if not tables:
            return windows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        columns = ("step", "start_ps", "end_ps")
        return windows(*(np.concatenate([getattr(t, c) for t in tables]) for c in columns))


def step_windows(raw: RawSpace, step_num: StatColumn, category: np.ndarray) -> tuple[StepTable, str]:
    """``(steps, window)``: the windows (``step``, ``start_ps``, ``end_ps``) and how they were found."""
    k = raw.n_kept  # derived lines' events come after
    start_ps, dur_ps, strings = raw.start_ps, raw.dur_ps, raw.strings
    if step_num.any:
        on = np.flatnonzero(step_num.index < k)
        on = on[raw.planes.kinds[raw.event_plane[step_num.index[on]]] == HOST]
        marker = step_num.index[on]
        if marker.size:
            end_ps = start_ps[marker] + dur_ps[marker]
            return windows(step_num.nums[on], start_ps[marker], end_ps), "markers"
    steps_line = np.array([n == STEPS_LINE for n in raw.lines.names], dtype=bool)
    on_steps = np.flatnonzero(steps_line[raw.event_line]) if steps_line.any() else np.zeros(0, np.int64)
    if on_steps.size:
        codes = raw.name[on_steps]
        names = [strings.items[c] for c in used_codes(codes).tolist()]
        number = {strings.code(nm): int(nm) for nm in names if nm.strip().lstrip("-").isdigit()}
        if len(number) == len(names):
            lut = np.zeros(len(strings.items), dtype=np.int64)
            for c, v in number.items():
                lut[c] = v
            step = lut[codes]
        else:  # step names that are not numbers: number them in order of name
            step = dense_unique(codes)[1].astype(np.int64)
        return windows(step, start_ps[on_steps], start_ps[on_steps] + dur_ps[on_steps]), "steps-line"
    is_time = np.zeros(len(EVENT_CATEGORIES), dtype=bool)
    is_time[[CAT[c] for c in TIME_CATEGORIES]] = True
    counted = np.flatnonzero(is_time[category[:k]])
    if not counted.size:
        return windows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), "whole-trace"
    lo, hi = start_ps[counted].min(), (start_ps[counted] + dur_ps[counted]).max()
    return windows(np.array([0]), np.array([lo]), np.array([hi])), "whole-trace"


def windows(step: np.ndarray, start: np.ndarray, end: np.ndarray) -> StepTable:
    """One window per step number (earliest start, latest end), sorted, overlaps trimmed."""
    step, start, end = (np.asarray(a, dtype=np.int64) for a in (step, start, end))
    if step.size:
        uniq, inv = np.unique(step, return_inverse=True)
        lo = np.full(uniq.size, np.iinfo(np.int64).max, dtype=np.int64)
        hi = np.full(uniq.size, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(lo, inv.ravel(), start)
        np.maximum.at(hi, inv.ravel(), end)
        step, start, end = uniq, lo, hi
        order = np.lexsort((step, start))
        step, start, end = step[order], start[order], end[order].copy()
        end[:-1] = np.minimum(end[:-1], start[1:])
    return StepTable(step, start, end)


def assign_steps(start_ps: np.ndarray, steps: StepTable) -> np.ndarray:
    """Per event: the step whose window holds its start, else -1 (int32 where the numbers fit)."""
    if not len(steps):
        return np.full(start_ps.size, -1, dtype=np.int32)
    ws, we = steps.start_ps, steps.end_ps
    i = np.searchsorted(ws, start_ps, side="right") - 1
    np.maximum(i, 0, out=i)
    numbers = steps.step
    small = numbers.size == 0 or (numbers.min() > -(1 << 31) and numbers.max() < (1 << 31))
    out = numbers.astype(np.int32 if small else np.int64)[i]
    out[(start_ps < ws[i]) | (start_ps >= we[i])] = -1
    return out


# ------------------------------------------------------------------ events in step windows


@dataclass(frozen=True)
class DeviceEvents:
    """One device's events that count as time (``rows``: their index in the trace's columns)."""

    rows: np.ndarray  # int64
    category: np.ndarray  # int8
    start: np.ndarray  # int64
    end: np.ndarray  # int64
    step: np.ndarray  # step number, -1 when in no window
    bytes: np.ndarray  # int64
    window: np.ndarray  # int64 index of the window holding the start, -1 when none


def window_of(steps: StepTable) -> tuple[np.ndarray, int]:
    """A table from step number to window index (-1: none) and the number's offset into it."""
    numbers = steps.step
    if not numbers.size:
        return np.full(1, -1, dtype=np.int64), 0
    lo = int(numbers.min())
    lut = np.full(int(numbers.max()) - lo + 2, -1, dtype=np.int64)  # the last entry: step -1
    lut[numbers - lo] = np.arange(numbers.size)
    return lut, lo


def clip_to_windows(s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray):
    """Each interval cut to every window it overlaps: (window index, start, end, source row)."""
    first = np.searchsorted(we, s, side="right")  # first window ending after the start
    last = np.searchsorted(ws, e, side="left") - 1  # last window starting before the end
    count = np.maximum(last - first + 1, 0)
    count[e <= s] = 0
    if (count == 1).all():  # the common case: each interval inside one window
        win = first
        cs, ce = np.maximum(s, ws[win]), np.minimum(e, we[win])
        ok = np.flatnonzero(ce > cs)
        return win[ok], cs[ok], ce[ok], ok
    idx = np.repeat(np.arange(s.size), count)
    win = first[idx] + (np.arange(idx.size) - np.repeat(np.cumsum(count) - count, count))
    cs = np.maximum(s[idx], ws[win])
    ce = np.minimum(e[idx], we[win])
    ok = ce > cs
    return win[ok], cs[ok], ce[ok], idx[ok]
