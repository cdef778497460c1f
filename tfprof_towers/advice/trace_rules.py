"""Findings from one trace alone: rules that run on an :class:`~tfprof_towers.trace.analysis.Analysis`.

A trace captured anywhere (the Keras ``TensorBoard(profile_batch=...)`` callback,
``tf.profiler.experimental``) has no run directory: no placement, no baseline, no
losses.  These rules need only the trace.  They use the same machinery as the run's
rules (:mod:`tfprof_towers.advice.findings`): a :class:`~.findings.Rule` with named
parameters, a tier raised to high at ``high_at``, and ``needs`` (keys of
:data:`~.findings.NEEDS`) that say when a rule *could not be evaluated*, and why.
Each :class:`~.findings.Finding` names its devices, states its measured numbers and one
``Suggestion:``, with the numbers in ``evidence``.

Figures are per step of each device (its time in the analysed step windows divided by the
number of windows it has time in), read from the breakdown's frames and the event columns
with numpy/pandas; nothing loops per event in Python.  No TensorFlow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.advice.cluster import straggler_finding
from tfprof_towers.advice.findings import (
    ACCELERATOR_PLANES,
    KERNELS,
    LAUNCHES,
    LOW,
    MEDIUM,
    PRECISION_NAMES,
    TASKS,
    TWO_ACCELERATORS,
    Finding,
    Rule,
    by_severity,
)
from tfprof_towers.advice.memory_rules import MEMORY_RULES, memory_unmet
from tfprof_towers.analysis.cluster_view import STRAGGLER_PARAMS, stepping_tasks
from tfprof_towers.trace.attribute import RANK, sweep
from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.idle import Launches
from tfprof_towers.trace.steps import clip_to_windows
from tfprof_towers.trace.tasks import task_steps
from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_count, fmt_percent, fmt_rate, fmt_seconds
from tfprof_towers.xplane import DEVICE, HOST, categorical

if TYPE_CHECKING:
    import pandas as pd

    from tfprof_towers.trace.analysis import Analysis

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
    """Every accelerator the trace knows of: a device plane, even one without lines."""
    known = dict.fromkeys([*analysis.trace.planes, *analysis.breakdown.devices])
    return tuple(sorted((d for d in known if is_accelerator_plane(d)), key=device_sort_key))


@dataclass(frozen=True, eq=False)
class TraceFacts:
    """One analysis, and the per-accelerator figures the trace rules share (made on first use)."""

    analysis: Analysis

    @property
    def name(self) -> str:
        return self.analysis.label

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
        launch_start, launch_end = launch_times(self.analysis, rows)
        return pd.DataFrame({
            "device": categorical(c.device[rows], c.strings), "name": c.name[rows],
            "collective": c.category[rows] == CAT["collective"],
            "start_ps": c.start_ps[rows], "dur_ps": c.dur_ps[rows],
            "launch_start_ps": launch_start, "launch_end_ps": launch_end,
        })

    @cached_property
    def working(self) -> tuple[str, ...]:
        """The accelerators that ran a kernel in the analysed windows."""
        ran = {str(d) for d in self.kernels.device.unique().tolist()}
        return tuple(d for d in self.accelerators if d in ran)

    @cached_property
    def devices(self) -> pd.DataFrame:
        """Per accelerator with time in the breakdown: ``steps`` (windows it has time in), ``window_s``
        and every wall category and idle kind in seconds, all per step; ``busy_s`` = window - idle."""
        import pandas as pd

        b = self.analysis.breakdown
        acc = [d for d in b.devices if is_accelerator_plane(d)]
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

    def per_step(self, device: str) -> int:
        return int(self.devices.steps.get(device, 1)) if device in self.devices.index else 1

    def wall_s(self, device: str, category: str) -> float:
        d = self.devices
        return float(d.at[device, category]) if category in d.columns and device in d.index else 0.0

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


# ------------------------------------------------------------------------------------------
# The rules


def check_idle_accelerators(rule: Rule, f: TraceFacts) -> Finding | None:
    idle = list(f.analysis.idle_accelerators)
    if len(idle) < rule.param("min_idle_accelerators"):
        return None
    share = len(idle) / len(f.accelerators)
    msg = (f"{len(idle)} of the {len(f.accelerators)} accelerators in the trace ran no kernel in the "
           f"analysed steps: {', '.join(idle)}"
           + (f"; only {', '.join(f.working)} did" if f.working else "; none ran a kernel"))
    suggestion = ("Suggestion: check that the job means to use them: `CUDA_VISIBLE_DEVICES`, the devices "
                  "given to the strategy (`tf.distribute.MirroredStrategy(devices=...)`, "
                  "`tf.config.set_visible_devices`), and for a multi-worker job that each worker's trace "
                  "is in the logdir (a trace holds only its own process's work).")
    evidence = {"idle": idle, "accelerators": list(f.accelerators), "working": list(f.working),
                "idle_share": share}
    return Finding(rule.name, rule.tier(share), f.name, msg, suggestion, evidence, (), tuple(idle))


def check_host_bound(rule: Rule, f: TraceFacts) -> Finding | None:
    d = f.devices
    rows = []
    for dev in f.working:
        if dev not in d.index or d.at[dev, "window_s"] <= 0:
            continue
        idle, wait = f.wall_s(dev, "idle"), f.wall_s(dev, "host_wait")
        idle_share = idle / float(d.at[dev, "window_s"])
        if idle_share >= rule.param("min_idle_share") and idle > 0 and wait / idle >= rule.param(
                "min_host_wait_share"):
            rows.append((dev, idle_share, wait / idle, idle, wait, float(d.at[dev, "window_s"])))
    if not rows:
        return None
    rows.sort(key=lambda r: -r[1])
    dev, idle_share, wait_share, idle, wait, step = rows[0]
    activity = host_activity(f.analysis, dev)
    cats = activity["by_category_s"]
    untraced = max(0.0, activity["gap_s"] - activity["any_s"])
    # the host's busiest category in the gaps, unless no traced thread was busy for most of them
    main = max(cats, key=cats.get) if any(cats.values()) else None
    if untraced >= rule.param("untraced_share") * activity["gap_s"]:
        main = "untraced"
    doing = ", ".join(f"{HOST_ACTIVITY[k]} {fmt_seconds(v)}" for k, v in
                      sorted(cats.items(), key=lambda kv: -kv[1]) if v > 0) or "nothing traced"
    msg = (f"{dev} is idle {fmt_percent(idle_share)} of its {fmt_seconds(step)} step, "
           f"{fmt_percent(wait_share)} of that ({fmt_seconds(wait)} per step) waiting on the host (the "
           f"next kernel was launched only after the device ran out of work); in those gaps the host "
           f"threads were in {doing}"
           + (f", and no traced host thread was busy for {fmt_seconds(untraced)}" if untraced > 0 else ""))
    if len(rows) > 1:
        msg += "; also " + ", ".join(f"{r[0]} idle {fmt_percent(r[1])}" for r in rows[1:])
    ops = activity["heaviest_ops"]
    suggestion = _host_bound_suggestion(main, ops)
    if main == "host_compute" and ops:
        msg += "; heaviest host ops: " + ", ".join(f"{o['op']} ({o['op_type']}) {fmt_seconds(o['seconds'])}"
                                                  for o in ops)
    evidence = {"device": dev, "step_s": step, "idle_s": idle, "idle_share": idle_share,
                "host_wait_s": wait, "host_wait_share_of_idle": wait_share,
                "host_in_gaps_s": cats, "host_busy_in_gaps_s": activity["any_s"],
                "gaps_s": activity["gap_s"], "main_activity": main, "heaviest_ops": ops,
                "others": {r[0]: {"idle_share": r[1], "host_wait_share_of_idle": r[2]} for r in rows[1:]}}
    return Finding(rule.name, rule.tier(idle_share), f.name, msg, suggestion, evidence, (),
                   tuple(r[0] for r in rows))


def _host_bound_suggestion(main: str | None, ops: Sequence[dict[str, Any]]) -> str:
    if main == "untraced":
        return ("Suggestion: for most of those gaps no traced host thread was busy, so the time goes to work "
                "this trace does not show: Python between steps (logging, a `.numpy()` that waits for each "
                "step, a loop outside `tf.function`), another process on the host, or waiting for other "
                "workers -- or the step window spans more than this device's step (separate processes merged "
                "into one file).  Trace Python too: `tf.profiler.experimental.ProfilerOptions("
                "python_tracer_level=1)`.")
    if main == "input":
        return ("Suggestion: the input pipeline is what the accelerator waits for: end it with "
                "`.prefetch(tf.data.AUTOTUNE)`, give `.map(...)` and `.interleave(...)` "
                "`num_parallel_calls=tf.data.AUTOTUNE`, and `.cache()` what does not change between epochs.")
    if main == "host_compute":
        which = ", ".join(f"{o['op']} ({o['op_type']})" for o in ops) or "ops on the host"
        return (f"Suggestion: {which} compute on the host while the accelerator waits: a placement bug -- "
                "a `with tf.device('/cpu:0')` around model code, or an op without a GPU kernel; run them on "
                "the accelerator (remove the scope; `tf.debugging.set_log_device_placement(True)` shows "
                "where each op runs).")
    return ("Suggestion: the host cannot issue work fast enough (framework and launch overhead per op): "
            "compile the step with `tf.function(jit_compile=True)` (XLA fuses ops into fewer kernels), "
            "use a larger batch per replica, and set `TF_GPU_THREAD_MODE=gpu_private` so each GPU gets "
            "its own launch threads.")


def check_launch_bound(rule: Rule, f: TraceFacts) -> Finding | None:
    k = f.kernels
    short_ps = rule.param("short_kernel_s") * _PS
    delay_ps = rule.param("launch_delay_cutoff_s") * _PS
    rows = []
    for dev, g in k.groupby("device", sort=False, observed=True):
        dev = str(dev)
        if dev not in f.devices.index:
            continue
        steps = f.per_step(dev)
        per_step = len(g) / steps
        median = float(np.median(g.dur_ps.to_numpy()))
        window = float(f.devices.at[dev, "window_s"])
        gaps = f.wall_s(dev, "host_wait") + f.wall_s(dev, "kernel_wait")
        gap_share = gaps / window if window > 0 else 0.0
        if (median >= short_ps or per_step < rule.param("min_kernels_per_step")
                or gap_share < rule.param("min_gap_share")):
            continue
        known = g.launch_end_ps >= 0
        delay = (g.start_ps - g.launch_end_ps)[known].to_numpy()
        if delay.size and np.median(delay) > delay_ps:
            continue  # kernels queue after their launch: the device has a backlog, launches are not the pace
        launch_dur = (g.launch_end_ps - g.launch_start_ps)[known].to_numpy()
        rows.append({
            "device": dev, "kernels_per_step": per_step, "median_kernel_s": median / _PS,
            "short_kernel_share": float((g.dur_ps < short_ps).mean()),
            "kernel_s": float(g.dur_ps.sum()) / _PS / steps, "step_s": window,
            "kernel_wait_share": f.wall_s(dev, "kernel_wait") / window,
            "host_wait_share": f.wall_s(dev, "host_wait") / window, "gap_share": gap_share,
            "launches_known": int(known.sum()),
            "median_launch_delay_s": float(np.median(delay)) / _PS if delay.size else None,
            "launch_delay_outlier_share": float((delay > delay_ps).mean()) if delay.size else None,
            "shorter_than_launch_share": (float((g.dur_ps[known].to_numpy() < launch_dur).mean())
                                          if delay.size else None),
        })
    if not rows:
        return None
    rows.sort(key=lambda r: -r["gap_share"])
    r = rows[0]
    msg = (f"{r['device']} runs {fmt_count(r['kernels_per_step'])} kernels per step with a median of "
           f"{fmt_seconds(r['median_kernel_s'])} ({fmt_percent(r['short_kernel_share'])} shorter than "
           f"{fmt_seconds(rule.param('short_kernel_s'))}); kernels are busy {fmt_seconds(r['kernel_s'])} of "
           f"its {fmt_seconds(r['step_s'])} step, and the gaps between them are "
           f"{fmt_percent(r['gap_share'])} of it (kernel wait {fmt_percent(r['kernel_wait_share'])}, host "
           f"wait {fmt_percent(r['host_wait_share'])})")
    if r["median_launch_delay_s"] is not None:
        msg += (f"; median launch delay {fmt_seconds(r['median_launch_delay_s'])}, "
                f"{fmt_percent(r['launch_delay_outlier_share'])} over "
                f"{fmt_seconds(rule.param('launch_delay_cutoff_s'))}; "
                f"{fmt_percent(r['shorter_than_launch_share'])} of kernels are shorter than their "
                "launch call")
    if len(rows) > 1:
        msg += "; also " + ", ".join(f"{x['device']} ({fmt_count(x['kernels_per_step'])} kernels, median "
                                     f"{fmt_seconds(x['median_kernel_s'])})" for x in rows[1:])
    suggestion = ("Suggestion: make fewer, larger kernels: compile the step with "
                  "`tf.function(jit_compile=True)` so XLA fuses the small ops, use a larger batch per "
                  "replica, and set `TF_GPU_THREAD_MODE=gpu_private` so launches do not queue behind other "
                  "host work.")
    return Finding(rule.name, rule.tier(r["gap_share"]), f.name, msg, suggestion,
                   {**r, "others": rows[1:]}, (), tuple(x["device"] for x in rows))


def check_exposed_copies(rule: Rule, f: TraceFacts) -> Finding | None:
    d = f.devices
    rows = []
    for dev in d.index:
        window = float(d.at[dev, "window_s"])
        exposed = f.wall_s(dev, "h2d") + f.wall_s(dev, "d2h")
        if window <= 0 or exposed / window < rule.param("min_exposed_share"):
            continue
        cp = f.copies.loc[dev] if dev in f.copies.index else None
        seconds = float(cp.seconds) if cp is not None else 0.0
        nbytes = float(cp.bytes) if cp is not None else 0.0
        rows.append({"device": dev, "exposed_s": exposed, "step_s": window, "share": exposed / window,
                     "copy_s": seconds, "bytes_per_step": nbytes,
                     "gbps": nbytes / seconds / 1e9 if seconds > 0 else None,
                     "h2d_exposed_s": f.wall_s(dev, "h2d"), "d2h_exposed_s": f.wall_s(dev, "d2h")})
    if not rows:
        return None
    rows.sort(key=lambda r: -r["share"])
    r = rows[0]
    rate = fmt_rate(r["gbps"] * 1e9) if r["gbps"] is not None else "–"
    msg = (f"host↔device copies not hidden behind other work on {r['device']} are {fmt_percent(r['share'])} "
           f"of its {fmt_seconds(r['step_s'])} step ({fmt_seconds(r['exposed_s'])}: host→device "
           f"{fmt_seconds(r['h2d_exposed_s'])}, device→host {fmt_seconds(r['d2h_exposed_s'])}); "
           f"{fmt_bytes(r['bytes_per_step'])} per step at {rate} achieved")
    if len(rows) > 1:
        msg += "; also " + ", ".join(f"{x['device']} {fmt_percent(x['share'])}" for x in rows[1:])
    slow = r["gbps"] is not None and r["gbps"] < rule.param("slow_gbps")
    suggestion = ("Suggestion: overlap the copies with compute and move fewer bytes: "
                  "`.prefetch(tf.data.AUTOTUNE)` (with a distribution strategy, "
                  "`strategy.experimental_distribute_dataset` prefetches to the devices), keep tensors on "
                  "the device between steps instead of fetching them back (`.numpy()` in the loop)")
    suggestion += (f"; at under {rule.param('slow_gbps'):g} GB/s the copies are small or from pageable "
                   "memory: batch them into fewer, larger transfers." if slow else ".")
    return Finding(rule.name, rule.tier(r["share"]), f.name, msg, suggestion,
                   {**r, "others": rows[1:]}, (), tuple(x["device"] for x in rows))


def check_accelerator_imbalance(rule: Rule, f: TraceFacts) -> Finding | None:
    d = f.devices
    busy = {dev: float(d.at[dev, "busy_s"]) for dev in f.working if dev in d.index}
    if len(busy) < 2:
        return None
    slow = max(busy, key=busy.get)
    fast = min(busy, key=busy.get)
    if busy[fast] <= 0:
        return None
    ratio = busy[slow] / busy[fast]
    if ratio < rule.param("min_busy_ratio"):
        return None
    compute = {dev: f.wall_s(dev, "compute") for dev in busy}
    msg = (f"{slow} is busy {fmt_seconds(busy[slow])} per step, {fast} {fmt_seconds(busy[fast])} "
           f"({ratio:.2f}×); in a synchronous step the slowest accelerator, {slow}, sets the step and the "
           f"others wait up to {fmt_seconds(busy[slow] - busy[fast])} for it")
    suggestion = ("Suggestion: give every accelerator the same work: an even share of the batch per "
                  "replica, the variable update and gradient reduction spread over all devices rather "
                  f"than on {slow}; if the work is equal, {slow} itself is slower (clocks, PCIe slot, "
                  "another process on it: check `nvidia-smi`).")
    evidence = {"busy_s": busy, "compute_s": compute, "slowest": slow, "fastest": fast, "ratio": ratio}
    return Finding(rule.name, rule.tier(ratio), f.name, msg, suggestion, evidence, (),
                   tuple(sorted(busy, key=lambda x: -busy[x])))


def check_collective_bound(rule: Rule, f: TraceFacts) -> Finding | None:
    d = f.devices
    rows = []
    for dev, union in f.collective_union_s.items():
        window = float(d.at[dev, "window_s"]) if dev in d.index else 0.0
        if window <= 0 or union / window < rule.param("min_collective_share"):
            continue
        exposed = f.wall_s(dev, "collective")
        overlap = max(0.0, union - exposed)
        rows.append({"device": dev, "collective_s": union, "step_s": window, "share": union / window,
                     "exposed_s": exposed, "overlap_s": overlap, "overlap_share": overlap / union})
    if not rows:
        return None
    rows.sort(key=lambda r: -r["share"])
    r = rows[0]
    msg = (f"{r['device']} spends {fmt_percent(r['share'])} of its {fmt_seconds(r['step_s'])} step in "
           f"collectives ({fmt_seconds(r['collective_s'])}); {fmt_percent(r['overlap_share'])} of that "
           f"overlaps compute, {fmt_seconds(r['exposed_s'])} per step does not")
    if len(rows) > 1:
        msg += "; also " + ", ".join(f"{x['device']} {fmt_percent(x['share'])}" for x in rows[1:])
    if r["overlap_share"] < rule.param("min_overlap_share"):
        suggestion = ("Suggestion: overlap the all-reduce with the backward pass and send fewer, larger "
                      "messages: pack gradients (`tf.distribute.NcclAllReduce(num_packs=...)`, "
                      "`tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...)`), and use a "
                      "larger batch per replica so each byte sent buys more compute.")
    else:
        suggestion = ("Suggestion: the communication already overlaps compute; send fewer bytes (16-bit "
                      "gradients with mixed precision) or use a larger batch per replica so each byte sent "
                      "buys more compute.")
    return Finding(rule.name, rule.tier(r["share"]), f.name, msg, suggestion,
                   {**r, "others": rows[1:]}, (), tuple(x["device"] for x in rows))


# Kernel names that tell their precision.  TF32 tensor-core kernels (``tf32``) read and write
# float32: 32-bit.  ``s884``/``s1688``/``s16816`` are tensor-core GEMMs with 16-bit inputs and
# float32 accumulation (``volta_fp16_s884gemm_fp16_...``), ``h884``/``h1688`` the same accumulating
# in 16 bits: both count as 16-bit compute.
_TF32 = re.compile(r"tf32", re.IGNORECASE)
_16 = re.compile(r"hgemm|hcudnn|h884|h1688|h16816|s884|s1688|s16816|fp16|bf16|float16|f16|half|hmma",
                 re.IGNORECASE)
_32 = re.compile(r"sgemm|scudnn|fp32|f32|float", re.IGNORECASE)


def kernel_precision(name: str) -> str:
    """``"16"``, ``"32"`` or ``""`` (the name does not tell) for one kernel name."""
    if _TF32.search(name):
        return "32"
    if _16.search(name):
        return "16"
    if _32.search(name):
        return "32"
    return ""


@dataclass(frozen=True)
class Precision:
    compute_s: float
    by_bits: dict[str, float]  # "16" / "32" / "" -> seconds of compute kernels
    examples: dict[str, list[str]]  # a few kernel names of each kind (most time first)

    @property
    def known_share(self) -> float:
        return (self.by_bits["16"] + self.by_bits["32"]) / self.compute_s if self.compute_s else 0.0


def precision_of(f: TraceFacts) -> Precision:
    k = f.kernels[~f.kernels.collective]
    per_name = k.groupby("name", sort=False).dur_ps.sum().sort_values(ascending=False, kind="stable")
    text = f.analysis.trace.columns.text
    bits = np.array([kernel_precision(text(int(code))) for code in per_name.index.tolist()], dtype=object)
    seconds = per_name.groupby(bits).sum() / _PS
    by_bits = {b: float(seconds.get(b, 0.0)) for b in ("16", "32", "")}
    examples = {b: [text(int(n)) for n in per_name.index[bits == b][:3]] for b in ("16", "32")}
    return Precision(float(per_name.sum()) / _PS, by_bits, examples)


def check_precision(rule: Rule, f: TraceFacts) -> Finding | None:
    p = precision_of(f)
    known = p.by_bits["16"] + p.by_bits["32"]
    if known <= 0:
        return None
    fp32 = p.by_bits["32"] / known
    if fp32 < rule.param("min_fp32_share"):
        return None
    examples = ", ".join(_short(n) for n in p.examples["32"])
    msg = (f"{fmt_percent(fp32)} of the compute time whose kernel names tell their precision ran in 32-bit "
           f"kernels ({fmt_seconds(p.by_bits['32'])}, e.g. {examples}), "
           f"{fmt_percent(1 - fp32)} in 16-bit; the names tell for {fmt_percent(p.known_share)} of "
           f"{fmt_seconds(p.compute_s)} of kernel time")
    suggestion = ("Suggestion: on GPUs with tensor cores (Volta and later) train in mixed precision: "
                  "`tf.keras.mixed_precision.set_global_policy('mixed_float16')` (or 'mixed_bfloat16' on "
                  "Ampere and later), with loss scaling for a custom loop "
                  "(`tf.keras.mixed_precision.LossScaleOptimizer`); matrix multiplies and convolutions then "
                  "run in 16-bit.")
    evidence = {"fp32_share_of_known": fp32, "seconds": {"16": p.by_bits["16"], "32": p.by_bits["32"],
                                                          "unknown": p.by_bits[""]},
                "compute_s": p.compute_s, "known_share": p.known_share, "examples": p.examples}
    return Finding(rule.name, rule.severity, f.name, msg, suggestion, evidence, (), f.working)


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def check_straggler(rule: Rule, f: TraceFacts) -> Finding | None:
    tasks = stepping_tasks(task_steps(f.analysis.trace), None)
    return straggler_finding(rule, tasks, f.name, loopback=False)


TRACE_RULES: tuple[Rule, ...] = (
    Rule("idle_accelerators", "accelerators in the trace that ran no kernel",
         severity=MEDIUM, high_at=0.5, check=check_idle_accelerators,
         params={"min_idle_accelerators": 1}, primary="min_idle_accelerators", needs=(ACCELERATOR_PLANES,)),
    Rule("host_bound", "an accelerator idles, waiting on the host",
         severity=MEDIUM, high_at=0.7, check=check_host_bound,
         params={"min_idle_share": 0.40, "min_host_wait_share": 0.50, "untraced_share": 0.50},
         primary="min_idle_share",
         needs=(ACCELERATOR_PLANES, KERNELS, LAUNCHES)),
    # Holistic Trace Analysis's cut-offs (hta/trace_analysis.py, TraceAnalysis.get_cuda_kernel_launch_stats:
    # runtime_cutoff=50 us for CUDA runtime (launch) calls, launch_delay_cutoff=100 us for the delay from
    # a launch call's end to its kernel's start).  A kernel shorter than 50 us is shorter than a slow
    # launch call: "short" here.  Launch bound means each kernel runs as soon as it is launched and the
    # device waits for the next launch: where the median launch delay exceeds 100 us the kernels queue
    # instead (a backlog on the device), and the rule does not fire; the share of HTA's outliers
    # (delay over 100 us) is in the evidence.
    Rule("launch_bound", "many short kernels with gaps between them: launch overhead sets the pace",
         severity=MEDIUM, high_at=0.5, check=check_launch_bound,
         params={"short_kernel_s": 50e-6, "launch_delay_cutoff_s": 100e-6, "min_kernels_per_step": 20,
                 "min_gap_share": 0.20},
         primary="short_kernel_s", needs=(ACCELERATOR_PLANES, KERNELS)),
    Rule("exposed_copies", "host↔device copies not hidden behind compute are a large share of the step",
         severity=MEDIUM, high_at=0.40, check=check_exposed_copies,
         params={"min_exposed_share": 0.20, "slow_gbps": 1.0}, primary="min_exposed_share",
         needs=(ACCELERATOR_PLANES,)),
    Rule("accelerator_imbalance", "accelerators are busy for different times; the slowest sets the step",
         severity=LOW, high_at=2.0, check=check_accelerator_imbalance,
         params={"min_busy_ratio": 1.25}, primary="min_busy_ratio",
         needs=(ACCELERATOR_PLANES, TWO_ACCELERATORS)),
    Rule("collective_bound", "a large share of the step is spent in collectives",
         severity=MEDIUM, high_at=0.40, check=check_collective_bound,
         params={"min_collective_share": 0.20, "min_overlap_share": 0.50}, primary="min_collective_share",
         needs=(ACCELERATOR_PLANES, KERNELS)),
    Rule("precision", "compute runs mostly in 32-bit kernels",
         severity=LOW, check=check_precision,
         params={"min_fp32_share": 0.80, "min_known_share": 0.25}, primary="min_fp32_share",
         needs=(ACCELERATOR_PLANES, KERNELS, PRECISION_NAMES)),
    Rule("straggler", "one task reaches the all-reduce late, step after step, and the others wait for it",
         severity=MEDIUM, high_at=0.25, check=check_straggler,
         params=dict(STRAGGLER_PARAMS), primary="min_late_share", needs=(TASKS,)),
    *MEMORY_RULES,
)


# ------------------------------------------------------------------------------------------
# Running the rules


def unmet(rule: Rule, f: TraceFacts) -> str | None:
    """Why ``rule`` could not be evaluated on this trace (None: it can)."""
    if (why := memory_unmet(rule, f)) is not None:
        return why
    if ACCELERATOR_PLANES in rule.needs and not f.accelerators:
        why = "the trace has no accelerator plane (a CPU-only capture"
        if f.analysis.kind == "logical-cpu":
            why += "; its accelerators are logical CPU devices, whose time is the host's"
        return why + ")"
    if KERNELS in rule.needs and not f.working:
        return "no accelerator ran a kernel in the analysed steps"
    if TWO_ACCELERATORS in rule.needs and len(f.working) < 2:
        return f"only {len(f.working)} accelerator ran kernels ({', '.join(f.working) or 'none'})"
    if LAUNCHES in rule.needs and not (f.kernels.launch_start_ps >= 0).any():
        return ("no kernel is joined to its host launch (no correlation_id on the launches): host wait "
                "cannot be told from other idle time")
    if PRECISION_NAMES in rule.needs:
        p = precision_of(f)
        if p.compute_s <= 0:
            return "no compute kernel ran on an accelerator (collectives only)"
        if p.known_share < rule.param("min_known_share"):
            return (f"the kernel names tell the precision of only {fmt_percent(p.known_share)} of "
                    f"{fmt_seconds(p.compute_s)} of compute time (fused or generic kernels do not), under "
                    f"{fmt_percent(rule.param('min_known_share'))}")
    if TASKS in rule.needs:
        tasks = stepping_tasks(task_steps(f.analysis.trace), None)
        if len(tasks) < 2:
            return ("fewer than two tasks ran steps (a single-host trace; a multi-host logdir holds one "
                    "trace per task)")
    return None


@dataclass(frozen=True)
class TraceEvaluation:
    findings: tuple[Finding, ...]
    rules: tuple[dict[str, Any], ...]  # each rule's to_json() with evaluated / why_not

    def to_json(self) -> dict[str, Any]:
        return {"findings": [{**x.to_json(), "devices": list(x.devices)} for x in self.findings],
                "rules": [dict(r) for r in self.rules]}


def evaluate_trace(analysis: Analysis, rules: Sequence[Rule] = TRACE_RULES) -> TraceEvaluation:
    """Every trace rule on ``analysis``; findings most severe first, and each rule's status."""
    f = TraceFacts(analysis)
    findings: list[Finding] = []
    status = []
    for rule in rules:
        why = unmet(rule, f)
        doc = {**rule.to_json(), "evaluated": why is None, "why_not": why}
        status.append(doc)
        if why is None:
            found = rule.check(rule, f)
            if found is not None:
                findings.append(found)
    return TraceEvaluation(tuple(by_severity(findings)), tuple(status))
