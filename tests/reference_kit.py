"""Plain reference versions the tests check the package's vectorised code against, and small
conveniences only tests use (the tool itself never needs them)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tfprof_towers.rundir.scaling import AT
from tfprof_towers.trace.attribute import sweep
from tfprof_towers.xplane.events import Events, decode_event_ranges
from tfprof_towers.xplane.layout import Lines, read_lines, read_planes
from tfprof_towers.xplane.wire import Buffer


@dataclass(frozen=True)
class CopyDetails:
    """A parsed ``memcpy_details`` string (either form)."""

    size: int
    dest: int
    kind_src: str
    kind_dst: str


def parse_memcpy_details(text: str) -> CopyDetails:
    """``kind_src:<k> kind_dst:<k> size:<n> dest:<d> async:<a>``, or the older ``size:.. dest:..``."""
    fields = dict(re.findall(r"(\w+):(\S+)", text))

    def as_int(key: str, default: int, limit: int) -> int:
        try:
            value = int(fields.get(key, default))
        except ValueError:
            return default
        return value if 0 <= value < limit else default

    return CopyDetails(
        as_int("size", 0, 1 << 62), as_int("dest", -1, 1 << 20), fields.get("kind_src", ""),
        fields.get("kind_dst", ""),
    )


def kind_of(memory_kind: str) -> str:
    k = memory_kind.lower()
    if k in ("device", "array"):
        return "d"
    if k in ("pageable", "pinned", "host", "managed"):
        return "h"
    return "?"


def kinds_category(p: CopyDetails) -> str | None:
    pair = kind_of(p.kind_src) + kind_of(p.kind_dst)
    return {"hd": "h2d", "dh": "d2h", "dd": "d2d"}.get(pair)


@dataclass(frozen=True)
class Space:
    planes: list  # XPlane messages holding everything but the lines
    hostnames: tuple[str, ...]
    lines: Lines


def read_space(buf: Buffer, data: bytes | memoryview) -> Space:
    """The layout of the XSpace in ``data``, every line walked at once (small spaces, tests)."""
    p = read_planes(buf, data)
    return Space(p.planes, p.hostnames, read_lines(buf, p.line_plane, p.line_start, p.line_end))


def decode_events(chunks: list[bytes] | tuple[bytes, ...], lengths: np.ndarray | None = None) -> Events:
    """Decode serialized XEvent messages (given one ``bytes`` per event) into arrays."""
    n = len(chunks)
    if lengths is None:
        lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=n)
    end = np.cumsum(lengths, dtype=np.int64)
    return decode_event_ranges(Buffer.of(b"".join(chunks)), end - lengths, end)


def sweep_float(
    group: np.ndarray, rank: np.ndarray, s: np.ndarray, e: np.ndarray, n_groups: int, n_rank: int
) -> np.ndarray:
    """:func:`sweep` as float64 (the brute-force test's interface)."""
    return sweep(group, rank, s, e, n_groups, n_rank).astype(np.float64)


def is_point_name(folder: str) -> bool:
    """Whether a folder under ``variants/`` is a sweep point's (not one of the run's own variants)."""
    name, sep, count = folder.rpartition(AT)
    return bool(sep and name and count.isdigit())
