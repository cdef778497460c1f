"""Decode a whole space a batch of lines at a time into the columns of a :class:`~.tables.RawSpace`.

Lines are taken in file order, in batches of about :data:`BATCH_BYTES` (a line is never
split): each batch's lines are walked (:func:`~.layout.read_lines`), its events decoded
(:func:`~.events.decode_event_ranges`) and turned into compact columns -- times, name
codes, line, and the sparse stats of :func:`~.columns.batch_stats` -- before the next
batch starts, so the walk's and the decoder's temporaries never exist for more than one
batch, and a mapped file's pages are let go once their batch is done
(:meth:`~.wire.Buffer.release`).  The batches' columns are then joined, the events of
derived lines last (their stats are never read).

Times are counted from the earliest line timestamp of the space; until the last batch is
walked it is not known, so each batch counts from the first batch's and the joined column
is shifted once at the end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .columns import Parser, StatPart, Tables, batch_stats, build_tables, event_names, stat_filter
from .events import decode_event_ranges
from .layout import Lines, Planes, read_lines
from .memory import release_free_memory
from .ragged import Ragged
from .strings import Strings
from .tables import LineTable, PlaneTable, RawSpace, StatColumn, derived_lines, empty_stat, plane_kind
from .wire import Buffer

#: Bytes of lines walked and decoded at once.
BATCH_BYTES = 16 << 20
#: Events whose columns are made at once (the decoder itself works in blocks of ``events.BLOCK``).
DECODE_BLOCK = 1 << 16


def batches(start: np.ndarray, end: np.ndarray, limit: int = BATCH_BYTES) -> list[np.ndarray]:
    """Consecutive runs of lines of about ``limit`` bytes (at least one line each)."""
    size = np.maximum(end - start, 0)
    group = (np.cumsum(size) - size) // max(limit, 1)
    cuts = np.flatnonzero(np.diff(group)) + 1
    return [b for b in np.split(np.arange(start.size), cuts) if b.size]


@dataclass
class _Columns:
    """Per-event columns of the batches so far: ``kept`` (lines that are not derived) and ``derived``."""

    kept: dict[str, list[np.ndarray]]
    derived: dict[str, list[np.ndarray]]
    stats: dict[int, list[StatPart]]
    lines: list[Lines]
    n_kept: int = 0


def decode_space(
    buf: Buffer,
    planes: Planes,
    source: str,
    stats: tuple[str, ...],
    as_bytes: Sequence[str] | Mapping[str, Parser | None] = (),
) -> RawSpace:
    """Decode every event of the space whose planes are ``planes``; raises :class:`~.wire.Malformed`.

    ``as_bytes``: stats read as bytes; a mapping gives each a parser (:data:`~.columns.Parser`),
    applied to each batch's values: only its columns are kept (:attr:`StatColumn.parsed`).
    """
    if not isinstance(as_bytes, Mapping):
        as_bytes = dict.fromkeys(as_bytes)
    strings = Strings()
    n_planes = len(planes.planes)
    with_lines = np.bincount(planes.line_plane, minlength=n_planes) > 0
    tables = build_tables(planes.planes, with_lines, stats, as_bytes, strings)
    keys = ("start", "dur", "name", "line")
    cols = _Columns({k: [] for k in keys}, {k: [] for k in keys}, {i: [] for i in range(len(stats))}, [])
    origin = None
    offset = 0
    for idx in batches(planes.line_start, planes.line_end):
        lines = read_lines(buf, planes.line_plane[idx], planes.line_start[idx], planes.line_end[idx])
        if origin is None:
            origin = int(lines.timestamp_ns.min())
        _decode_batch(buf, lines, offset, origin, tables, strings, cols)
        offset += idx.size
        buf.release(int(planes.line_start[idx].min()), int(planes.line_end[idx].max()))
        release_free_memory()  # the batches' temporaries, when they add up
    raw = _assemble(planes, cols, tables, strings, origin or 0, source)
    del cols
    release_free_memory()  # the batches' temporaries: the allocator would keep them
    return raw


def _decode_batch(
    buf: Buffer, lines: Lines, offset: int, origin: int, tables: Tables, strings: Strings, cols: _Columns
) -> None:
    """Decode one batch's events, a block of :data:`DECODE_BLOCK` at a time (a line of a million
    events costs a block's temporaries, not a million events')."""
    derived = derived_lines(lines.name, lines.id)
    ev_line = np.repeat(np.arange(lines.plane.size, dtype=np.int32), lines.event_count)
    starts, ends = lines.event_start, lines.event_end
    stamp = (lines.timestamp_ns - origin) * 1000
    cols.lines.append(replace(lines, event_start=starts[:0], event_end=ends[:0]))
    for lo in range(0, ev_line.size, DECODE_BLOCK):
        block = slice(lo, min(ev_line.size, lo + DECODE_BLOCK))
        line = ev_line[block]
        plane = lines.plane[line]
        kept = ~derived[line]
        group = np.where(kept, plane, tables.n_planes)
        ev = decode_event_ranges(buf, starts[block], ends[block], stat_filter(tables, group), values=True)
        start = stamp[line]
        start += ev.offset_ps
        name, md_local = event_names(tables, plane, ev.metadata_id)
        found = batch_stats(buf, ev, plane, kept, md_local, tables, strings, name)
        dur = ev.duration_ps
        del ev
        rank = np.cumsum(kept) - 1
        for wi, part in found.items():
            cols.stats[wi].append(replace(part, owner=cols.n_kept + rank[part.owner]))
        every = {"start": start, "dur": dur, "name": name, "line": line + np.int32(offset)}
        if kept.all():
            for k, v in every.items():
                cols.kept[k].append(v)
        else:
            for k, v in every.items():
                cols.kept[k].append(v[kept])
                cols.derived[k].append(v[~kept])
        cols.n_kept += int(kept.sum())


def _join(parts: list[np.ndarray], dtype) -> np.ndarray:
    """Concatenate and let go of the parts (the list is emptied)."""
    out = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
    parts.clear()
    return out


def _uniform(a: np.ndarray) -> np.ndarray:
    """``a``, as one value broadcast (no memory) where all its values are equal."""
    if a.size > 1 and (a == a[0]).all():
        return np.broadcast_to(a[:1].copy(), a.shape)
    return a


def _assemble(
    planes: Planes, cols: _Columns, tables: Tables, strings: Strings, first_origin: int, source: str
) -> RawSpace:
    names = [p.name for p in planes.planes]
    ls = cols.lines
    plane = np.concatenate([x.plane for x in ls]) if ls else np.zeros(0, np.int64)
    ids = np.concatenate([x.id for x in ls]) if ls else np.zeros(0, np.int64)
    ts = np.concatenate([x.timestamp_ns for x in ls]) if ls else np.zeros(0, np.int64)
    counts = np.concatenate([x.event_count for x in ls]) if ls else np.zeros(0, np.int64)
    line_names = [nm or dn or str(i) for x in ls for nm, dn, i in zip(x.name, x.display_name, x.id.tolist())]
    derived = derived_lines([nm for x in ls for nm in x.name], ids)
    origin = int(ts.min()) if ts.size else 0
    columns = {}
    for key, dtype in (("start", np.int64), ("dur", np.int64), ("name", np.int64), ("line", np.int32)):
        columns[key] = _join(cols.kept[key] + cols.derived[key], dtype)
        cols.kept[key].clear()
        cols.derived[key].clear()
    if origin != first_origin:
        columns["start"] -= (origin - first_origin) * 1000
    n = columns["start"].size
    stat_columns = {}
    for wi, name in enumerate(tables.names):
        parts = cols.stats[wi]
        if not parts:
            stat_columns[name] = empty_stat(n, strings)
            continue
        text = parsed = None
        if tables.parsers[wi] is not None:
            parsed = {k: np.concatenate([p.parsed[k] for p in parts]) for k in parts[0].parsed}
        elif tables.as_bytes[wi]:
            text = Ragged.concatenate([p.text for p in parts])
        stat_columns[name] = StatColumn(
            n,
            np.concatenate([p.owner for p in parts]),
            _uniform(np.concatenate([p.codes for p in parts])),
            _uniform(np.concatenate([p.nums for p in parts])),
            strings,
            text,
            parsed,
        )
        parts.clear()
    narrow = np.int16 if len(names) < (1 << 15) else np.int32
    return RawSpace(
        source=source,
        planes=PlaneTable(tuple(names), np.array([plane_kind(nm) for nm in names], dtype=np.int8)),
        lines=LineTable(tuple(line_names), plane, derived, counts, (ts - origin) * 1000),
        event_line=columns["line"],
        event_plane=plane.astype(narrow)[columns["line"]],
        name=columns["name"],
        start_ps=columns["start"],
        dur_ps=columns["dur"],
        n_kept=cols.n_kept,
        stats=stat_columns,
        strings=strings,
        hostnames=planes.hostnames,
        origin_ns=origin,
    )
