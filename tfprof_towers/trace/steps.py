"""Step windows: from step markers, else the profiler's ``Steps`` line, else the whole trace.

* ``markers``: host events with a ``step_num`` stat (``tf.profiler.experimental.Trace(
  "train", step_num=i)``); a step's window runs from its markers' earliest start to
  their latest end.
* ``steps-line``: the events of the derived ``Steps`` line, named by step number
  (numbered in order of name when the names are not numbers).
* ``whole-trace``: one window over every event that counts as time.

Windows are sorted by start, and each ends no later than the next one starts.  An
event belongs to the window holding its start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..categories import EVENT_CATEGORIES, TIME_CATEGORIES
from ..xplane import HOST, RawSpace, StatColumn, dense_unique, used_codes
from .codes import CAT

STEPS_LINE = "Steps"


def step_windows(raw: RawSpace, step_num: StatColumn, category: np.ndarray) -> tuple[pd.DataFrame, str]:
    """``(steps, window)``: the windows (``step``, ``start_ps``, ``end_ps``) and how they were found."""
    k = raw.n_kept  # derived lines' events come after
    start_ps, dur_ps, strings = raw.start_ps, raw.dur_ps, raw.strings
    if step_num.any:
        marker = np.flatnonzero(step_num.present[:k] & (raw.planes.kinds[raw.event_plane[:k]] == HOST))
        if marker.size:
            end_ps = start_ps[marker] + dur_ps[marker]
            return windows(step_num.num[marker], start_ps[marker], end_ps), "markers"
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


def windows(step: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.DataFrame:
    """One window per step number (earliest start, latest end), sorted, overlaps trimmed."""
    df = pd.DataFrame(
        {"step": step.astype(np.int64), "start_ps": start.astype(np.int64), "end_ps": end.astype(np.int64)}
    )
    df = df.groupby("step", as_index=False).agg(start_ps=("start_ps", "min"), end_ps=("end_ps", "max"))
    df = df.sort_values(["start_ps", "step"], kind="stable").reset_index(drop=True)
    if len(df) > 1:
        starts, ends = df["start_ps"].to_numpy(), df["end_ps"].to_numpy().copy()
        ends[:-1] = np.minimum(ends[:-1], starts[1:])
        df["end_ps"] = ends
    return df.astype({"step": "int64", "start_ps": "int64", "end_ps": "int64"})


def assign_steps(start_ps: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """Per event: the step whose window holds its start, else -1."""
    if not len(steps):
        return np.full(start_ps.size, -1, dtype=np.int64)
    ws = steps["start_ps"].to_numpy()
    we = steps["end_ps"].to_numpy()
    i = np.searchsorted(ws, start_ps, side="right") - 1
    ok = (i >= 0) & (start_ps < we[np.maximum(i, 0)])
    return np.where(ok, steps["step"].to_numpy()[np.maximum(i, 0)], -1)
