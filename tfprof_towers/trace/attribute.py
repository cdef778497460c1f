"""Per device and step: ``total`` time per category, the exclusive ``wall`` breakdown, GPU idle split.

* ``total``: events whose start lies in the step window, counted in full (overlap
  included): event count, picoseconds, bytes.
* ``wall``: at each instant of the window the device is in its highest-precedence
  active category (:data:`WALL_ORDER`), else ``idle``; the parts sum to the window.
  A copy's wall time is therefore its *exposed* time.  The time a category owns is the
  measure of the union of its and all higher categories' intervals minus that of the
  higher ones alone; each union is measured in one vectorised pass over the intervals
  sorted by (device and window, start): a running maximum of the ends (kept within each
  group by counting each group's times from its own origin, offset by its number), and
  per interval the length it adds past that maximum.  Integers throughout: exact.  Each
  device's events are put in order of start once (:func:`device_events`): its sweep and its
  idle gaps take them in place, in that order (only pieces past a window's end are added).
* ``idle``: how an accelerator's idle time splits into host wait, kernel wait and other
  (:mod:`.idle`).

Each device is broken down within its own step windows (:meth:`~.load.Trace.steps_of`); the
results are laid out by the trace's windows (one per step number), a device's window for a step
it did not run being empty.  ``window_ps`` says how long each device's window of each step is.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.trace.idle import IDLE_KINDS, KERNEL_WAIT_PS, Launches, idle_split
from tfprof_towers.trace.load import Trace
from tfprof_towers.trace.nesting import self_pieces, self_times
from tfprof_towers.trace.steps import DeviceEvents, StepTable, clip_to_windows, index_of, window_of
from tfprof_towers.vocab.categories import EVENT_CATEGORIES, WALL_CATEGORIES, WALL_ORDER
from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane
from tfprof_towers.xplane import distinct
from tfprof_towers.xplane.parallel import decode_threads, in_order

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["WALL_CATEGORIES", "WALL_ORDER", "Breakdown", "attribute", "totals", "wall_times"]

#: Per event category code: its rank in WALL_ORDER, -1 when it is not time.
RANK = np.array([WALL_ORDER.index(c) if c in WALL_ORDER else -1 for c in EVENT_CATEGORIES], dtype=np.int8)
_SAFE = 1 << 62
#: A TPU chip (its ``XLA Ops`` line: ops that nest, read by self time, :mod:`.nesting`).
TPU_CHIP = re.compile(r"(^|/)device:TPU:\d+$")


@dataclass(frozen=True)
class Totals:
    """Per (device, window, category) with events: their count, summed duration and bytes."""

    device: np.ndarray  # int64 index into the breakdown's devices
    window: np.ndarray  # int64 index into its windows
    category: np.ndarray  # int64 code
    count: np.ndarray
    dur_ps: np.ndarray
    bytes: np.ndarray


@dataclass(frozen=True, eq=False)
class Breakdown:
    """Attribution of one trace, as arrays; the frames (``windows``, ``total``, ``wall``, ``idle``,
    each with a ``device`` and a ``step`` column) are made on first use."""

    steps: StepTable
    devices: tuple[str, ...]
    totals: Totals
    wall_ps: np.ndarray  # int64 [device, window, WALL_CATEGORIES]
    idle_ps: np.ndarray  # int64 [device, window, IDLE_KINDS]: accelerators only (zeros elsewhere)
    accelerator: np.ndarray  # bool per device: it has a plane of its own (an idle split)
    window_ps: np.ndarray | None = None  # int64 [device, window]: its own window (None: the trace's)

    def device_window_ps(self) -> np.ndarray:
        """int64 ``[device, window]``: each device's own window of each step (0: it has none)."""
        if self.window_ps is not None:
            return self.window_ps
        return np.broadcast_to(self.steps.window_ps, (len(self.devices), len(self.steps)))

    @cached_property
    def windows(self) -> pd.DataFrame:
        """step, start_ps, end_ps, window_ps."""
        return self.steps.frame().assign(window_ps=self.steps.window_ps)

    @cached_property
    def total(self) -> pd.DataFrame:
        """device, step, category, count, dur_ps, bytes."""
        import pandas as pd

        t = self.totals
        return pd.DataFrame({
            "device": np.array(self.devices, dtype=object)[t.device] if t.device.size else [],
            "step": self.steps.step[t.window].astype(np.int64),
            "category": np.array(EVENT_CATEGORIES, dtype=object)[t.category],
            "count": t.count,
            "dur_ps": t.dur_ps,
            "bytes": t.bytes,
        }).astype({"device": str, "category": str, "count": "int64", "dur_ps": "int64", "bytes": "int64"})

    @cached_property
    def wall(self) -> pd.DataFrame:
        """device, step, category (WALL_CATEGORIES, idle last), dur_ps."""
        return self._frame(self.wall_ps, WALL_CATEGORIES, "category", np.arange(len(self.devices)))

    @cached_property
    def idle(self) -> pd.DataFrame:
        """device, step, kind (IDLE_KINDS), dur_ps: accelerators only."""
        return self._frame(self.idle_ps, IDLE_KINDS, "kind", np.flatnonzero(self.accelerator))

    def _frame(self, values: np.ndarray, names: tuple[str, ...], column: str, devices: np.ndarray):
        import pandas as pd

        n_win, k = len(self.steps), len(names)
        return pd.DataFrame({
            "device": np.repeat(np.array(self.devices, dtype=object)[devices], n_win * k),
            "step": np.tile(np.repeat(self.steps.step, k), devices.size).astype(np.int64),
            column: np.tile(np.array(names, dtype=object), devices.size * n_win),
            "dur_ps": values[devices].reshape(-1),
        }).astype({"device": str, column: str, "dur_ps": "int64"})


#: Events attributed at once: a device with more is swept in time slices of about this many
#: (the union measure adds up over a partition of time), so that memory stays bounded.
CHUNK = 1 << 19


def device_index(trace: Trace) -> tuple[tuple[str, ...], np.ndarray]:
    """The devices with time, sorted (:func:`device_sort_key`), and per event its device's index
    (-1: not time; int16 where the devices are that few)."""
    c = trace.columns
    is_time = RANK.take(c.category) >= 0  # take: ~2x a subscript by a narrow index
    present = np.flatnonzero(np.bincount(c.device[is_time], minlength=1)) if is_time.any() else np.zeros(0)
    names = [c.strings.items[u] for u in present.tolist()]
    order = sorted(range(len(names)), key=lambda i: device_sort_key(names[i]))
    narrow = np.int16 if len(order) < (1 << 15) else np.int32  # held while the devices are broken down
    lut = np.full(max(int(c.device.max()) + 1 if c.n else 1, 1), -1, dtype=narrow)
    lut[present[order]] = np.arange(len(order), dtype=narrow)
    dev_of = lut.take(c.device)
    dev_of[~is_time] = -1
    return tuple(names[i] for i in order), dev_of


#: Devices whose events are found one device at a time (a pass over every event each); more are sorted.
FEW_DEVICES = 8


def device_rows(dev_of: np.ndarray, n_dev: int):
    """Yield (device index, its events' rows, ascending): for a few devices, each one's found when it is
    asked for (only its rows held), else all of them sorted by device at once."""
    if n_dev <= FEW_DEVICES:
        for d in range(n_dev):
            yield d, np.flatnonzero(dev_of == d)
        return
    order = np.argsort(dev_of, kind="stable")  # every device's events, in order
    bounds = np.searchsorted(dev_of[order], np.arange(n_dev + 1), side="left")
    for d in range(n_dev):
        yield d, order[bounds[d] : bounds[d + 1]]


def window_lookups(tables: list[StepTable]) -> list[tuple]:
    """Per table: what :func:`device_events` turns step numbers into window indices with (made once
    per distinct table)."""
    made: dict[int, tuple] = {}
    for table in tables:
        if id(table) not in made:
            lut, lo = window_of(table)
            numbers = table.step
            dense = lut.size <= 4 * len(table) + 1024
            made[id(table)] = (lut, lo, dense, numbers, np.argsort(numbers, kind="stable"))
    return [made[id(t)] for t in tables]


def device_events(trace: Trace, rows: np.ndarray, lookup: tuple) -> DeviceEvents:
    """The events ``rows`` (ascending) of one device, in order of start (ties: in row order), with
    their window index from ``lookup`` (:func:`window_lookups`)."""
    c = trace.columns
    lut, lo, dense, numbers, by_number = lookup
    start = c.start_ps[rows]
    if start.size > 1 and not (start[1:] >= start[:-1]).all():
        by_start = np.argsort(start, kind="stable")  # the lines' runs, merged
        start = start[by_start]
        rows = rows[by_start]
        del by_start
    end = c.dur_ps[rows]
    end += start
    step = c.step[rows]
    if dense:
        at = step.astype(np.int64)
        at -= lo
        at[step < 0] = lut.size - 1
        window = lut[at]
        del at
    else:  # sparse step numbers: search them
        window = np.full(rows.size, -1, dtype=np.int64)
        inside = step >= 0
        window[inside] = by_number[np.searchsorted(numbers[by_number], step[inside])]
    return DeviceEvents(rows, c.category[rows], start, end, step, c.bytes[rows], window)


def attribute(trace: Trace, kernel_wait_ps: int = KERNEL_WAIT_PS, threads: int | None = None) -> Breakdown:
    """The trace's breakdown (module doc), device by device; ``threads``: devices broken down at once
    (default :func:`~tfprof_towers.xplane.parallel.decode_threads`: numpy's sorts and scans let go of the
    GIL, so two devices are swept on two cores); the result is the same whatever the threads."""
    steps = trace.step_table
    devices, dev_of = device_index(trace)
    n_dev, n_win = len(devices), len(steps)
    accelerator = np.array([is_accelerator_plane(d) for d in devices], dtype=bool)
    tables = [trace.steps_of(d) for d in devices]
    wall = np.zeros((n_dev, n_win, len(WALL_CATEGORIES)), dtype=np.int64)
    idle = np.zeros((n_dev, n_win, len(IDLE_KINDS)), dtype=np.int64)
    window = np.zeros((n_dev, n_win), dtype=np.int64)
    parts = []
    launches = _Once(lambda: Launches.of(trace))  # made by the first accelerator's thread
    lookups = window_lookups(tables)

    def one(item: tuple[int, np.ndarray]) -> tuple[int, Totals, np.ndarray, np.ndarray | None]:
        d, rows = item
        table = tables[d]
        joined = launches() if accelerator[d] else None  # before this device's events are gathered
        ev = device_events(trace, rows, lookups[d])
        del rows
        wall_ev, own = nested(ev) if TPU_CHIP.search(devices[d]) else (ev, None)
        part = totals(ev, d, table, own)
        split = idle_split(trace, ev, table, kernel_wait_ps, joined) if joined is not None else None
        return d, part, wall_times(wall_ev, table), split

    work = device_rows(dev_of, n_dev)
    for d, part, wall_d, idle_d in in_order(one, work, decode_threads(threads) if n_dev > 1 else 1):
        table = tables[d]
        if table is steps:  # the trace's windows: laid out as they are
            at = ok = slice(None)
        else:  # windows of its own: each where the trace's window of its step number is
            pos = index_of(steps, table.step)
            ok = np.flatnonzero(pos >= 0)
            at = pos[ok]
            part = Totals(part.device, pos[part.window], part.category, part.count, part.dur_ps, part.bytes)
        parts.append(part)
        window[d, at] = table.window_ps[ok]
        wall[d, at, :-1] = wall_d[ok]
        if idle_d is not None:
            idle[d, at] = idle_d[ok]
    wall[:, :, -1] = window - wall[:, :, :-1].sum(axis=2)
    if not parts:
        parts = [totals(per_device_empty(), 0, steps)]
    joined = Totals(*(np.concatenate([getattr(p, f) for p in parts]) for f in Totals.__dataclass_fields__))
    return Breakdown(steps, devices, joined, wall, idle, accelerator, window)


class _Once:
    """A value made on first call, once, whichever thread calls first (the others wait for it)."""

    def __init__(self, make: Callable[[], Launches]) -> None:
        self._make, self._lock, self._value = make, threading.Lock(), None

    def __call__(self) -> Launches:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value


def nested(ev: DeviceEvents) -> tuple[DeviceEvents, np.ndarray]:
    """A TPU chip's ops as the pieces of their self time (for the wall: the innermost op owns each
    instant) and each op's self time (for the totals: every op counted once), :mod:`.nesting`."""
    pieces = self_pieces(ev.start, ev.end)
    i = pieces.src
    window = np.full(i.size, -1, dtype=np.int64)  # a piece's window is searched (:func:`window_pieces`)
    cut = DeviceEvents(ev.rows[i], ev.category[i], pieces.start, pieces.end, ev.step[i], ev.bytes[i], window)
    return cut, self_times(ev.start.size, pieces)


def per_device_empty() -> DeviceEvents:
    z = np.zeros(0, dtype=np.int64)
    return DeviceEvents(z, z.astype(np.int8), z, z, z, z, z)


def totals(ev: DeviceEvents, device: int, steps: StepTable, own: np.ndarray | None = None) -> Totals:
    """Per step window and category of one device: count, summed duration and bytes (exact).
    ``own``: per event, the time it counts for instead of its duration (a TPU op's self time)."""
    n_win, n_cat = max(len(steps), 1), len(EVENT_CATEGORIES)
    inside = ev.window >= 0
    every = ev.end - ev.start if own is None else own
    if inside.all():  # the usual case: no event outside the windows
        key, dur, nbytes = ev.window * n_cat, every, ev.bytes
        key += ev.category
    else:
        at = np.flatnonzero(inside)
        key = ev.window[at] * n_cat
        key += ev.category[at]
        dur, nbytes = every[at], ev.bytes[at]
    count = np.bincount(key, minlength=n_win * n_cat)
    dur = exact_sums(key, dur, n_win * n_cat)
    # most devices move no bytes (only copies do): their sums need no pass
    nbytes = exact_sums(key, nbytes, n_win * n_cat) if nbytes.any() else np.zeros(n_win * n_cat, np.int64)
    used = np.flatnonzero(count)
    return Totals(
        np.full(used.size, device, dtype=np.int64), used // n_cat, used % n_cat, count[used].astype(np.int64),
        dur[used], nbytes[used],
    )


def exact_sums(key: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per ``key``: float weights where every sum stays below 2**53 (then
    exact), else integer accumulation."""
    if not values.size or (values.min() >= 0 and int(values.sum(dtype=np.uint64)) < (1 << 53)):
        return np.rint(np.bincount(key, weights=values, minlength=n)).astype(np.int64)
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, key, values)
    return out


def wall_times(ev: DeviceEvents, steps: StepTable) -> np.ndarray:
    """One device's exclusive time per step window and rank of :data:`WALL_ORDER` (module doc),
    swept in time slices of about :data:`CHUNK` events."""
    n_win, n_rank = len(steps), len(WALL_ORDER)
    acc = np.zeros((n_win, n_rank), dtype=np.int64)
    if not n_win or not ev.start.size:
        return acc
    ws, we = steps.start_ps, steps.end_ps
    for lo, hi in time_slices(ev.start, CHUNK):
        if lo is None:  # the usual case: one pass
            s, e, w, cat = ev.start, ev.end, ev.window, ev.category
        else:  # one slice of time: its events, cut to it
            sel = np.flatnonzero((ev.start < hi) & (ev.end > lo))
            s, e, w, cat = ev.start[sel], np.minimum(ev.end[sel], hi), ev.window[sel], ev.category[sel]
            spill = s < lo  # started before the slice: its piece starts at ``lo``
            if spill.any():
                at = int(np.searchsorted(we, lo, side="right"))
                w[spill] = at if at < n_win and ws[at] <= lo else -1
                s = np.maximum(s, lo)
        pieces = window_pieces(s, e, w, ws, we)
        if pieces is None:
            continue
        if lo is None:  # every window (those without events add nothing)
            first, last, origin, end = 0, n_win, ws, we
        else:  # only the windows the slice touches, whose pieces lie within the slice
            first, last = pieces.windows
            origin, end = np.maximum(ws[first:last], lo), np.minimum(we[first:last], hi)
        part = pieces_sweep(pieces, cat, first, origin, end, we, n_rank)
        acc[first:last] += part.reshape(last - first, n_rank)
    return acc


@dataclass(frozen=True)
class WindowPieces:
    """Intervals cut to the step windows (:func:`window_pieces`): those whose start lies in a window
    (``kept``: their indices, or ``slice(None)`` for all) each give their first piece in place --
    ``s``, ``e`` and ``w`` are theirs, and those at ``cut`` (positions among them) end at their
    window's end instead --, and every other piece is listed (window, start, end, interval)."""

    kept: np.ndarray | slice
    w: np.ndarray
    s: np.ndarray
    e: np.ndarray
    cut: np.ndarray
    win: np.ndarray
    cs: np.ndarray
    ce: np.ndarray
    src: np.ndarray

    @property
    def windows(self) -> tuple[int, int]:
        """The first window with a piece and one past the last."""
        lo = min([int(x.min()) for x in (self.w, self.win) if x.size])
        hi = max([int(x.max()) for x in (self.w, self.win) if x.size])
        return lo, hi + 1


def window_pieces(s: np.ndarray, e: np.ndarray, w: np.ndarray, ws: np.ndarray, we: np.ndarray,
                  ) -> WindowPieces | None:
    """:func:`clip_to_windows` of intervals whose start's window ``w`` is known (-1: none), without
    copying those that start in a window (:class:`WindowPieces`); only the ones that leave their
    window, or start outside every window, are searched.  None: no piece."""
    inside = w >= 0
    if inside.all():  # the usual case: every event starts in a window
        kept, outside = slice(None), np.zeros(0, dtype=np.int64)
        ks, ke, kw = s, e, w
    else:
        kept, outside = np.flatnonzero(inside), np.flatnonzero(~inside)
        ks, ke, kw = s[kept], e[kept], w[kept]
    cut = np.flatnonzero(ke > we[kw])
    leaving = cut if isinstance(kept, slice) else kept[cut]
    rest = np.concatenate([leaving, outside])
    win, cs, ce, idx = clip_to_windows(s[rest], e[rest], ws, we)
    own = np.concatenate([kw[cut], np.full(outside.size, -1, dtype=kw.dtype)])
    later = np.flatnonzero(win != own[idx])  # a leaving interval's first piece is kept in place
    if not kw.size and not later.size:
        return None
    return WindowPieces(kept, kw, ks, ke, cut, win[later], cs[later], ce[later], rest[idx[later]])


def pieces_sweep(p: WindowPieces, cat: np.ndarray, first: int, origin: np.ndarray, end: np.ndarray,
                 we: np.ndarray, n_rank: int) -> np.ndarray:
    """:func:`sweep` of the pieces ``p`` of the windows from ``first`` on, each within its window's
    ``[origin, end]`` (per window): the keys are the starts and ends plus one offset per window, the
    listed pieces merged in among the kept ones (in order of start, the sweep's order)."""
    n_groups = origin.size
    span = int((end - origin).max()) + 1 if n_groups else 1
    kept_rank = RANK.take(cat[p.kept])
    if span * n_groups >= _SAFE:  # too far apart for one key
        win = np.concatenate([p.w, p.win]) - first
        s, e = np.concatenate([p.s, p.cs]), np.concatenate([p.e, p.ce])
        e[p.cut] = we[p.w[p.cut]]
        rank = np.concatenate([kept_rank, RANK.take(cat[p.src])])
        return sweep(win, rank, s, e, n_groups, n_rank, origin[win])
    offset = np.arange(n_groups, dtype=np.int64) * span - origin
    at = offset.take(p.w - first) if first else offset.take(p.w)
    s, e = p.s + at, p.e + at
    e[p.cut] = we[p.w[p.cut]] + at[p.cut]
    np.maximum(e, s, out=e)  # an interval ending before its start adds nothing (as if dropped)
    if not p.src.size:
        return keyed_sweep(s, e, kept_rank, n_groups, n_rank, span)
    local = p.win - first
    if (p.cs == origin[local]).all():  # as always: a listed piece starts where its window does
        heads = Heads(local, p.ce - p.cs, RANK.take(cat[p.src]))
        return keyed_sweep(s, e, kept_rank, n_groups, n_rank, span, heads)
    xs, xe = p.cs + offset[local], p.ce + offset[local]  # else merged in among the kept ones
    by = np.argsort(xs, kind="stable")
    pos = np.searchsorted(s, xs[by], side="right")
    s, e = np.insert(s, pos, xs[by]), np.insert(e, pos, xe[by])
    kept_rank = np.insert(kept_rank, pos, RANK.take(cat[p.src[by]]))
    return keyed_sweep(s, e, kept_rank, n_groups, n_rank, span)


@dataclass(frozen=True)
class Heads:
    """Intervals that start where their group does (key ``g * span``): each one's group, length and rank.
    A group's heads of some ranks cover one interval from its start, as long as their longest."""

    group: np.ndarray
    length: np.ndarray
    rank: np.ndarray

    def longest(self, r: int, n_groups: int) -> np.ndarray:
        """Per group, the length of its longest head of rank ``r`` or less (0: none)."""
        out = np.zeros(n_groups, dtype=np.int64)
        sel = self.rank <= r
        np.maximum.at(out, self.group[sel], self.length[sel])
        return out


def time_slices(start: np.ndarray, size: int) -> list[tuple[int | None, int | None]]:
    """Cuts of the time axis holding about ``size`` event starts each ((None, None): all at once)."""
    if start.size <= size:
        return [(None, None)]
    k = -(-start.size // size)
    sample = np.sort(start[:: max(1, start.size // (64 * k))])
    cuts = distinct(sample[(np.arange(1, k) * sample.size) // k])
    edges = [int(start.min()) - 1, *cuts.tolist(), int(start.max()) + 1]
    bounds = list(itertools.pairwise(edges))
    bounds[-1] = (bounds[-1][0], np.iinfo(np.int64).max // 2)  # the last slice runs to the end
    return bounds


def sweep(
    group: np.ndarray, rank: np.ndarray, s: np.ndarray, e: np.ndarray, n_groups: int, n_rank: int,
    origin: np.ndarray | None = None,
) -> np.ndarray:
    """Exclusive time per (group, rank), int64: the lowest active rank owns each instant (module doc).

    ``origin``: per interval, a time no later than any start of its group (default: the group's
    earliest start); a group's times are counted from it.
    """
    out = np.zeros(n_groups * n_rank, dtype=np.int64)
    keep = e > s
    if not keep.any():
        return out
    if not keep.all():
        group, rank, s, e = group[keep], rank[keep], s[keep], e[keep]
        origin = origin[keep] if origin is not None else None
    if origin is not None:  # each group from its own origin: one sort key (group, start)
        s, e = s - origin, e - origin
        span = int(e.max()) + 1
        if span * n_groups < _SAFE:
            base = group.astype(np.int64)
            base *= span
            s += base
            e += base
            return keyed_sweep(s, e, rank, n_groups, n_rank, span)
        else:
            order = np.lexsort((s, group))
            group, rank, s, e = group[order], rank[order], s[order], e[order]
    else:
        order = np.lexsort((s, group))
        group, rank, s, e = group[order], rank[order], s[order], e[order]
        first = np.r_[True, group[1:] != group[:-1]]
        origin = s[np.maximum.accumulate(np.where(first, np.arange(group.size), 0))]
        s, e = s - origin, e - origin
        span = int(e.max()) + 1
    prev = np.zeros(n_groups, dtype=np.int64)
    ranks = np.flatnonzero(np.bincount(rank, minlength=n_rank)).tolist()
    for r in ranks:
        if r == ranks[-1]:  # every interval
            measure = union_measure(group, s, e, n_groups, span)
        else:
            sel = np.flatnonzero(rank <= r)
            measure = union_measure(group[sel], s[sel], e[sel], n_groups, span)
        out[np.arange(n_groups) * n_rank + r] = measure - prev
        prev = measure
    return out


def keyed_sweep(s: np.ndarray, e: np.ndarray, rank: np.ndarray, n_groups: int, n_rank: int, span: int,
                heads: Heads | None = None) -> np.ndarray:
    """:func:`sweep` of intervals given by keys (``e >= s``): group ``g``'s times offset into ``[g * span,
    (g + 1) * span)``, ``span * n_groups`` below :data:`_SAFE`, so that one key sorts them all; and of
    ``heads``, intervals that start where their group does.  ``s`` and ``e`` are the caller's no more
    (fresh arrays, or used up)."""
    if not (s[1:] >= s[:-1]).all():  # often sorted already: one device's events, in time order
        order = np.argsort(s, kind="stable")
        rank, s, e = rank[order], s[order], e[order]
        del order
    edges = np.arange(n_groups + 1, dtype=np.int64) * span
    out = np.zeros(n_groups * n_rank, dtype=np.int64)
    prev = np.zeros(n_groups, dtype=np.int64)
    present = np.bincount(rank, minlength=n_rank)
    if heads is not None:
        present += np.bincount(heads.rank, minlength=n_rank)
    ranks = np.flatnonzero(present).tolist()
    for r in ranks:
        head = heads.longest(r, n_groups) if heads is not None else None
        if r == ranks[-1]:  # every interval
            measure = keyed_union(s, e, edges, head)
        else:
            sel = np.flatnonzero(rank <= r)
            measure = keyed_union(s[sel], e[sel], edges, head)
        out[np.arange(n_groups) * n_rank + r] = measure - prev
        prev = measure
    return out


def keyed_union(s: np.ndarray, e: np.ndarray, edges: np.ndarray, head: np.ndarray | None = None,
                ) -> np.ndarray:
    """Per group, the measure of the union of its intervals (``e >= s``): keys sorted by start, group
    ``g``'s in ``[edges[g], edges[g + 1])``.  Each interval adds how far it reaches past every earlier one
    (``reach[i] - max(s[i], reach[i - 1])``, never negative); the additions are disjoint pieces of
    the key axis, so their running sum stays below its end: exact int64.  ``head``: per group, the
    length of one more interval from its start (``[edges[g], edges[g] + head[g])``), counted with
    them: its length less what the group's intervals that start inside it already cover there (their
    additions, less how far past its end they reach)."""
    if not s.size:
        return np.zeros(edges.size - 1, dtype=np.int64) if head is None else head.copy()
    reach = np.maximum.accumulate(e)
    if head is not None:  # where each group's head ends, and how far its intervals before that reach
        head_end = edges[:-1] + head
        before = np.searchsorted(s, head_end)
        reach_there = reach[np.maximum(before - 1, 0)]
    lo = s.copy()
    np.maximum(lo[1:], reach[:-1], out=lo[1:])
    reach -= lo  # each interval's addition
    del lo
    total = np.cumsum(reach, out=reach)
    at = np.searchsorted(s, edges)  # each group's first interval
    upto = np.where(at > 0, total[np.maximum(at - 1, 0)], 0)  # the additions before it
    measure = np.diff(upto)
    if head is not None:  # the head, less its overlap with the group's intervals that start in it
        added = np.where(before > 0, total[np.maximum(before - 1, 0)], 0) - upto[:-1]
        past = np.where(before > at[:-1], np.maximum(reach_there - head_end, 0), 0)
        measure += head - (added - past)
    return measure


def union_measure(group: np.ndarray, s: np.ndarray, e: np.ndarray, n_groups: int, span: int) -> np.ndarray:
    """Per group, the measure of the union of its intervals; sorted by (group, start), times in
    ``[0, span)``.  Groups are offset by ``span`` so one running maximum serves them all."""
    out = np.zeros(n_groups, dtype=np.int64)
    if not group.size:
        return out
    per = max(1, _SAFE // max(span, 1))  # groups per pass that keep the offsets in int64
    lo = 0
    while lo < n_groups:
        a, b = np.searchsorted(group, [lo, lo + per])
        if b > a:
            g = group[a:b] - lo
            base = g * span
            ends = e[a:b] + base
            reach = np.maximum.accumulate(ends)
            before = np.r_[np.int64(-1), reach[:-1]]
            add = ends - np.maximum(s[a:b] + base, before)
            np.maximum(add, 0, out=add)
            out[lo : lo + per] += _group_sums(g, add, min(per, n_groups - lo))
        lo += per
    return out


def _group_sums(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of ``values`` per group (``group`` sorted)."""
    out = np.zeros(n, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    out[group[starts]] = np.add.reduceat(values, starts)
    return out


