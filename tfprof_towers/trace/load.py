"""Load a TensorFlow trace: locate it, read it, classify its events, find its steps.

``load_trace(path)`` accepts an ``*.xplane.pb`` file, or any directory holding
``plugins/profile/<run>/<host>.xplane.pb`` (:mod:`.locate`; ``run=`` chooses), and
returns a :class:`Trace`::

    locate  ->  tfprof_towers.xplane.read_xspace (raw columns)  ->  classify  ->  steps  ->  frame

No event ever becomes a Python object, and strings become categorical codes once:
anything parsed from a string -- ``memcpy_details``, rendezvous keys, ``node:OpType``
names -- is parsed once per distinct string, never per event.

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
category         category    one of :data:`~tfprof_towers.categories.EVENT_CATEGORIES`
bytes            int64       bytes moved (copies: ``memcpy_details``), else 0
src_device       category    copy / send source device, "" when none
dst_device       category    copy / send destination device, "" when none
edge             category    rendezvous edge name of ``_Send``/``_Recv``, "" when none
step             int64       step whose window holds the event's start, -1 when none
===============  ==========  ===============================================================

``steps`` columns: ``step`` (int64), ``start_ps``, ``end_ps`` (int64).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..xplane import RawSpace, categorical, categorical_by, read_xspace
from .classify import STATS, STEP_NUM, Classes, classify
from .codes import CATEGORY_DTYPE
from .locate import locate
from .steps import assign_steps, step_windows

WHOLE_TRACE_NOTE = "no step markers and no Steps line: the whole trace is analysed as one window"


@dataclass(frozen=True)
class Trace:
    """One decoded trace: its events and steps, and how the step windows were found."""

    source: str
    events: pd.DataFrame
    steps: pd.DataFrame
    window: str  # "markers" | "steps-line" | "whole-trace"
    hostnames: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


def load_trace(
    path: Path | str, run: str | None = None, node_devices: Mapping[str, str] | None = None
) -> Trace:
    """Locate, read and decode a trace (see the module docstring)."""
    file, notes = locate(path, run)
    if file.name.endswith(".xplane.riegeli"):
        raise TraceError(
            f"{file}: the newer .xplane.riegeli form is not supported; "
            "export the profile as .xplane.pb (the TensorFlow profiler's default)"
        )
    trace = trace_from_raw(read_xspace(file, STATS), node_devices)
    return replace(trace, notes=notes + trace.notes)


def trace_from_bytes(
    data: bytes, source: str = "<bytes>", node_devices: Mapping[str, str] | None = None
) -> Trace:
    """Decode a serialized XSpace; every way it can be broken raises :class:`TraceError`."""
    return trace_from_raw(read_xspace(data, STATS, label=source), node_devices)


def trace_from_raw(raw: RawSpace, node_devices: Mapping[str, str] | None = None) -> Trace:
    """Classify the events of a space read with :data:`~.classify.STATS`, find the steps, build the frames."""
    stats = raw.stats
    raw = replace(raw, stats={})  # each stat column is let go as soon as it is used up
    classes = classify(raw, stats, node_devices)
    step_num = stats[STEP_NUM]
    del stats
    steps, window = step_windows(raw, step_num, classes.category)
    del step_num
    step = assign_steps(raw.start_ps[: raw.n_kept], steps)
    events = event_frame(raw, classes, step)
    notes = (WHOLE_TRACE_NOTE,) if window == "whole-trace" else ()
    return Trace(raw.source, events, steps, window, raw.hostnames, notes)


# ---------------------------------------------------------------------------------------------
# The events frame

EVENT_COLUMNS: dict[str, object] = {
    "plane": "category",
    "device": "category",
    "line": "category",
    "name": "category",
    "op_type": "category",
    "tf_op": "category",
    "start_ps": "int64",
    "dur_ps": "int64",
    "category": CATEGORY_DTYPE,
    "bytes": "int64",
    "src_device": "category",
    "dst_device": "category",
    "edge": "category",
    "step": "int64",
}


def empty_events() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})


def event_frame(raw: RawSpace, classes: Classes, step: np.ndarray) -> pd.DataFrame:
    """The ``events`` frame: the first ``n_kept`` events (derived lines come after them)."""
    k = raw.n_kept
    if not k:
        return empty_events()
    strings = raw.strings
    plane_codes = strings.codes(list(raw.planes.names))
    line_codes = strings.codes(list(raw.lines.names))
    lines = raw.event_line[:k]
    kept_lines = np.flatnonzero(~raw.lines.derived & (raw.lines.event_count > 0))
    plane = categorical_by(plane_codes[raw.lines.plane], lines, kept_lines, strings)
    return pd.DataFrame(
        {
            "plane": plane,
            "device": (
                categorical_by(plane_codes[raw.lines.plane], lines, kept_lines, strings)
                if classes.device_is_plane
                else categorical(classes.device[:k], strings)
            ),
            "line": categorical_by(line_codes, lines, kept_lines, strings),
            "name": categorical(raw.name[:k], strings),
            "op_type": categorical(classes.op_type[:k], strings),
            "tf_op": categorical(classes.tf_op[:k], strings),
            "start_ps": raw.start_ps[:k],
            "dur_ps": raw.dur_ps[:k],
            "category": pd.Categorical.from_codes(classes.category[:k], dtype=CATEGORY_DTYPE, validate=False),
            "bytes": classes.bytes[:k],
            "src_device": categorical(classes.src[:k], strings),
            "dst_device": categorical(classes.dst[:k], strings),
            "edge": categorical(classes.edge[:k], strings),
            "step": step.astype(np.int64),
        },
        copy=False,  # the columns are fresh arrays: no copy into consolidated blocks
    )
