"""Load a TensorFlow trace: locate it, read it, classify its events, find its steps.

A :class:`Trace` holds its events as numpy columns (:class:`~.columns.EventColumns`, what the
analysis reads); ``Trace.events``, the pandas frame below, is made from them on first use.

``events`` columns (one row per event; derived lines such as ``Steps`` or
``TensorFlow Ops`` are left out, they only repeat other events):

===============  ==========  ===============================================================
plane            category    plane name (``/host:CPU``, ``/device:GPU:0``, ...)
device           category    device the event's time belongs to: the GPU plane, or for host
                             events the device of their TF node (``node_devices``), else the
                             host plane
line             category    thread or stream name
name             category    event name
op_type          category    TF op type (``MatMul``; ``_Send``), "" when none
tf_op            category    TF node name (host ops; ``tf_op``/``annotation`` of kernels)
start_ps         int64       start, picoseconds after the earliest line timestamp
dur_ps           int64       duration, picoseconds
category         category    one of :data:`~tfprof_towers.vocab.categories.EVENT_CATEGORIES`
bytes            int64       bytes moved (copies: ``memcpy_details``), else 0
src_device       category    copy / send source device, "" when none
dst_device       category    copy / send destination device, "" when none
edge             category    rendezvous edge name of ``_Send``/``_Recv``, "" when none
step             int64       step whose window holds the event's start, -1 when none
===============  ==========  ===============================================================

``steps`` columns: ``step`` (int64), ``start_ps``, ``end_ps`` (int64).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.trace.allocator_events import MEMORY_STATS, MemoryEvents, memory_events
from tfprof_towers.trace.classify import (
    AS_BYTES,
    CORRELATION_ID,
    STATS,
    STEP_NUM,
    NodeDevices,
    classify,
)
from tfprof_towers.trace.columns import EventColumns, events_frame
from tfprof_towers.trace.locate import locate
from tfprof_towers.trace.producer import TF_DATA_THREAD, UNKNOWN, Producer, detect_producer
from tfprof_towers.trace.steps import (
    REGION_GAP_PS,
    StepSources,
    StepTable,
    assign_steps,
    outside_ps,
    program_run_name,
    step_windows,
)
from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane import DEVICE, HOST, RawSpace, read_xspace, used_codes
from tfprof_towers.xplane.glibc_heap import release_free_memory
from tfprof_towers.xplane.tables import TPU_OP_LINE, tpu_planes

if TYPE_CHECKING:
    import pandas as pd

#: Every stat a trace is read with: classification's and the allocators' (:mod:`.allocator_events`).
READ_STATS = tuple(dict.fromkeys(STATS + MEMORY_STATS))
WHOLE_TRACE_NOTE = ("no step markers, no Steps line and no accelerator work: the whole trace is analysed as "
                    "one window")

__all__ = ["Host", "Trace", "load_trace", "trace_from_bytes", "trace_from_raw"]


@dataclass(frozen=True, eq=False)
class Host:
    """One host (trace file) of a trace: its name, the task prefix of its devices (``""`` for a
    single-host trace), and its own step windows (times on the trace's clock)."""

    name: str
    task: str
    steps: StepTable
    window: str


@dataclass(frozen=True, eq=False)
class Trace:
    """One decoded trace (one or several hosts): its events and steps, and how the step windows were found."""

    source: str
    columns: EventColumns
    step_table: StepTable  # the step windows (``steps`` as a DataFrame)
    window: str  # "markers" | "steps-line" | "modules" | "program-runs" | "busy-regions" | "whole-trace"
    hostnames: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    hosts: tuple[Host, ...] = ()  # per host file (task); empty: one host, not named
    origin_ns: int = 0  # the clock's zero: the earliest line timestamp, epoch nanoseconds
    #: who owns step windows (hosts' markers, planes' own ``Steps`` lines) and theirs; None: the trace's
    sources: StepSources | None = None
    #: devices broken down in windows of their own (their plane's ``Steps`` line, or in a multi-host
    #: trace their host's windows), by name; every other device uses ``step_table``
    device_steps: dict[str, StepTable] = field(default_factory=dict)
    planes: tuple[str, ...] = ()  # every plane's name (with its task prefix), lines or not
    #: the framework and vendor that wrote the trace (:mod:`.producer`)
    producer: Producer = UNKNOWN
    #: device planes with events that this tool cannot yet read right, and why (:func:`unread_planes`):
    #: left out of the findings, never called idle
    unread: dict[str, str] = field(default_factory=dict)
    memory: MemoryEvents = field(default_factory=MemoryEvents)  # the allocators' events (allocator_events.py)

    def steps_of(self, device: str) -> StepTable:
        """The step windows ``device`` is broken down in."""
        return self.device_steps.get(device, self.step_table)

    @property
    def step_sources(self) -> StepSources:
        host = self.hostnames[0] if self.hostnames else "host"
        return self.sources or StepSources((host,), (self.step_table,), {})

    @cached_property
    def events(self) -> pd.DataFrame:
        """The events as a DataFrame (module docstring), made on first use."""
        return events_frame(self.columns)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """The step windows as a DataFrame: ``step``, ``start_ps``, ``end_ps``."""
        return self.step_table.frame()


def load_trace(
    path: Path | str, run: str | None = None, node_devices: NodeDevices | None = None,
    threads: int | None = None,
) -> Trace:
    """Locate, read and decode one trace file (see the module docstring; ``threads``: see
    :func:`~tfprof_towers.xplane.read_xspace`)."""
    file, notes = locate(path, run)
    trace = read_trace(file, node_devices, threads=threads)
    return replace(trace, notes=notes + trace.notes)


def read_trace(
    file: Path, node_devices: NodeDevices | None = None, prefix: str = "", host: int = 0,
    threads: int | None = None,
) -> Trace:
    """Read and decode the trace file ``file`` (``prefix``: its task's name, see :func:`trace_from_raw`;
    ``threads``: decoding threads, see :func:`~tfprof_towers.xplane.read_xspace`)."""
    if file.name.endswith(".xplane.riegeli"):
        raise TraceError(
            f"{file}: the newer .xplane.riegeli form is not supported; "
            "export the profile as .xplane.pb (the TensorFlow profiler's default)"
        )
    # no other reference: see _from_box
    box = [read_xspace(file, READ_STATS, as_bytes=AS_BYTES, threads=threads)]
    return _from_box(box, node_devices, prefix, host)


def trace_from_bytes(
    data: bytes, source: str = "<bytes>", node_devices: NodeDevices | None = None, prefix: str = ""
) -> Trace:
    """Decode a serialized XSpace (``prefix``: its task's name, see :func:`trace_from_raw`); every way it
    can be broken raises :class:`TraceError`."""
    return _from_box([read_xspace(data, READ_STATS, label=source, as_bytes=AS_BYTES)], node_devices, prefix)


def trace_from_raw(
    raw: RawSpace, node_devices: NodeDevices | None = None, prefix: str = "", host: int = 0
) -> Trace:
    """Classify the events of a space read with :data:`~.classify.STATS`, find the steps, build the columns.

    ``prefix`` (a task's name, ``/job:worker/task:1``) goes before every device name; ``host``
    numbers the host in a multi-host trace.
    """
    return _from_box([raw], node_devices, prefix, host)


def _from_box(
    box: list[RawSpace], node_devices: NodeDevices | None, prefix: str = "", host: int = 0
) -> Trace:
    """:func:`trace_from_raw` of the space in ``box``, which it empties: where the caller keeps no
    other reference, the space's columns are let go as soon as they are used up."""
    raw = box.pop()
    producer = producer_of(raw)
    unread = unread_planes(raw, prefix)
    stats = raw.stats
    memory = memory_events(raw, stats, prefix)
    raw = replace(raw, stats={})  # each stat column is let go as soon as it is used up
    classes = classify(raw, stats, node_devices, prefix)
    k = raw.n_kept
    corr = stats[CORRELATION_ID]
    m = int(np.searchsorted(corr.index, k))  # the kept events' (derived lines' come after)
    corr_index, corr_value = corr.index[:m], corr.nums[:m]
    step_num = stats[STEP_NUM]
    del stats, corr
    host_name = prefix.rstrip("/") or (raw.hostnames[0] if raw.hostnames else "host")
    steps, window, sources = step_windows(raw, step_num, classes.category, host_name, prefix)
    del step_num
    strings = raw.strings
    plane_codes = strings.codes([prefix + p for p in raw.planes.names]).astype(np.int32)
    step = assign_steps(raw.start_ps[:k], steps)
    device_steps = {}
    for p, table in sources.planes.items():  # each device with a Steps line of its own: its own windows
        rows = np.flatnonzero(classes.device == plane_codes[p])
        step[rows] = assign_steps(raw.start_ps[rows], table)
        device_steps[prefix + raw.planes.names[p]] = table
    columns = EventColumns(
        strings=strings,
        line_name=strings.codes(list(raw.lines.names)).astype(np.int32),
        line_plane=plane_codes[raw.lines.plane],
        line_host=np.full(len(raw.lines.names), host, dtype=np.int16),
        line_kind=raw.planes.kinds[raw.lines.plane],
        line=raw.event_line[:k],
        name=raw.name[:k].astype(np.int32),
        device=classes.device,
        category=classes.category,
        tf_op=classes.tf_op,
        op_type=classes.op_type,
        bytes=classes.bytes,
        src=classes.src,
        dst=classes.dst,
        edge=classes.edge,
        start_ps=raw.start_ps[:k],
        dur_ps=raw.dur_ps[:k],
        step=step,
        corr_index=corr_index,
        corr=corr_value,
    )
    notes = ((WHOLE_TRACE_NOTE,) if window == "whole-trace" else ()) + (
        (regions_note(raw, classes.category, steps),) if window == "busy-regions" else ()) + (
        (runs_note(raw, classes.category, steps),) if window == "program-runs" else ()) + tuple(
        f"{plane}: {why}; left out of the findings (it is not idle)" for plane, why in unread.items())
    trace = Trace(raw.source, columns, steps, window, raw.hostnames, notes, (), raw.origin_ns, sources,
                  device_steps, tuple(prefix + p for p in raw.planes.names), producer, unread, memory)
    del raw, classes
    release_free_memory()
    return trace


def producer_of(raw: RawSpace) -> Producer:
    """Who wrote ``raw`` (:func:`~.producer.detect_producer`), from its planes, host threads and the
    distinct names of its host and device events (every event, derived lines' too)."""
    kinds = raw.planes.kinds
    items = raw.strings.items
    on = kinds.take(raw.event_plane)
    # what runs on tf.data's threads (a map function's ops) is the input pipeline's, not the framework's
    tf_data = np.array([bool(TF_DATA_THREAD.match(n)) for n in raw.lines.names] or [False])
    own = ~tf_data.take(raw.event_line) if tf_data.any() else np.ones(raw.n_events, dtype=bool)

    def names(mask: np.ndarray) -> list[str]:
        return [items[c] for c in used_codes(raw.name[mask]).tolist()]

    threads = [n for n, p in zip(raw.lines.names, raw.lines.plane.tolist()) if kinds[p] == HOST]
    return detect_producer(raw.planes.names, raw.planes.stats, threads, names((on == HOST) & own),
                           names(on == DEVICE))


_GPU_PLANE = re.compile(r"^/device:GPU:\d+$")


def unread_planes(raw: RawSpace, prefix: str = "") -> dict[str, str]:
    """Device planes with events whose kind this tool cannot yet read right, and why: a GPU's streams
    and a TPU chip's ``XLA Ops`` line are read; any other device plane with events (a TPU's SparseCore,
    a custom or vendor plane) is not, nor a TPU chip's plane without an ``XLA Ops`` line."""
    counts = np.zeros(len(raw.planes.names), dtype=np.int64)  # events per plane: its lines' counts
    np.add.at(counts, raw.lines.plane, raw.lines.event_count)
    tpu = tpu_planes(raw.planes.names)
    with_ops = {int(p) for nm, p, n in zip(raw.lines.names, raw.lines.plane.tolist(), raw.lines.event_count)
                if nm == TPU_OP_LINE and n > 0}
    out = {}
    for p, name in enumerate(raw.planes.names):
        if raw.planes.kinds[p] != DEVICE or not counts[p] or _GPU_PLANE.match(name):
            continue
        if tpu[p]:
            if p in with_ops:
                continue
            why = (f"a TPU plane with no event on an `{TPU_OP_LINE}` line ({int(counts[p])} events on other "
                   "lines)")
        else:
            why = f"a plane of a kind this tool does not read yet ({int(counts[p])} events)"
        out[prefix + name] = why
    return out


def regions_note(raw: RawSpace, category: np.ndarray, steps: StepTable) -> str:
    """What ``busy-regions`` windows mean, with the time they leave out."""
    outside, span = outside_ps(raw, category, steps)
    n = len(steps)
    return (f"no step markers and no Steps line: the accelerators' {n} busy region{'s' if n != 1 else ''} "
            f"(their work, split where all of them pause for {REGION_GAP_PS / 1e9:g} ms or more) "
            f"{'are' if n != 1 else 'is'} analysed as the steps; {outside / 1e12:.6g} s of the trace's "
            f"{span / 1e12:.6g} s is outside any accelerator work and is not analysed (not a launch or input "
            "problem: the program was doing something other than issuing work)")


def runs_note(raw: RawSpace, category: np.ndarray, steps: StepTable) -> str:
    """What ``program-runs`` windows mean, with the time they leave out."""
    outside, span = outside_ps(raw, category, steps)
    name = program_run_name(raw, category)
    return (f"no step markers and no Steps line: the {len(steps)} runs of `{name}`, the program the host ran "
            "most often while the accelerators worked, are analysed as the steps "
            f"(each from one run's start to the next one's); {outside / 1e12:.6g} s of the trace's "
            f"{span / 1e12:.6g} s is outside them, outside any accelerator work or before the first run, "
            "and is not analysed")
