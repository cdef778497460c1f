"""Rules on which accelerators work, and how evenly: ``idle_accelerators``, ``accelerator_imbalance``."""

from __future__ import annotations

from tfprof_towers.advice.findings import Finding, Rule
from tfprof_towers.advice.trace_rules.suggestions import suggestion
from tfprof_towers.trace.facts import TraceFacts
from tfprof_towers.vocab.fmt import fmt_seconds


def check_idle_accelerators(rule: Rule, f: TraceFacts) -> Finding | None:
    idle = list(f.idle_accelerators)
    if len(idle) < rule.param("min_idle_accelerators"):
        return None
    share = len(idle) / len(f.accelerators)
    msg = (f"{len(idle)} of the {len(f.accelerators)} accelerators in the trace ran no kernel in the "
           f"analysed steps: {', '.join(idle)}"
           + (f"; only {', '.join(f.working)} did" if f.working else "; none ran a kernel"))
    text = suggestion("idle_accelerators", f.producer)
    evidence = {"idle": idle, "accelerators": list(f.accelerators), "working": list(f.working),
                "idle_share": share}
    return Finding(rule.name, rule.tier(share), f.name, msg, text, evidence, (), tuple(idle))



def check_accelerator_imbalance(rule: Rule, f: TraceFacts) -> Finding | None:
    d = f.devices
    busy = {dev: d[dev].busy_s for dev in f.working if dev in d}
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
    text = suggestion("accelerator_imbalance", f.producer, slow=slow)
    evidence = {"busy_s": busy, "compute_s": compute, "slowest": slow, "fastest": fast, "ratio": ratio}
    return Finding(rule.name, rule.tier(ratio), f.name, msg, text, evidence, (),
                   tuple(sorted(busy, key=lambda x: -busy[x])))

