"""What the trace rules read of a trace: :class:`TraceFacts`, reduced from each host's :class:`HostFacts`.

The rules never read events.  Each host's events are scanned once, where the host is analysed (the map
of :mod:`tfprof_towers.trace.pod`, or one :class:`~tfprof_towers.trace.analysis.Analysis`), by
:class:`HostScan`, into a compact :class:`HostFacts`: per accelerator its wall and idle figures, its
copies, its collectives' union, its kernels' launch figures, what its host did while it waited, and the
compute time per kernel name.  :meth:`TraceFacts.reduce` joins the hosts' facts (and the tasks' steps,
which the reduce builds across hosts); every rule reads only that.  A single-host trace is the same
map with a one-host reduce.

Figures are per step of each device (its time in the analysed step windows divided by the number of
windows it has time in), read from the breakdown's frames and the event columns with numpy/pandas;
nothing loops per event in Python.  An accelerator plane this tool cannot read
(``analysis.trace.unread``) is not an accelerator here: the rules never name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.trace.attribute import RANK, sweep
from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.idle import Launches
from tfprof_towers.trace.producer import UNKNOWN, Producer
from tfprof_towers.trace.steps import clip_to_windows
from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane
from tfprof_towers.xplane import DEVICE, HOST, categorical

if TYPE_CHECKING:
    import pandas as pd

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


class PerAccelerator:
    """What the rules read of the per-accelerator table ``devices`` (:attr:`HostScan.devices`, or the
    hosts' joined in :class:`TraceFacts`)."""

    devices: pd.DataFrame

    def per_step(self, device: str) -> int:
        return int(self.devices.steps.get(device, 1)) if device in self.devices.index else 1

    def wall_s(self, device: str, category: str) -> float:
        d = self.devices
        return float(d.at[device, category]) if category in d.columns and device in d.index else 0.0


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
    def kernels(self) -> pd.DataFrame:
        """Kernels (compute and collective events of accelerator planes) in the step windows: device (a
        categorical), name (its code in the trace's strings: kernel names are long, and only the few
        distinct ones are ever made text), collective (bool), start_ps, dur_ps, launch_start_ps,
        launch_end_ps (-1: launch not known)."""
        import pandas as pd

        c = self.analysis.trace.columns
        is_kernel = np.isin(c.category, [CAT["compute"], CAT["collective"]])
        rows = np.flatnonzero(is_kernel & (c.line_kind[c.line] == DEVICE) & (c.step >= 0))
        unread = [c.code_of(d) for d in self.analysis.trace.unread]
        if unread:
            rows = rows[~np.isin(c.device[rows], unread)]
        launch_start, launch_end = launch_times(self.analysis, rows)
        return pd.DataFrame({
            "device": categorical(c.device[rows], c.strings), "name": c.name[rows],
            "collective": c.category[rows] == CAT["collective"],
            "start_ps": c.start_ps[rows], "dur_ps": c.dur_ps[rows],
            "launch_start_ps": launch_start, "launch_end_ps": launch_end,
        })

    @cached_property
    def working(self) -> tuple[str, ...]:
        """The accelerators that ran a kernel in the analysed windows (one that started before a window
        and runs into it too: the wall breakdown, clipped to the windows)."""
        ran = {str(d) for d in self.kernels.device.unique().tolist()}
        d = self.devices
        timed = [c for c in ("compute", "collective") if c in d.columns]
        if timed:
            ran.update(str(x) for x in d.index[d[timed].sum(axis=1) > 0].tolist())
        return tuple(d for d in self.accelerators if d in ran)

    @cached_property
    def devices(self) -> pd.DataFrame:
        """Per accelerator with time in the breakdown: ``steps`` (windows it has time in), ``window_s``
        and every wall category and idle kind in seconds, all per step; ``busy_s`` = window - idle."""
        import pandas as pd

        b = self.analysis.breakdown
        acc = [d for d in b.devices if is_accelerator_plane(d) and d not in self.analysis.trace.unread]
        wall = b.wall[b.wall.device.isin(acc)]
        if wall.empty:
            return pd.DataFrame(columns=["steps", "window_s", "busy_s"])
        per_step = wall.groupby(["device", "step"]).dur_ps.sum()
        steps = (per_step > 0).groupby(level="device").sum().clip(lower=1)
        table = wall.pivot_table(index="device", columns="category", values="dur_ps", aggfunc="sum",
                                 fill_value=0)
        idle = b.idle[b.idle.device.isin(acc)].pivot_table(
            index="device", columns="kind", values="dur_ps", aggfunc="sum", fill_value=0)
        table = table.join(idle, how="left").fillna(0)
        out = table.div(steps, axis=0) / _PS
        out["window_s"] = table.drop(columns=idle.columns).sum(axis=1).div(steps) / _PS
        out["busy_s"] = out["window_s"] - out.get("idle", 0.0)
        out["steps"] = steps
        return out.loc[sorted(out.index, key=device_sort_key)]

    @cached_property
    def copies(self) -> pd.DataFrame:
        """Per accelerator: host<->device copies' total seconds and bytes per step (h2d and d2h)."""
        t = self.analysis.breakdown.total
        t = t[t.category.isin(["h2d", "d2h"]) & t.device.isin(self.devices.index)]
        sums = t.groupby("device")[["dur_ps", "bytes", "count"]].sum()
        steps = self.devices.steps.reindex(sums.index)
        return sums.assign(seconds=sums.dur_ps / _PS / steps, bytes=sums.bytes / steps,
                           count=sums["count"] / steps)

    @cached_property
    def collective_union_s(self) -> dict[str, float]:
        """Per accelerator: the wall time any collective of its ran, per step (overlap included)."""
        k = self.kernels[self.kernels.collective]
        out = dict.fromkeys(self.working, 0.0)
        if k.empty:
            return out
        for dev, g in k.groupby("device", sort=False, observed=True):  # each accelerator in its own windows
            steps = self.analysis.trace.steps_of(str(dev))
            s = g.start_ps.to_numpy(np.int64)
            _, cs, ce, _ = clip_to_windows(s, s + g.dur_ps.to_numpy(np.int64), steps.start_ps, steps.end_ps)
            z = np.zeros(cs.size, np.int64)
            out[str(dev)] = int(sweep(z, z, cs, ce, 1, 1)[0]) / _PS / self.per_step(str(dev))
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
    for dev, g in scan.kernels.groupby("device", sort=False, observed=True):
        dur = g.dur_ps.to_numpy(np.int64)
        known = (g.launch_end_ps >= 0).to_numpy()
        delay = (g.start_ps - g.launch_end_ps).to_numpy(np.int64)[known]
        launch_dur = (g.launch_end_ps - g.launch_start_ps).to_numpy(np.int64)[known]
        out[str(dev)] = {
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
    k = scan.kernels[~scan.kernels.collective]
    per_name = k.groupby("name", sort=False).dur_ps.sum().sort_values(ascending=False, kind="stable")
    text = scan.analysis.trace.columns.text
    return tuple((text(int(code)), int(ps)) for code, ps in per_name.items())


@dataclass(frozen=True, eq=False)
class Facts(PerAccelerator):
    """The per-accelerator figures the trace rules read, without events: one host's, or the hosts'
    joined (the fields :class:`HostFacts` and :class:`TraceFacts` share)."""

    kind: str | None
    producer: Producer
    accelerators: tuple[str, ...]
    working: tuple[str, ...]
    idle_accelerators: tuple[str, ...]
    devices: pd.DataFrame  # :attr:`HostScan.devices`
    copies: pd.DataFrame  # :attr:`HostScan.copies`
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
        if dev not in d.index or d.at[dev, "window_s"] <= 0:
            continue
        idle, wait = f.wall_s(dev, "idle"), f.wall_s(dev, "host_wait")
        idle_share = idle / float(d.at[dev, "window_s"])
        if idle_share >= min_idle_share and idle > 0 and wait / idle >= min_host_wait_share:
            rows.append((dev, idle_share, wait / idle, idle, wait, float(d.at[dev, "window_s"])))
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
        import pandas as pd

        from tfprof_towers.trace.memory_peaks import sort_memory

        def joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
            frames = [x for x in frames if len(x)]
            if not frames:
                return pd.DataFrame(columns=["steps", "window_s", "busy_s"])
            out = pd.concat(frames).fillna(0) if len(frames) > 1 else frames[0]
            return out.loc[sorted(out.index, key=device_sort_key)]

        names: dict[str, int] = {}
        for h in hosts:
            for n, ps in h.kernel_ps:
                names[n] = names.get(n, 0) + ps
        kernel_ps = tuple(sorted(names.items(), key=lambda kv: -kv[1]))  # stable: first-seen order on ties
        acc = tuple(sorted(dict.fromkeys(a for h in hosts for a in h.accelerators), key=device_sort_key))
        working = {w for h in hosts for w in h.working}
        devices = joined([h.devices for h in hosts])
        if "steps" in devices.columns:
            devices = devices.astype({"steps": np.int64})
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
    c = analysis.trace.columns
    start = np.full(rows.size, -1, dtype=np.int64)
    end = np.full(rows.size, -1, dtype=np.int64)
    idx = c.corr_index
    if not idx.size or not rows.size:
        return start, end
    on_host = c.line_kind[c.line[idx]] == HOST
    hidx = idx[on_host]
    mask = (1 << 48) - 1
    hkey = (c.line_host[c.line[hidx]].astype(np.int64) << 48) | (c.corr[on_host] & mask)
    order = np.lexsort((c.start_ps[hidx], hkey))
    hkey, hidx = hkey[order], hidx[order]
    first = np.r_[True, hkey[1:] != hkey[:-1]] if hkey.size else np.zeros(0, bool)
    hkey, hidx = hkey[first], hidx[first]
    pos = np.searchsorted(idx, rows)
    pos_ok = (pos < idx.size) & (idx[np.minimum(pos, idx.size - 1)] == rows)
    has = np.flatnonzero(pos_ok)
    if not has.size or not hkey.size:
        return start, end
    key = (c.line_host[c.line[rows[has]]].astype(np.int64) << 48) | (c.corr[pos[has]] & mask)
    at = np.minimum(np.searchsorted(hkey, key), hkey.size - 1)
    found = hkey[at] == key
    start[has[found]] = c.start_ps[hidx[at[found]]]
    end[has[found]] = c.start_ps[hidx[at[found]]] + c.dur_ps[hidx[at[found]]]
    return start, end


def device_gaps(analysis: Analysis, device: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The device's idle gaps inside the step windows, ``[a, b)`` sorted, and per gap whether it is
    host wait (the work that ends it was launched after the device's previous work ended: the
    rule of :mod:`tfprof_towers.trace.idle`)."""
    c = analysis.trace.columns
    code = c.code_of(device)
    rows = np.flatnonzero((c.device == code) & (RANK[c.category] >= 0) & (c.dur_ps > 0)) if code >= 0 else []
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
    import pandas as pd

    c = analysis.trace.columns
    hc = c.category[rows] == CAT["host_compute"]
    if not hc.any():
        return []
    frame = pd.DataFrame({"op": c.tf_op[rows[hc]], "op_type": c.op_type[rows[hc]], "dur_ps": dur_ps[hc]})
    g = frame.groupby(["op", "op_type"], sort=False).dur_ps.sum().sort_values(ascending=False, kind="stable")
    return [{"op": c.text(int(op)), "op_type": c.text(int(t)), "seconds": int(v) / _PS / steps}
            for (op, t), v in g.head(top).items()]

