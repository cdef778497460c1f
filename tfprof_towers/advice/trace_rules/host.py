"""Rules on the host's pace: ``host_bound`` (the device waits for the host) and ``launch_bound`` (many
short kernels, launch overhead sets the pace)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfprof_towers.advice.findings import Finding, Rule
from tfprof_towers.advice.trace_rules.suggestions import suggestion
from tfprof_towers.trace.facts import _PS, HOST_ACTIVITY, TraceFacts, host_waiting
from tfprof_towers.vocab.fmt import fmt_count, fmt_percent, fmt_seconds, fmt_some


def check_host_bound(rule: Rule, f: TraceFacts) -> Finding | None:
    rows = host_waiting(f, rule.param("min_idle_share"), rule.param("min_host_wait_share"))
    if not rows:
        return None
    dev, idle_share, wait_share, idle, wait, step = rows[0]
    activity = f.host_activity[dev]  # scanned where its host was analysed (HostFacts.of)
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
        msg += "; also " + fmt_some([f"{r[0]} idle {fmt_percent(r[1])}" for r in rows[1:]])
    ops = activity["heaviest_ops"]
    text = _host_bound_suggestion(f, main, ops)
    if main == "host_compute" and ops:
        msg += "; heaviest host ops: " + ", ".join(f"{o['op']} ({o['op_type']}) {fmt_seconds(o['seconds'])}"
                                                  for o in ops)
    evidence = {"device": dev, "step_s": step, "idle_s": idle, "idle_share": idle_share,
                "host_wait_s": wait, "host_wait_share_of_idle": wait_share,
                "host_in_gaps_s": cats, "host_busy_in_gaps_s": activity["any_s"],
                "gaps_s": activity["gap_s"], "main_activity": main, "heaviest_ops": ops,
                "others": {r[0]: {"idle_share": r[1], "host_wait_share_of_idle": r[2]} for r in rows[1:]}}
    return Finding(rule.name, rule.tier(idle_share), f.name, msg, text, evidence, (),
                   tuple(r[0] for r in rows))


def _host_bound_suggestion(f: TraceFacts, main: str | None, ops: Sequence[dict[str, Any]]) -> str:
    """The suggestion for what the host did in the gaps (``main``), in the producer's words."""
    if main in ("untraced", "input"):
        return suggestion(f"host_bound.{main}", f.producer)
    if main == "host_compute":
        which = ", ".join(f"{o['op']} ({o['op_type']})" for o in ops) or "ops on the host"
        return suggestion("host_bound.host_compute", f.producer, ops=which)
    return suggestion("host_bound.launch", f.producer)


def check_launch_bound(rule: Rule, f: TraceFacts) -> Finding | None:
    short_ps = rule.param("short_kernel_s") * _PS
    rows = []
    for dev, k in f.launch.items():  # each accelerator's kernels, scanned where its host was analysed
        if dev not in f.devices:
            continue
        steps = f.per_step(dev)
        per_step = k["kernels"] / steps
        window = f.devices[dev].window_s
        gaps = f.wall_s(dev, "host_wait") + f.wall_s(dev, "kernel_wait")
        gap_share = gaps / window if window > 0 else 0.0
        if (k["median_ps"] >= short_ps or per_step < rule.param("min_kernels_per_step")
                or gap_share < rule.param("min_gap_share")):
            continue
        delay = k["median_delay_ps"]
        if delay is not None and delay > rule.param("launch_delay_cutoff_s") * _PS:
            continue  # kernels queue after their launch: the device has a backlog, launches are not the pace
        rows.append({
            "device": dev, "kernels_per_step": per_step, "median_kernel_s": k["median_ps"] / _PS,
            "short_kernel_share": k["short_share"],
            "kernel_s": float(k["kernel_ps"]) / _PS / steps, "step_s": window,
            "kernel_wait_share": f.wall_s(dev, "kernel_wait") / window,
            "host_wait_share": f.wall_s(dev, "host_wait") / window, "gap_share": gap_share,
            "launches_known": k["known"],
            "median_launch_delay_s": None if delay is None else delay / _PS,
            "launch_delay_outlier_share": k["outlier_share"],
            "shorter_than_launch_share": k["shorter_than_launch_share"],
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
        msg += "; also " + fmt_some([f"{x['device']} ({fmt_count(x['kernels_per_step'])} kernels, median "
                                     f"{fmt_seconds(x['median_kernel_s'])})" for x in rows[1:]])
    text = suggestion("launch_bound", f.producer)
    return Finding(rule.name, rule.tier(r["gap_share"]), f.name, msg, text,
                   {**r, "others": rows[1:]}, (), tuple(x["device"] for x in rows))

