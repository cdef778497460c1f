"""Documents written as plain dicts in a test, read into the records the advice and the audit take."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tfprof_towers.rundir.projection_doc import ProjectionSummary
from tfprof_towers.rundir.records import Topology, VariantRecord
from tfprof_towers.rundir.summary import Summary, SummaryEntry
from tfprof_towers.rundir.trace_doc import TraceDoc


def plain(value: Any) -> Any:
    """``value`` as JSON: a record inside a dict (an audit built by the code under test) is written."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def summary(doc: Mapping[str, Any]) -> Summary:
    """A summary document (its entries may hold audits built by the code under test) as a record."""
    return Summary.from_json(plain(doc))


def entry(doc: Mapping[str, Any] | None) -> SummaryEntry | None:
    return None if doc is None else SummaryEntry.from_json(plain(doc))


def record(doc: Mapping[str, Any]) -> VariantRecord:
    """A variant's record document (``status`` "ok" unless it says otherwise)."""
    return VariantRecord.from_json({"status": "ok", **doc})


def topology(doc: Mapping[str, Any] | None) -> Topology | None:
    return None if doc is None else Topology.from_json(doc)


def breakdown(doc: Mapping[str, Any] | None) -> TraceDoc | None:
    """A trace analysis document (a variant's breakdown) as a record."""
    return None if doc is None else TraceDoc.from_json(plain(doc))


def projection(doc: Mapping[str, Any] | None) -> ProjectionSummary | None:
    """summary.json's compact projection as a record."""
    return None if doc is None else ProjectionSummary.from_json(doc)
