"""Step windows: from step markers, else the profiler's ``Steps`` line, else the TPU chips' or the host's
program runs, else the accelerators' busy regions, else the whole trace.

* ``markers``: host events with a ``step_num`` stat (``tf.profiler.experimental.Trace(
  "train", step_num=i)``); a step's window runs from its markers' earliest start to
  their latest end.
* ``steps-line``: the events of the derived ``Steps`` line, named by step number
  (numbered in order of name when the names are not numbers).
* ``modules``: no markers and no ``Steps`` line, but TPU chips with an ``XLA Modules`` line (one event
  per program run): each run of the program with the most time is a step, numbered in order on each
  chip (each chip its own windows).
* ``program-runs``: none of those, but the host ran one compiled program again and again (a JAX
  ``jit_<f>:XLA GPU module`` execution, a ``tf.function``'s ``__inference_<f>`` call) while the
  accelerators worked: the program run most often is the step, each window from one run's start to the
  next one's or to the end of the accelerators' busy region it launched into, whichever comes first --
  provided the windows hold :data:`RUNS_COVER` of the accelerators' time in their busy regions (else the
  regions are the steps).
* ``busy-regions``: none of those, but accelerators (GPU or TPU chip planes) did work: their busy
  regions are the steps -- the union of their events that count as time, split where every
  accelerator pauses for at least :data:`REGION_GAP_PS` and ten times the median pause -- each window
  from a region's first event's start to its last one's end (micro-benchmarks, inference: XProf's
  op profile measures such a trace over the same span).  Host time outside them is outside any
  accelerator work, not a launch or input problem, and is not analysed.
* ``whole-trace``: one window over every event that counts as time (no accelerator did work).

Windows are sorted by start, and each ends no later than the next one starts.  An
event belongs to the window holding its start.  They are a :class:`StepTable` (numpy;
``.frame()`` makes the pandas frame).

**Windows of their own.**  Devices need not step together: each GPU of a trace may carry
its own ``Steps`` line, and two GPUs driven by separate processes merged into one file run
step 0 hundreds of milliseconds apart.  So the windows are kept per owner
(:class:`StepSources`): the host's markers (one table shared by every device of the
host), else each plane's own ``Steps`` line.  A device with a ``Steps`` line of its own is
broken down within its own windows; the others (the host threads, CPU devices, GPUs
without a ``Steps`` line) within the trace's table, one window per step number from the
earliest start to the latest end of every owner's window for it (:meth:`StepTable.join`).
A step's duration is the longest of its owners' windows (:func:`step_times`): the rule
XProf's overview page uses for the steps of several devices.  Owners whose windows for
a step do not overlap did not step together (:func:`apart`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.trace.codes import CAT
from tfprof_towers.vocab.categories import EVENT_CATEGORIES, TIME_CATEGORIES
from tfprof_towers.xplane import HOST, RawSpace, StatColumn, dense_unique, distinct, used_codes
from tfprof_towers.xplane.tables import tpu_planes

if TYPE_CHECKING:
    import pandas as pd

STEPS_LINE = "Steps"
MODULES_LINE = "XLA Modules"
#: The shortest pause of every accelerator that ends a busy region (and ten times the median pause).
REGION_GAP_PS = 1_000_000_000
REGION_GAP_FACTOR = 10
#: The share of the accelerators' time in their busy regions that a program's runs must hold to be the steps.
RUNS_COVER = 0.95
_ACCELERATOR_PLANE = re.compile(r"^/device:(GPU|TPU):\d+$")


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


@dataclass(frozen=True, eq=False)
class StepSources:
    """Who owns step windows, and theirs: ``names[i]`` (a host, or a plane with its own ``Steps``
    line) has ``tables[i]``.  ``planes``: the planes among them whose devices are broken down in
    their own windows (plane index -> table); empty when every device shares the trace's table."""

    names: tuple[str, ...]
    tables: tuple[StepTable, ...]
    planes: dict[int, StepTable]

    def shifted(self, delta: int) -> StepSources:
        return StepSources(self.names, tuple(t.shifted(delta) for t in self.tables),
                           {p: t.shifted(delta) for p, t in self.planes.items()})


def step_windows(
    raw: RawSpace, step_num: StatColumn, category: np.ndarray, host: str = "host", prefix: str = ""
) -> tuple[StepTable, str, StepSources]:
    """``(steps, window, sources)``: the trace's windows (``step``, ``start_ps``, ``end_ps``), how they
    were found, and who owns them (``host`` names the host when its markers or the whole trace do;
    ``prefix``, a task's name, goes before plane names)."""
    steps, window, planes = _step_windows(raw, step_num, category)
    names = tuple(prefix + raw.planes.names[p] for p in planes)
    if len(planes) < 2:  # one owner: every device shares the trace's windows
        return steps, window, StepSources(names or (host,), (steps,), {})
    return steps, window, StepSources(names, tuple(planes.values()), dict(planes))


def _step_windows(raw: RawSpace, step_num: StatColumn, category: np.ndarray):
    k = raw.n_kept  # derived lines' events come after
    start_ps, dur_ps, strings = raw.start_ps, raw.dur_ps, raw.strings
    if step_num.any:
        on = np.flatnonzero(step_num.index < k)
        on = on[raw.planes.kinds[raw.event_plane[step_num.index[on]]] == HOST]
        marker = step_num.index[on]
        if marker.size:
            end_ps = start_ps[marker] + dur_ps[marker]
            return windows(step_num.nums[on], start_ps[marker], end_ps), "markers", {}
    steps_line = np.array([n == STEPS_LINE for n in raw.lines.names], dtype=bool)
    on_steps = np.flatnonzero(steps_line.take(raw.event_line)) if steps_line.any() else np.zeros(0, np.int64)
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
        start, end = start_ps[on_steps], start_ps[on_steps] + dur_ps[on_steps]
        plane = raw.event_plane[on_steps]
        planes = {
            int(p): windows(step[plane == p], start[plane == p], end[plane == p]) for p in distinct(plane)
        }
        return windows(step, start, end), "steps-line", planes
    modules = module_windows(raw)
    if modules:
        return StepTable.join(list(modules.values())), "modules", modules
    regions = busy_regions(raw, category)
    if len(regions):
        runs = program_runs(raw, category, regions)
        if len(runs):
            return runs, "program-runs", {}
        return regions, "busy-regions", {}
    is_time = np.zeros(len(EVENT_CATEGORIES), dtype=bool)
    is_time[[CAT[c] for c in TIME_CATEGORIES]] = True
    counted = np.flatnonzero(is_time[category[:k]])
    if not counted.size:
        return windows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), "whole-trace", {}
    lo, hi = start_ps[counted].min(), (start_ps[counted] + dur_ps[counted]).max()
    return windows(np.array([0]), np.array([lo]), np.array([hi])), "whole-trace", {}


def _accelerator_rows(raw: RawSpace, category: np.ndarray) -> np.ndarray:
    """The events of accelerator planes (GPUs, TPU chips) that count as time, with a duration."""
    k = raw.n_kept
    is_time = np.zeros(len(EVENT_CATEGORIES), dtype=bool)
    is_time[[CAT[c] for c in TIME_CATEGORIES]] = True
    accelerator = np.array([bool(_ACCELERATOR_PLANE.match(nm)) for nm in raw.planes.names], dtype=bool)
    on = accelerator.take(raw.event_plane[:k]) & is_time.take(category[:k])
    return np.flatnonzero(on & (raw.dur_ps[:k] > 0))


def busy_regions(raw: RawSpace, category: np.ndarray) -> StepTable:
    """The accelerators' busy regions as windows numbered 0, 1, ... (module docstring); empty when no
    accelerator plane has an event that counts as time."""
    rows = _accelerator_rows(raw, category)
    if not rows.size:
        return windows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    order = np.argsort(raw.start_ps[rows], kind="stable")
    start = raw.start_ps[rows][order]
    reach = np.maximum.accumulate(start + raw.dur_ps[rows][order])  # the furthest end so far
    pause = start[1:] - reach[:-1]
    positive = pause[pause > 0]
    cut = max(REGION_GAP_PS, REGION_GAP_FACTOR * int(np.median(positive))) if positive.size else REGION_GAP_PS
    split = np.flatnonzero(pause >= cut)
    first = np.r_[0, split + 1]
    last = np.r_[split, start.size - 1]
    return windows(np.arange(first.size), start[first], reach[last])


#: Host events that are one run of a compiled program: JAX's ``jit_<f>:XLA GPU module`` (``XLA CPU module``
#: & co.) and a ``tf.function``'s ``__inference_<f>_<n>``.
PROGRAM_RUN = re.compile(r"(^[\w.\-]+:XLA( \w+)? module$)|(^__inference_\w+$)")


def program_runs(raw: RawSpace, category: np.ndarray, regions: StepTable) -> StepTable:
    return _program_runs(raw, category, regions)[0]


def program_run_name(raw: RawSpace, category: np.ndarray) -> str:
    """The name of the program whose runs are the steps (``program-runs`` windows), "" when none."""
    return _program_runs(raw, category, busy_regions(raw, category))[1]


def _program_runs(raw: RawSpace, category: np.ndarray, regions: StepTable) -> tuple[StepTable, str]:
    """Windows from the host's runs of the program it ran most often (module docstring): runs that
    launch into the accelerators' busy ``regions`` (start in one, or less than :data:`REGION_GAP_PS` before
    it), at least two, whose windows hold at least
    :data:`RUNS_COVER` of the accelerators' time in the regions; empty otherwise."""
    none = windows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)), ""
    k = raw.n_kept
    host = np.flatnonzero(raw.planes.kinds.take(raw.event_plane[:k]) == HOST)
    items = raw.strings.items
    program = [c for c in used_codes(raw.name[host]).tolist() if PROGRAM_RUN.match(items[c])]
    if not program or not len(regions):
        return none
    is_program = np.zeros(len(items), dtype=bool)
    is_program[program] = True
    runs = host[is_program[raw.name[host]]]
    runs = runs[np.lexsort((raw.start_ps[runs], raw.name[runs]))]  # by program, then by start
    cuts = np.flatnonzero(np.diff(raw.name[runs])) + 1
    best: tuple[int, int, np.ndarray, str] | None = None
    for rows in np.split(runs, cuts):
        c = int(raw.name[rows[0]])
        start, end = raw.start_ps[rows], raw.start_ps[rows] + raw.dur_ps[rows]
        top = np.r_[True, start[1:] >= np.maximum.accumulate(end)[:-1]]  # nested or repeated: the outer run
        start, end = start[top], end[top]
        # the region each run launches work into: the first one ending after its start, which starts no
        # more than a region gap after it (dispatch runs ahead of the device)
        i = np.searchsorted(regions.end_ps, start, side="right")
        ok = i < len(regions)
        ok[ok] = regions.start_ps[i[ok]] - start[ok] < REGION_GAP_PS
        start, end, i = start[ok], end[ok], i[ok]
        key = (int(start.size), int((end - start).sum()))
        if start.size >= 2 and (best is None or key > best[:2]):
            best = (*key, np.stack([start, i]), items[c])
    if best is None:
        return none
    start, region = best[2]
    # each run's window ends at the next run, or at the end of the busy region it launched into
    end = np.minimum(np.r_[start[1:], np.iinfo(np.int64).max], regions.end_ps[region])
    table = windows(np.arange(start.size), start, end)
    work = _accelerator_rows(raw, category)
    s = raw.start_ps[work]
    held = assign_steps(s, table) >= 0
    in_regions = assign_steps(s, regions) >= 0
    total = raw.dur_ps[work][in_regions].sum()
    return (table, best[3]) if total and raw.dur_ps[work][held].sum() >= RUNS_COVER * total else none


def outside_ps(raw: RawSpace, category: np.ndarray, steps: StepTable) -> tuple[int, int]:
    """``(outside, span)``: of the span of every event that counts as time, the time in no window."""
    k = raw.n_kept
    is_time = np.zeros(len(EVENT_CATEGORIES), dtype=bool)
    is_time[[CAT[c] for c in TIME_CATEGORIES]] = True
    counted = np.flatnonzero(is_time[category[:k]])
    if not counted.size:
        return 0, 0
    lo, hi = int(raw.start_ps[counted].min()), int((raw.start_ps[counted] + raw.dur_ps[counted]).max())
    inside = int(np.clip(np.minimum(steps.end_ps, hi) - np.maximum(steps.start_ps, lo), 0, None).sum())
    return hi - lo - inside, hi - lo


def module_windows(raw: RawSpace) -> dict[int, StepTable]:
    """Per TPU plane with an ``XLA Modules`` line: the runs of the program with the most time over every
    such line, as windows numbered 0, 1, ... in order of start (empty: no such line)."""
    tpu = tpu_planes(raw.planes.names)
    on_line = np.array([nm == MODULES_LINE and bool(tpu[p]) for nm, p in
                        zip(raw.lines.names, raw.lines.plane.tolist())], dtype=bool)
    if not on_line.any():
        return {}
    ev = np.flatnonzero(on_line.take(raw.event_line))
    if not ev.size:
        return {}
    time = np.bincount(raw.name[ev], weights=raw.dur_ps[ev].astype(np.float64))
    ev = ev[raw.name[ev] == int(np.argmax(time))]
    plane = raw.event_plane[ev]
    out = {}
    for p in distinct(plane).tolist():
        rows = ev[plane == p]
        rows = rows[np.argsort(raw.start_ps[rows], kind="stable")]
        out[int(p)] = windows(np.arange(rows.size), raw.start_ps[rows], raw.start_ps[rows] + raw.dur_ps[rows])
    return out


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
    numbers = steps.step
    small = numbers.size == 0 or (numbers.min() > -(1 << 31) and numbers.max() < (1 << 31))
    numbers = numbers.astype(np.int32 if small else np.int64)
    bounds = np.stack([ws, we], axis=1).reshape(-1)  # ws[0], we[0], ws[1], ...
    if (bounds[1:] >= bounds[:-1]).all():  # windows apart (as :func:`windows` makes them): one search
        # the bounds at or before a start: 2k + 1 in window k, even when in none
        lut = np.full(bounds.size + 1, -1, dtype=numbers.dtype)
        lut[1::2] = numbers
        return lut[np.searchsorted(bounds, start_ps, side="right")]
    i = np.searchsorted(ws, start_ps, side="right") - 1
    np.maximum(i, 0, out=i)
    out = numbers[i]
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


# ------------------------------------------------------------------ owners' windows side by side


def index_of(steps: StepTable, numbers: np.ndarray) -> np.ndarray:
    """Per step number: the index of its window in ``steps``, -1 when it has none."""
    numbers = np.asarray(numbers, dtype=np.int64)
    if not len(steps):
        return np.full(numbers.size, -1, dtype=np.int64)
    order = np.argsort(steps.step, kind="stable")
    pos = np.minimum(np.searchsorted(steps.step[order], numbers), order.size - 1)
    return np.where(steps.step[order][pos] == numbers, order[pos], -1)


def aligned(steps: StepTable, tables: Sequence[StepTable]) -> tuple[np.ndarray, np.ndarray]:
    """``(start, end)``, int64 ``[table, window of steps]``: each table's window of that step number
    (``start == end == 0`` where it has none)."""
    start = np.zeros((len(tables), len(steps)), dtype=np.int64)
    end = np.zeros_like(start)
    for i, t in enumerate(tables):
        at = index_of(steps, t.step)
        ok = at >= 0
        start[i, at[ok]] = t.start_ps[ok]
        end[i, at[ok]] = t.end_ps[ok]
    return start, end


def step_times(steps: StepTable, sources: StepSources) -> np.ndarray:
    """Per window of ``steps``: the step's duration, the longest of its owners' windows (int64 ps)."""
    if not len(steps):
        return np.zeros(0, dtype=np.int64)
    start, end = aligned(steps, sources.tables)
    return (end - start).max(axis=0)


@dataclass(frozen=True)
class Apart:
    """Two owners' windows of one step that do not overlap: ``first`` ended ``gap_ps`` before
    ``second`` began."""

    step: int
    first: str
    second: str
    gap_ps: int


def apart(steps: StepTable, sources: StepSources) -> list[Apart]:
    """Where owners did not step together: per step, each owner whose window starts at or after every
    earlier-starting owner's window has ended, and the one that ended last before it."""
    if len(sources.tables) < 2 or not len(steps):
        return []
    start, end = aligned(steps, sources.tables)
    has = end > start
    far = np.iinfo(np.int64).max
    order = np.argsort(np.where(has, start, far), axis=0, kind="stable")  # per step, owners by start
    s = np.take_along_axis(start, order, 0)
    e = np.take_along_axis(np.where(has, end, -far), order, 0)
    h = np.take_along_axis(has, order, 0)
    out: list[Apart] = []
    reach, who = e[0].copy(), order[0].copy()  # per step: the latest end so far, and whose
    for k in range(1, order.shape[0]):
        gap = h[k] & h[0] & (s[k] >= reach)
        for w in np.flatnonzero(gap).tolist():
            out.append(Apart(int(steps.step[w]), sources.names[who[w]], sources.names[order[k, w]],
                             int(s[k, w] - reach[w])))
        later = e[k] > reach
        reach = np.where(later, e[k], reach)
        who = np.where(later, order[k], who)
    return sorted(out, key=lambda a: (a.first, a.second, a.step))
