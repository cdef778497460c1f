"""Decode a whole space a batch of lines at a time into the columns of a :class:`~.tables.RawSpace`.

Lines are taken in file order, in batches of about :data:`BATCH_BYTES` (a line is never
split): each batch's lines are walked (:func:`~.layout.read_lines`), its events decoded
(:func:`~.events.decode_event_ranges`) a block at a time and turned into compact columns
-- times, name codes, line, and the sparse stats of :func:`~.columns.batch_stats` -- so
the walk's and the decoder's temporaries never exist for more than one block, and a
mapped file's pages are let go once their batch is done (:meth:`~.wire.Buffer.release`).
The batches' columns are then joined, the events of derived lines last (their stats are
never read).

Batches are decoded on worker threads (:mod:`.parallel`; numpy lets go of the GIL inside
its loops), a few ahead of the one being joined.  A batch writes nothing shared: the
strings it meets first get provisional codes (:class:`~.strings.PendingStrings`), made
final as the batches are joined in file order, so the result is the same, code for code,
whatever the number of threads.

Times are counted from the earliest line timestamp of the space; until the last batch is
walked it is not known, so each batch counts from its own, is shifted to the first
batch's when joined, and the joined column is shifted once at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from tfprof_towers.xplane.columns import (
    Parser,
    StatPart,
    Tables,
    batch_stats,
    build_tables,
    event_names,
    stat_filter,
)
from tfprof_towers.xplane.events import decode_event_ranges
from tfprof_towers.xplane.glibc_heap import release_free_memory
from tfprof_towers.xplane.layout import Lines, Planes, read_lines
from tfprof_towers.xplane.parallel import Stopped, decode_threads, in_order
from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.strings import PendingStrings, Strings
from tfprof_towers.xplane.tables import (
    LineTable,
    PlaneTable,
    RawSpace,
    StatColumn,
    derived_lines,
    empty_stat,
    plane_kind,
    tpu_planes,
)
from tfprof_towers.xplane.wire import Buffer

#: Bytes of lines walked and decoded at once.
BATCH_BYTES = 16 << 20
#: Events whose columns are made at once (the decoder itself works in blocks of ``events.BLOCK``).
DECODE_BLOCK = 1 << 16


def batches(
    start: np.ndarray, end: np.ndarray, limit: int | None = None, threads: int = 1
) -> list[np.ndarray]:
    """Consecutive runs of lines of at most about ``limit`` bytes (default :data:`BATCH_BYTES`; at
    least one line each), as many as a multiple of ``threads`` and of about equal size, so that
    no thread is left with the last batch alone while the others wait."""
    limit = BATCH_BYTES if limit is None else limit
    size = np.maximum(end - start, 0)
    total = int(size.sum())
    count = -(-total // max(limit, 1))
    count = max(1, -(-count // threads) * threads)
    group = (np.cumsum(size) - size) * count // max(total, 1)
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
    threads: int | None = None,
) -> RawSpace:
    """Decode every event of the space whose planes are ``planes``; raises :class:`~.wire.Malformed`.

    ``as_bytes``: stats read as bytes; a mapping gives each a parser (:data:`~.columns.Parser`),
    applied to each batch's values: only its columns are kept (:attr:`StatColumn.parsed`);
    ``threads``: decoding threads (default :func:`~.parallel.decode_threads`).
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
    threads = decode_threads(threads)
    work = batches(planes.line_start, planes.line_end, threads=threads)
    stop = threading.Event()
    decode = partial(_decode_lines, buf, planes, tables, strings, len(strings.items), stop)
    with closing(in_order(decode, work, threads, stop)) as decoded:  # an error here ends the threads too
        for batch in decoded:
            if origin is None:
                origin = batch.origin
            _take_batch(batch, origin, cols)
            buf.release(*batch.span)
            del batch
            release_free_memory()  # the batches' temporaries, when they add up
    raw = _assemble(planes, cols, tables, strings, origin or 0, source)
    del cols
    release_free_memory()  # the batches' temporaries: the allocator would keep them
    return raw


@dataclass(frozen=True)
class _Block:
    """One block's events, decoded: columns of the events of ordinary lines (``kept``) and of derived
    ones, and the kept events' stats (owners counted within the block's kept events)."""

    kept: dict[str, np.ndarray]  # start (after the batch's origin), dur, name, line (of the batch)
    derived: dict[str, np.ndarray] | None
    stats: dict[int, StatPart]


@dataclass(frozen=True)
class _Batch:
    """A batch of lines, walked and decoded, with string codes of its own (:class:`~.strings.PendingStrings`):
    nothing shared is written, so batches are decoded on worker threads ahead of :func:`_take_batch`."""

    lines: Lines  # without their events' byte ranges
    origin: int  # the batch's earliest line timestamp, nanoseconds
    span: tuple[int, int]  # the bytes of its lines
    blocks: list[_Block]
    strings: PendingStrings


def _decode_lines(
    buf: Buffer, planes: Planes, tables: Tables, strings: Strings, known: int, stop: threading.Event,
    idx: np.ndarray,
) -> _Batch:
    """Walk the lines ``idx`` and decode their events, a block of :data:`DECODE_BLOCK` at a time (a line
    of a million events costs a block's temporaries, not a million events'); ends early, raising
    :class:`~.parallel.Stopped`, once ``stop`` is set (the decode was given up)."""
    lines = read_lines(buf, planes.line_plane[idx], planes.line_start[idx], planes.line_end[idx])
    origin = int(lines.timestamp_ns.min())
    pending = PendingStrings(strings, known)
    named = [nm or dn for nm, dn in zip(lines.name, lines.display_name)]
    derived = derived_lines(named, lines.id, tpu_planes([p.name for p in planes.planes])[lines.plane])
    ev_line = np.repeat(np.arange(lines.plane.size, dtype=np.int32), lines.event_count)
    starts, ends = lines.event_start, lines.event_end
    stamp = (lines.timestamp_ns - origin) * 1000
    first = np.int32(idx[0])  # the batch's first line in the space: batches are consecutive runs of lines
    blocks = []
    for lo in range(0, ev_line.size, DECODE_BLOCK):
        if stop.is_set():
            raise Stopped
        at = slice(lo, lo + DECODE_BLOCK)
        line = ev_line[at]
        plane, kept = lines.plane[line], ~derived[line]
        block = _decode_block(buf, tables, pending, plane, kept, stamp, line, first, starts[at], ends[at])
        blocks.append(block)
    span = (int(planes.line_start[idx].min()), int(planes.line_end[idx].max()))
    return _Batch(replace(lines, event_start=starts[:0], event_end=ends[:0]), origin, span, blocks, pending)


def _decode_block(
    buf: Buffer, tables: Tables, strings: PendingStrings, plane: np.ndarray, kept: np.ndarray,
    stamp: np.ndarray, line: np.ndarray, first: np.int32, start: np.ndarray, end: np.ndarray,
) -> _Block:
    """The events at ``buf[start:end]`` (on ``line`` of the batch, whose first line is ``first`` of the
    space; of ``plane``; ``kept``: not on a derived line)."""
    group = np.where(kept, plane, tables.n_planes)
    ev = decode_event_ranges(buf, start, end, stat_filter(tables, group), values=True)
    at = stamp[line]
    at += ev.offset_ps
    name, md_local = event_names(tables, plane, ev.metadata_id)
    found = batch_stats(buf, ev, plane, kept, md_local, tables, strings, name)
    every = {"start": at, "dur": ev.duration_ps, "name": name, "line": line + first}
    del ev
    if kept.all():
        return _Block(every, None, found)
    rank = np.cumsum(kept) - 1
    found = {wi: replace(part, owner=rank[part.owner]) for wi, part in found.items()}
    derived = {k: v[~kept] for k, v in every.items()}
    return _Block({k: v[kept] for k, v in every.items()}, derived, found)


def _take_batch(batch: _Batch, origin: int, cols: _Columns) -> None:
    """Add a decoded batch's events to the columns, batches in file order: its string codes made final,
    times counted from ``origin``."""
    cols.lines.append(batch.lines)
    shift = (batch.origin - origin) * 1000
    settle = batch.strings.settle
    blocks = batch.blocks
    while blocks:
        b = blocks.pop(0)
        for wi, part in b.stats.items():
            cols.stats[wi].append(replace(part, owner=part.owner + cols.n_kept, codes=settle(part.codes)))
        for into, got in ((cols.kept, b.kept), (cols.derived, b.derived)):
            for k, v in (got or {}).items():
                into[k].append(v + shift if k == "start" and shift else v)
        cols.n_kept += b.kept["start"].size


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


def plane_numbers(plane) -> dict[str, float]:
    """A plane's own stats whose values are numbers (``memory_size``, ``core_count``, ...), by name."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    out = {}
    for st in plane.stats:
        kind = st.WhichOneof("value")
        if kind in ("int64_value", "uint64_value", "double_value") and names.get(st.metadata_id):
            out[names[st.metadata_id]] = float(getattr(st, kind))
    return out


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
    named = [nm or dn for x in ls for nm, dn in zip(x.name, x.display_name)]
    derived = derived_lines(named, ids, tpu_planes(names)[plane])
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
        reals = None
        if any(p.reals is not None for p in parts):
            reals = np.concatenate([p.nums.astype(np.float64) if p.reals is None else p.reals for p in parts])
        stat_columns[name] = StatColumn(
            n,
            np.concatenate([p.owner for p in parts]),
            _uniform(np.concatenate([p.codes for p in parts])),
            _uniform(np.concatenate([p.nums for p in parts])),
            strings,
            text,
            parsed,
            reals,
        )
        parts.clear()
    narrow = np.int16 if len(names) < (1 << 15) else np.int32
    return RawSpace(
        source=source,
        planes=PlaneTable(tuple(names), np.array([plane_kind(nm) for nm in names], dtype=np.int8),
                          tuple(plane_stats(p) for p in planes.planes),
                          tuple(plane_numbers(p) for p in planes.planes)),
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


def plane_stats(plane) -> dict[str, str | int | float]:
    """A plane's own stats (an ``XPlane`` message without its lines) by name; a reference value as the
    text it names."""
    meta = {k: v.name for k, v in plane.stat_metadata.items()}
    out: dict[str, str | int | float] = {}
    for st in plane.stats:
        kind = st.WhichOneof("value")
        if kind is None or st.metadata_id not in meta:
            continue
        value = getattr(st, kind)
        if kind == "ref_value":
            value = meta.get(value, "")
        elif kind == "bytes_value":
            continue
        out[meta[st.metadata_id]] = value
    return out
