"""The ``straggler`` rule on a multi-host trace: one task reaches the collectives late, step after step."""

from __future__ import annotations

from tfprof_towers.advice.cluster import straggler_finding
from tfprof_towers.advice.findings import Finding, Rule
from tfprof_towers.advice.trace_rules.facts import TraceFacts
from tfprof_towers.analysis.cluster_view import stepping_tasks


def check_straggler(rule: Rule, f: TraceFacts) -> Finding | None:
    tasks = stepping_tasks(f.tasks, None)
    return straggler_finding(rule, tasks, f.name, loopback=False)
