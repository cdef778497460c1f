"""The run's rules over a variant's facts (nothing without evidence), and :func:`advise`.

The engine (:mod:`.engine`) decides, per rule and variant, whether the rule can be
evaluated at all: rules that need real accelerator timings (scaling) are *not
evaluated* on logical-CPU runs, where every "device" shares the same cores, nor
on a variant whose trace could not be analysed; the rules' status in
``summary.json`` says which and why, instead of "evaluated, nothing found".
What a trace alone tells (idle time, copies, imbalance) is the trace rules'
(:mod:`.trace_rules`), run on each analysed variant's trace.

The recommendation never names a variant with a high-severity finding of a rule that
``disqualifies`` (heavy compute on the host, changed math) while another variant succeeded.
Reads the typed summary (:class:`~tfprof_towers.rundir.summary.Summary`); no rendering, no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfprof_towers.advice import cluster as cluster_advice
from tfprof_towers.advice import engine, recommend
from tfprof_towers.advice import strategy as strategy_advice
from tfprof_towers.advice.engine import Evaluation, run_level_gap, unmet  # noqa: F401  (the engine's, for callers)
from tfprof_towers.advice.findings import (
    BASELINE,
    HIGH,
    LOW,
    MATH,
    MEASURED_TIMINGS,
    MEDIUM,
    PEER_PATH,
    PLACEMENT,
    Facts,
    Finding,
    Rule,
    RuleStatus,
)
from tfprof_towers.advice.memory_rules import DOES_NOT_FIT
from tfprof_towers.analysis import samemath
from tfprof_towers.analysis.audit import LinkModel, link_model, short_source
from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.math_table import MathTable
from tfprof_towers.rundir.summary import Summary
from tfprof_towers.variants import registry
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
    if not a or not a.accelerators or not a.host_compute:
        return None
    share = a.host_flops_share or 0.0
    if share < rule.param("min_host_flops_share"):
        return None
    groups = a.host_compute
    host_flops = sum(g.flops_per_step for g in groups)
    sources = _unique(g.sources[0] for g in groups if g.sources)
    scopes = _unique(g.scope for g in groups)
    measured = a.host_compute_share
    msg = (
        f"{fmt_percent(share)} of estimated FLOPs ({fmt_count(host_flops)} of "
        f"{fmt_count(a.total_flops_per_step)} per step) ran on the host {a.host} while "
        f"{len(a.accelerators)} accelerator(s) were available"
    )
    if measured is not None:
        msg += f"; measured: {fmt_percent(measured)} of compute time"
    msg += f"; heavy ops in {_list(scopes)}"
    dev = groups[0].source_device if sources else ""
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
        "host": a.host, "host_flops_per_step": host_flops,
        "total_flops_per_step": a.total_flops_per_step, "host_flops_share": share,
        "host_compute_time_share": measured, "accelerators": len(a.accelerators),
        "groups": [
            {"scope": g.scope, "ops": g.ops, "flops_per_step": g.flops_per_step, "sources": list(g.sources)}
            for g in groups
        ],
    }
    return Finding(rule.name, rule.tier(share), f.name, msg, suggestion, evidence, tuple(sources))


def check_unbalanced_towers(rule: Rule, f: Facts) -> Finding | None:
    """The placement gives one accelerator many more estimated FLOPs than another.

    The plan, which only a run's placement has; the measured imbalance (busy time) is the trace
    rule ``accelerator_imbalance``'s, on every analysed trace."""
    if not f.audit:
        return None
    rows = [d for d in f.audit.devices if d.device in f.accelerators_used]
    if len(rows) < 2:
        return None
    values = {d.device: float(d.flops_per_step or 0.0) for d in rows}
    hi = max(values, key=values.get)
    lo = min(values, key=values.get)
    if values[hi] <= 0:
        return None
    ratio = values[hi] / values[lo] if values[lo] > 0 else float("inf")
    if ratio < rule.param("min_ratio"):
        return None
    msg = (
        f"towers are unbalanced by estimated FLOPs: {hi} has {fmt_count(values[hi])} per step, {lo} "
        f"{fmt_count(values[lo])} ({'no work' if values[lo] == 0 else fmt_ratio(ratio)})"
    )
    suggestion = (
        "Suggestion: give every accelerator an equal share of the batch and of the shared work "
        "(the variable update and gradient reduction can be spread across devices, as `replicated` does)."
    )
    evidence = {"metric": "flops_per_step", "per_accelerator": values, "ratio": None if lo == hi else ratio}
    return Finding(rule.name, rule.tier(min(ratio, 1e9)), f.name, msg, suggestion, evidence, ())


def check_poor_scaling(rule: Rule, f: Facts) -> Finding | None:
    if not f.on_gpus or f.is_baseline or not f.baseline:
        return None
    eff, speedup = f.entry.scaling_efficiency, f.entry.speedup_vs_baseline
    # the denominator of scaling_efficiency: the accelerators the variant used
    n = (f.entry.accelerators_used or len(f.accelerators_used)
         or (len(f.topology.accelerators) if f.topology is not None else 0))
    if eff is None or speedup is None or n < rule.param("min_accelerators"):
        return None
    if eff >= rule.param("max_efficiency"):
        return None
    msg = (
        f"speedup over {f.baseline.name} is {fmt_ratio(speedup)} on {n} accelerators: scaling efficiency "
        f"{fmt_percent(eff)} (median step {fmt_seconds(f.entry.median_s)} vs "
        f"{fmt_seconds(f.baseline.median_s)})"
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
    if a.strategy_name == strategy_advice.CENTRAL_STORAGE:
        return None  # central_storage_pulls says it, with the strategy's own remedy
    pulls = a.variable_pulls
    used = f.accelerators_used
    pulling = [d for d in used if pulls.by_accelerator.get(d, 0) > 0]
    if len(used) < rule.param("min_accelerators") or len(pulling) < len(used):
        return None
    link = _link(rule, f)
    modeled = pulls.bytes_per_step / link.bytes_per_s
    modeled_share = f.share_of_step(modeled)
    msg = (
        f"every tower ({len(pulling)} of {len(used)}) pulls the variables across devices each step: "
        f"{fmt_bytes(pulls.bytes_per_step)}/step in {pulls.tensors} tensors "
        f"from {_list(pulls.sources_from)}; "
        f"modeled at {link.name}: {fmt_seconds(modeled)} per step"
    )
    sources = list(pulls.sources)  # the innermost tf.device lines that placed the variables
    tf2 = f.entry.family == registry.TF2_STRATEGY
    remedy = ("`tf.distribute.MirroredStrategy`, the `mirrored` variant" if tf2
              else "the `replicated` variant, MirroredStrategy")
    suggestion = (
        "Suggestion: keep a copy of the variables on each accelerator and all-reduce the gradients "
        f"({remedy})"
        + (f" instead of the scope at {_list(sources)}" if sources else "") + "."
    )
    evidence = {"bytes_per_step": pulls.bytes_per_step, "tensors": pulls.tensors,
                "by_accelerator": dict(pulls.by_accelerator), "from": list(pulls.sources_from),
                "modeled_s": {link.key: modeled}, "modeled_share_of_step": modeled_share}
    severity = rule.medium_at(modeled_share, "medium_at_modeled_share")
    return Finding(rule.name, severity, f.name, msg, suggestion, evidence, tuple(sources))


def _link(rule: Rule, f: Facts) -> LinkModel:
    """The link the modeled time is quoted at: the projection's hardware profile's host link,
    else the rule's named ``link_model`` (a run without a projection)."""
    return f.link or link_model(rule.param("link_model"))


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
         # losses: 1e-4, while correct variants agree to ~1e-7 (float32 reordering).  The norm:
         # correct variants agree to ~1e-7 too, while the mistakes it catches change it by a factor
         # (x2 summed not averaged, (n-1)/n for a forgotten tower of n <= 64: >= 1.6%), so 1e-3.
         params={"loss_rtol": 1e-4, "grad_norm_rtol": 1e-3}, primary="loss_rtol", needs=(MATH,),
         disqualifies=True),
    Rule("host_compute", "heavy compute on the host while accelerators are available",
         severity=MEDIUM, high_at=0.25, check=check_host_compute,
         params={"min_host_flops_share": 0.10}, primary="min_host_flops_share", needs=(PLACEMENT,),
         disqualifies=True),
    # exposed_copies and host_bound are trace rules (trace_rules/): they read each variant's trace
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
    cluster_advice.STRAGGLER,
    DOES_NOT_FIT,
)


def _unique(items) -> list:
    return list(dict.fromkeys(items))


def _list(items) -> str:
    items = [str(i) for i in items]
    return ", ".join(items) if items else "–"


# ------------------------------------------------------------------------------------------
# Running the rules


def facts_for(summary: Summary) -> list[Facts]:
    """The facts of every successful variant (failed ones have nothing to judge)."""
    entries = summary.variants
    baselines = {e.family: e for e in entries if e.ok and e.baseline}
    reference = samemath.reference(entries)
    link = host_link(summary.link_models)
    return [Facts(e, summary.topology, baselines.get(e.family), reference, link, summary.projection)
            for e in entries if e.ok]


#: The key of the projection profile's host link among ``summary.json`` -> ``link_models``.
HOST_LINK_KEY = "host_link"


def host_link(link_models: Sequence[LinkModel]) -> LinkModel | None:
    """The projection profile's host link among the summary's link models (None without a projection)."""
    return next((m for m in link_models if m.key == HOST_LINK_KEY), None)


def evaluate(summary: Summary, rules: Sequence[Rule] = RULES) -> Evaluation:
    """Every rule over every successful variant where its needs are met (:func:`.engine.evaluate`)."""
    return engine.evaluate(rules, facts_for(summary))


def run_rules(summary: Summary, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """The findings of :func:`evaluate`."""
    return list(evaluate(summary, rules).findings)


def rules_status(
    summary: Summary, rules: Sequence[Rule] = RULES, evaluation: Evaluation | None = None
) -> list[RuleStatus]:
    """Each rule with its parameters, and whether it was evaluated on every successful variant.

    ``evaluated`` is false when the run cannot support the rule at all (``why_not`` says why)
    or when some variant lacked what it needs (``not_evaluated`` names them, each with why).
    """
    evaluation = evaluation or evaluate(summary, rules)
    return engine.status(rules, evaluation, lambda r: run_level_gap(r, summary.topology))


@dataclass(frozen=True)
class Advice:
    """What the advice step adds to a summary."""

    findings: tuple[Finding, ...]
    rules: tuple[RuleStatus, ...]  # rules_status()
    recommendation: recommend.Recommendation
    math: MathTable | None = None  # samemath.table: the losses side by side


def excluded(summary: Summary, findings: Sequence[Finding], rules: Sequence[Rule] = RULES) -> dict[str, str]:
    """Variants that must not be recommended, and why: a high-severity finding of a rule that
    disqualifies; and (for a projected recommendation) a variant that failed in this run."""
    disqualifying = {r.name: r for r in rules if r.disqualifies}
    out: dict[str, list[str]] = {}
    for f in findings:
        if f.severity == HIGH and f.rule in disqualifying:
            why = f"{disqualifying[f.rule].title} (high-severity finding {f.rule})"
            out.setdefault(f.variant, []).append(why)
    for e in summary.variants:
        if not e.ok:
            why = f"it failed in this run ({e.error or 'no reason given'})"
            out.setdefault(e.name, []).append(why)
    return {name: "; ".join(whys) for name, whys in out.items()}


def math_table(summary: Summary, rules: Sequence[Rule] = RULES) -> MathTable | None:
    """The losses side by side with the ``changed_math`` rule's tolerances (None without that rule)."""
    rule = next((r for r in rules if r.name == "changed_math"), None)
    if rule is None:
        return None
    return samemath.table(summary.variants, rule.param("loss_rtol"), rule.param("grad_norm_rtol"))


def advise(summary: Summary) -> Advice:
    """Findings, the rules' status, the losses side by side and the recommendation."""
    evaluation = evaluate(summary)
    rec = recommend.headline(summary, excluded(summary, evaluation.findings))
    return Advice(evaluation.findings, tuple(rules_status(summary, evaluation=evaluation)), rec,
                  math_table(summary))
