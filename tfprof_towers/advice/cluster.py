"""The ``straggler`` rule, which looks across the tasks of a cluster variant or of a multi-host trace.

* ``straggler`` -- one task reaches the collectives of a synchronous step late, step after
  step, and every other worker waits for it inside the all-reduce.  Measured from the
  tasks' traces on one clock (:mod:`tfprof_towers.analysis.cluster_view`).  On loopback every
  task shares this machine's cores, so a task can be late because of the others (on 2 cores a
  worker is often 1-3 ms behind in a 5 ms step): the finding says "on loopback" and is one tier lower.

Defined once (:data:`STRAGGLER`): a run's cluster variant and a multi-host trace both give it their
tasks' steps; only a run knows whether its tasks ran on loopback.  No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfprof_towers.advice.findings import HIGH, LOW, MEDIUM, TASKS, Facts, Finding, Rule
from tfprof_towers.analysis.cluster_view import (
    STRAGGLER_PARAMS,
    as_task_steps,
    short_task,
    step_table,
    stepping_tasks,
    stragglers,
)
from tfprof_towers.rundir.trace_doc import TaskSteps
from tfprof_towers.vocab.fmt import fmt_percent, fmt_seconds


def task_steps(f: Facts) -> list[TaskSteps]:
    """The tasks of the variant's trace that ran the steps (two or more make a straggler view)."""
    stepping = None if f.entry.cluster is None else f.entry.cluster.stepping_tasks
    return stepping_tasks(() if f.breakdown is None else f.breakdown.tasks, stepping)


def unmet_tasks(f: Any) -> str | None:
    """Why the straggler view cannot be made from the facts ``f``: a run variant's (a single-process
    variant has no other task to wait for, so the rule finds nothing there) or a trace's (None: it can)."""
    if not isinstance(f, Facts):
        if len(stepping_tasks(as_task_steps(f.tasks), None)) < 2:
            return ("fewer than two tasks ran steps (a single-host trace; a multi-host logdir holds one "
                    "trace per task)")
        return None
    if not f.entry.cluster:
        return None
    if f.breakdown is not None and f.breakdown.error:
        return f"its trace could not be analysed: {f.breakdown.error}"
    if len(task_steps(f)) < 2:
        return "fewer than two of its tasks ran steps (parameter_server: only the chief does)"
    return None


def check_straggler(rule: Rule, f: Any) -> Finding | None:
    """The straggler finding of a run's cluster variant (:class:`Facts`) or of a multi-host trace's facts."""
    if not isinstance(f, Facts):
        return straggler_finding(rule, stepping_tasks(as_task_steps(f.tasks), None), f.name, loopback=False)
    loopback = f.entry.cluster is not None and f.entry.cluster.on_loopback
    return straggler_finding(rule, task_steps(f), f.name, loopback)


def straggler_finding(rule: Rule, tasks: Sequence[TaskSteps], variant: str,
                      loopback: bool) -> Finding | None:
    """The straggler finding over ``tasks`` (each task's steps): a run's cluster variant, or a multi-host
    logdir's trace."""
    if len({str(t.task or t.host or "") for t in tasks if t.steps}) < 2:  # no step two tasks ran
        return None
    table = step_table(tasks)
    found = stragglers(table, rule.param("min_late_s"), rule.param("min_late_share"),
                       rule.param("min_steps_share"))
    if not found:
        return None
    s = found[0]
    share = s["late_s_median"] / s["step_s_median"] if s["step_s_median"] > 0 else 0.0
    who = short_task(s["task"])
    others = (", ".join(short_task(t) for t in s["others"]) if len(s["others"]) <= 5
              else f"the other {len(s['others'])} tasks") or "the others"
    steps = ", ".join(str(x) for x in s["late_steps"])
    severity = rule.tier(share)
    if loopback:  # every task shares this machine's cores: weaker evidence, one tier lower
        severity = {HIGH: MEDIUM, MEDIUM: LOW}.get(severity, LOW)
    where = "on loopback, " if loopback else ""
    msg = (f"{where}{who} reached the collectives last in {len(s['late_steps'])} of {s['steps']} "
           f"profiled steps (steps {steps}), {fmt_seconds(s['late_s_median'])} late (median; worst "
           f"{fmt_seconds(s['late_s_max'])}), {fmt_percent(share)} of the {fmt_seconds(s['step_s_median'])} "
           f"step; {others} waited {fmt_seconds(s['others_wait_s_median'])} per step inside collective ops")
    also = found[1:]
    if also:
        msg += "; also late: " + ", ".join(
            f"{short_task(o['task'])} {fmt_seconds(o['late_s_median'])} (median) in "
            f"{len(o['late_steps'])} of {o['steps']} steps" for o in also)
    suggestion = (f"Suggestion: find what slows {who} -- a busier or slower machine, its input pipeline, a "
                  "larger shard of the batch -- since every other worker idles in the all-reduce until it "
                  "arrives; the Trace Viewer shows its steps next to the others'.")
    if loopback:
        suggestion += (" Here every task shares this machine's cores, so confirm it on the real cluster "
                       "before acting.")
    evidence = {"task": s["task"], "late_steps": s["late_steps"], "steps": s["steps"],
                "late_s_median": s["late_s_median"], "late_s_max": s["late_s_max"],
                "step_s_median": s["step_s_median"], "late_share": share,
                "others_wait_s_median": s["others_wait_s_median"], "loopback": loopback,
                "others_late": [o["task"] for o in found[1:]],
                "others_late_s_median": {o["task"]: o["late_s_median"] for o in found[1:]}}
    late = (s["task"], *(o["task"] for o in found[1:]))
    return Finding(rule.name, severity, variant, msg, suggestion, evidence, (), late)


STRAGGLER = Rule("straggler",
                 "one task reaches the all-reduce late, step after step, and the others wait for it",
                 severity=MEDIUM, high_at=0.25, check=check_straggler,
                 params=dict(STRAGGLER_PARAMS), primary="min_late_share", needs=(TASKS,))
