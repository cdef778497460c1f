"""What the trace rules read of a trace: :class:`TraceFacts`, reduced from each host's :class:`HostFacts`.

The rules never read events.  Each host's events are scanned once, where the host is analysed (the map
of :mod:`tfprof_towers.trace.pod`, or one :class:`~tfprof_towers.trace.analysis.Analysis`), by
:class:`HostScan`, into a compact :class:`HostFacts`: per accelerator its wall and idle figures, its
copies, its collectives' union, its kernels' launch figures, what its host did while it waited, and the
compute time per kernel name.  :meth:`TraceFacts.reduce` joins the hosts' facts (and the tasks' steps,
which the reduce builds across hosts); every rule reads only that.  A single-host trace is the same
map with a one-host reduce.

Figures are per step of each device (its time in the analysed step windows divided by the number of
windows it has time in), read from the breakdown's arrays and the event columns with numpy (no pandas:
``analyze --json`` never imports it); nothing loops per event in Python.  An accelerator plane this tool
cannot read (``analysis.trace.unread``) is not an accelerator here: the rules never name it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.trace.attribute import RANK, exact_sums, sweep
from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.idle import IDLE_KINDS, Launches
from tfprof_towers.trace.producer import UNKNOWN, Producer
from tfprof_towers.trace.steps import clip_to_windows
from tfprof_towers.vocab.categories import EVENT_CATEGORIES, WALL_CATEGORIES
from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane
from tfprof_towers.xplane import DEVICE, HOST, dense_unique, distinct

if TYPE_CHECKING:
    from tfprof_towers.trace.analysis import Analysis
    from tfprof_towers.trace.memory_peaks import DeviceMemory

_PS = 1e12
#: Host-side categories, and what the findings call them.
HOST_ACTIVITY: dict[str, str] = {
    "input": "input pipeline (tf.data, IteratorGetNext)",
    "framework": "framework, executor and kernel-launch overhead",
    "host_compute": "TF ops computing on the host",
    "send_recv": "send/recv",
    "collective": "collectives",
}
_HOST_CODES = np.array([CAT[c] for c in HOST_ACTIVITY], dtype=np.int8)


# ------------------------------------------------------------------------------------------
# What the rules read of one analysis


def known_accelerators(analysis: Analysis) -> tuple[str, ...]:
    """Every accelerator the trace knows of: a device plane, even one without lines, unless it is one this
    tool cannot read (``trace.unread``)."""
    known = dict.fromkeys([*analysis.trace.planes, *analysis.breakdown.devices])
    unread = analysis.trace.unread
    shown = (d for d in known if is_accelerator_plane(d) and d not in unread)
    return tuple(sorted(shown, key=device_sort_key))


@dataclass(frozen=True)
class DeviceFigures:
    """One accelerator's figures per step (its time in its step windows divided by ``steps``)."""

    steps: int  # the windows it has time in (at least 1)
    window_s: float
    busy_s: float  # window less idle
    wall: Mapping[str, float]  # every wall category (``idle`` too) and idle kind (``host_wait``, ...)


@dataclass(frozen=True)
class CopyFigures:
    """One accelerator's host<->device copies (h2d and d2h together) per step."""

    seconds: float
    bytes: float
    count: float


class PerAccelerator:
    """What the rules read of the per-accelerator figures ``devices`` (:attr:`HostScan.devices`, or the
    hosts' joined in :class:`TraceFacts`), by device, in :func:`device_sort_key` order."""

    devices: Mapping[str, DeviceFigures]

    def per_step(self, device: str) -> int:
        d = self.devices.get(device)
        return d.steps if d is not None else 1

    def wall_s(self, device: str, category: str) -> float:
        d = self.devices.get(device)
        return float(d.wall.get(category, 0.0)) if d is not None else 0.0


@dataclass(frozen=True)
class Kernels:
    """Kernels (compute and collective events of accelerator planes) in the step windows, in the
    trace's order: device and name as codes in the trace's strings, collective (bool), start, duration,
    and the start and end of each one's launch (-1: not known)."""

    device: np.ndarray
    name: np.ndarray
    collective: np.ndarray
    start_ps: np.ndarray
    dur_ps: np.ndarray
    launch_start_ps: np.ndarray
    launch_end_ps: np.ndarray

    def take(self, rows: np.ndarray) -> Kernels:
        """The kernels ``rows`` (indices or a mask), in their order."""
        return Kernels(*(getattr(self, f)[rows] for f in Kernels.__dataclass_fields__))


def unique_first(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True, return_inverse=True)`` (the inverse flat), without a sort where
    the keys are small codes (:func:`~tfprof_towers.xplane.dense_unique`)."""
    uniq, inverse = dense_unique(keys.reshape(-1))
    first = np.full(uniq.size, inverse.size, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(inverse.size))
    return uniq, first, inverse


def first_seen_groups(keys: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each distinct key in the order it first occurs, with its positions (ascending): a groupby
    ``sort=False``."""
    if not keys.size:
        return
    uniq, first, inverse = unique_first(keys)
    rank = np.empty(uniq.size, dtype=np.int64)
    seen = np.argsort(first, kind="stable")
    rank[seen] = np.arange(uniq.size)
    r = rank[inverse]
    order = np.argsort(r, kind="stable")
    bounds = np.searchsorted(r[order], np.arange(uniq.size + 1))
    for k, u in enumerate(seen.tolist()):
        yield int(uniq[u]), order[bounds[k] : bounds[k + 1]]


def sums_by_first_seen(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct key in the order it first occurs: the key and the exact int64 sum of its ``values``,
    most first (ties in that order)."""
    if not keys.size:
        z = np.zeros(0, np.int64)
        return z, z
    uniq, first, inverse = unique_first(keys)
    totals = exact_sums(inverse, values.astype(np.int64), uniq.size)
    seen = np.argsort(first, kind="stable")
    keys_seen, totals_seen = uniq[seen], totals[seen]
    most = np.argsort(-totals_seen, kind="stable")
    return keys_seen[most], totals_seen[most]


@dataclass(frozen=True, eq=False)
class HostScan(PerAccelerator):
    """One analysis's events, scanned for the per-accelerator figures the trace rules share (made on
    first use); :meth:`HostFacts.of` keeps what the rules need of them."""

    analysis: Analysis

    @property
    def name(self) -> str:
        return self.analysis.label

    @property
    def producer(self) -> Producer:
        """The framework and vendor that wrote the trace: every suggestion is worded for them."""
        return self.analysis.trace.producer

    @cached_property
    def accelerators(self) -> tuple[str, ...]:
        return known_accelerators(self.analysis)

    @cached_property
    def kernels(self) -> Kernels:
        """Kernels (compute and collective events of accelerator planes) in the step windows
        (:class:`Kernels`): kernel names are long, and only the few distinct ones are ever made text."""
        c = self.analysis.trace.columns
        is_kernel = (c.category == CAT["compute"]) | (c.category == CAT["collective"])
        rows = np.flatnonzero(is_kernel & (c.line_kind.take(c.line) == DEVICE) & (c.step >= 0))
        unread = [c.code_of(d) for d in self.analysis.trace.unread]
        if unread:
            rows = rows[~np.isin(c.device[rows], unread)]
        launch_start, launch_end = launch_times(self.analysis, rows)
        return Kernels(c.device[rows], c.name[rows], c.category[rows] == CAT["collective"], c.start_ps[rows],
                       c.dur_ps[rows], launch_start, launch_end)

    def kernel_groups(self, kernels: Kernels | None = None) -> Iterator[tuple[str, Kernels]]:
        """Per device of ``kernels`` (default all), in the order they first ran: its name and kernels."""
        k = self.kernels if kernels is None else kernels
        text = self.analysis.trace.columns.strings.items
        for code, rows in first_seen_groups(k.device):
            yield text[code], k.take(rows)

    @cached_property
    def working(self) -> tuple[str, ...]:
        """The accelerators that ran a kernel in the analysed windows (one that started before a window
        and runs into it too: the wall breakdown, clipped to the windows)."""
        text = self.analysis.trace.columns.strings.items
        ran = {text[int(d)] for d in distinct(self.kernels.device).tolist()}
        ran.update(dev for dev, f in self.devices.items()
                   if f.wall.get("compute", 0.0) + f.wall.get("collective", 0.0) > 0)
        return tuple(d for d in self.accelerators if d in ran)

    @cached_property
    def devices(self) -> dict[str, DeviceFigures]:
        """Per accelerator with time in the breakdown (:class:`DeviceFigures`): ``steps`` (windows it has
        time in), ``window_s`` and every wall category and idle kind in seconds, all per step; ``busy_s`` =
        window - idle."""
        b = self.analysis.breakdown
        unread = self.analysis.trace.unread
        acc = [i for i, d in enumerate(b.devices) if is_accelerator_plane(d) and d not in unread]
        if not acc or not len(b.steps):
            return {}
        numbers, which = np.unique(b.steps.step, return_inverse=True)
        out: dict[str, DeviceFigures] = {}
        for i in sorted(acc, key=lambda i: device_sort_key(b.devices[i])):
            wall = b.wall_ps[i]  # [window, WALL_CATEGORIES]
            per_number = np.zeros(numbers.size, dtype=np.int64)
            np.add.at(per_number, which.reshape(-1), wall.sum(axis=1))
            steps = np.int64(max(int((per_number > 0).sum()), 1))
            cats = wall.sum(axis=0)
            # int64 / int64 / 1e12 in numpy's float64, as every figure of the breakdown is divided
            figures = dict(zip(WALL_CATEGORIES, (cats / steps / _PS).tolist()))
            figures.update(zip(IDLE_KINDS, (b.idle_ps[i].sum(axis=0) / steps / _PS).tolist()))
            window_s = float(cats.sum() / steps / _PS)
            out[b.devices[i]] = DeviceFigures(int(steps), window_s, window_s - figures["idle"], figures)
        return out

    @cached_property
    def copies(self) -> dict[str, CopyFigures]:
        """Per accelerator: host<->device copies' total seconds and bytes per step (h2d and d2h)."""
        b = self.analysis.breakdown
        t = b.totals
        cats = [EVENT_CATEGORIES.index(c) for c in ("h2d", "d2h")]
        sel = np.flatnonzero(np.isin(t.category, cats))
        n = len(b.devices)
        has = np.bincount(t.device[sel], minlength=n) > 0
        dur, nbytes, count = (exact_sums(t.device[sel], v[sel], n) for v in (t.dur_ps, t.bytes, t.count))
        out: dict[str, CopyFigures] = {}
        for i in sorted(np.flatnonzero(has).tolist(), key=lambda i: b.devices[i]):
            dev = b.devices[i]
            if dev in self.devices:
                steps = np.int64(self.devices[dev].steps)
                out[dev] = CopyFigures(float(dur[i] / _PS / steps), float(nbytes[i] / steps),
                                       float(count[i] / steps))
        return out

    @cached_property
    def collective_union_s(self) -> dict[str, float]:
        """Per accelerator: the wall time any collective of its ran, per step (overlap included)."""
        k = self.kernels
        out = dict.fromkeys(self.working, 0.0)
        for dev, g in self.kernel_groups(k.take(k.collective)):  # each accelerator in its own windows
            steps = self.analysis.trace.steps_of(dev)
            s = g.start_ps.astype(np.int64)
            _, cs, ce, _ = clip_to_windows(s, s + g.dur_ps.astype(np.int64), steps.start_ps, steps.end_ps)
            z = np.zeros(cs.size, np.int64)
            out[dev] = int(sweep(z, z, cs, ce, 1, 1)[0]) / _PS / self.per_step(dev)
        return out


@dataclass(frozen=True)
class Cutoffs:
    """The trace rules' cut-offs that the scan of a host's events needs (the rest are applied to the
    joined facts): ``launch_bound``'s short kernel and launch delay, ``host_bound``'s idle shares (which
    accelerators get the host's activity in their gaps scanned).  The defaults are the rules' defaults
    (``advice.trace_rules.TRACE_RULES`` reads them from here)."""

    short_kernel_s: float = 50e-6
    launch_delay_cutoff_s: float = 100e-6
    min_idle_share: float = 0.40
    min_host_wait_share: float = 0.50


DEFAULT_CUTOFFS = Cutoffs()


def launch_stats(scan: HostScan, short_ps: float, delay_ps: float) -> dict[str, dict[str, Any]]:
    """Per accelerator with kernels (in the order they first ran): what ``launch_bound`` reads of its
    kernels -- their number, median duration, share shorter than ``short_ps``, total time, and of those
    joined to their launch: the median launch delay, the share over ``delay_ps`` and the share shorter
    than their launch call."""
    out: dict[str, dict[str, Any]] = {}
    for dev, g in scan.kernel_groups():
        dur = g.dur_ps.astype(np.int64)
        known = g.launch_end_ps >= 0
        delay = (g.start_ps - g.launch_end_ps).astype(np.int64)[known]
        launch_dur = (g.launch_end_ps - g.launch_start_ps).astype(np.int64)[known]
        out[dev] = {
            "kernels": int(dur.size), "median_ps": float(np.median(dur)),
            "short_share": float((dur < short_ps).mean()), "kernel_ps": int(dur.sum()),
            "known": int(known.sum()),
            "median_delay_ps": float(np.median(delay)) if delay.size else None,
            "outlier_share": float((delay > delay_ps).mean()) if delay.size else None,
            "shorter_than_launch_share": float((dur[known] < launch_dur).mean()) if delay.size else None,
        }
    return out


def kernel_time_by_name(scan: HostScan) -> tuple[tuple[str, int], ...]:
    """Compute kernels (not collectives): per distinct name, its total time (ps), most time first (ties in
    the order they first ran)."""
    k = scan.kernels
    names, ps = sums_by_first_seen(k.name[~k.collective], k.dur_ps[~k.collective])
    text = scan.analysis.trace.columns.text
    return tuple((text(int(code)), int(v)) for code, v in zip(names.tolist(), ps.tolist()))


@dataclass(frozen=True, eq=False)
class Facts(PerAccelerator):
    """The per-accelerator figures the trace rules read, without events: one host's, or the hosts'
    joined (the fields :class:`HostFacts` and :class:`TraceFacts` share)."""

    kind: str | None
    producer: Producer
    accelerators: tuple[str, ...]
    working: tuple[str, ...]
    idle_accelerators: tuple[str, ...]
    devices: Mapping[str, DeviceFigures]  # :attr:`HostScan.devices`
    copies: Mapping[str, CopyFigures]  # :attr:`HostScan.copies`
    collective_union_s: dict[str, float]
    launches_known: bool  # some kernel is joined to its host launch
    launch: dict[str, dict[str, Any]]  # :func:`launch_stats`
    host_activity: dict[str, dict[str, Any]]  # :func:`host_activity` of the accelerators host_bound names
    kernel_ps: tuple[tuple[str, int], ...]  # :func:`kernel_time_by_name`
    memory: tuple[DeviceMemory, ...]


@dataclass(frozen=True, eq=False)
class HostFacts(Facts):
    """What the trace rules read of one host's analysis, without its events (a few rows per accelerator):
    made where the host is analysed, joined over hosts by :meth:`TraceFacts.reduce`."""

    @classmethod
    def of(cls, analysis: Analysis, cutoffs: Cutoffs = DEFAULT_CUTOFFS) -> HostFacts:
        """Scan ``analysis``'s events once, with the rules' ``cutoffs``."""
        scan = HostScan(analysis)
        short, delay = cutoffs.short_kernel_s * _PS, cutoffs.launch_delay_cutoff_s * _PS
        waiting = host_waiting(scan, cutoffs.min_idle_share, cutoffs.min_host_wait_share)
        activity = {r[0]: host_activity(analysis, r[0]) for r in waiting}
        return cls(analysis.kind, analysis.trace.producer, scan.accelerators, scan.working,
                   analysis.idle_accelerators, scan.devices, scan.copies, scan.collective_union_s,
                   bool((scan.kernels.launch_start_ps >= 0).any()), launch_stats(scan, short, delay),
                   activity, kernel_time_by_name(scan), analysis.memory)


def host_waiting(f: HostScan | TraceFacts, min_idle_share: float, min_host_wait_share: float
                 ) -> list[tuple[str, float, float, float, float, float]]:
    """The working accelerators idle at least ``min_idle_share`` of their step, ``min_host_wait_share`` of
    that waiting on the host: (device, idle share, host-wait share of idle, idle s, host wait s, step s),
    most idle first."""
    d = f.devices
    rows = []
    for dev in f.working:
        if dev not in d or d[dev].window_s <= 0:
            continue
        idle, wait = f.wall_s(dev, "idle"), f.wall_s(dev, "host_wait")
        idle_share = idle / d[dev].window_s
        if idle_share >= min_idle_share and idle > 0 and wait / idle >= min_host_wait_share:
            rows.append((dev, idle_share, wait / idle, idle, wait, d[dev].window_s))
    rows.sort(key=lambda r: -r[1])
    return rows


@dataclass(frozen=True, eq=False)
class TraceFacts(Facts):
    """What every trace rule reads: the hosts' :class:`HostFacts` joined, named, and the tasks' steps
    (built across hosts: :func:`~tfprof_towers.trace.tasks.task_steps`)."""

    name: str = ""
    tasks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, analysis: Analysis, cutoffs: Cutoffs = DEFAULT_CUTOFFS) -> TraceFacts:
        """One analysis (one host, or hosts merged into one trace): a one-host reduce."""
        from tfprof_towers.trace.tasks import task_steps

        return cls.reduce([HostFacts.of(analysis, cutoffs)], analysis.label, task_steps(analysis.trace),
                          analysis.trace.producer)

    @classmethod
    def reduce(cls, hosts: Sequence[HostFacts], name: str, tasks: Sequence[Mapping[str, Any]],
               producer: Producer | None = None) -> TraceFacts:
        """The hosts' facts as one trace's (``producer``: the hosts' combined; default the first's)."""
        from tfprof_towers.trace.memory_peaks import sort_memory

        def joined(tables: list[Mapping[str, Any]]) -> dict[str, Any]:
            every = [(dev, x) for t in tables for dev, x in t.items()]
            return dict(sorted(every, key=lambda kv: device_sort_key(kv[0])))

        names: dict[str, int] = {}
        for h in hosts:
            for n, ps in h.kernel_ps:
                names[n] = names.get(n, 0) + ps
        kernel_ps = tuple(sorted(names.items(), key=lambda kv: -kv[1]))  # stable: first-seen order on ties
        acc = tuple(sorted(dict.fromkeys(a for h in hosts for a in h.accelerators), key=device_sort_key))
        working = {w for h in hosts for w in h.working}
        devices = joined([h.devices for h in hosts])
        copies = joined([h.copies for h in hosts])
        return cls(
            name=name, kind=hosts[0].kind if hosts else None,
            producer=producer or (hosts[0].producer if hosts else UNKNOWN),
            accelerators=acc, working=tuple(a for a in acc if a in working),
            idle_accelerators=tuple(sorted({d for h in hosts for d in h.idle_accelerators},
                                           key=device_sort_key)),
            devices=devices, copies=copies,
            collective_union_s={k: v for h in hosts for k, v in h.collective_union_s.items()},
            launches_known=any(h.launches_known for h in hosts),
            launch={k: v for h in hosts for k, v in h.launch.items()},
            host_activity={k: v for h in hosts for k, v in h.host_activity.items()},
            kernel_ps=kernel_ps, memory=sort_memory([m for h in hosts for m in h.memory]),
            tasks=[dict(t) for t in tasks])


def launch_times(analysis: Analysis, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per event ``rows``: the start and end of its launch (the host event with its correlation id on
    the same host; the earliest when several), -1 when unknown."""
    return Launches.of(analysis.trace).found(analysis.trace, rows)


def device_gaps(analysis: Analysis, device: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The device's idle gaps inside the step windows, ``[a, b)`` sorted, and per gap whether it is
    host wait (the work that ends it was launched after the device's previous work ended: the
    rule of :mod:`tfprof_towers.trace.idle`)."""
    c = analysis.trace.columns
    code = c.code_of(device)
    lasting = (c.device == code) & (RANK.take(c.category) >= 0) & (c.dur_ps > 0) if code >= 0 else None
    rows = np.flatnonzero(lasting) if lasting is not None else []
    steps = analysis.trace.steps_of(device)
    if not len(rows) or not len(steps):
        z = np.zeros(0, np.int64)
        return z, z, z.astype(bool)
    rows = rows[np.argsort(c.start_ps[rows], kind="stable")]
    s, e = c.start_ps[rows], c.start_ps[rows] + c.dur_ps[rows]
    reach = np.maximum.accumulate(e)
    before = np.r_[np.int64(steps.start_ps[0]), reach[:-1]]
    opens = np.flatnonzero(s > before)
    a = np.r_[before[opens], reach[-1]]
    b = np.r_[s[opens], np.int64(steps.end_ps[-1])]
    launch = np.r_[Launches.of(analysis.trace).starts(analysis.trace, rows[opens]), -1]
    host_wait = (launch >= 0) & (launch > a)
    _, cs, ce, idx = clip_to_windows(a, b, steps.start_ps, steps.end_ps)
    return cs, ce, host_wait[idx]


def host_activity(analysis: Analysis, device: str, host_wait_only: bool = True) -> dict[str, Any]:
    """While ``device`` idled (its host-wait gaps): per host category the wall time some thread of the
    device's host was in it, the time no thread was busy, and the heaviest host ops, all per step."""
    c = analysis.trace.columns
    a, b, host_wait = device_gaps(analysis, device)
    if host_wait_only:
        a, b = a[host_wait], b[host_wait]
    code = c.code_of(device)
    on_device = np.flatnonzero(c.device == code)
    host_no = int(c.line_host[c.line[on_device[0]]]) if on_device.size else 0
    steps = max(1, len(analysis.trace.steps_of(device)))
    gap_s = float((b - a).sum()) / _PS / steps
    out: dict[str, Any] = {"gap_s": gap_s, "by_category_s": dict.fromkeys(HOST_ACTIVITY, 0.0),
                           "any_s": 0.0, "heaviest_ops": []}
    line = c.line
    rows = np.flatnonzero((c.line_kind[line] == HOST) & (c.line_host[line] == host_no)
                          & np.isin(c.category, _HOST_CODES) & (c.dur_ps > 0))
    if not a.size or not rows.size:
        return out
    s = c.start_ps[rows]
    _, cs, ce, idx = clip_to_windows(s, s + c.dur_ps[rows], a, b)
    cat = _host_index(c.category[rows[idx]])
    n = len(HOST_ACTIVITY)
    union = sweep(cat, np.zeros(cat.size, np.int64), cs, ce, n, 1)
    anything = sweep(np.zeros(cat.size, np.int64), np.zeros(cat.size, np.int64), cs, ce, 1, 1)
    out["by_category_s"] = {k: int(union[i]) / _PS / steps for i, k in enumerate(HOST_ACTIVITY)}
    out["any_s"] = int(anything[0]) / _PS / steps
    out["heaviest_ops"] = heaviest_ops(analysis, rows[idx], ce - cs, steps)
    return out


def _host_index(codes: np.ndarray) -> np.ndarray:
    lut = np.full(int(max(CAT.values())) + 1, -1, dtype=np.int64)
    lut[_HOST_CODES] = np.arange(_HOST_CODES.size)
    return lut[codes]


def heaviest_ops(analysis: Analysis, rows: np.ndarray, dur_ps: np.ndarray, steps: int,
                 top: int = 3) -> list[dict[str, Any]]:
    """The host-compute ops (node, op type) with the most time among ``rows`` (pieces of ``dur_ps``)."""
    c = analysis.trace.columns
    hc = c.category[rows] == CAT["host_compute"]
    if not hc.any():
        return []
    op, op_type = c.tf_op[rows[hc]].astype(np.int64), c.op_type[rows[hc]].astype(np.int64)
    o, t = int(op.min()), int(op_type.min())
    width = int(op_type.max()) - t + 1
    pairs, ps = sums_by_first_seen((op - o) * width + (op_type - t), dur_ps[hc])
    return [{"op": c.text(p // width + o), "op_type": c.text(p % width + t), "seconds": int(v) / _PS / steps}
            for p, v in zip(pairs[:top].tolist(), ps[:top].tolist())]
