"""Decode XEvent and XStat messages with numpy: every event's fields, the stats asked for, their values.

The events -- a million in a big trace -- never become protobuf or Python objects:
:mod:`.layout` finds each one's byte range in the file, and
:func:`decode_event_ranges` decodes them all with numpy, a block of events at a time,
in lock-step (one vectorised pass per field position, not one Python step per event):
the header fields, then the run of stats, one round per stat, keeping only the stats
a :class:`StatFilter` asks for, and their values.

Where the C kernel is built (:mod:`.native`), ``decode_event_ranges(..., values=True)`` runs it
instead: one event after the other, to the same arrays in the same order (round by round, as
below) and the same :class:`~.wire.Malformed`; the numpy code is its fallback and oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tfprof_towers.xplane import native
from tfprof_towers.xplane.wire import (
    Buffer,
    Malformed,
    read_fields,
    read_varints,
    scatter_last,
    word_varints,
)

#: Stat value kinds (the XStat field number of the value; 0 = no value).
KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = 2, 3, 4, 5, 6, 7


@dataclass(frozen=True)
class Events:
    """Events decoded from a buffer; their stats left as byte ranges until asked for."""

    metadata_id: np.ndarray  # int64, per event
    offset_ps: np.ndarray  # int64, per event
    duration_ps: np.ndarray  # int64, per event
    stat_owner: np.ndarray  # int64 event index, per stat (an event's stats in wire order)
    stat_start: np.ndarray  # int64 byte range of each XStat message in ``buf``
    stat_end: np.ndarray
    buf: Buffer
    stat_md: np.ndarray | None = None  # int64 metadata_id per stat, when the decoder read them
    stat_head: np.ndarray | None = None  # uint64: the first 8 bytes of each stat field (tag first), or 0
    stat_values: StatValues | None = None  # the stats' values, when the decoder was asked for them
    stat_label: np.ndarray | None = None  # int8 per stat: its label in the StatFilter that kept it


@dataclass(frozen=True)
class StatFilter:
    """Which stats to keep: ``table[group[event], metadata_id]``, a label (0..125) or -1 to drop
    (ids past the table: dropped).  The decoder returns each kept stat's label."""

    group: np.ndarray  # int64 per event
    table: np.ndarray  # int8 [groups, ids]


# XEvent fields: metadata_id = 1, offset_ps = 2, duration_ps = 3 (varints), stats = 4 (messages).
_EVENT_STATS_TAG = (4 << 3) | 2
_STAT_MD_TAG = 1 << 3


#: Events decoded per block.  Whole-array temporaries of a million events are fresh memory
#: every time (the allocator hands large blocks back to the system, and touching new pages
#: costs more than the arithmetic); blocks of this size are reused from the heap and stay
#: in cache.
BLOCK = 1 << 16


def decode_event_ranges(
    buf: Buffer, start: np.ndarray, end: np.ndarray, keep: StatFilter | None = None, values: bool = False
) -> Events:
    """Decode the XEvent messages at ``buf[start:end]``; stats only where ``keep`` says (all by default),
    and with ``values`` their values too (:func:`decode_stat_values`, block by block).

    Writers put an event's fields in field-number order, so the fast path reads, for every
    event of a block at once, an optional metadata_id, offset_ps and duration_ps, then its
    run of stats one round per stat.  Whatever an event holds beyond that (other orders,
    repeated or unknown fields) is read field by field from where the fast path stopped:
    later fields override earlier ones, as in protobuf.
    """
    n = start.size
    header = [np.zeros(n, dtype=np.int64) for _ in range(3)]  # metadata_id, offset_ps, duration_ps
    c_kernel = values and native.kernel is not None  # the C kernel: the same arrays (see .native)
    states = None if c_kernel else _key_states(keep)
    parts = []
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
        if c_kernel:
            group, table = (keep.group[lo:hi], keep.table) if keep is not None else (None, None)
            part = native.decode_events(buf, start[lo:hi], end[lo:hi], [h[lo:hi] for h in header], group,
                                        table, lo)
            parts.append(part)
            continue
        part = _decode_block(buf, start[lo:hi], end[lo:hi], [h[lo:hi] for h in header], keep, states, lo)
        if values:
            v = decode_stat_values(buf, part[1], part[2], part[5])
            part = [*part[:5], v.kind, v.num, v.str_start, v.str_len]
        parts.append(part)
        del part
    if not parts:
        z = np.zeros(0, dtype=np.int64)
        parts = [(z, z, z, z, z.astype(np.int8), z.view(np.uint64))]
        if values:
            parts = [(*parts[0][:5], z.astype(np.int8), z.view(np.uint64), z, z)]
    owner, s_start, s_end, md, label, *rest = _concatenate_columns(parts)
    label = label if keep is not None else None
    if not values:
        return Events(header[0], header[1], header[2], owner, s_start, s_end, buf, md, rest[0], None, label)
    sv = StatValues(*rest)
    return Events(header[0], header[1], header[2], owner, s_start, s_end, buf, md, None, sv, label)


def _concatenate_columns(rows: list) -> list[np.ndarray]:
    """Concatenate the blocks' columns one at a time, letting go of each column's blocks as it
    is done (``rows`` is emptied): the peak holds one column twice, not every column."""
    if len(rows) == 1:  # one block: its columns as they are
        return list(rows.pop())
    for j, r in enumerate(rows):
        rows[j] = list(r)
    out = []
    for i in range(len(rows[0])):
        out.append(np.concatenate([r[i] for r in rows]))
        for r in rows:
            r[i] = None
    return out


def _decode_block(
    buf: Buffer,
    start: np.ndarray,
    end: np.ndarray,
    header: list[np.ndarray],
    keep: StatFilter | None,
    states: np.ndarray,
    first: int,
) -> tuple[np.ndarray, ...]:
    """:func:`decode_event_ranges` for events ``first ..``: writes ``header``, returns their stats
    as (owner, payload start, end, metadata_id, label, head)."""
    pos = start
    for number, column in enumerate(header, start=1):
        pos = _optional_varint_field(buf, pos, end, number << 3, column)
    group = keep.group[first : first + start.size] if keep is not None else None
    runs = _stat_runs(buf, pos, end, keep, group, states)
    rest = np.flatnonzero(runs.pos < end)
    parts = [runs.stats]
    if rest.size:
        parts.append(_decode_rest(buf, rest, runs.pos[rest], end[rest], header, keep, group))
    stats = [np.concatenate(c) for c in zip(*parts)] if rest.size else list(parts[0])
    stats[0] += first
    return tuple(stats)


def _optional_varint_field(
    buf: Buffer, pos: np.ndarray, end: np.ndarray, tag: int, column: np.ndarray
) -> np.ndarray:
    """Where the field at ``pos`` has (one-byte) tag ``tag``, read its varint into ``column``;
    returns the positions after it (or ``pos`` where absent).  One 8-byte load holds the tag
    and a varint of up to 7 bytes; longer ones are read again."""
    w = buf.u64[pos]
    has = (w & np.uint64(0xFF)) == tag
    has &= pos < end
    w >>= np.uint64(8)
    value, length = word_varints(w)
    long = np.flatnonzero(has & (length == 0))
    if long.size:
        value[long], after = read_varints(buf, pos[long] + 1, end[long])
        length[long] = after - pos[long] - 1
    if has.all():
        column[:] = value.view(np.int64)
        after = pos + 1
        after += length
    else:
        idx = np.flatnonzero(has)
        column[idx] = value[idx].view(np.int64)
        after = pos.copy()
        after[idx] += length[idx] + 1
    if (after > end).any():
        raise Malformed("varint runs past the end of its message")
    return after


@dataclass(frozen=True)
class _Runs:
    stats: tuple[np.ndarray, ...]  # owner, start, end, metadata_id, label, head (see Events)
    pos: np.ndarray  # per event: where its run of stats ended


_SLOW, _SKIP, _KEEP = 0, 1, 2  # a stat's state; _KEEP + label: kept, with that label


def _key_states(keep: StatFilter | None) -> np.ndarray:
    """Per (group, bytes 2-3 of a stat field as a little-endian uint16): what to do with the stat.

    A stat in the usual layout starts ``22 <len> 08 <id>``: bytes 2-3 are ``08`` and a
    one-byte metadata_id, so one table lookup says skip, or keep and with which label;
    any other pair of bytes (a longer id, another first field) sends the stat to the
    slow path.
    """
    groups = keep.table.shape[0] if keep is not None else 1
    states = np.full((groups, 1 << 16), _SLOW, dtype=np.int8)
    ids = np.arange(0x80)
    keys = _STAT_MD_TAG | (ids << 8)
    if keep is None:
        states[:, keys] = _KEEP
    else:
        width = min(0x80, keep.table.shape[1])
        states[:, keys] = _SKIP
        label = keep.table[:, :width]
        states[:, keys[:width]] = np.where(label >= 0, _KEEP + label, _SKIP)
    return states.ravel()


def _stat_runs(
    buf: Buffer,
    pos: np.ndarray,
    end: np.ndarray,
    keep: StatFilter | None,
    group: np.ndarray | None,
    states: np.ndarray,
) -> _Runs:
    """Every event's run of stats from ``pos``: round r reads the r-th stat of every event.

    One 8-byte load per stat gives its tag, a one-byte length and, in the usual layout,
    its metadata_id (see :func:`_key_states`); longer lengths and other layouts take
    slower paths.  Only the stats ``keep`` keeps are returned.
    """
    pos = pos.copy()
    act = np.flatnonzero(pos < end)
    p, e = pos[act], end[act]
    base = group[act] << 16 if group is not None else np.zeros(act.size, dtype=np.int64)
    out: list[tuple[np.ndarray, ...]] = []
    while act.size:
        w = buf.u64[p]
        b = w.view(np.uint8).reshape(-1, 8)
        is_stat = b[:, 0] == _EVENT_STATS_TAG
        if not is_stat.all():  # another field: the rest of this event is read field by field
            pos[act] = p
            act, p, e, base, w = _take(np.flatnonzero(is_stat), act, p, e, base, w)
            if not act.size:
                break
            b = w.view(np.uint8).reshape(-1, 8)
        length = b[:, 1].astype(np.int64)
        long = np.flatnonzero(length >= 0x80) if length.max() >= 0x80 else None
        payload = None  # p + 2, but for the long lengths: made only when needed
        if long is not None:
            v, after = read_varints(buf, p[long] + 1, e[long])
            if (v > np.uint64(buf.size)).any():
                raise Malformed("length out of range")
            payload = p + 2
            length[long], payload[long] = v.astype(np.int64), after
            nxt = payload + length
        else:
            nxt = length + p
            nxt += 2
        if (nxt > e).any():
            raise Malformed("stat runs past the end of its event")
        key = w.view(np.uint16).reshape(-1, 4)[:, 1].astype(np.int64)
        key += base
        state = states[key]
        if long is not None:
            state[long] = _SLOW
        if length.min() < 2:
            state[length < 2] = _SLOW
        if state.min() == _SLOW:  # metadata_id read field by field, then the filter's table says
            payload = p + 2 if payload is None else payload
            slow = np.flatnonzero(state == _SLOW)
            md = b[:, 3].astype(np.int64)
            md[slow] = _stat_md_slow(buf, payload[slow], nxt[slow])
            label = np.zeros(slow.size, dtype=np.int8)
            if keep is not None:
                label = _labels(keep.table, group[act[slow]], md[slow])
            state[slow] = np.where(label >= 0, _KEEP + label, _SKIP)
            w[slow] = 0  # not the usual layout: no head
            kept = np.flatnonzero(state >= _KEEP)
            found = [*_take(kept, act, payload, nxt, md)]
        else:
            kept = np.flatnonzero(state >= _KEEP)
            payload_kept = p.take(kept)
            payload_kept += 2
            found = [act.take(kept), payload_kept, nxt.take(kept), b[:, 3].take(kept).astype(np.int64)]
        label = state.take(kept)
        label -= _KEEP
        found += [label, w.take(kept)]
        out.append(tuple(found))
        more = nxt < e
        if more.all():
            p = nxt
            continue
        done = np.flatnonzero(~more)
        pos[act.take(done)] = nxt.take(done)
        act, p, e, base = _take(np.flatnonzero(more), act, nxt, e, base)
    pos[act] = p
    z = np.zeros(0, dtype=np.int64)
    empty = (z, z, z, z, z.astype(np.int8), z.view(np.uint64))
    stats = tuple(np.concatenate(c) for c in zip(*out)) if out else empty
    return _Runs(stats, pos)


def _take(idx: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """``a[idx]`` for each array: one index array and ``take`` beats repeated boolean masks."""
    return [a.take(idx) for a in arrays]


def _labels(table: np.ndarray, group: np.ndarray, md: np.ndarray) -> np.ndarray:
    """``table[group, md]`` (int8 labels), -1 where ``md`` is past the table."""
    width = table.shape[1]
    ok = (md >= 0) & (md < width)
    label = table.ravel()[group * width + np.where(ok, md, 0)]
    label[~ok] = -1
    return label


def _stat_md_slow(buf: Buffer, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """metadata_id of the XStat messages at ``buf[start:end]``, field by field (last one wins)."""
    f = read_fields(buf, start, end)
    sel = (f.number == 1) & (f.wire == 0)
    return scatter_last(start.size, f.owner[sel], f.value[sel].view(np.int64), 0, np.int64)


def _decode_rest(
    buf: Buffer,
    events: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    header: list[np.ndarray],
    keep: StatFilter | None,
    group: np.ndarray | None,
) -> tuple[np.ndarray, ...]:
    """The remaining fields of ``events`` (from ``start``), field by field."""
    f = read_fields(buf, start, end)
    varint = f.wire == 0
    for number, column in enumerate(header, start=1):
        sel = (f.number == number) & varint
        if number == 2:  # offset_ps shares a oneof with num_occurrences (5): the last one set wins
            sel |= (f.number == 5) & varint
        value = f.value[sel].view(np.int64)
        if number == 2:
            value = np.where(f.number[sel] == 2, value, 0)
        column[events[f.owner[sel]]] = value
    sel = np.flatnonzero((f.number == 4) & (f.wire == 2))
    owner = events[f.owner[sel]]
    s_start = f.start[sel]
    s_end = s_start + f.value[sel].astype(np.int64)
    md = _stat_md_slow(buf, s_start, s_end)
    label = np.zeros(owner.size, dtype=np.int8)
    if keep is not None:
        label = _labels(keep.table, group[owner], md)
        kept = np.flatnonzero(label >= 0)
        owner, s_start, s_end, md, label = owner[kept], s_start[kept], s_end[kept], md[kept], label[kept]
    return owner, s_start, s_end, md, label, np.zeros(owner.size, dtype=np.uint64)


def stat_metadata_ids(ev: Events) -> np.ndarray:
    """The ``metadata_id`` of every stat (0 when absent), reading only what that needs."""
    if ev.stat_md is not None:
        return ev.stat_md
    s, e = ev.stat_start, ev.stat_end
    n = s.size
    out = np.zeros(n, dtype=np.int64)
    nonempty = s < e
    first = np.zeros(n, dtype=np.uint8)
    first[nonempty] = ev.buf.u8[s[nonempty]]
    fast = np.flatnonzero(nonempty & (first == 0x08))  # metadata_id first, as writers do
    if fast.size:
        b = ev.buf.u8[s[fast] + 1]
        if b.max() < 0x80 and (s[fast] + 1 < e[fast]).all():  # one-byte ids: one load
            out[fast] = b
        else:
            v, _ = read_varints(ev.buf, s[fast] + 1, e[fast])
            out[fast] = v.view(np.int64)
    rest = np.flatnonzero(nonempty & (first != 0x08))
    if rest.size:
        f = read_fields(ev.buf, s[rest], e[rest])
        sel = (f.number == 1) & (f.wire == 0)
        out[rest] = scatter_last(rest.size, f.owner[sel], f.value[sel].view(np.int64), 0, np.int64)
    return out


@dataclass(frozen=True)
class StatValues:
    """Values of selected stats: one entry per stat."""

    kind: np.ndarray  # int8 KIND_*; 0 when the stat carries no value
    num: np.ndarray  # uint64: int64/uint64/ref value, or the bits of a double
    str_start: np.ndarray  # int64: string/bytes payload offset (-1 when none)
    str_len: np.ndarray  # int64


_EXPECTED_WIRE = np.array([-1, -1, 1, 0, 0, 2, 2, 0], dtype=np.int64)  # per XStat field number


#: XStat value field tag -> KIND_* (0: not a value field of the expected wire type).
_KIND_OF_TAG = np.zeros(256, dtype=np.int8)
for _number, _wire in ((2, 1), (3, 0), (4, 0), (5, 2), (6, 2), (7, 0)):
    _KIND_OF_TAG[(_number << 3) | _wire] = _number


def decode_stat_values(
    buf: Buffer, start: np.ndarray, end: np.ndarray, head: np.ndarray | None = None
) -> StatValues:
    """Values of the XStat messages at ``buf[start:end]``.

    Fast path: the usual layout, ``08 <one-byte metadata_id> <value tag> <value>`` and
    nothing after it.  With ``head`` (each stat field's first 8 bytes, from
    :class:`Events`), values of up to three bytes -- most refs, short strings' lengths
    -- need no load at all; longer numbers take one 8-byte load, other values two; any
    other layout is read field by field.
    """
    n = start.size
    if n == 0:
        return StatValues(
            np.zeros(0, np.int8), np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        )
    if head is None:
        return _stat_values_loaded(buf, start, end)
    b = head.view(np.uint8).reshape(-1, 8)
    kind = _KIND_OF_TAG[b[:, 4]]
    v, vlen = word_varints(head >> np.uint64(40))  # bytes 5-7; a zero byte past them ends any varint
    usual = (b[:, 2] == _STAT_MD_TAG) & (b[:, 3] < 0x80) & (kind > 0) & (kind != KIND_DOUBLE)
    short = (vlen > 0) & (vlen <= 3)
    ok = usual & short
    is_len = (kind == KIND_STR) | (kind == KIND_BYTES)
    longer = np.flatnonzero(usual & ~short & ~is_len)  # a number of four bytes or more
    payload = start + 3
    payload += vlen
    value_end = payload + np.where(is_len & ok, v, np.uint64(0)).astype(np.int64)
    ok &= value_end == end
    kind[~ok] = 0
    str_start = np.where(ok & is_len, payload, -1)
    str_len = np.where(ok & is_len, v.astype(np.int64), 0)
    num = v
    num[~ok | is_len] = 0
    if longer.size:  # the usual layout with a longer number: one load of the value alone
        long_kind = _KIND_OF_TAG[b[longer, 4]]
        v_long, vlen_long = word_varints(buf.u64[start[longer] + 3])
        read = (vlen_long > 0) & (start[longer] + 3 + vlen_long == end[longer])
        done = longer[read]
        kind[done], num[done] = long_kind[read], v_long[read]
        ok[done] = True
    rest = np.flatnonzero(~ok)
    if rest.size:
        sv = _stat_values_loaded(buf, start[rest], end[rest])
        kind[rest], num[rest], str_start[rest], str_len[rest] = sv.kind, sv.num, sv.str_start, sv.str_len
    return StatValues(kind, num, str_start, str_len)


def _stat_values_loaded(buf: Buffer, start: np.ndarray, end: np.ndarray) -> StatValues:
    """:func:`decode_stat_values` from the buffer: two 8-byte loads per stat in the usual layout."""
    b = buf.u64[start].view(np.uint8).reshape(-1, 8)
    kind = _KIND_OF_TAG[b[:, 2]]
    ok = (b[:, 0] == _STAT_MD_TAG) & (b[:, 1] < 0x80) & (kind > 0)
    ok &= start + 3 < end
    raw = buf.u64[start + 3]  # the value: a varint, a length, or a double's 8 bytes
    v, vlen = word_varints(raw.copy())
    is_f64 = kind == KIND_DOUBLE
    is_len = (kind == KIND_STR) | (kind == KIND_BYTES)
    payload = start + 3
    payload += np.where(is_f64, 8, vlen)
    ok &= (vlen > 0) | is_f64
    value_end = payload + np.where(is_len & ok, v, np.uint64(0)).astype(np.int64)
    ok &= value_end == end  # exactly one value field, nothing after it
    kind[~ok] = 0
    num = np.where(is_f64, raw, v)
    num[~ok | is_len] = 0
    str_start = np.where(ok & is_len, payload, -1)
    str_len = np.where(ok & is_len, v.astype(np.int64), 0)
    slow = np.flatnonzero(~ok)
    if slow.size:
        sv = _decode_stat_values_slow(buf, start[slow], end[slow])
        kind[slow], num[slow], str_start[slow], str_len[slow] = sv.kind, sv.num, sv.str_start, sv.str_len
    return StatValues(kind, num, str_start, str_len)


def _decode_stat_values_slow(buf: Buffer, start: np.ndarray, end: np.ndarray) -> StatValues:
    n = start.size
    f = read_fields(buf, start, end)
    value_field = (f.number >= 2) & (f.number <= 7)
    # a value field of the wrong wire type is an unknown field, as protobuf reads it
    sel = np.flatnonzero(value_field & (f.wire == _EXPECTED_WIRE[np.where(value_field, f.number, 0)]))
    number = f.number[sel]
    owner = f.owner[sel]
    is_len = f.wire[sel] == 2
    return StatValues(
        kind=scatter_last(n, owner, number, 0, np.int8),
        num=scatter_last(n, owner, np.where(is_len, np.uint64(0), f.value[sel]), 0, np.uint64),
        str_start=scatter_last(n, owner, f.start[sel], -1, np.int64),
        str_len=scatter_last(n, owner, np.where(is_len, f.value[sel], 0).astype(np.int64), 0, np.int64),
    )
