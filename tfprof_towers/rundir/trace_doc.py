"""The trace analysis document: what ``analyze --json`` prints and ``summary.json`` keeps per variant as
its ``breakdown`` (per step), typed.

``trace.analysis.trace_doc`` writes it (docs/output.md describes every field); :class:`TraceDoc` reads
it back for the terminal, the HTML pages and the run's later steps.  A variant whose trace could not be
analysed has only ``error``.  The figures are kept as written (an int or a float: a count per step is
either), so a document read and written again is the same JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.fields import Record, if_empty, if_none, meta


def _kept(default: Any = None, **more: Any) -> Any:
    """A field read and written as the document has it (a number stays an int or a float; ``default``
    where absent)."""
    return meta(default, read=lambda f, key: f.data.get(key, default), write=lambda v: v, **more)


def _kept_list(**more: Any) -> Any:
    return meta((), read=lambda f, key: tuple(f.items(key)), write=list, **more)


@dataclass(frozen=True)
class CategoryTotal(Record):
    """One category's events on a device, overlaps included: how many, their time, their bytes (copies)."""

    count: float | None = _kept(0)
    seconds: float | None = _kept(0.0)
    bytes: float | None = _kept(None, omit=if_none)  # copy categories only


#: A category a device has no events of.
NO_EVENTS = CategoryTotal(None, None, None)


@dataclass(frozen=True)
class DeviceTime(Record):
    """One device's time: its windows, the inclusive totals per category and the exclusive (wall) split."""

    window_s: float = _kept(0.0)  # the device's own step windows, added up
    total: Mapping[str, CategoryTotal] = meta(factory=dict)  # inclusive, per category
    wall: Mapping[str, float] = _kept(None)  # category (and "idle") -> seconds: exclusive, they add up
    idle_split: Mapping[str, float] | None = _kept(None, omit=if_none)  # accelerators: host wait, ...
    role: str | None = meta(None, omit=if_none)  # a run's breakdown: "host", "accelerator" or "other"

    def wall_s(self, category: str) -> float | None:
        """The wall seconds of ``category``; None where the device has no such column."""
        return (self.wall or {}).get(category)

    def seconds(self, category: str) -> float:
        """The wall seconds of ``category`` (0 where the device has none)."""
        return float(self.wall_s(category) or 0.0)

    def total_of(self, category: str) -> CategoryTotal:
        """The inclusive total of ``category`` (:data:`NO_EVENTS` where the device has none)."""
        return self.total.get(category, NO_EVENTS)

    def split_s(self, kind: str) -> float:
        """The idle seconds of one kind of :data:`~tfprof_towers.vocab.categories.IDLE_SPLIT` (0: none)."""
        return float((self.idle_split or {}).get(kind) or 0.0)

    @property
    def idle(self) -> float | None:
        return self.wall_s("idle")


@dataclass(frozen=True)
class LinkRow(Record):
    """One link's bytes, copies and (where measured) time and rate."""

    src: str
    dst: str
    kind: str = ""
    bytes: float | None = _kept()
    count: float = _kept(0)
    seconds: float | None = _kept()  # None: not measured (a send/recv on logical devices)
    gbps: float | None = _kept()
    measured: bool = False
    impossible: bool = meta(False, omit=lambda v: not v)  # a rate above any such link's peak


@dataclass(frozen=True)
class TaskStep(Record):
    """One step of one task, in seconds after the earliest step start of any task."""

    step: int = _kept(0)
    start_s: float = _kept(0.0)
    end_s: float = _kept(0.0)
    collective_s: float = _kept(0.0)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class TaskSteps(Record):
    """One host's (task's) steps."""

    task: str = _kept("")
    host: str = _kept("")
    steps: tuple[TaskStep, ...] = ()


@dataclass(frozen=True)
class TopOp(Record):
    """An op live at the allocator's peak, with its bytes."""

    op: str = ""
    bytes: int = _kept(0)
    count: int = _kept(0)


@dataclass(frozen=True)
class AllocatorPeak(Record):
    """One allocator's peak from its events (trace.memory_peaks.DeviceMemory.to_doc)."""

    allocator: str = ""
    peak_bytes: int = _kept(0)
    peak_time_s: float = _kept(0.0)
    peak_in_steps_bytes: int | None = _kept()
    peak_in_steps_time_s: float | None = _kept()
    lifetime_peak_bytes: int | None = _kept()
    capacity_bytes: int | None = _kept()
    device_memory_bytes: int | None = _kept()
    fragmentation: float | None = _kept()
    before_trace_bytes: int | None = _kept()
    top_ops: tuple[TopOp, ...] = ()
    events: int = _kept(0)
    peak_op: str | None = _kept()
    unknown: tuple[str, ...] = meta((), omit=if_empty)  # what could not be told from the events


@dataclass(frozen=True)
class MemoryDoc(Record):
    """``memory``: each allocator's peak, and a note on what the events are (or why there are none)."""

    devices: Mapping[str, AllocatorPeak] = meta(factory=dict)
    note: str | None = None


@dataclass(frozen=True)
class FailedHost(Record):
    """A host of the profile that could not be read, and why (it is left out of the figures)."""

    host: str = ""
    file: str = ""
    reason: str = ""


@dataclass(frozen=True)
class ProducerDoc(Record):
    """Who wrote the trace (framework, accelerator vendor) and the signs that say so."""

    framework: str | None = None
    vendor: str | None = None
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class TraceDoc(Record):
    """The trace analysis (``analyze --json``; a run's ``variants[].breakdown``, per step), or only
    ``error`` where the trace could not be analysed."""

    source: str | None = meta(None, omit=if_none)  # the trace's path (not in a run's breakdown)
    producer: ProducerDoc | None = None
    steps: int = _kept(0)
    step_numbers: tuple[int, ...] = _kept_list()
    window: str = ""  # how the step windows were found: "markers", "steps-line", ...
    per_step: bool = False  # every count, time and byte figure divided by the steps
    step_time_s: tuple[float, ...] = _kept_list()
    step_time_avg_s: float = _kept(0.0)
    idle_accelerators: tuple[str, ...] = ()
    unread_planes: Mapping[str, str | None] = meta(factory=dict)
    devices: Mapping[str, DeviceTime] = meta(factory=dict)
    links: tuple[LinkRow, ...] = ()
    tasks: tuple[TaskSteps, ...] = ()
    memory: MemoryDoc = meta(factory=MemoryDoc)
    hosts: int | None = _kept(None, omit=if_none)  # analyze: the hosts of the profile
    failed_hosts: tuple[FailedHost, ...] | None = meta(None, omit=if_none)
    notes: tuple[str, ...] = ()
    kind: str | None = meta(None, omit=if_none)  # the run's topology kind
    error: str | None = meta(None, omit=if_none)
    WHERE = "trace analysis"

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error} if self.error is not None else super().to_json()

    @property
    def ok(self) -> bool:
        return self.error is None


def as_trace_doc(doc: TraceDoc | Mapping[str, Any]) -> TraceDoc:
    """``doc`` typed (a document built as a dict is read as ``analyze --json`` would print it)."""
    return doc if isinstance(doc, TraceDoc) else TraceDoc.from_json(doc)
