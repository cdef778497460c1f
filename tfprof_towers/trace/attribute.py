"""Per device and step: ``total`` time per category, and the exclusive ``wall`` breakdown.

* ``total``: events whose start lies in the step window, counted in full (overlap
  included): event count, picoseconds, bytes.
* ``wall``: at each instant of the window the device is in its highest-precedence
  active category (:data:`WALL_ORDER`), else ``idle``; the parts sum to the window.
  A copy's wall time is therefore its *exposed* time.  Computed with one vectorised
  sweep: interval ends as +1/-1 per precedence rank, a cumulative sum, and for each
  elementary segment the lowest rank still active.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..categories import TIME_CATEGORIES, WALL_CATEGORIES, WALL_ORDER
from ..device_names import device_sort_key
from .load import Trace

_TOTAL_DTYPES = {"count": "int64", "dur_ps": "int64", "bytes": "int64"}


@dataclass(frozen=True)
class Breakdown:
    """Attribution of one trace; every frame has a ``device`` and a ``step`` column."""

    windows: pd.DataFrame  # step, start_ps, end_ps, window_ps
    devices: tuple[str, ...]
    total: pd.DataFrame  # device, step, category, count, dur_ps, bytes
    wall: pd.DataFrame  # device, step, category (WALL_CATEGORIES), dur_ps


def attribute(trace: Trace) -> Breakdown:
    ev = trace.events
    counted = ev[ev["category"].isin(TIME_CATEGORIES)]
    devices = tuple(sorted(counted["device"].unique().tolist(), key=device_sort_key))
    windows = trace.steps.assign(window_ps=trace.steps["end_ps"] - trace.steps["start_ps"])
    return Breakdown(windows, devices, totals(counted), wall_times(counted, windows, devices))


def totals(events: pd.DataFrame) -> pd.DataFrame:
    """Per device, step and category: count, summed duration and bytes (steps >= 0 only)."""
    inside = events[events["step"] >= 0]
    g = inside.groupby(["device", "step", "category"], observed=True, sort=True)
    out = g.agg(count=("dur_ps", "size"), dur_ps=("dur_ps", "sum"), bytes=("bytes", "sum")).reset_index()
    out["category"] = out["category"].astype(str)
    out["device"] = out["device"].astype(str)
    return out.astype(_TOTAL_DTYPES)


def wall_times(events: pd.DataFrame, windows: pd.DataFrame, devices: tuple[str, ...]) -> pd.DataFrame:
    """Exclusive time per device, step window and category, idle included (see module doc)."""
    n_dev, n_win, n_rank = len(devices), len(windows), len(WALL_ORDER)
    acc = np.zeros((n_dev, n_win, n_rank), dtype=np.float64)
    if n_dev and n_win and len(events):
        dev_index = {d: i for i, d in enumerate(devices)}
        dev = events["device"].map(dev_index).to_numpy(dtype=np.int64)
        rank_of = {c: i for i, c in enumerate(WALL_ORDER)}
        rank = events["category"].astype(str).map(rank_of).to_numpy(dtype=np.int64)
        s = events["start_ps"].to_numpy()
        e = s + events["dur_ps"].to_numpy()
        ws, we = windows["start_ps"].to_numpy(), windows["end_ps"].to_numpy()
        win, cs, ce, idx = _clip_to_windows(s, e, ws, we)
        acc += _sweep(dev[idx] * n_win + win, rank[idx], cs, ce, n_dev * n_win, n_rank).reshape(
            n_dev, n_win, n_rank
        )
    window_ps = (windows["end_ps"] - windows["start_ps"]).to_numpy(dtype=np.float64)
    idle = window_ps[None, :] - acc.sum(axis=2)
    full = np.concatenate([acc, idle[:, :, None]], axis=2)
    frame = pd.DataFrame(
        {
            "device": np.repeat(np.array(devices, dtype=object), n_win * (n_rank + 1)),
            "step": np.tile(np.repeat(windows["step"].to_numpy(), n_rank + 1), n_dev),
            "category": np.tile(np.array(WALL_CATEGORIES, dtype=object), n_dev * n_win),
            "dur_ps": np.rint(full.reshape(-1)).astype(np.int64),
        }
    )
    return frame.astype({"device": str, "category": str, "step": "int64", "dur_ps": "int64"})


def _clip_to_windows(s: np.ndarray, e: np.ndarray, ws: np.ndarray, we: np.ndarray):
    """Each interval cut to every window it overlaps: (window index, start, end, source row)."""
    first = np.searchsorted(we, s, side="right")  # first window ending after the start
    last = np.searchsorted(ws, e, side="left") - 1  # last window starting before the end
    count = np.maximum(last - first + 1, 0)
    count[e <= s] = 0
    idx = np.repeat(np.arange(s.size), count)
    win = first[idx] + (np.arange(idx.size) - np.repeat(np.cumsum(count) - count, count))
    cs = np.maximum(s[idx], ws[win])
    ce = np.minimum(e[idx], we[win])
    ok = ce > cs
    return win[ok], cs[ok], ce[ok], idx[ok]


def _sweep(
    group: np.ndarray, rank: np.ndarray, s: np.ndarray, e: np.ndarray, n_groups: int, n_rank: int
) -> np.ndarray:
    """Exclusive time per (group, rank): the lowest active rank owns each instant."""
    out = np.zeros(n_groups * n_rank, dtype=np.float64)
    if not s.size:
        return out
    present, rank_c = np.unique(rank, return_inverse=True)  # only the ranks that occur
    m = s.size
    t = np.concatenate([s, e])
    g = np.concatenate([group, group])
    order = np.lexsort((t, g))
    t, g = t[order], g[order]
    r = np.concatenate([rank_c, rank_c])[order]
    d = np.concatenate([np.ones(m, np.int32), -np.ones(m, np.int32)])[order]
    delta = np.zeros((2 * m, present.size), dtype=np.int32)
    delta[np.arange(2 * m), r] = d
    active = np.cumsum(delta, axis=0) > 0  # each group's counts return to zero at its end
    top = np.argmax(active[:-1], axis=1)
    seg = (t[1:] - t[:-1]).astype(np.float64)
    valid = (g[1:] == g[:-1]) & active[:-1].any(axis=1)
    key = g[:-1][valid] * n_rank + present[top[valid]]
    return np.bincount(key, weights=seg[valid], minlength=n_groups * n_rank)
