"""A profile of many hosts (one ``<host>.xplane.pb`` per task): analysed host by host, then reduced.

**Map** (:func:`map_host`, one host, in a process of the executor's: :mod:`.executors`): read the host's
file, classify, find its steps, attribute, link, scan the events for the rules' facts; return a
:class:`HostResult` -- its per-device figures, step windows, links, memory peaks, tasks' collective
time and :class:`~.facts.HostFacts` -- and let the events go.  A result is a few rows per device and
step, whatever the host's events: the parent holds only results, never events.

**Reduce** (:class:`PodAnalysis`, in the parent): put the hosts on one clock (each file counts from its
own earliest timestamp; their epoch timestamps are assumed to agree), join their step windows per step
number (:func:`~.hosts.join_steps`, the join the merged trace makes too), join links (a pair across tasks
counted by its sends where a host holds them, else by its receives), memory and facts, and build the
tasks' steps -- the straggler view -- across hosts.  ``to_doc()`` is ``analyze --json``'s document.
A single-host trace is the same map with a one-host reduce: there is one code path.

A host whose file cannot be read is a :class:`HostFailure`: named with its reason, left out, the others
analysed.  Every figure is computed from integers the map returned, in the reduce, in host order: the
document is the same, to the last digit, whichever executor ran the map.

The events of all hosts together (``Trace`` of :func:`~.hosts.load_hosts`) are only built when asked
for (``load(...).events``): at pod size they are the one thing that does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from tfprof_towers.trace.analysis import (
    Analysis,
    devices_doc,
    links_doc,
    step_notes,
    trace_doc,
)
from tfprof_towers.trace.attribute import Breakdown, attribute
from tfprof_towers.trace.classify import NodeDevices
from tfprof_towers.trace.facts import DEFAULT_CUTOFFS, Cutoffs, HostFacts, TraceFacts
from tfprof_towers.trace.hosts import JoinedSteps, join_notes, join_steps, joined_window
from tfprof_towers.trace.links import Link, LinkParts, join_links, link_parts
from tfprof_towers.trace.load import Host, Trace, read_trace, trace_from_bytes
from tfprof_towers.trace.memory_peaks import DeviceMemory, sort_memory, timelines
from tfprof_towers.trace.producer import Producer, combine
from tfprof_towers.trace.steps import StepSources, StepTable, step_times
from tfprof_towers.trace.tasks import host_collective_ps, tasks_doc
from tfprof_towers.vocab.device_names import device_sort_key
from tfprof_towers.vocab.errors import TowersError

_PS = 1e12


@dataclass(frozen=True)
class HostJob:
    """One host to map: its file (or, for workers that cannot read it, its bytes), its name and task
    prefix, and what the analysis needs from outside the trace."""

    file: str
    name: str
    prefix: str = ""  # "/job:worker/task:1" ("" for a single host not named by a task)
    node_devices: NodeDevices | None = None
    kind: str | None = None
    edge_bytes: Mapping[str, int] | None = None
    cutoffs: Cutoffs = DEFAULT_CUTOFFS
    threads: int | None = None  # decoding threads (None: the reader's default)
    data: bytes | None = None  # the file's bytes, sent to a worker that cannot read ``file``


@dataclass(frozen=True)
class HostFailure:
    """A host whose trace could not be analysed, and why (one line)."""

    name: str
    file: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"host": self.name, "file": self.file, "reason": self.reason}


@dataclass(frozen=True, eq=False)
class HostResult:
    """One host, analysed (module docstring): everything the reduce needs, no events.  Times are on the
    host's own clock (picoseconds after ``origin_ns``)."""

    name: str
    task: str
    file: str
    origin_ns: int
    steps: StepTable
    window: str
    sources: StepSources
    device_steps: dict[str, StepTable]
    notes: tuple[str, ...]
    unread: dict[str, str]
    breakdown: Breakdown
    links: LinkParts
    timelines: dict[str, tuple[list[float], list[int]]]
    collective_ps: np.ndarray  # per window of ``steps``: time in collectives
    facts: HostFacts  # the rules' facts; also its producer, idle accelerators and allocators' peaks


def analyze_host(analysis: Analysis, name: str, task: str, file: str, links: LinkParts,
                 cutoffs: Cutoffs = DEFAULT_CUTOFFS) -> HostResult:
    """A :class:`HostResult` of one host's analysis (``links``: its link parts, which its ``link_rows``
    were joined from)."""
    t = analysis.trace
    return HostResult(
        name=name, task=task, file=file, origin_ns=t.origin_ns, steps=t.step_table, window=t.window,
        sources=t.step_sources, device_steps=dict(t.device_steps), notes=t.notes,
        unread=dict(t.unread), breakdown=analysis.breakdown, links=links,
        timelines=timelines(t.memory, analysis.memory), collective_ps=host_collective_ps(t),
        facts=HostFacts.of(analysis, cutoffs),
    )


def map_host(job: HostJob, keep_going: bool = True) -> HostResult | HostFailure:
    """The map: one host's file read, analysed and reduced to a :class:`HostResult`; a file that cannot
    be read (or analysed) is a :class:`HostFailure` with its one-line reason, never an exception
    (``keep_going=False``: the exception, as for a single host, whose failure is the command's)."""
    if not keep_going:
        return _map_host(job)
    try:
        return _map_host(job)
    except Exception as e:  # a host's bad file must not lose the other hosts' results
        return host_failure(job, e)


def host_failure(job: HostJob, exc: Exception) -> HostFailure:
    """The :class:`HostFailure` of a host whose read or analysis raised ``exc``: its one-line reason."""
    if isinstance(exc, TowersError):
        return HostFailure(job.name, job.file, str(exc))
    if isinstance(exc, MemoryError):
        return HostFailure(job.name, job.file, "out of memory while analysing this host's trace")
    return HostFailure(job.name, job.file, f"could not be analysed ({type(exc).__name__}: {exc})")


def _map_host(job: HostJob) -> HostResult:
    return map_trace(read_host(job), job)


def read_host(job: HostJob) -> Trace:
    """The host's events, as the map reads them (from ``job.data`` where a worker cannot read the file)."""
    if job.data is not None:  # sent to a worker that cannot read the file
        return trace_from_bytes(job.data, job.file, job.node_devices, job.prefix)
    return read_trace(Path(job.file), job.node_devices, job.prefix, 0, job.threads)


def map_trace(trace: Trace, job: HostJob) -> HostResult:
    """The map of a host whose events are read (:func:`read_host`): analysed and reduced to its result."""
    parts = link_parts(trace, job.edge_bytes)  # once: the analysis's links are these, joined
    breakdown = attribute(trace, threads=job.threads)  # the host's share of the cores, as its decoding
    analysis = Analysis(trace, breakdown, tuple(join_links([parts], job.kind)), job.kind)
    del trace
    return analyze_host(analysis, job.name, job.prefix, job.file, parts, job.cutoffs)


#: A progress callback: (hosts done, hosts in all, the host just done, its failure or None).
Progress = Callable[[int, int, str, "HostFailure | None"], None]


@dataclass(frozen=True, eq=False)
class PodAnalysis:
    """The reduce (module docstring): the hosts' results as one analysis of the whole job."""

    source: str
    results: tuple[HostResult, ...]
    failures: tuple[HostFailure, ...] = ()
    kind: str | None = None
    label: str = ""
    notes: tuple[str, ...] = ()  # where the hosts came from (locate's notes, the run's)
    made_up: tuple[str, ...] = ()  # notes on hosts no task names
    #: what ran the map (shown by ``analyze``; never in the document, the same whoever ran it)
    executor_note: str = ""
    #: the hosts' events as :func:`~.hosts.load_hosts` gives them (less the failed hosts), kept from the
    #: map's own read where the caller asked (``analyze_pod(keep_events=True)``: a report needs them)
    #: and they are small enough (:data:`~.executors.KEEP_EVENTS_BYTES`); else None
    events: Trace | None = None

    @property
    def multi_host(self) -> bool:
        return len(self.results) + len(self.failures) > 1

    @cached_property
    def joined(self) -> JoinedSteps:
        """The hosts' step windows on one clock (:func:`~.hosts.join_steps`, as the merged trace's)."""
        rs = self.results
        return join_steps([r.name for r in rs], [r.task for r in rs], [r.origin_ns for r in rs],
                          [r.steps for r in rs], [r.window for r in rs], [r.sources for r in rs])

    @property
    def origin_ns(self) -> int:
        return self.joined.origin_ns if self.results else 0

    def delta_ps(self, r: HostResult) -> int:
        """How much later than the pod's clock ``r``'s clock starts."""
        return (r.origin_ns - self.origin_ns) * 1000

    @property
    def hosts(self) -> tuple[Host, ...]:
        return self.joined.hosts

    @property
    def one_host(self) -> bool:
        """A single host read alone: its own steps, as it found them (no join)."""
        return len(self.results) == 1 and not self.multi_host

    @property
    def step_table(self) -> StepTable:
        return self.results[0].steps if self.one_host else self.joined.steps

    @property
    def sources(self) -> StepSources:
        return self.results[0].sources if self.one_host else self.joined.sources

    @property
    def window(self) -> str:
        return joined_window([r.window for r in self.results])

    @cached_property
    def step_time_ps(self) -> np.ndarray:
        return step_times(self.step_table, self.sources)

    @property
    def n_steps(self) -> int:
        return len(self.step_table)

    @cached_property
    def producer(self) -> Producer:
        if len(self.results) == 1:
            return self.results[0].facts.producer
        return combine([r.facts.producer for r in self.results])

    def devices(self, scale: float = 1.0) -> dict[str, Any]:
        """The hosts' :func:`~.analysis.devices_doc` (each figure times ``scale``), sorted by device."""
        merged = {d: v for r in self.results for d, v in devices_doc(r.breakdown, scale).items()}
        return {d: merged[d] for d in sorted(merged, key=device_sort_key)}

    @cached_property
    def link_rows(self) -> tuple[Link, ...]:
        return tuple(join_links([r.links for r in self.results], self.kind))

    @cached_property
    def idle_accelerators(self) -> tuple[str, ...]:
        idle = {d for r in self.results for d in r.facts.idle_accelerators}
        return tuple(sorted(idle, key=device_sort_key))

    @cached_property
    def unread(self) -> dict[str, str]:
        return {k: v for r in self.results for k, v in r.unread.items()}

    @cached_property
    def memory(self) -> tuple[DeviceMemory, ...]:
        return sort_memory([m.shifted(self.delta_ps(r)) for r in self.results for m in r.facts.memory])

    @cached_property
    def timelines(self) -> dict[str, tuple[list[float], list[int]]]:
        """Each allocator's bytes in use over time (the HTML page's), on the pod's clock."""
        out = {}
        for r in self.results:
            shift = self.delta_ps(r) / _PS
            for dev, (t, b) in r.timelines.items():
                out[dev] = ([x + shift for x in t] if shift else t, b)
        return out

    @cached_property
    def tasks(self) -> list[dict[str, Any]]:
        """Per host (task): its steps, after the earliest step start (:func:`~.tasks.tasks_doc`)."""
        return tasks_doc([(h, r.collective_ps) for h, r in zip(self.hosts, self.results)])

    @cached_property
    def facts(self) -> TraceFacts:
        """What the trace rules read, joined over the hosts."""
        return TraceFacts.reduce([r.facts for r in self.results], self.label, self.tasks, self.producer)

    @cached_property
    def trace_notes(self) -> tuple[str, ...]:
        """The notes of the trace: where the hosts came from, the clock, each host's own notes."""
        notes = list(self.notes)
        if not self.multi_host:
            return tuple(notes + list(self.made_up) + [n for r in self.results for n in r.notes])
        names = ", ".join(f"{r.name} = {r.task}" for r in self.results)
        notes.append(f"{len(self.results)} hosts analysed together: {names}")
        notes += self.made_up
        if self.failures:
            total = len(self.results) + len(self.failures)
            notes.append(f"{len(self.failures)} of {total} hosts could not be read and are left out: "
                         + "; ".join(f"{f.name}: {f.reason}" for f in self.failures))
        return tuple(join_notes(notes, self.hosts, [r.notes for r in self.results]))

    def to_doc(self, per_step: bool = False) -> dict[str, Any]:
        """``analyze --json``'s document (format: :mod:`tfprof_towers.trace`); ``per_step`` divides every
        count, time and byte figure by the steps."""
        n = self.n_steps
        scale = 1.0 / n if per_step and n else 1.0
        return trace_doc(self.source, self.producer, self.step_table, self.window, per_step,
                         self.step_time_ps, self.idle_accelerators, self.unread, self.devices(scale),
                         links_doc(self.link_rows, scale), self.tasks, self.memory,
                         [*self.trace_notes, *step_notes(self.step_table, self.sources)], self.kind,
                         {"hosts": len(self.results) + len(self.failures),
                          "failed_hosts": [f.to_json() for f in self.failures]})


__all__ = ["HostFailure", "HostJob", "HostResult", "PodAnalysis", "map_host"]
