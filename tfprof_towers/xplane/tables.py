"""The reader's records: plane and line tables, per-event stat columns, and :class:`RawSpace`.

Everything here is format-level: a plane's kind comes from its name's ``/host:`` or
``/device:`` prefix, and a line is *derived* when the profiler's own post-processing
wrote it (``Steps``, ``XLA Ops``, ... with ids counting down from -0xDEADBEEF): such
lines only repeat the events of other lines.  What an event *means* is the
classifier's business, not the reader's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .layout import Space
from .strings import Strings

#: Plane kinds (:attr:`PlaneTable.kinds`).
HOST, DEVICE, OTHER = 0, 1, 2

#: Derived lines repeat events of other lines (the profiler's ids count down from -0xDEADBEEF).
DERIVED_LINE_NAMES = frozenset(
    {
        "Steps",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "XLA Ops",
        "XLA Modules",
        "Launch Stats",
        "Source code",
        "XLA TraceMe",
        "Framework Ops",
        "Framework Name Scope",
        "SparseCore Ops",
    }
)
DERIVED_LINE_ID = -559038737


@dataclass(frozen=True)
class PlaneTable:
    """One entry per plane, in file order."""

    names: tuple[str, ...]
    kinds: np.ndarray  # int8 per plane: HOST, DEVICE or OTHER


@dataclass(frozen=True)
class LineTable:
    """One entry per line, in file order (planes' lines one after the other)."""

    names: tuple[str, ...]  # the line's name, else its display name, else its id as text
    plane: np.ndarray  # int64 per line: index into the plane table
    derived: np.ndarray  # bool per line
    event_count: np.ndarray  # int64 per line
    timestamp_ps: np.ndarray  # int64 per line: its timestamp, picoseconds after the space's origin


@dataclass(frozen=True)
class StatColumn:
    """One stat asked for, per event: the code of its value as a string (strings and bytes as
    UTF-8, refs resolved, integers printed; -1 when absent or a double), its integer value
    (doubles truncated; a ref's stat-metadata id; 0 for strings) and whether the event has it.
    ``any`` is False when no event has it: then the arrays are shared and read-only."""

    code: np.ndarray  # int32
    num: np.ndarray  # int64
    present: np.ndarray  # bool
    any: bool = True


@dataclass(frozen=True)
class RawSpace:
    """An XSpace as raw columns, one entry per event.

    Events are numbered with the events of derived lines last (each group in file
    order): the events of the other lines are the first ``n_kept``, a slice, not a mask.
    ``name`` and every stat's ``code`` index :attr:`strings`; a classifier may add its own
    strings to it (codes never change).
    """

    source: str
    planes: PlaneTable
    lines: LineTable
    event_line: np.ndarray  # int64 per event: index into the line table
    event_plane: np.ndarray  # int64 per event: index into the plane table
    name: np.ndarray  # int64 per event: code of its metadata's name ("" without metadata)
    start_ps: np.ndarray  # int64 per event: line timestamp + offset, after the origin
    dur_ps: np.ndarray  # int64 per event
    n_kept: int  # events on lines that are not derived
    stats: Mapping[str, StatColumn]  # every stat asked for, present or not
    strings: Strings
    hostnames: tuple[str, ...]
    origin_ns: int  # the earliest line timestamp (epoch ns): start_ps counts from it

    @property
    def n_events(self) -> int:
        return int(self.event_line.size)


@dataclass(frozen=True)
class Layout:
    """The space's tables, where each event's bytes are, and each plane's metadata."""

    planes: PlaneTable
    lines: LineTable
    event_line: np.ndarray  # int64 per event (derived lines' events last)
    n_kept: int
    event_start: np.ndarray | None  # int64 per event: byte range of the serialized XEvent
    event_end: np.ndarray | None
    event_md: list[tuple[np.ndarray, list[str], list]]  # per plane: sorted ids, names, metadata
    stat_md: list[dict[int, str]]  # per plane: stat metadata id -> name
    hostnames: tuple[str, ...]
    origin_ns: int


def plane_kind(name: str) -> int:
    return HOST if name.startswith("/host:") else DEVICE if name.startswith("/device:") else OTHER


def collect(space: Space) -> Layout:
    """The tables of a walked space, with the events renumbered so derived lines' come last."""
    names = [plane.name for plane in space.planes]
    lines = space.lines
    ids = lines.id.tolist()
    line_names = [nm or dn or str(i) for nm, dn, i in zip(lines.name, lines.display_name, ids)]
    line_derived = np.array(
        [nm in DERIVED_LINE_NAMES or abs(i - DERIVED_LINE_ID) < 64 for nm, i in zip(lines.name, ids)],
        dtype=bool,
    )
    order = np.argsort(line_derived, kind="stable")  # kept lines first
    counts = lines.event_count[order]
    event_start, event_end = lines.event_start, lines.event_end
    if (np.diff(line_derived[lines.event_count > 0].astype(np.int8)) < 0).any():  # a derived line mid-file
        first = np.cumsum(lines.event_count) - lines.event_count
        perm = np.arange(int(counts.sum())) + np.repeat(first[order] - (np.cumsum(counts) - counts), counts)
        event_start, event_end = event_start[perm], event_end[perm]
    event_md, stat_md = [], []
    for plane in space.planes:
        md = plane.event_metadata
        md_ids = np.array(sorted(md.keys()), dtype=np.int64)
        event_md.append((md_ids, [md[i].name for i in md_ids.tolist()], [md[i] for i in md_ids.tolist()]))
        stat_md.append({k: v.name for k, v in plane.stat_metadata.items()})
    ts = lines.timestamp_ns
    origin = int(ts.min()) if ts.size else 0
    return Layout(
        planes=PlaneTable(tuple(names), np.array([plane_kind(n) for n in names], dtype=np.int8)),
        lines=LineTable(
            names=tuple(line_names),
            plane=lines.plane,
            derived=line_derived,
            event_count=lines.event_count,
            # relative to the earliest line: epoch nanoseconds times 1000 would overflow int64
            timestamp_ps=(ts - origin) * 1000,
        ),
        event_line=np.repeat(order, counts),
        n_kept=int(lines.event_count[~line_derived].sum()),
        event_start=event_start,
        event_end=event_end,
        event_md=event_md,
        stat_md=stat_md,
        hostnames=tuple(space.hostnames),
        origin_ns=origin,
    )
