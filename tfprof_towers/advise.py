"""Findings and the recommendation: small rules over measured facts, nothing without evidence.

Each rule is a :class:`Rule`: a name, a threshold, the tier it reports at and
the function that checks one variant's :class:`Facts`.  A rule returns a
:class:`Finding` (what was measured, one concrete change -- naming the source
line where one is known -- and the numbers behind it) or ``None``.  Rules that
need real accelerator timings (copy time, idle time, scaling) are *not
evaluated* on logical-CPU runs, where every "device" shares the same cores: the
report says so instead of inventing numbers.

The recommendation ranks successful variants by median un-profiled step time
(the profiler's overhead never decides), and prefers a simpler variant whose
p10–p90 step-time range overlaps the fastest one's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .audit import LINK_MODELS, short_source
from .categories import COPY_CATEGORIES
from .config import BASELINE_VARIANT
from .device_names import HOST_THREADS
from .render.filters import fmt_bytes, fmt_count, fmt_percent, fmt_ratio, fmt_seconds

HIGH, MEDIUM, LOW = "high", "medium", "low"
SEVERITIES: tuple[str, ...] = (HIGH, MEDIUM, LOW)

#: How much machinery a built-in variant adds: the recommendation prefers the lower one
#: when two are within noise.  Variant files count as 2; the buggy variant is never preferred.
SIMPLICITY: dict[str, int] = {
    "single": 0, "towers_accel0_vars": 1, "towers_host_vars": 1, "replicated": 2, "towers_bug": 9,
}
USER_VARIANT_SIMPLICITY = 2


@dataclass(frozen=True)
class Facts:
    """Everything the rules may look at for one variant (plain dicts from the summary)."""

    entry: Mapping[str, Any]  # summary["variants"][i]
    audit: Mapping[str, Any] | None
    breakdown: Mapping[str, Any] | None
    topology: Mapping[str, Any]
    baseline: Mapping[str, Any] | None  # the `single` entry, when it succeeded

    @property
    def name(self) -> str:
        return str(self.entry["name"])

    @property
    def measured_timings(self) -> bool:
        """True where device timings mean what they say (real accelerators, a trace analysed)."""
        return self.topology.get("kind") == "gpu" and bool(self.breakdown and self.breakdown.get("devices"))

    @property
    def accelerators_used(self) -> list[str]:
        if not self.audit:
            return []
        return [d["device"] for d in self.audit["devices"] if d["role"] == "accelerator" and d["ops"] > 0]


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    variant: str
    message: str
    suggestion: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule, "severity": self.severity, "variant": self.variant,
            "message": self.message, "suggestion": self.suggestion,
            "evidence": dict(self.evidence), "sources": list(self.sources),
        }


Check = Callable[["Rule", Facts], "Finding | None"]


@dataclass(frozen=True)
class Rule:
    """A named check with its threshold; ``high_at`` (when set) raises the tier to high."""

    name: str
    title: str
    threshold: float
    severity: str
    check: Check
    high_at: float | None = None
    needs_measured_timings: bool = False

    def tier(self, value: float, higher_is_worse: bool = True) -> str:
        if self.high_at is None:
            return self.severity
        worse = value >= self.high_at if higher_is_worse else value <= self.high_at
        return HIGH if worse else self.severity

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.name, "title": self.title, "threshold": self.threshold,
            "severity": self.severity, "high_at": self.high_at,
            "needs_measured_timings": self.needs_measured_timings,
        }


# ------------------------------------------------------------------------------------------
# The rules


def check_host_compute(rule: Rule, f: Facts) -> Finding | None:
    """Heavy compute on the host while accelerators were available."""
    a = f.audit
    if not a or not a["accelerators"] or not a["host_compute"]:
        return None
    share = a["host_flops_share"] or 0.0
    if share < rule.threshold:
        return None
    groups = a["host_compute"]
    host_flops = sum(g["flops_per_step"] for g in groups)
    sources = _unique(g["sources"][0] for g in groups if g["sources"])
    scopes = _unique(g["scope"] for g in groups)
    measured = a.get("host_compute_share")
    msg = (
        f"{fmt_percent(share)} of estimated FLOPs ({fmt_count(host_flops)} of "
        f"{fmt_count(a['total_flops_per_step'])} per step) ran on the host {a['host']} while "
        f"{len(a['accelerators'])} accelerator(s) were available"
    )
    if measured is not None:
        msg += f"; measured: {fmt_percent(measured)} of compute time"
    msg += f"; heavy ops in {_list(scopes)}"
    if sources:
        dev = _source_device(groups[0])
        msg += f", placed there by `with tf.device({dev!r})` at {_list(short_source(s) for s in sources)}"
    suggestion = (
        f"Suggestion: remove the `with tf.device(...)` at {_list(sources)} so that the "
        f"{'tower' if len(scopes) > 1 else 'scope'}'s forward pass runs on its accelerator."
        if sources else
        "Suggestion: wrap the model's forward pass in `with tf.device(accelerator)`; nothing in the "
        "graph pins it, so TensorFlow's placer kept it on the host."
    )
    evidence = {
        "host": a["host"], "host_flops_per_step": host_flops,
        "total_flops_per_step": a["total_flops_per_step"], "host_flops_share": share,
        "host_compute_time_share": measured, "accelerators": len(a["accelerators"]),
        "groups": [
            {"scope": g["scope"], "ops": g["ops"], "flops_per_step": g["flops_per_step"],
             "sources": g["sources"]}
            for g in groups
        ],
    }
    return Finding(rule.name, rule.tier(share), f.name, msg, suggestion, evidence, tuple(sources))


def check_exposed_copies(rule: Rule, f: Facts) -> Finding | None:
    """Exposed (not overlapped with compute) copy time is a large share of the step."""
    if not f.measured_timings:
        return None
    worst = None
    for dev in f.accelerators_used:
        d = (f.breakdown["devices"] or {}).get(dev) or {}
        step = d.get("window_s") or 0.0
        if step <= 0:
            continue
        exposed = sum((d.get("wall") or {}).get(c, 0.0) for c in COPY_CATEGORIES)
        if worst is None or exposed / step > worst[1]:
            worst = (dev, exposed / step, exposed, step)
    if worst is None or worst[1] < rule.threshold:
        return None
    dev, share, exposed, step = worst
    links = [ln for ln in (f.audit or {}).get("links", ()) if ln["kind"] != "other"]
    bus_bytes = sum(ln["bytes_per_step"] for ln in links)
    msg = (
        f"exposed copies are {fmt_percent(share)} of the step on {dev}: {fmt_seconds(exposed)} of "
        f"{fmt_seconds(step)}; {fmt_bytes(bus_bytes)}/step cross between devices"
    )
    biggest = _largest_tensor(links)
    suggestion = "Suggestion: move less data per step between devices"
    if biggest:
        suggestion += (
            f"; the largest tensor crossing is {biggest['tensor']} ({fmt_bytes(biggest['bytes'])}, "
            f"{biggest['src']} → {biggest['dst']}): compute it on the device that consumes it"
        )
    suggestion += "."
    evidence = {"device": dev, "exposed_copy_s": exposed, "step_s": step, "share": share,
                "bytes_per_step": bus_bytes}
    return Finding(rule.name, rule.tier(share), f.name, msg, suggestion, evidence, ())


def check_accelerator_idle(rule: Rule, f: Facts) -> Finding | None:
    """Accelerators idle a large share of the step while the host computes."""
    if not f.measured_timings or not f.audit:
        return None
    devs = f.breakdown["devices"] or {}
    idle = {}
    for dev in f.accelerators_used:
        d = devs.get(dev) or {}
        step = d.get("window_s") or 0.0
        if step > 0:
            idle[dev] = (d.get("wall") or {}).get("idle", 0.0) / step
    if not idle:
        return None
    host_compute = sum(
        float(((devs.get(h) or {}).get("total") or {}).get("host_compute", {}).get("seconds") or 0.0)
        for h in (f.audit["host"], HOST_THREADS)
    )
    host_step = max((devs.get(d) or {}).get("window_s") or 0.0 for d in idle)
    if host_step <= 0:
        return None
    mean_idle = sum(idle.values()) / len(idle)
    host_busy = host_compute / host_step
    if mean_idle < rule.threshold or host_busy < 0.2:
        return None
    msg = (
        f"the accelerators are idle {fmt_percent(mean_idle)} of the step on average "
        f"({', '.join(f'{d} {fmt_percent(v)}' for d, v in idle.items())}) while the host computes "
        f"{fmt_seconds(host_compute)} per step ({fmt_percent(host_busy)} of it)"
    )
    groups = f.audit.get("host_compute") or []
    sources = _unique(g["sources"][0] for g in groups if g["sources"])
    suggestion = (
        f"Suggestion: move the host compute placed at {_list(sources)} to the accelerators."
        if sources else
        "Suggestion: find what the host computes each step (timeline below) and move it to the "
        "accelerators or overlap it with the previous step (tf.data prefetch)."
    )
    evidence = {"idle_share": idle, "mean_idle_share": mean_idle, "host_compute_s": host_compute,
                "host_busy_share": host_busy}
    return Finding(rule.name, rule.tier(mean_idle), f.name, msg, suggestion, evidence, tuple(sources))


def check_unbalanced_towers(rule: Rule, f: Facts) -> Finding | None:
    """One accelerator gets much more work than another (measured time on GPUs, else FLOPs)."""
    if not f.audit:
        return None
    rows = [d for d in f.audit["devices"] if d["device"] in f.accelerators_used]
    if len(rows) < 2:
        return None
    measured = f.measured_timings and all(d["compute_s"] is not None for d in rows)
    key, what = ("compute_s", "measured compute time") if measured else ("flops_per_step", "estimated FLOPs")
    values = {d["device"]: float(d[key] or 0.0) for d in rows}
    hi = max(values, key=values.get)
    lo = min(values, key=values.get)
    if values[hi] <= 0:
        return None
    ratio = values[hi] / values[lo] if values[lo] > 0 else float("inf")
    if ratio < rule.threshold:
        return None
    fmt = fmt_seconds if measured else fmt_count
    msg = (
        f"towers are unbalanced by {what}: {hi} has {fmt(values[hi])} per step, {lo} {fmt(values[lo])} "
        f"({'no work' if values[lo] == 0 else fmt_ratio(ratio)})"
    )
    suggestion = (
        "Suggestion: give every accelerator an equal share of the batch and of the shared work "
        "(the variable update and gradient reduction can be spread across devices, as `replicated` does)."
    )
    evidence = {"metric": key, "per_accelerator": values, "ratio": None if lo == hi else ratio}
    return Finding(rule.name, rule.tier(min(ratio, 1e9)), f.name, msg, suggestion, evidence, ())


def check_poor_scaling(rule: Rule, f: Facts) -> Finding | None:
    """Speedup over `single` divided by the number of accelerators is low."""
    if f.topology.get("kind") != "gpu" or f.name == BASELINE_VARIANT or not f.baseline:
        return None
    eff, speedup = f.entry.get("scaling_efficiency"), f.entry.get("speedup_vs_single")
    n = len(f.accelerators_used) or len(f.topology.get("accelerators") or ())
    if eff is None or speedup is None or n < 2 or eff >= rule.threshold:
        return None
    msg = (
        f"speedup over single is {fmt_ratio(speedup)} on {n} accelerators: scaling efficiency "
        f"{fmt_percent(eff)} (median step {fmt_seconds(f.entry['step_time_s']['median'])} vs "
        f"{fmt_seconds(f.baseline['step_time_s']['median'])})"
    )
    suggestion = (
        "Suggestion: the other findings for this variant say where the time goes; on PCIe-only "
        "machines keep variables and the update next to the compute (replicated) so only gradients cross."
    )
    evidence = {"speedup_vs_single": speedup, "accelerators": n, "scaling_efficiency": eff}
    return Finding(rule.name, rule.tier(eff, higher_is_worse=False), f.name, msg, suggestion, evidence, ())


def check_variables_remote(rule: Rule, f: Facts) -> Finding | None:
    """Variables on a device that makes every tower pull them across the bus each step."""
    a = f.audit
    if not a:
        return None
    pulls = a["variable_pulls"]
    used = f.accelerators_used
    pulling = [d for d in used if pulls["by_accelerator"].get(d, 0) > 0]
    if len(used) < rule.threshold or len(pulling) < len(used):
        return None
    x16 = LINK_MODELS[0]
    modeled = pulls["bytes_per_step"] / x16.bytes_per_s
    step = f.entry["step_time_s"].get("median")
    modeled_share = modeled / step if (step and f.topology.get("kind") == "gpu") else None
    msg = (
        f"every tower ({len(pulling)} of {len(used)}) pulls the variables across devices each step: "
        f"{fmt_bytes(pulls['bytes_per_step'])}/step in {pulls['tensors']} tensors "
        f"from {_list(pulls['from'])}; "
        f"modeled at {x16.name}: {fmt_seconds(modeled)} per step"
    )
    sources = _variable_sources(f)
    suggestion = (
        "Suggestion: keep a copy of the variables on each accelerator and all-reduce the gradients "
        "(the `replicated` variant, MirroredStrategy)"
        + (f" instead of the scope at {_list(sources)}" if sources else "") + "."
    )
    evidence = {"bytes_per_step": pulls["bytes_per_step"], "tensors": pulls["tensors"],
                "by_accelerator": pulls["by_accelerator"], "from": pulls["from"],
                "modeled_s": {x16.key: modeled}, "modeled_share_of_step": modeled_share}
    severity = MEDIUM if (modeled_share is not None and modeled_share >= 0.1) else rule.severity
    return Finding(rule.name, severity, f.name, msg, suggestion, evidence, tuple(sources))


RULES: tuple[Rule, ...] = (
    Rule("host_compute", "heavy compute on the host while accelerators are available",
         threshold=0.10, severity=MEDIUM, high_at=0.25, check=check_host_compute),
    Rule("exposed_copies", "exposed copy time is a large share of the step",
         threshold=0.20, severity=MEDIUM, high_at=0.40, check=check_exposed_copies,
         needs_measured_timings=True),
    Rule("accelerator_idle", "accelerators idle, waiting on the host",
         threshold=0.40, severity=MEDIUM, high_at=0.70, check=check_accelerator_idle,
         needs_measured_timings=True),
    Rule("unbalanced_towers", "one accelerator does much more work than another",
         threshold=1.25, severity=LOW, high_at=2.0, check=check_unbalanced_towers),
    Rule("poor_scaling", "speedup over single divided by accelerators is low",
         threshold=0.50, severity=MEDIUM, high_at=0.25, check=check_poor_scaling,
         needs_measured_timings=True),
    Rule("variables_remote", "every tower pulls the variables across the bus",
         threshold=2, severity=LOW, check=check_variables_remote),
)


def _variable_sources(f: Facts) -> list[str]:
    """The innermost ``tf.device`` lines that placed this variant's variables."""
    return list(((f.audit or {}).get("variable_pulls") or {}).get("sources") or [])


def _unique(items) -> list:
    out: list = []
    for x in items:
        if x not in out:
            out.append(x)
    return out


def _list(items) -> str:
    items = [str(i) for i in items]
    return ", ".join(items) if items else "–"


def _source_device(group: Mapping[str, Any]) -> str:
    devs = group.get("source_devices") or []
    return devs[0] if devs else group.get("device", "")


def _largest_tensor(links: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    best = None
    for ln in links:
        for t in ln.get("largest_tensors") or ():
            if best is None or t["bytes"] > best["bytes"]:
                best = {**t, "src": ln["src"], "dst": ln["dst"]}
    return best


# ------------------------------------------------------------------------------------------
# Running the rules, and the recommendation


def facts_for(summary: Mapping[str, Any]) -> list[Facts]:
    topology = summary.get("topology") or {}
    entries = summary.get("variants") or []
    baseline = next((e for e in entries if e["name"] == BASELINE_VARIANT and e["status"] == "ok"), None)
    return [
        Facts(e, e.get("audit"), e.get("breakdown"), topology, baseline)
        for e in entries if e["status"] == "ok"
    ]


def run_rules(summary: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule over every successful variant; findings by severity, then variant order."""
    findings = []
    for f in facts_for(summary):
        for rule in rules:
            found = rule.check(rule, f)
            if found is not None:
                findings.append(found)
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda x: order.get(x.severity, len(order)))


def rules_status(summary: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[dict[str, Any]]:
    """Each rule, and whether it could be evaluated on this run (and why not)."""
    kind = (summary.get("topology") or {}).get("kind")
    out = []
    for r in rules:
        doc = r.to_json()
        if r.needs_measured_timings and kind != "gpu":
            doc["evaluated"] = False
            doc["why_not"] = (
                "not measurable here: the accelerators are logical CPU devices sharing the same cores"
                if kind == "logical-cpu" else "needs device timings from real accelerators"
            )
        else:
            doc["evaluated"] = True
            doc["why_not"] = None
        out.append(doc)
    return out


def simplicity(entry: Mapping[str, Any]) -> int:
    return SIMPLICITY.get(entry["name"], USER_VARIANT_SIMPLICITY) if entry.get("source") == "builtin" \
        else USER_VARIANT_SIMPLICITY


def within_noise(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when the p10–p90 ranges of two variants' un-profiled step times overlap."""
    sa, sb = a["step_time_s"], b["step_time_s"]
    if None in (sa.get("p10"), sa.get("p90"), sb.get("p10"), sb.get("p90")):
        return False
    return sa["p10"] <= sb["p90"] and sb["p10"] <= sa["p90"]


def recommend(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The variant to use, with a two-or-three-sentence reason that quotes the numbers."""
    entries = {e["name"]: e for e in summary.get("variants") or []}
    ok = [entries[n] for n in summary.get("ranking") or [] if entries[n]["status"] == "ok"
          and entries[n]["step_time_s"].get("median") is not None]
    if not ok:
        return {"variant": None, "fastest": None, "runner_up": None, "speedup_vs_single": None,
                "median_step_s": None, "within_noise": [], "basis": "median un-profiled step time",
                "reason": "No variant finished successfully, so there is nothing to recommend; "
                          "the failed variants below say why."}
    fastest = ok[0]
    close = [e for e in ok[1:] if within_noise(fastest, e)]
    simpler = sorted((e for e in close if simplicity(e) < simplicity(fastest)),
                     key=lambda e: (simplicity(e), e["step_time_s"]["median"]))
    chosen = simpler[0] if simpler else fastest
    others = [e for e in ok if e is not chosen]
    runner = others[0] if others else None
    reason = [_describe_fastest(fastest)]
    if chosen is not fastest:
        reason.append(
            f"{chosen['name']} is within measured noise ({_med(chosen)}, p10–p90 ranges overlap) and "
            f"simpler, so it is the recommendation."
        )
    elif runner is not None:
        gap = runner["step_time_s"]["median"] / fastest["step_time_s"]["median"]
        noise = " (within measured noise, but not simpler)" if runner in close else ""
        reason.append(f"Runner-up: {runner['name']} at {_med(runner)}, {fmt_ratio(gap)} slower{noise}.")
    if (summary.get("topology") or {}).get("kind") == "logical-cpu":
        reason.append(
            "The accelerators here are logical CPU devices sharing the same cores, so this ranks "
            "CPU cost, not GPU scaling: profile on the GPU machine before changing production code."
        )
    return {
        "variant": chosen["name"],
        "fastest": fastest["name"],
        "runner_up": runner["name"] if runner else None,
        "speedup_vs_single": chosen.get("speedup_vs_single"),
        "median_step_s": chosen["step_time_s"]["median"],
        "within_noise": [e["name"] for e in close],
        "basis": "median un-profiled step time",
        "reason": " ".join(reason),
    }


def _med(e: Mapping[str, Any]) -> str:
    return fmt_seconds(e["step_time_s"]["median"])


def _describe_fastest(e: Mapping[str, Any]) -> str:
    st = e["step_time_s"]
    text = f"{e['name']} has the fastest median un-profiled step: {_med(e)}"
    if st.get("p10") is not None and st.get("p90") is not None:
        text += f" (p10–p90 {fmt_seconds(st['p10'])}–{fmt_seconds(st['p90'])}, {st.get('n')} steps)"
    if e.get("speedup_vs_single") is not None and e["name"] != BASELINE_VARIANT:
        text += f", {fmt_ratio(e['speedup_vs_single'])} the speed of single"
    return text + "."


def advise(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``{"findings": [...], "rules": [...], "recommendation": {...}}`` for a summary with audits."""
    return {
        "findings": [f.to_json() for f in run_rules(summary)],
        "rules": rules_status(summary),
        "recommendation": recommend(summary),
    }
