"""The reader's records: plane and line tables, per-event stat columns, and :class:`RawSpace`.

Everything here is format-level: a plane's kind comes from its name's ``/host:`` or
``/device:`` prefix, and a line is *derived* when the profiler's own post-processing
wrote it (``Steps``, ``XLA Ops``, ... with ids counting down from -0xDEADBEEF): such
lines only repeat the events of other lines.  What an event *means* is the
classifier's business, not the reader's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.strings import Strings

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
        "Async XLA Ops",
    }
)
DERIVED_LINE_ID = -559038737
#: A TPU chip's plane (``/device:TPU:0``): its ``XLA Ops`` line is the chip's own record of the ops it ran
#: (XProf's op line for TPUs), not a copy of other lines' events; its other lines (``XLA Modules``,
#: ``Async XLA Ops``, ``XLA TraceMe``, ``Steps``, ...) are derived (nested in, or beside, the same time).
TPU_PLANE = re.compile(r"^/device:TPU:\d+$")
TPU_OP_LINE = "XLA Ops"


@dataclass(frozen=True)
class PlaneTable:
    """One entry per plane, in file order."""

    names: tuple[str, ...]
    kinds: np.ndarray  # int8 per plane: HOST, DEVICE or OTHER
    #: per plane, its own stats (``XPlane.stats``: ``device_vendor``, ``compute_cap_major``, ...) by name;
    #: a reference value is given as the text it names
    stats: tuple[Mapping[str, str | int | float], ...] = field(default_factory=tuple)
    #: per plane, its own numeric stats (``memory_size``, ``core_count``, ...) by name; () when not read
    numbers: tuple[Mapping[str, float], ...] = ()


@dataclass(frozen=True)
class LineTable:
    """One entry per line, in file order (planes' lines one after the other)."""

    names: tuple[str, ...]  # the line's name, else its display name, else its id as text
    plane: np.ndarray  # int64 per line: index into the plane table
    derived: np.ndarray  # bool per line
    event_count: np.ndarray  # int64 per line
    timestamp_ps: np.ndarray  # int64 per line: its timestamp, picoseconds after the space's origin


#: :attr:`StatColumn.codes` of an integer value: its text is made only when asked for (``code``).
NUMBER = -2


@dataclass(frozen=True, eq=False)
class StatColumn:
    """One stat asked for, stored for the events that have it (``index``, ascending).

    Per such event: the code of its value as a string (strings and bytes as UTF-8, refs
    resolved; :data:`NUMBER` for integers, whose text is made on demand; -1 for doubles),
    and its integer value (doubles truncated; a ref's stat-metadata id; 0 for strings).  A
    stat read *as bytes* (``read_xspace(as_bytes=...)``) keeps its raw bytes in ``text``
    instead of string codes (-1), or, read with a parser, only what the parser made of
    them, in ``parsed``.  ``present``, ``code`` and ``num`` give the same per event.
    """

    n: int  # events in the space
    index: np.ndarray  # int64: the events that have the stat, ascending
    codes: np.ndarray  # int32 per index
    nums: np.ndarray  # int64 per index
    strings: Strings | None = None  # the space's table (for ``code``)
    text: Ragged | None = None  # the raw bytes per index, for stats read as bytes
    parsed: Mapping[str, np.ndarray] | None = None  # per index, for stats read with a parser
    reals: np.ndarray | None = None  # float64 per index (doubles exact); None: no value is a double

    @property
    def values(self) -> np.ndarray:
        """Per index, the value as a number: float64, doubles exact (``nums`` truncates them)."""
        return self.nums.astype(np.float64) if self.reals is None else self.reals

    @property
    def any(self) -> bool:
        return bool(self.index.size)

    @property
    def present(self) -> np.ndarray:
        out = np.zeros(self.n, dtype=bool)
        out[self.index] = True
        return out

    @property
    def num(self) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.int64)
        out[self.index] = self.nums
        return out

    @property
    def code(self) -> np.ndarray:
        """Per event: the code of its value's text (-1 when absent or a double)."""
        out = np.full(self.n, -1, dtype=np.int32)
        codes = self.codes.copy()
        if self.strings is not None:
            numbers = np.flatnonzero(codes == NUMBER)
            if numbers.size:
                codes[numbers] = self.strings.codes([str(v) for v in self.nums[numbers].tolist()])
            if self.text is not None:
                codes[:] = self.strings.codes(self.text.texts())
        out[self.index] = codes
        return out


@dataclass(frozen=True)
class RowNames:
    """The names of the events whose stat values a parser is given: per row, the code of its
    event's name in ``strings``."""

    codes: np.ndarray
    strings: Strings


def empty_stat(n: int, strings: Strings | None = None) -> StatColumn:
    z = np.zeros(0, dtype=np.int64)
    return StatColumn(n, z, z.astype(np.int32), z, strings)


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
    event_line: np.ndarray  # int32 per event: index into the line table
    event_plane: np.ndarray  # int16 (int32 past 32767 planes) per event: index into the plane table
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


def plane_kind(name: str) -> int:
    return HOST if name.startswith("/host:") else DEVICE if name.startswith("/device:") else OTHER


def derived_lines(names: list[str], ids: np.ndarray, on_tpu: np.ndarray | None = None) -> np.ndarray:
    """Which lines are derived (repeat other lines' events), from their names (a line's name, else its
    display name) and ids.  On a TPU chip's plane (``on_tpu``, per line: :data:`TPU_PLANE`) the ``XLA Ops``
    line is the one line kept, whatever its id, and every other line (modules, async ops, TraceMe, steps,
    counters) is not time: a chip's lines nest in, or sit beside, the same time."""
    tpu = on_tpu.tolist() if on_tpu is not None else [False] * len(names)
    return np.array(
        [(nm != TPU_OP_LINE) if t else (nm in DERIVED_LINE_NAMES or abs(i - DERIVED_LINE_ID) < 64)
         for nm, i, t in zip(names, ids.tolist(), tpu)],
        dtype=bool,
    )


def tpu_planes(names: list[str] | tuple[str, ...]) -> np.ndarray:
    """Per plane: a TPU chip's (:data:`TPU_PLANE`)."""
    return np.array([bool(TPU_PLANE.match(nm)) for nm in names], dtype=bool)
