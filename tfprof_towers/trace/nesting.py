"""Ops that nest on one line (a TPU chip's ``XLA Ops``: a ``while`` holds its body's ops), by self time.

At each instant the innermost op running owns it, as in XProf's op statistics (an op's *self time* is its
duration less its children's).  :func:`self_pieces` cuts one chip's ops into the disjoint pieces of their
self time, each with the op it belongs to, so that the wall sweep counts every instant once and a
collective inside a loop stays a collective; :func:`self_times` sums them per op, for the totals.

Nesting is read from the times alone, as on an op line: by start (longest first at a tie), an op that
starts before the end of an earlier open op is inside it (its depth is the number of ops open at its
start).  Ops that overlap without nesting (not seen on a real op line) may leave pieces that overlap;
the wall sweep still counts each instant once (it measures unions).  Vectorised: sorts and searches, no
loop per op or per level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pieces:
    """Disjoint pieces of self time: ``src`` is the index (into the ops given) of the op each belongs to."""

    src: np.ndarray  # int64
    start: np.ndarray  # int64
    end: np.ndarray  # int64


def parents(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(order, parent)``: the ops by start (longest first at a tie), and per position in that order the
    position of the op it lies in (-1: outermost)."""
    n = start.size
    order = np.lexsort((-end, start))
    s, e = start[order], end[order]
    pos = np.arange(n, dtype=np.int64)
    # ops open at each start: those before it in the order, less those that ended by then
    depth = np.maximum(pos - np.searchsorted(np.sort(e), s, side="right"), 0)
    # the parent: the last op before it in the order one level up
    key = depth * (n + 1) + pos
    sorted_key = np.sort(key)
    at = np.searchsorted(sorted_key, key - (n + 1)) - 1
    found = sorted_key[np.maximum(at, 0)]
    ok = (depth > 0) & (at >= 0) & (found // (n + 1) == depth - 1)
    parent = np.where(ok, found % (n + 1), -1)
    return order, parent


def self_pieces(start: np.ndarray, end: np.ndarray) -> Pieces:
    """The pieces of each op's self time (module docstring); ops of no duration have none."""
    keep = np.flatnonzero(end > start)
    if not keep.size:
        z = np.zeros(0, dtype=np.int64)
        return Pieces(z, z, z)
    order, parent = parents(start[keep], end[keep])
    s, e = start[keep][order], end[keep][order]
    src = keep[order]
    kids = np.flatnonzero(parent >= 0)
    if not kids.size:  # nothing nests: every op is its own piece
        return Pieces(src, s, e)
    kids = kids[np.lexsort((kids, parent[kids]))]  # by parent, then by start (the order's position)
    p = parent[kids]
    first = np.r_[True, p[1:] != p[:-1]]
    last = np.r_[p[1:] != p[:-1], True]
    # before each child: from the parent's start (first child) or the furthest end of the earlier ones
    reach = _group_max(p, e[kids], first)
    prev_end = np.where(first, s[p], np.maximum(np.r_[s[p[0]], reach[:-1]], s[p]))
    gap_s, gap_e = prev_end, np.minimum(s[kids], e[p])
    # after the last child: to the parent's end
    tail_s, tail_e = reach[last], e[p[last]]
    lonely = np.ones(s.size, dtype=bool)
    lonely[p] = False
    whole = np.flatnonzero(lonely)
    src_all = np.concatenate([src[whole], src[p], src[p[last]]])
    s_all = np.concatenate([s[whole], gap_s, tail_s])
    e_all = np.concatenate([e[whole], gap_e, tail_e])
    ok = e_all > s_all
    return Pieces(src_all[ok], s_all[ok], e_all[ok])


def _group_max(group: np.ndarray, values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running maximum of ``values`` within each run of equal ``group`` (``first``: each run's start)."""
    run = np.cumsum(first) - 1
    big = 1 << 62
    lo = int(values.min()) if values.size else 0
    # offset each run above the previous so one running maximum serves all (values kept as they are)
    shifted = values - lo
    span = int(shifted.max()) + 1 if values.size else 1
    if span * (int(run[-1]) + 1) < big:
        return np.maximum.accumulate(shifted + run * span) - run * span + lo
    out = values.copy()
    starts = np.flatnonzero(first)
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), values.size]):  # rare: times too far apart
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


def self_times(n: int, pieces: Pieces) -> np.ndarray:
    """Per op (``n`` of them): the sum of its pieces, int64 (each op's self time)."""
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, pieces.src, pieces.end - pieces.start)
    return out
