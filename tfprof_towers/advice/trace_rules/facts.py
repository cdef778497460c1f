"""What the trace rules read: :class:`~tfprof_towers.trace.facts.TraceFacts` (made in the trace layer,
where each host's events are scanned once into a compact :class:`~tfprof_towers.trace.facts.HostFacts`;
see :mod:`tfprof_towers.trace.facts`), and :func:`cutoffs_of`, the cut-offs that scan takes from the
rules' parameters."""

from __future__ import annotations

from collections.abc import Sequence

from tfprof_towers.advice.findings import Rule
from tfprof_towers.trace.facts import (
    _PS,
    HOST_ACTIVITY,
    Cutoffs,
    HostFacts,
    HostScan,
    TraceFacts,
    device_gaps,
    heaviest_ops,
    host_activity,
    host_waiting,
    known_accelerators,
    launch_times,
)

__all__ = [
    "HOST_ACTIVITY",
    "_PS",
    "Cutoffs",
    "HostFacts",
    "HostScan",
    "TraceFacts",
    "cutoffs_of",
    "device_gaps",
    "heaviest_ops",
    "host_activity",
    "host_waiting",
    "known_accelerators",
    "launch_times",
]


def cutoffs_of(rules: Sequence[Rule]) -> Cutoffs:
    """The scan's cut-offs from ``rules``' parameters (a rule not among them: its default)."""
    by_name = {r.name: r for r in rules}
    d = Cutoffs()

    def param(rule: str, key: str, default: float) -> float:
        return float(by_name[rule].param(key)) if rule in by_name else default

    return Cutoffs(param("launch_bound", "short_kernel_s", d.short_kernel_s),
                   param("launch_bound", "launch_delay_cutoff_s", d.launch_delay_cutoff_s),
                   param("host_bound", "min_idle_share", d.min_idle_share),
                   param("host_bound", "min_host_wait_share", d.min_host_wait_share))
