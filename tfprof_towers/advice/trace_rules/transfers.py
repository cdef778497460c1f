"""Rules on moving data: ``exposed_copies`` (copies not hidden behind compute) and ``collective_bound``
(time in collectives)."""

from __future__ import annotations

from tfprof_towers.advice.findings import Finding, Rule
from tfprof_towers.advice.trace_rules.suggestions import copies_suggestion, suggestion
from tfprof_towers.trace.facts import TraceFacts
from tfprof_towers.vocab.categories import COPY_CATEGORIES
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_percent, fmt_rate, fmt_seconds, fmt_some
from tfprof_towers.vocab.links import impossible_rate


def check_exposed_copies(rule: Rule, f: TraceFacts) -> Finding | None:
    """Copies of every kind (peer, device-to-device, host-to-device, device-to-host) not hidden behind
    other work on an accelerator, as a share of its step: any of them lengthens the step alike."""
    d = f.devices
    rows = []
    for dev in d:
        window = d[dev].window_s
        kinds = {c: f.wall_s(dev, c) for c in COPY_CATEGORIES}
        exposed = sum(kinds.values())
        if window <= 0 or exposed / window < rule.param("min_exposed_share"):
            continue
        cp = f.copies.get(dev)
        seconds = float(cp.seconds) if cp is not None else 0.0
        nbytes = float(cp.bytes) if cp is not None else 0.0
        gbps = nbytes / seconds / 1e9 if seconds > 0 else None
        impossible = impossible_rate("h2d", gbps)  # byte counts that are not per copy: no rate, no bytes
        between = {k: kinds[k] for k in _BETWEEN_DEVICES if kinds[k] > 0}
        rows.append({"device": dev, "exposed_s": exposed, "step_s": window, "share": exposed / window,
                     "copy_s": seconds, "bytes_per_step": None if impossible else nbytes,
                     "gbps": None if impossible else gbps,
                     **({"impossible_gbps": gbps} if impossible else {}),
                     "h2d_exposed_s": kinds["h2d"], "d2h_exposed_s": kinds["d2h"],
                     **{f"{k}_exposed_s": v for k, v in between.items()}})
    if not rows:
        return None
    rows.sort(key=lambda r: -r["share"])
    r = rows[0]
    rate = fmt_rate(r["gbps"] * 1e9) if r["gbps"] is not None else "–"
    between = [f"{_BETWEEN_DEVICES[k]} {fmt_seconds(r[f'{k}_exposed_s'])}" for k in _BETWEEN_DEVICES
               if f"{k}_exposed_s" in r]
    what = "copies" if between else "host↔device copies"
    msg = (f"{what} not hidden behind other work on {r['device']} are {fmt_percent(r['share'])} "
           f"of its {fmt_seconds(r['step_s'])} step ({fmt_seconds(r['exposed_s'])}: host→device "
           f"{fmt_seconds(r['h2d_exposed_s'])}, device→host {fmt_seconds(r['d2h_exposed_s'])}"
           + "".join(f", {b}" for b in between) + "); "
           + ("host↔device copies: " if between else "")
           + (f"{fmt_bytes(r['bytes_per_step'])} per step at {rate} achieved" if "impossible_gbps" not in r
              else "its copies' byte counts give a rate above any host link's peak (not per copy): no rate "
              "is given"))
    if len(rows) > 1:
        msg += "; also " + fmt_some([f"{x['device']} {fmt_percent(x['share'])}" for x in rows[1:]])
    slow = r["gbps"] is not None and r["gbps"] < rule.param("slow_gbps")
    text = copies_suggestion(f.producer, slow, rule.param("slow_gbps"))
    if between:
        text += (" Between accelerators: move less data per step from one device to another (compute "
                 "each tensor on the device that consumes it; keep the variables next to the compute).")
    return Finding(rule.name, rule.tier(r["share"]), f.name, msg, text,
                   {**r, "others": rows[1:]}, (), tuple(x["device"] for x in rows))


#: The copies between accelerators, in the message's words.
_BETWEEN_DEVICES = {"d2d": "device→device", "p2p": "peer"}


def check_collective_bound(rule: Rule, f: TraceFacts) -> Finding | None:
    d = f.devices
    rows = []
    for dev, union in f.collective_union_s.items():
        window = d[dev].window_s if dev in d else 0.0
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
        msg += "; also " + fmt_some([f"{x['device']} {fmt_percent(x['share'])}" for x in rows[1:]])
    overlapped = r["overlap_share"] >= rule.param("min_overlap_share")
    text = suggestion("collective_bound.overlapped" if overlapped else "collective_bound.overlap", f.producer)
    return Finding(rule.name, rule.tier(r["share"]), f.name, msg, text,
                   {**r, "others": rows[1:]}, (), tuple(x["device"] for x in rows))


# Kernel names that tell their precision.  TF32 tensor-core kernels (``tf32``) read and write
