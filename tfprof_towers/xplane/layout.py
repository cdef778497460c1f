"""Where everything is in an XSpace file: planes, lines, and the byte range of every event.

No protobuf runtime walks the lines: the few fields of the space and its planes are
walked in Python (one step per plane, line or metadata entry), each plane's metadata
(names of events and stats) is handed to protobuf (upb) as one small message, and the
fields of all lines -- a million events -- are found by :func:`walk_fields`, a
vectorised numpy walk of the wire format.

The trick: the fields of a message tile its payload (``tag, [length,] value`` back to
back), so finding them is a chain -- each field's end is the next one's start -- and a
chain is sequential.  A line holds thousands of events, so each line is cut into chunks
of a few hundred events (the event size is sampled per line) and all chunks of all
lines are walked at once, in lock-step, one field per round.  Only a line's first chunk
starts at a known field; every other chunk starts *speculatively*, at the first bytes
that look like a length-delimited field whose payload begins with field 1 (``22 <len>
08``: an event, or a stat inside one).  Whatever nesting depth the guess lands at -- an
event, a stat, a field inside a stat -- the chain from there ends where its enclosing
messages end, i.e. at the next event: it *resynchronises* with the true chain within
one event.  Each chunk's walk is then checked against its predecessor's: the first
field the previous chunk's walk reached past its own end must be one this chunk
visited (the fields before it are the speculative prefix, dropped).  A chunk that fails
the check (a guess inside a string that never resynchronised; an event larger than a
chunk) is walked again from the now-known true position.  Every field of the true chain
is read with bounds checks, so a corrupt file raises :class:`~.wire.Malformed`, never
misreads.

Where the C kernel is built (:mod:`.native`), :func:`read_lines` walks each line's fields one
after the other in C instead -- the same fields, the same :class:`~.wire.Malformed` -- and the
walk above is its fallback and the oracle of its tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from tfprof_towers.xplane import native
from tfprof_towers.xplane.schema import XPlane
from tfprof_towers.xplane.wire import Buffer, Malformed, soft_varints, word_varints

# ---------------------------------------------------------------------------------------------
# Scalar walk: the space's and the planes' fields (a few thousand at most)


def _py_varint(data: bytes | memoryview, p: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if p >= end or shift > 63:
            raise Malformed("bad varint")
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7


def py_fields(data: bytes | memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of the message ``data[start:end]``: ``(number, wire, value, field start, field end)``;
    ``value`` is a varint's value or a length-delimited field's payload start (0 for fixed widths)."""
    p = start
    while p < end:
        f0 = p
        b = data[p]
        if b < 0x80:
            tag, p = b, p + 1
        else:
            tag, p = _py_varint(data, p, end)
        number, wire = tag >> 3, tag & 7
        value = 0
        if wire == 0:
            value, p = _py_varint(data, p, end)
        elif wire == 2:
            length, value = _py_varint(data, p, end)
            p = value + length
        elif wire == 1:
            p += 8
        elif wire == 5:
            p += 4
        else:
            raise Malformed("bad wire type")
        if number == 0 or p > end:
            raise Malformed("field runs past the end of its message")
        yield number, wire, value, f0, p


# ---------------------------------------------------------------------------------------------
# Vectorised walk of the top-level fields of many messages


@dataclass(frozen=True)
class Records:
    """Top-level fields of many messages, in file order (so grouped by message, in wire order)."""

    owner: np.ndarray  # int64 message index
    pos: np.ndarray  # int64 field start
    tag: np.ndarray  # int64 tag (number << 3 | wire)
    value: np.ndarray  # uint64 varint value or payload length (fixed-width fields: 0)
    payload: np.ndarray  # int64 payload start of length-delimited fields, else -1


def _field_step(
    buf: Buffer, pos: np.ndarray, limit: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read the field at each ``pos`` (< ``limit``): (tag, value, payload start or -1, next, bad).

    ``bad`` marks what is not a well-formed field ending by ``limit``; nothing raises, so
    speculative positions can be tried.  Fast path: a one-byte tag and its varint in the
    same 8-byte load; longer tags or varints are read byte by byte.
    """
    w = buf.u64[pos]
    tag = (w & np.uint64(0xFF)).astype(np.int64)
    value, vlen = word_varints(w >> np.uint64(8))
    tag_end = pos + 1
    after = tag_end + vlen
    bad = np.zeros(pos.size, dtype=bool)
    slow = np.flatnonzero((tag >= 0x80) | (vlen == 0))
    if slow.size:
        t, t_end, ok_t = soft_varints(buf, pos[slow])
        v, v_end, ok_v = soft_varints(buf, t_end)
        ok_t &= t < np.uint64(1 << 32)
        tag[slow] = np.where(ok_t, t, np.uint64(0)).astype(np.int64)
        tag_end[slow], value[slow], after[slow] = t_end, v, v_end
        varint_follows = (tag[slow] & 7 == 0) | (tag[slow] & 7 == 2)
        bad[slow] = ~ok_t | (varint_follows & ~ok_v)
    wire = tag & 7
    is_len, is_var = wire == 2, wire == 0
    bad |= ((tag >> 3) == 0) | ~(is_len | is_var | (wire == 1) | (wire == 5))
    big = value > np.uint64(buf.size)
    length = np.where(is_len & ~big, value, np.uint64(0)).astype(np.int64)
    nxt = np.where(is_var | is_len, after + length, tag_end + np.where(wire == 1, 8, 4))
    bad |= (is_len & big) | (nxt > limit)
    value = np.where(is_var | is_len, value, np.uint64(0))
    payload = np.where(is_len, after, -1)
    return tag, value, payload, nxt, bad


def _next_fields(buf: Buffer, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Where the field at each ``pos`` ends, and which are bad (None: none).

    Fast path, for a run of one repeated field (a line's events): every tag is the same
    one-byte length-delimited tag and every length fits two bytes.  It reads single
    bytes: numpy gathers bytes from scattered positions several times faster than
    unaligned 8-byte words.
    """
    t = buf.u8[pos]
    t0 = int(t[0]) if pos.size else 0
    if t0 & 7 == 2 and 8 <= t0 < 0x80 and (t == t0).all():
        b1 = buf.u8[pos + 1]
        nxt = pos + 2
        nxt += b1
        c1 = np.flatnonzero(b1 >= 0x80)
        if c1.size:
            b2 = buf.u8[pos[c1] + 2]
            if (b2 >= 0x80).any():
                return _slow_next(buf, pos, limit)
            nxt[c1] += (b2.astype(np.int64) << 7) - 0x80 + 1
        over = nxt > limit
        return nxt, (over if over.any() else None)
    return _slow_next(buf, pos, limit)


def _slow_next(buf: Buffer, pos: np.ndarray, limit: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    _, _, _, nxt, bad = _field_step(buf, pos, limit)
    return nxt, (bad if bad.any() else None)


@dataclass(frozen=True)
class _Walked:
    """Fields visited by lock-step walks of chunks: positions sorted by (chunk, visit order)."""

    pos: np.ndarray  # int64 field starts
    lo: np.ndarray  # int64 per chunk: its fields are pos[lo:hi]
    hi: np.ndarray
    exit: np.ndarray  # int64 per chunk: where its walk left it (the first field start at or past its end)
    failed: np.ndarray  # bool per chunk: its walk met bytes that are not a field


def _walk(buf: Buffer, start: np.ndarray, stop: np.ndarray, limit: np.ndarray, soft: bool) -> _Walked:
    """Walk each chunk's chain of fields from ``start`` until it passes ``stop``, all chunks in lock-step.

    ``limit``: the end of each chunk's message (no field may run past it).  ``soft``: a bad
    field ends that chunk's walk (and marks it failed) instead of raising.
    """
    k = start.size
    exit_ = start.copy()
    failed = np.zeros(k, dtype=bool)
    active = np.flatnonzero(start < stop)
    pos, stop_a, limit_a = start[active], stop[active], limit[active]
    rounds: list[tuple[np.ndarray, np.ndarray]] = []
    while active.size:
        nxt, bad = _next_fields(buf, pos, limit_a)
        if bad is not None:
            if not soft:
                raise Malformed("a field runs past the end of its message")
            failed[active[bad]] = True
            exit_[active[bad]] = pos[bad]
            good = np.flatnonzero(~bad)
            active, pos, nxt, stop_a, limit_a = (a.take(good) for a in (active, pos, nxt, stop_a, limit_a))
        rounds.append((active, pos))
        more = nxt < stop_a
        if more.all():
            pos = nxt
            continue
        done = np.flatnonzero(~more)
        exit_[active.take(done)] = nxt.take(done)
        keep = np.flatnonzero(more)
        active, pos, stop_a, limit_a = (a.take(keep) for a in (active, nxt, stop_a, limit_a))
    # a chunk takes part in rounds 0..count-1: its r-th field goes to lo + r (an O(n) sort)
    count = np.zeros(k, dtype=np.int64)
    for act, _ in rounds:
        count[act] += 1
    hi = np.cumsum(count)
    lo = hi - count
    out = np.empty(int(hi[-1]) if k else 0, dtype=np.int64)
    for r, (act, p) in enumerate(rounds):
        out[lo[act] + r] = p
    return _Walked(out, lo, hi, exit_, failed)


def _guess_starts(
    buf: Buffer, cs: np.ndarray, ce: np.ndarray, hint: tuple[int, int], window: int
) -> np.ndarray:
    """Per chunk, the first position in ``[cs, cs + window)`` that looks like a length-delimited
    field with tag ``hint[0]`` whose payload starts with tag ``hint[1]``; ``cs`` when none does."""
    tag, inner = hint
    idx = np.minimum(cs[:, None] + np.arange(window + 3), buf.u8.size - 1)
    b = buf.u8[idx]
    b0, b1, b2, b3 = b[:, :window], b[:, 1 : window + 1], b[:, 2 : window + 2], b[:, 3 : window + 3]
    one = b1 < 0x80  # one-byte length, else try a two-byte one
    looks = (b0 == tag) & ((one & (b2 == inner)) | (~one & (b2 < 0x80) & (b3 == inner)))
    hit = looks.argmax(axis=1)
    found = looks[np.arange(cs.size), hit]
    return np.where(found, np.minimum(cs + hit, ce), cs)


def walk_fields(
    buf: Buffer,
    start: np.ndarray,
    end: np.ndarray,
    hint: tuple[int, int] = (0x22, 0x08),
    fields_per_chunk: int = 256,
    window: int = 64,
) -> Records:
    """The top-level fields of the messages at ``buf[start:end]`` (in file order, not
    overlapping), found by the speculative chunked walk of the module docstring.

    ``hint``: (tag of the message's common repeated field, first tag inside it), used to
    guess where a chunk's fields start.  Each message is cut into chunks of about
    ``fields_per_chunk`` fields (their size sampled per message), so that every chunk
    takes about as many rounds.  Raises :class:`Malformed` on a corrupt message.
    """
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    size = _chunk_sizes(buf, start, end, hint, window) * fields_per_chunk
    nchunk = np.where(end > start, (end - start + size - 1) // size, 0)
    msg = np.repeat(np.arange(start.size), nchunk)
    k_in = np.arange(msg.size) - np.repeat(np.cumsum(nchunk) - nchunk, nchunk)
    cs = start[msg] + k_in * size[msg]
    limit = end[msg]
    ce = np.minimum(cs + size[msg], limit)
    later = np.flatnonzero(k_in > 0)
    guess = cs.copy()
    if later.size:
        guess[later] = _guess_starts(buf, cs[later], ce[later], hint, window)
    walked = _walk(buf, guess, ce, limit, soft=True)
    keep_from, redo = _verify(buf, walked, cs, ce, limit, msg)
    pos, chunk_of = _assemble(walked, keep_from, redo)
    owner = msg[chunk_of]
    return _read_records(buf, owner, pos, end[owner], hint[0])


def _chunk_sizes(
    buf: Buffer, start: np.ndarray, end: np.ndarray, hint: tuple[int, int], window: int, samples: int = 4
) -> np.ndarray:
    """Per message, the typical size of its fields (at least 8 bytes; 64 for small messages), from
    a short walk at a few guessed points: a line of small events gets small chunks."""
    steps = 16
    size = end - start
    big = np.flatnonzero(size > 64 * steps)
    out = np.full(start.size, 64, dtype=np.int64)
    if not big.size:
        return out
    frac = (np.arange(samples) + 0.5) / samples
    at = (start[big, None] + size[big, None] * frac).astype(np.int64).ravel()
    limit = np.repeat(end[big], samples)
    p0 = _guess_starts(buf, at, limit, hint, window)
    pos, ok, walked = p0.copy(), p0 < limit, np.zeros(p0.size, dtype=np.int64)
    for _ in range(steps):
        live = np.flatnonzero(ok)
        if not live.size:
            break
        nxt, bad = _next_fields(buf, pos[live], limit[live])
        good = live if bad is None else live[~bad]
        pos[good] = nxt if bad is None else nxt[~bad]
        walked[good] += 1
        ok[live] = False
        ok[good] = pos[good] < limit[good]
    per_field = np.where(walked > 0, (pos - p0) // np.maximum(walked, 1), 0).reshape(-1, samples)
    est = np.median(per_field, axis=1).astype(np.int64)
    out[big] = np.where(est > 0, np.maximum(est, 8), 64)
    return out


def _read_records(buf: Buffer, owner: np.ndarray, pos: np.ndarray, limit: np.ndarray, tag: int) -> Records:
    """Decode the fields at ``pos``; the common case -- tag ``tag``, a length of one or two
    bytes -- from single-byte reads."""
    common = buf.u8[pos] == tag
    b1 = buf.u8[pos + 1]
    payload = pos + 2
    value = b1.astype(np.uint64)
    c1 = np.flatnonzero(b1 >= 0x80)
    if c1.size:
        b2 = buf.u8[pos[c1] + 2]
        common[c1[b2 >= 0x80]] = False
        payload[c1] += 1
        value[c1] += (b2.astype(np.uint64) << np.uint64(7)) - np.uint64(0x80)
    tags = np.full(pos.size, tag, dtype=np.int64)
    rest = np.flatnonzero(~common)
    if rest.size:
        t, v, p, _, bad = _field_step(buf, pos[rest], limit[rest])
        if bad.any():  # cannot happen: every one was read once already
            raise Malformed("a field runs past the end of its message")
        tags[rest], value[rest], payload[rest] = t, v, p
    return Records(owner, pos, tags, value, payload)


def _verify(
    buf: Buffer, w: _Walked, cs: np.ndarray, ce: np.ndarray, limit: np.ndarray, msg: np.ndarray
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Check each chunk's speculative walk against the true chain; walk again the ones that missed it.

    Returns, per chunk, the index in ``w.pos`` from which its fields are true (``w.hi``: none),
    and the (chunk, positions) of the chunks walked again.  Each pass settles, in every
    message, all chunks up to the first one whose walk missed the true chain, and that one.
    """
    k = cs.size
    first = np.r_[True, msg[1:] != msg[:-1]] if k else np.zeros(0, dtype=bool)
    keep_from = w.hi.copy()
    exit_ = w.exit.copy()
    redo: list[tuple[np.ndarray, np.ndarray]] = []
    todo = np.arange(k)
    n = w.pos.size
    while todo.size:
        entry = np.where(first[todo], cs[todo], exit_[np.maximum(todo - 1, 0)])
        j = np.searchsorted(w.pos, entry)
        found = (j < w.hi[todo]) & (w.pos[np.minimum(j, max(n - 1, 0))] == entry) if n else j < 0
        spanned = entry >= ce[todo]
        problem = spanned | ~found | w.failed[todo]
        # problems before each chunk within its message (todo is sorted, grouped by message)
        before = np.cumsum(problem) - problem
        tm = msg[todo]
        msg_first = np.flatnonzero(np.r_[True, tm[1:] != tm[:-1]])
        before -= np.repeat(before[msg_first], np.diff(np.r_[msg_first, todo.size]))
        settled = before == 0
        ok = settled & ~problem
        keep_from[todo[ok]] = j[ok]
        front = np.flatnonzero(settled & problem)  # true entry known, walk did not confirm it
        f, fe = todo[front], entry[front]
        if (found[front] & w.failed[f] & ~spanned[front]).any():
            raise Malformed("a field runs past the end of its message")
        done = np.zeros(k, dtype=bool)
        done[todo[ok]] = True
        span = spanned[front]
        for c, e in zip(f[span].tolist(), fe[span].tolist()):
            last = int(np.searchsorted(ce, e, side="right"))  # chunks up to it lie inside one field
            exit_[c:last] = e
            done[c:last] = True
        walk = ~span
        if walk.any():
            again = _walk(buf, fe[walk], ce[f[walk]], limit[f[walk]], soft=False)
            exit_[f[walk]] = again.exit
            done[f[walk]] = True
            redo.append((np.repeat(f[walk], again.hi - again.lo), again.pos))
        todo = todo[~done[todo]]
    return keep_from, redo


def _assemble(
    w: _Walked, keep_from: np.ndarray, redo: list[tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """The true fields' positions in file order, and each one's chunk."""
    n = w.pos.size
    marks = np.bincount(keep_from, minlength=n + 1)[: n + 1] - np.bincount(w.hi, minlength=n + 1)[: n + 1]
    keep = np.cumsum(marks[:n]) > 0
    chunk_of = np.repeat(np.arange(w.lo.size), w.hi - w.lo)[keep]
    pos = w.pos[keep]
    if redo:
        rc = np.concatenate([c for c, _ in redo])
        rp = np.concatenate([p for _, p in redo])
        order = np.argsort(rp, kind="stable")
        rc, rp = rc[order], rp[order]
        at = np.searchsorted(pos, rp)
        pos = np.insert(pos, at, rp)
        chunk_of = np.insert(chunk_of, at, rc)
    return pos, chunk_of


# ---------------------------------------------------------------------------------------------
# The space: planes (metadata through protobuf), lines and events

_XPLANE_LINES = 3
_XLINE_EVENTS_TAG = (4 << 3) | 2


@dataclass(frozen=True)
class Lines:
    """Every line of the space, in file order, with the byte range of each of its events."""

    plane: np.ndarray  # int64 per line: plane index
    id: np.ndarray  # int64 per line
    name: list[str]
    display_name: list[str]
    timestamp_ns: np.ndarray  # int64 per line
    event_count: np.ndarray  # int64 per line
    event_start: np.ndarray  # int64 per event: payload range of the serialized XEvent
    event_end: np.ndarray


@dataclass(frozen=True)
class Planes:
    """The space without its lines' contents: each plane's metadata, and where each line is."""

    planes: list  # XPlane messages holding everything but the lines
    hostnames: tuple[str, ...]
    line_plane: np.ndarray  # int64 per line (file order): its plane
    line_start: np.ndarray  # int64 per line: payload range of the serialized XLine
    line_end: np.ndarray


def read_planes(buf: Buffer, data: bytes | memoryview) -> Planes:
    """The planes of the XSpace in ``data`` (``buf`` wraps the same bytes), and their lines' ranges:
    one Python step per plane, line or metadata entry, none per event."""
    planes, ranges, hostnames = [], [], []
    for number, wire, value, _, f1 in py_fields(data, 0, buf.size):
        if wire != 2:
            continue
        if number == 1:
            meta, lines = _read_plane(data, value, f1)
            planes.append(meta)
            ranges.append(lines)
        elif number == 4:
            hostnames.append(bytes(data[value:f1]).decode("utf-8", "replace"))
    counts = [len(r) for r in ranges]
    flat = [r for rs in ranges for r in rs]
    start = np.array([s for s, _ in flat], dtype=np.int64)
    end = np.array([e for _, e in flat], dtype=np.int64)
    return Planes(planes, tuple(hostnames), np.repeat(np.arange(len(planes)), counts), start, end)


def _read_plane(data: bytes | memoryview, start: int, end: int):
    """(the plane without its lines, as an XPlane message; the payload range of each line)."""
    lines: list[tuple[int, int]] = []
    pieces: list[list[int]] = []  # byte ranges of every other field, adjacent ones merged
    for number, wire, value, f0, f1 in py_fields(data, start, end):
        if number == _XPLANE_LINES and wire == 2:
            lines.append((value, f1))
        elif pieces and pieces[-1][1] == f0:
            pieces[-1][1] = f1
        else:
            pieces.append([f0, f1])
    try:
        meta = XPlane.FromString(b"".join(bytes(data[a:b]) for a, b in pieces))
    except (DecodeError, RuntimeError, ValueError):
        raise Malformed("unreadable plane metadata") from None
    return meta, lines


def read_lines(buf: Buffer, plane: np.ndarray, start: np.ndarray, end: np.ndarray) -> Lines:
    """Headers and event ranges of the XLine messages at ``buf[start:end]``."""
    n = start.size
    if native.kernel is not None:  # the C kernel: the same fields (see .native)
        ev_start, ev_end, counts, fields = native.walk_lines(buf, start, end)
    else:
        rec = walk_fields(buf, start, end)
        is_event = rec.tag == _XLINE_EVENTS_TAG
        events = np.flatnonzero(is_event)
        ev_start = rec.payload[events]
        ev_end = ev_start + rec.value[events].astype(np.int64)
        counts = np.bincount(rec.owner[events], minlength=n)
        other = np.flatnonzero(~is_event)
        fields = (rec.owner[other], rec.tag[other], rec.value[other], rec.payload[other])
    ids, stamps = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    names, display = [""] * n, [""] * n
    for i, tag, value, payload in zip(*(f.tolist() for f in fields)):
        # last one wins, as in protobuf; known fields with another wire type are unknown fields
        if tag == (1 << 3):
            ids[i] = np.uint64(value).view(np.int64)
        elif tag == (3 << 3):
            stamps[i] = np.uint64(value).view(np.int64)
        elif tag == (2 << 3) | 2:
            names[i] = buf.text(payload, value)
        elif tag == (11 << 3) | 2:
            display[i] = buf.text(payload, value)
    return Lines(plane, ids, names, display, stamps, counts, ev_start, ev_end)
