"""Read an XSpace (a ``*.xplane.pb`` path, or its bytes) into :class:`~.tables.RawSpace` columns.

``read_xspace(source, stats=("step", ...))`` reads the file once into a padded
numpy buffer (:meth:`~.wire.Buffer.read`: the read is the only copy), walks the
layout (:func:`~.layout.read_space`), decodes every event's header and the stats
asked for (:func:`~.events.decode_event_ranges`) and turns names and string stats
into codes (:mod:`.columns`).  Every way the bytes can be broken raises one
:class:`~tfprof_towers.errors.TraceError` with a one-line message.

A call shares no state with another (its string table is its own), so several files can
be read in parallel, one per worker process; and :func:`decode_space` is the seam to
decode a walked layout differently (plane by plane, into preallocated columns) without
touching the wire-format modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..errors import TraceError
from .columns import MAX_STATS, event_names, metadata_stat_fallback, stat_columns, wanted_table
from .events import decode_event_ranges
from .layout import read_space
from .strings import Strings
from .tables import Layout, RawSpace, collect
from .wire import Buffer, Malformed

RIEGELI_MAGIC = b"\x83\xaf\x70\xd1\x0d\x88\x4a\x3f"


def read_xspace(
    source: Path | str | bytes, stats: Sequence[str] = (), label: str | None = None
) -> RawSpace:
    """Read a file (``source`` a path) or a serialized XSpace (``source`` bytes).

    ``stats``: the names of the stats to decode (every other stat is skipped unread);
    ``label``: how messages and :attr:`RawSpace.source` name it (default: the path, or
    ``"<bytes>"``).
    """
    if isinstance(source, bytes | bytearray):
        data = bytes(source)
        return decode_buffer(Buffer.of(data), data, "<bytes>" if label is None else label, stats)
    path = Path(source)
    try:
        buf, view = Buffer.read(path)  # read into a padded buffer: no copy of the file's bytes
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return decode_buffer(buf, view, str(path) if label is None else label, stats)


def decode_buffer(
    buf: Buffer, data: bytes | memoryview, source: str, stats: Sequence[str] = ()
) -> RawSpace:
    """:func:`read_xspace` of bytes already in a buffer (``data``: the same bytes, indexable)."""
    names = tuple(dict.fromkeys(stats))
    if len(names) > MAX_STATS:
        raise ValueError(f"at most {MAX_STATS} stats can be read at once, not {len(names)}")
    try:
        # the layout is handed over, not kept here: decode_space lets go of its event ranges
        return decode_space(buf, read_layout(buf, data, source), source, names)
    except Malformed as exc:
        raise TraceError(f"{source}: corrupted trace ({exc})") from None


def read_layout(buf: Buffer, data: bytes | memoryview, source: str) -> Layout:
    """Walk the space's planes and lines; a :class:`TraceError` when it is not a readable XSpace."""
    if not buf.size:
        raise TraceError(f"{source}: empty file")
    if bytes(data[: len(RIEGELI_MAGIC)]) == RIEGELI_MAGIC:
        raise TraceError(f"{source}: this is the newer .xplane.riegeli form, which is not supported")
    try:
        space = read_space(buf, data)
    except Malformed:
        raise TraceError(
            f"{source}: not a readable XSpace trace (the protobuf data is corrupt or truncated)"
        ) from None
    if not space.planes:
        raise TraceError(f"{source}: no profiler planes in it: not an XSpace trace")
    return collect(space)


def decode_space(buf: Buffer, layout: Layout, source: str, stats: tuple[str, ...]) -> RawSpace:
    """Decode every event of a walked layout; raises :class:`~.wire.Malformed` on corrupt events.

    Each intermediate array is let go as soon as it is used up (pass ``layout`` without keeping
    a reference: its event ranges go once the events are decoded), so that the peak memory
    stays near the columns' own size plus the file's.
    """
    event_plane = layout.lines.plane[layout.event_line]
    wanted = wanted_table(layout, stats)
    ev = decode_event_ranges(buf, layout.event_start, layout.event_end, wanted.filter, values=True)
    layout = replace(layout, event_start=None, event_end=None)
    start_ps = layout.lines.timestamp_ps[layout.event_line]
    start_ps += ev.offset_ps
    dur_ps = ev.duration_ps

    strings = Strings()
    name_code, md_index = event_names(layout, event_plane, ev, strings)
    columns = stat_columns(layout, ev, event_plane, wanted, strings)
    del ev, wanted
    columns = metadata_stat_fallback(layout, event_plane, md_index, columns, strings)
    return RawSpace(
        source=source,
        planes=layout.planes,
        lines=layout.lines,
        event_line=layout.event_line,
        event_plane=event_plane,
        name=name_code,
        start_ps=start_ps,
        dur_ps=dur_ps,
        n_kept=layout.n_kept,
        stats=columns,
        strings=strings,
        hostnames=layout.hostnames,
        origin_ns=layout.origin_ns,
    )
