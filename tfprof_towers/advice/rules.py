"""The run's rules over measured facts (nothing without evidence), and :func:`advise`.

:func:`evaluate` decides, per rule and variant, whether the rule can be
evaluated at all: rules that need real accelerator timings (copy time, idle
time, scaling) are *not evaluated* on logical-CPU runs, where every "device"
shares the same cores, nor on a variant whose trace could not be analysed; the
rules' status in ``summary.json`` says which and why, instead of "evaluated,
nothing found".

The recommendation never names a variant with a high-severity finding of a rule that
``disqualifies`` (heavy compute on the host, changed math) while another variant succeeded.
Reads the summary document (plain mappings); no rendering, no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfprof_towers.advice import cluster as cluster_advice
from tfprof_towers.advice import recommend
from tfprof_towers.advice import strategy as strategy_advice
from tfprof_towers.advice.findings import (
    BASELINE,
    HIGH,
    LOW,
    MATH,
    MEASURED_TIMINGS,
    MEDIUM,
    PEER_PATH,
    PLACEMENT,
    TASKS,
    Facts,
    Finding,
    Rule,
    by_severity,
)
from tfprof_towers.advice.memory_rules import DOES_NOT_FIT, memory_fit_unmet
from tfprof_towers.analysis import samemath
from tfprof_towers.analysis.audit import LinkModel, link_model, short_source
from tfprof_towers.analysis.cluster_view import STRAGGLER_PARAMS
from tfprof_towers.rundir import nonfinite
from tfprof_towers.variants import registry
from tfprof_towers.vocab.categories import COPY_CATEGORIES, IDLE_SPLIT
from tfprof_towers.vocab.device_names import HOST_THREADS
from tfprof_towers.vocab.fmt import (
    fmt_bytes,
    fmt_count,
    fmt_float,
    fmt_percent,
    fmt_ratio,
    fmt_rel,
    fmt_seconds,
)

# ------------------------------------------------------------------------------------------
# The rules


def check_host_compute(rule: Rule, f: Facts) -> Finding | None:
    a = f.audit
    if not a or not a["accelerators"] or not a["host_compute"]:
        return None
    share = a["host_flops_share"] or 0.0
    if share < rule.param("min_host_flops_share"):
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
    dev = _source_device(groups[0]) if sources else ""
    if sources and dev:
        msg += f", placed there by `with tf.device({dev!r})` at {_list(short_source(s) for s in sources)}"
    elif sources:  # TF2: the lines that created the ops (a function's tf.device scopes are the strategy's)
        msg += f", created at {_list(short_source(s) for s in sources)}"
    suggestion = (
        f"Suggestion: remove the `with tf.device(...)` at {_list(sources)} so that the "
        f"{'tower' if len(scopes) > 1 else 'scope'}'s forward pass runs on its accelerator."
        if sources and dev else
        f"Suggestion: run the ops created at {_list(sources)} inside `strategy.run` (replica context), "
        "without a `with tf.device(host)` around them, so that each replica computes on its accelerator."
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
    if worst is None or worst[1] < rule.param("min_exposed_share"):
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
    if mean_idle < rule.param("min_idle_share") or host_busy < rule.param("min_host_busy"):
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
    split = idle_split(devs, list(idle))
    if split:
        evidence["idle_split"] = split
        waits = {k: sum(v[k] for v in split.values()) / len(split) for k in IDLE_SPLIT}
        msg += (f"; of each accelerator's idle time per step, on average {fmt_seconds(waits['host_wait'])} "
                "is host wait (the next kernel was launched only after the previous one ended), "
                f"{fmt_seconds(waits['kernel_wait'])} kernel wait and {fmt_seconds(waits['other'])} other")
    return Finding(rule.name, rule.tier(mean_idle), f.name, msg, suggestion, evidence, tuple(sources))


def idle_split(devices: Mapping[str, Any], names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per accelerator, its idle time split as the trace analysis gives it (where it does)."""
    out = {}
    for dev in names:
        split = (devices.get(dev) or {}).get("idle_split")
        if isinstance(split, Mapping) and all(k in split for k in IDLE_SPLIT):
            out[dev] = {k: float(split[k] or 0.0) for k in IDLE_SPLIT}
    return out


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
    if ratio < rule.param("min_ratio"):
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
    if not f.on_gpus or f.is_baseline or not f.baseline:
        return None
    eff, speedup = f.entry.get("scaling_efficiency"), f.entry.get("speedup_vs_single")
    # the denominator of scaling_efficiency: the accelerators the variant used
    n = (f.entry.get("accelerators_used") or len(f.accelerators_used)
         or len(f.topology.get("accelerators") or ()))
    if eff is None or speedup is None or n < rule.param("min_accelerators"):
        return None
    if eff >= rule.param("max_efficiency"):
        return None
    msg = (
        f"speedup over {f.baseline['name']} is {fmt_ratio(speedup)} on {n} accelerators: scaling efficiency "
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
    a = f.audit
    if not a:
        return None
    if strategy_advice.strategy(f).get("strategy") == strategy_advice.CENTRAL_STORAGE:
        return None  # central_storage_pulls says it, with the strategy's own remedy
    pulls = a["variable_pulls"]
    used = f.accelerators_used
    pulling = [d for d in used if pulls["by_accelerator"].get(d, 0) > 0]
    if len(used) < rule.param("min_accelerators") or len(pulling) < len(used):
        return None
    link = _link(rule, f)
    modeled = pulls["bytes_per_step"] / link.bytes_per_s
    modeled_share = f.share_of_step(modeled)
    msg = (
        f"every tower ({len(pulling)} of {len(used)}) pulls the variables across devices each step: "
        f"{fmt_bytes(pulls['bytes_per_step'])}/step in {pulls['tensors']} tensors "
        f"from {_list(pulls['from'])}; "
        f"modeled at {link.name}: {fmt_seconds(modeled)} per step"
    )
    sources = list(pulls.get("sources") or [])  # the innermost tf.device lines that placed the variables
    tf2 = registry.family_of(f.entry) == registry.TF2_STRATEGY
    remedy = ("`tf.distribute.MirroredStrategy`, the `mirrored` variant" if tf2
              else "the `replicated` variant, MirroredStrategy")
    suggestion = (
        "Suggestion: keep a copy of the variables on each accelerator and all-reduce the gradients "
        f"({remedy})"
        + (f" instead of the scope at {_list(sources)}" if sources else "") + "."
    )
    evidence = {"bytes_per_step": pulls["bytes_per_step"], "tensors": pulls["tensors"],
                "by_accelerator": pulls["by_accelerator"], "from": pulls["from"],
                "modeled_s": {link.key: modeled}, "modeled_share_of_step": modeled_share}
    severity = rule.medium_at(modeled_share, "medium_at_modeled_share")
    return Finding(rule.name, severity, f.name, msg, suggestion, evidence, tuple(sources))


def _link(rule: Rule, f: Facts) -> LinkModel:
    """The link the modeled time is quoted at: the projection's hardware profile's host link,
    else the rule's named ``link_model`` (a run without a projection)."""
    if f.link:
        return LinkModel(str(f.link["key"]), str(f.link["name"]), float(f.link["bytes_per_s"]),
                         str(f.link.get("source") or ""))
    return link_model(rule.param("link_model"))


def check_changed_math(rule: Rule, f: Facts) -> Finding | None:
    """The variant's first losses or step-1 gradient norm differ from the reference's (or hold a NaN)."""
    nan = samemath.not_finite(f.entry)
    if nan is not None:
        return _not_finite_math(rule, f, nan)
    ref = f.math_reference
    if ref is None or ref.variant == f.name or samemath.random_ops(f.entry):  # random: "not compared"
        return None
    loss_rtol, norm_rtol = rule.param("loss_rtol"), rule.param("grad_norm_rtol")
    c = samemath.compare(f.entry, ref, loss_rtol, norm_rtol)
    if not c.differs:
        return None
    mine = samemath.entry_losses(f.entry)
    parts = []
    if c.grad_norm_differs:
        parts.append(f"step-1 gradient norm {fmt_float(samemath.entry_grad_norm(f.entry), 6)} against "
                     f"{fmt_float(ref.grad_norm, 6)} (relative difference {fmt_rel(c.grad_norm_rel_diff)}, "
                     f"tolerance {norm_rtol:g})")
    parts.append(f"losses of the first steps {_nums(mine)} against {_nums(ref.losses)} (relative difference "
                 f"{', '.join(fmt_rel(d) for d in c.loss_rel_diff)}, tolerance {loss_rtol:g})")
    msg = f"this placement changes what is computed: {'; '.join(parts)}; reference: {ref.label}"
    suggestion = (
        "Suggestion: check how the towers' gradients are combined (each tower's gradient included, "
        "averaged over all towers) and that every tower reads the same variables and its own shard of the "
        "batch; until the numbers agree, this variant's step time is not comparable with the others'."
    )
    evidence = {"losses": list(mine), "grad_norm": samemath.entry_grad_norm(f.entry), "reference": ref.label,
                "reference_losses": list(ref.losses), "reference_grad_norm": ref.grad_norm,
                "loss_rel_diff": list(c.loss_rel_diff), "grad_norm_rel_diff": c.grad_norm_rel_diff,
                "loss_rtol": loss_rtol, "grad_norm_rtol": norm_rtol}
    return Finding(rule.name, rule.severity, f.name, msg, suggestion, evidence, ())


def _not_finite_math(rule: Rule, f: Facts, nan: str) -> Finding:
    """A NaN (or infinite) loss: the math differs from any reference, whatever the placement."""
    msg = f"{nan} (the model diverges or its inputs hold NaN); timings are still valid"
    suggestion = (
        "Suggestion: check the model on one device first (a learning rate too high, a log or a division "
        "of zero, NaN in the input batch); until its losses are numbers, this variant's step time is not "
        "comparable with the others'."
    )
    ref = f.math_reference
    evidence = nonfinite.strict({"losses": list(samemath.entry_losses(f.entry)),
                                 "grad_norm": samemath.entry_grad_norm(f.entry),
                                 "reference": None if ref is None else ref.label}, ("losses", "grad_norm"))
    return Finding(rule.name, rule.severity, f.name, msg, suggestion, evidence, ())


def _nums(xs: Sequence[float]) -> str:
    return ", ".join(fmt_float(x, 6) for x in xs)


RULES: tuple[Rule, ...] = (
    Rule("changed_math", "this placement changes what is computed",
         severity=HIGH, check=check_changed_math,
         # losses: the 1e-4; correct variants agree to ~1e-7 (float32 reordering).  The norm:
         # correct variants agree to ~1e-7 too, while the mistakes it catches change it by a factor
         # (x2 summed not averaged, (n-1)/n for a forgotten tower of n <= 64: >= 1.6%), so 1e-3.
         params={"loss_rtol": 1e-4, "grad_norm_rtol": 1e-3}, primary="loss_rtol", needs=(MATH,),
         disqualifies=True),
    Rule("host_compute", "heavy compute on the host while accelerators are available",
         severity=MEDIUM, high_at=0.25, check=check_host_compute,
         params={"min_host_flops_share": 0.10}, primary="min_host_flops_share", needs=(PLACEMENT,),
         disqualifies=True),
    Rule("exposed_copies", "exposed copy time is a large share of the step",
         severity=MEDIUM, high_at=0.40, check=check_exposed_copies,
         params={"min_exposed_share": 0.20}, primary="min_exposed_share", needs=(MEASURED_TIMINGS,)),
    Rule("accelerator_idle", "accelerators idle, waiting on the host",
         severity=MEDIUM, high_at=0.70, check=check_accelerator_idle,
         params={"min_idle_share": 0.40, "min_host_busy": 0.20}, primary="min_idle_share",
         needs=(PLACEMENT, MEASURED_TIMINGS)),
    Rule("unbalanced_towers", "one accelerator does much more work than another",
         severity=LOW, high_at=2.0, check=check_unbalanced_towers,
         params={"min_ratio": 1.25}, primary="min_ratio", needs=(PLACEMENT,)),
    Rule("poor_scaling", "speedup over the baseline divided by accelerators is low",
         severity=MEDIUM, high_at=0.25, check=check_poor_scaling,
         params={"max_efficiency": 0.50, "min_accelerators": 2}, primary="max_efficiency",
         needs=(MEASURED_TIMINGS, BASELINE)),
    Rule("variables_remote", "every tower pulls the variables across the bus",
         severity=LOW, check=check_variables_remote,
         # link_model: only where the run has no projection; otherwise the projection's host link
         params={"min_accelerators": 2, "link_model": "pcie3_x16", "medium_at_modeled_share": 0.10},
         primary="min_accelerators", needs=(PLACEMENT,)),
    Rule("staged_allreduce", "a ring all-reduce (NCCL) where the accelerators have no peer path",
         severity=LOW, check=strategy_advice.check_staged_allreduce,
         params={"min_replicas": 2, "medium_at_share": 0.10}, primary="min_replicas",
         needs=(PLACEMENT, PEER_PATH)),
    Rule("reduction_through_host", "gradients summed on the host though the accelerators are linked directly",
         severity=LOW, check=strategy_advice.check_reduction_through_host,
         params={"min_replicas": 2, "medium_at_share": 0.10}, primary="min_replicas",
         needs=(PLACEMENT, PEER_PATH)),
    Rule("central_storage_pulls", "CentralStorageStrategy pulls every variable to each accelerator each step",
         severity=LOW, check=strategy_advice.check_central_storage_pulls,
         params={"min_accelerators": 2, "link_model": "pcie3_x16", "medium_at_modeled_share": 0.10},
         primary="min_accelerators", needs=(PLACEMENT,)),
    Rule("straggler", "one task reaches the all-reduce late, step after step, and the others wait for it",
         severity=MEDIUM, high_at=0.25, check=cluster_advice.check_straggler,
         params=dict(STRAGGLER_PARAMS), primary="min_late_share", needs=(TASKS,)),
    DOES_NOT_FIT,
)


def _unique(items) -> list:
    return list(dict.fromkeys(items))


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
# Running the rules


def facts_for(summary: Mapping[str, Any]) -> list[Facts]:
    """The facts of every successful variant (failed ones have nothing to judge)."""
    topology = summary.get("topology") or {}
    entries = summary.get("variants") or []
    baselines = {
        registry.family_of(e): e for e in entries
        if e["status"] == "ok" and registry.is_baseline(e["name"], e.get("source"))
    }
    reference = samemath.reference(entries)
    link = next((m for m in summary.get("link_models") or () if m.get("key") == HOST_LINK_KEY), None)
    projection = summary.get("projection")
    return [
        Facts(e, e.get("audit"), e.get("breakdown"), topology, baselines.get(registry.family_of(e)),
              reference, link, projection)
        for e in entries if e["status"] == "ok"
    ]


#: The key of the projection profile's host link among ``summary.json`` -> ``link_models``.
HOST_LINK_KEY = "host_link"


def run_level_gap(rule: Rule, topology: Mapping[str, Any]) -> str | None:
    """Why ``rule`` cannot be evaluated on any variant of a run on ``topology`` (None: it can)."""
    if rule.needs_measured_timings and topology.get("kind") != "gpu":
        if topology.get("kind") == "logical-cpu":
            return "not measurable here: the accelerators are logical CPU devices sharing the same cores"
        return "needs device timings from real accelerators"
    return None


def unmet(rule: Rule, f: Facts) -> str | None:
    """Why ``rule`` cannot be evaluated on the variant of ``f`` (None: it can)."""
    gap = run_level_gap(rule, f.topology)
    if gap:
        return gap
    if PLACEMENT in rule.needs and not f.audit:
        return "no placement recorded"
    if MEASURED_TIMINGS in rule.needs and not f.measured_timings:
        error = (f.breakdown or {}).get("error")
        return f"no device timings: {error}" if error else "no device timings (no trace analysed)"
    if BASELINE in rule.needs and not f.baseline and not f.is_baseline:
        return f"the baseline {registry.baseline_of(f.entry)} did not succeed"
    if (PEER_PATH in rule.needs and strategy_advice.reduces_across_devices(f)
            and strategy_advice.profile(f) is None):
        return ("it reduces across devices, and no hardware profile says how its accelerators are linked "
                "(profile --project-on NAME, or project RUN_DIR --hardware NAME)")
    if (why := memory_fit_unmet(rule, f)) is not None:
        return why
    if MATH in rule.needs:
        return samemath.not_compared_why(f.entry, f.math_reference)
    return cluster_advice.unmet_tasks(f) if TASKS in rule.needs else None


@dataclass(frozen=True)
class Evaluation:
    """What the rules found, and where each could not be evaluated."""

    findings: tuple[Finding, ...]
    skipped: Mapping[str, Mapping[str, str]]  # rule -> {variant: why not evaluated}


def evaluate(summary: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> Evaluation:
    """Every rule over every successful variant where its needs are met; findings by severity."""
    findings: list[Finding] = []
    skipped: dict[str, dict[str, str]] = {r.name: {} for r in rules}
    for f in facts_for(summary):
        for rule in rules:
            why = unmet(rule, f)
            if why is not None:
                skipped[rule.name][f.name] = why
                continue
            found = rule.check(rule, f)
            if found is not None:
                findings.append(found)
    return Evaluation(tuple(by_severity(findings)), skipped)


def run_rules(summary: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> list[Finding]:
    """The findings of :func:`evaluate`."""
    return list(evaluate(summary, rules).findings)


def rules_status(
    summary: Mapping[str, Any], rules: Sequence[Rule] = RULES, evaluation: Evaluation | None = None
) -> list[dict[str, Any]]:
    """Each rule with its parameters, and whether it was evaluated on every successful variant.

    ``evaluated`` is false when the run cannot support the rule at all (``why_not`` says why)
    or when some variant lacked what it needs (``not_evaluated`` names them, each with why).
    """
    evaluation = evaluation or evaluate(summary, rules)
    topology = summary.get("topology") or {}
    out = []
    for r in rules:
        doc = r.to_json()
        gap = run_level_gap(r, topology)
        skipped = dict(evaluation.skipped.get(r.name) or {})
        if gap is None and skipped:
            gap = "; ".join(f"{name}: {why}" for name, why in skipped.items())
            gap = f"not evaluated on {len(skipped)} variant(s): {gap}"
        doc["evaluated"] = gap is None
        doc["why_not"] = gap
        doc["not_evaluated"] = skipped
        out.append(doc)
    return out


@dataclass(frozen=True)
class Advice:
    """What the advice step adds to a summary."""

    findings: tuple[Finding, ...]
    rules: tuple[dict[str, Any], ...]  # rules_status()
    recommendation: recommend.Recommendation
    math: dict[str, Any] | None = None  # samemath.table: the losses side by side


def excluded(summary: Mapping[str, Any], findings: Sequence[Finding],
             rules: Sequence[Rule] = RULES) -> dict[str, str]:
    """Variants that must not be recommended, and why: a high-severity finding of a rule that
    disqualifies; and (for a projected recommendation) a variant that failed in this run."""
    disqualifying = {r.name: r for r in rules if r.disqualifies}
    out: dict[str, list[str]] = {}
    for f in findings:
        if f.severity == HIGH and f.rule in disqualifying:
            why = f"{disqualifying[f.rule].title} (high-severity finding {f.rule})"
            out.setdefault(f.variant, []).append(why)
    for e in summary.get("variants") or ():
        if e["status"] != "ok":
            why = f"it failed in this run ({e.get('error') or 'no reason given'})"
            out.setdefault(e["name"], []).append(why)
    return {name: "; ".join(whys) for name, whys in out.items()}


def math_table(summary: Mapping[str, Any], rules: Sequence[Rule] = RULES) -> dict[str, Any] | None:
    """The losses side by side with the ``changed_math`` rule's tolerances (None without that rule)."""
    rule = next((r for r in rules if r.name == "changed_math"), None)
    if rule is None:
        return None
    entries = summary.get("variants") or ()
    return samemath.table(entries, rule.param("loss_rtol"), rule.param("grad_norm_rtol"))


def advise(summary: Mapping[str, Any]) -> Advice:
    """Findings, the rules' status, the losses side by side and the recommendation."""
    evaluation = evaluate(summary)
    rec = recommend.headline(summary, excluded(summary, evaluation.findings))
    return Advice(evaluation.findings, tuple(rules_status(summary, evaluation=evaluation)), rec,
                  math_table(summary))
