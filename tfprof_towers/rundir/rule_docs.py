"""What the advice rules write: a :class:`Finding`, and each rule's :class:`RuleStatus`.

``summary.json`` -> ``findings`` and ``rules``, ``variants[].trace_findings`` and ``analyze --json``'s
``findings`` and ``rules`` hold them.  The rules themselves (their checks) are :mod:`tfprof_towers.advice`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.fields import Fields, Record, if_empty, if_none, meta


@dataclass(frozen=True)
class Finding(Record):
    """What one rule found on one variant (or trace): the measured numbers, and what to do."""

    rule: str
    severity: str
    variant: str
    message: str
    suggestion: str
    evidence: Mapping[str, Any] = meta(factory=dict)  # the rule's own numbers (free-form per rule)
    sources: tuple[str, ...] = ()  # "file:line" of the code it is about
    devices: tuple[str, ...] = meta((), omit=if_empty)  # the devices (or tasks) it is about
    WHERE = "finding"


@dataclass(frozen=True)
class TraceFinding(Finding):
    """A trace rule's finding on a run's variant: ``devices`` is always written."""

    devices: tuple[str, ...] = ()

    @classmethod
    def of(cls, finding: Finding) -> TraceFinding:
        return cls(finding.rule, finding.severity, finding.variant, finding.message, finding.suggestion,
                   finding.evidence, finding.sources, finding.devices)


def _param(f: Fields, key: str) -> Any:
    """A rule's threshold: a number or a text, as the rule names it."""
    value = f.data.get(key)
    if value is not None and not isinstance(value, (int, float, str)):
        f.fail(key, "must be a number or a string")
    return value


@dataclass(frozen=True)
class RuleStatus(Record):
    """A rule with its named parameters, and whether it was evaluated (``why_not``: why not)."""

    rule: str
    title: str = ""
    threshold: float | int | str | None = meta(None, read=_param)  # the primary parameter's value
    primary: str = ""
    params: Mapping[str, Any] = meta(factory=dict)
    severity: str = ""
    high_at: float | None = None
    needs: tuple[str, ...] = ()
    needs_measured_timings: bool = False
    disqualifies: bool = False
    evaluated: bool = False
    why_not: str | None = None
    # a run's rules: variant -> why it was not evaluated there (a trace's rules: not written)
    not_evaluated: Mapping[str, str] | None = meta(None, omit=if_none)
    WHERE = "rule"
