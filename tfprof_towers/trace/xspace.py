"""The XSpace protobuf schema, built in code, and a vectorised decoder for its events.

The schema is that of ``tsl/profiler/protobuf/xplane.proto`` (TensorFlow / XLA TSL,
Apache License 2.0), written out here as a ``FileDescriptorProto`` so that reading a
trace never imports TensorFlow.  The messages live in a *private*
``DescriptorPool``: a process that also imported TensorFlow (which registers the
same file name in the default pool) sees no clash.  :data:`XSpace` & co. serve tests
and tools that build traces, and the loader for the planes' metadata (small).

The events -- a million in a big trace -- never become protobuf or Python objects:
:mod:`.layout` finds each one's byte range in the file, and
:func:`decode_event_ranges` decodes them all with numpy, a block of events at a time,
in lock-step (one vectorised pass per field position, not one Python step per event):
the header fields, then the run of stats, one round per stat, keeping only the stats
a :class:`StatFilter` asks for, and their values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_INT64, _UINT64, _DOUBLE = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE
_STRING, _BYTES, _MESSAGE = _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

_PACKAGE = "tfprof_towers.xplane"

# (name, number, type, label, message type or None, oneof index or None)
_Field = tuple[str, int, int, int, "str | None", "int | None"]


def _stat_fields() -> list[_Field]:
    return [
        ("metadata_id", 1, _INT64, _OPT, None, None),
        ("double_value", 2, _DOUBLE, _OPT, None, 0),
        ("uint64_value", 3, _UINT64, _OPT, None, 0),
        ("int64_value", 4, _INT64, _OPT, None, 0),
        ("str_value", 5, _STRING, _OPT, None, 0),
        ("bytes_value", 6, _BYTES, _OPT, None, 0),
        ("ref_value", 7, _UINT64, _OPT, None, 0),
    ]


def _messages() -> dict[str, tuple[list[_Field], list[str]]]:
    """Message name -> (fields, oneof names)."""
    p = f".{_PACKAGE}."
    events: _Field = ("events", 4, _MESSAGE, _REP, p + "XEvent", None)
    return {
        "XSpace": (
            [
                ("planes", 1, _MESSAGE, _REP, p + "XPlane", None),
                ("errors", 2, _STRING, _REP, None, None),
                ("warnings", 3, _STRING, _REP, None, None),
                ("hostnames", 4, _STRING, _REP, None, None),
            ],
            [],
        ),
        "XPlane": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("lines", 3, _MESSAGE, _REP, p + "XLine", None),
                ("event_metadata", 4, _MESSAGE, _REP, p + "XPlane.EventMetadataEntry", None),
                ("stat_metadata", 5, _MESSAGE, _REP, p + "XPlane.StatMetadataEntry", None),
                ("stats", 6, _MESSAGE, _REP, p + "XStat", None),
            ],
            [],
        ),
        "XLine": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("display_id", 10, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("display_name", 11, _STRING, _OPT, None, None),
                ("timestamp_ns", 3, _INT64, _OPT, None, None),
                ("duration_ps", 9, _INT64, _OPT, None, None),
                events,
            ],
            [],
        ),
        "XEvent": (
            [
                ("metadata_id", 1, _INT64, _OPT, None, None),
                ("offset_ps", 2, _INT64, _OPT, None, 0),
                ("num_occurrences", 5, _INT64, _OPT, None, 0),
                ("duration_ps", 3, _INT64, _OPT, None, None),
                ("stats", 4, _MESSAGE, _REP, p + "XStat", None),
            ],
            ["data"],
        ),
        "XStat": (_stat_fields(), ["value"]),
        "XEventMetadata": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("display_name", 4, _STRING, _OPT, None, None),
                ("metadata", 3, _BYTES, _OPT, None, None),
                ("stats", 5, _MESSAGE, _REP, p + "XStat", None),
                ("child_id", 6, _INT64, _REP, None, None),
            ],
            [],
        ),
        "XStatMetadata": (
            [
                ("id", 1, _INT64, _OPT, None, None),
                ("name", 2, _STRING, _OPT, None, None),
                ("description", 3, _STRING, _OPT, None, None),
            ],
            [],
        ),
    }


def _file_proto() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="tfprof_towers/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    prefix = f".{fdp.package}."
    for name, (fields, oneofs) in _messages().items():
        msg = fdp.message_type.add(name=name)
        for oneof in oneofs:
            msg.oneof_decl.add(name=oneof)
        for fname, number, ftype, label, type_name, oneof in fields:
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name.replace(f".{_PACKAGE}.", prefix)
            if oneof is not None:
                f.oneof_index = oneof
        if name == "XPlane":
            for entry, value in (
                ("EventMetadataEntry", "XEventMetadata"),
                ("StatMetadataEntry", "XStatMetadata"),
            ):
                nested = msg.nested_type.add(name=entry)
                nested.options.map_entry = True
                nested.field.add(name="key", number=1, type=_INT64, label=_OPT)
                nested.field.add(name="value", number=2, type=_MESSAGE, label=_OPT, type_name=prefix + value)
    return fdp


_POOL = descriptor_pool.DescriptorPool()  # private: never clashes with TensorFlow's registration
_POOL.Add(_file_proto())


def _cls(full_name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


XSpace = _cls(f"{_PACKAGE}.XSpace")
XPlane = _cls(f"{_PACKAGE}.XPlane")
XLine = _cls(f"{_PACKAGE}.XLine")
XEvent = _cls(f"{_PACKAGE}.XEvent")
XStat = _cls(f"{_PACKAGE}.XStat")
XEventMetadata = _cls(f"{_PACKAGE}.XEventMetadata")
XStatMetadata = _cls(f"{_PACKAGE}.XStatMetadata")


# --------------------------------------------------------------------------------------------
# Vectorised wire-format decoding of XEvent / XStat messages.
#
# The events are byte ranges of one buffer (the file); their fields are read in
# lock-step: round k reads the k-th field of every event still unfinished, with numpy.
# Varints of up to 8 bytes are decoded from one unaligned 64-bit load with bit tricks;
# longer ones (negative int64s, rare) take a slower byte-by-byte path.  Every read is
# checked against the end of its message, so malformed input raises, never misreads.

#: Stat value kinds (the XStat field number of the value; 0 = no value).
KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = 2, 3, 4, 5, 6, 7

PAD = 16  #: zero bytes after the data, so that 8-byte loads at any position stay inside
_HI = np.uint64(0x8080808080808080)
_LO7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONE = np.uint64(1)
_HI_BYTE0 = np.uint64(0x80)
_HI_2 = np.uint64(0x8080)
_HI_4 = np.uint64(0x80808080)
_LO_BYTE0 = np.uint64(0x7F)
_COMPACT = [
    (np.uint64(0x007F007F007F007F), np.uint64(1), np.uint64(0x3F803F803F803F80)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(2), np.uint64(0x0FFFC0000FFFC000)),
    (np.uint64(0x000000000FFFFFFF), np.uint64(4), np.uint64(0x00FFFFFFF0000000)),
]


class Malformed(Exception):
    """The bytes are not well-formed messages of the expected schema."""


@dataclass(frozen=True)
class Buffer:
    """A byte buffer padded for 8-byte loads at any position."""

    u8: np.ndarray  # uint8, with PAD zero bytes after ``size``
    u64: np.ndarray  # unaligned little-endian uint64 view: u64[i] = bytes i..i+7
    size: int

    @classmethod
    def of(cls, data: bytes) -> Buffer:
        return cls.wrap(data + b"\0" * PAD, len(data))

    @classmethod
    def wrap(cls, padded, size: int) -> Buffer:
        """A buffer over ``padded``: ``size`` bytes of data then at least ``PAD`` zero bytes (no copy)."""
        u8 = np.frombuffer(padded, dtype=np.uint8)
        u64 = np.ndarray((u8.size - 7,), dtype="<u8", buffer=u8, strides=(1,))
        return cls(u8, u64, size)

    @classmethod
    def read(cls, file) -> tuple[Buffer, memoryview]:
        """Read a whole file into a padded buffer: the read is the only copy, into memory numpy
        allocates (uninitialised, so the pages are touched once, by the read).  Returns the
        buffer and a memoryview of the same bytes (indexing it gives ints)."""
        with open(file, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            data = np.empty(size + PAD, dtype=np.uint8)
            view = memoryview(data)
            got = 0
            while got < size:
                n = f.readinto(view[got:size])
                if not n:
                    break
                got += n
        data[got:] = 0
        return cls.wrap(data[: got + PAD], got), memoryview(data[: got + PAD])

    def text(self, start: int, length: int) -> str:
        return self.u8[start : start + length].tobytes().decode("utf-8", "replace")


_HI7 = np.uint64(0x0080808080808080)


def _pack_groups(word: np.ndarray, mask: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Keep ``word``'s bits under ``mask``, drop the continuation bits and pack the 7-bit
    groups together (three shift-and-mask steps).  In place: ``word`` and ``scratch``
    are overwritten; returns ``word``."""
    word &= mask
    word &= _LO7
    for keep, shift, moved in _COMPACT:
        np.right_shift(word, shift, out=scratch)
        scratch &= moved
        word &= keep
        word |= scratch
    return word


def word_varints(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint in the low 7 bytes of each word: (value, length in bytes; 0 when longer).

    Works in place (``word`` is overwritten).  When every varint is short -- one, two or
    up to four bytes -- fewer and narrower operations do.
    """
    cont = word & _HI7  # continuation bits
    if not (cont & _HI_BYTE0).any():  # all one byte
        word &= _LO_BYTE0
        return word, np.ones(word.size, dtype=np.int64)
    if not ((cont & _HI_2) == _HI_2).any():  # all within two bytes
        two = (cont & _HI_BYTE0) != 0
        v = word & np.uint64(0x7F)
        v |= ((word >> np.uint64(1)) & np.uint64(0x3F80)) * two
        return v, two.astype(np.int64) + 1
    if not ((cont & _HI_4) == _HI_4).any():  # all within four bytes: 32-bit arithmetic
        w32 = word.astype(np.uint32)
        term = np.bitwise_not(w32)
        term &= np.uint32(0x80808080)
        low = np.negative(term)
        low &= term
        mask = low << np.uint32(1)
        mask -= np.uint32(1)  # bits up to the terminator (all 32 for a four-byte varint)
        w32 &= mask
        w32 &= np.uint32(0x7F7F7F7F)
        tmp = term
        for keep, shift, moved in _COMPACT[:2]:
            np.right_shift(w32, np.uint32(shift), out=tmp)
            tmp &= np.uint32(moved)
            w32 &= np.uint32(keep)
            w32 |= tmp
        length = np.bitwise_count(mask).astype(np.int64)
        length >>= 3
        return w32.astype(np.uint64), length
    term = np.bitwise_not(word)
    term &= _HI7
    low = np.negative(term)
    low &= term
    length = np.bitwise_count(low - _ONE).astype(np.int64)  # bits below the terminator: 8k + 7
    length += 1
    length >>= 3
    length[low == 0] = 0
    mask = low
    mask <<= _ONE
    mask -= _ONE
    return _pack_groups(word, mask, term), length


def read_varints(buf: Buffer, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One varint at each ``pos`` (< its ``end``); return (values as uint64, positions after).

    Varints of up to 8 bytes are decoded from one unaligned 8-byte load: the lowest
    clear high bit ends the varint, the bits below it are kept, and the 7-bit groups are
    packed together in three shift-and-mask steps.  The arithmetic runs in place: on a
    million values, allocating each temporary would cost as much as computing it.
    """
    word = buf.u64[pos]
    if not (word & _HI_BYTE0).any():  # all one-byte varints
        if (pos >= end).any():
            raise Malformed("varint runs past the end of its message")
        return word & _LO_BYTE0, pos + 1
    term = np.bitwise_not(word)
    term &= _HI  # the high bit of every byte that ends a varint
    mask = np.negative(term)
    mask &= term  # the lowest of them (0 when the varint is longer than 8 bytes)
    long = np.flatnonzero(mask == 0)
    mask <<= _ONE
    mask -= _ONE  # every bit up to it
    v = _pack_groups(word, mask, term)
    after = np.bitwise_count(mask).astype(np.int64)
    after >>= 3
    after += pos
    if long.size:
        v[long], after[long] = _read_long_varints(buf, pos[long])
    if (after > end).any():
        raise Malformed("varint runs past the end of its message")
    return v, after


def soft_varints(buf: Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A varint at each ``pos`` (any length): (value, position after, ok); never raises."""
    value = np.zeros(pos.size, dtype=np.uint64)
    after = pos.copy()
    todo = np.arange(pos.size)
    for i in range(10):
        p = np.minimum(pos[todo] + i, buf.u8.size - 1)
        b = buf.u8[p]
        value[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        done = b < 0x80
        after[todo[done]] = p[done] + 1
        todo = todo[~done]
        if not todo.size:
            break
    ok = np.ones(pos.size, dtype=bool)
    ok[todo] = False
    return value, after, ok


def _read_long_varints(buf: Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    value, after, ok = soft_varints(buf, pos)
    if not ok.all():
        raise Malformed("varint longer than 10 bytes")
    return value, after


@dataclass(frozen=True)
class Fields:
    """Fields of many messages: one entry per field, in (owner, wire order)."""

    owner: np.ndarray  # int64 index of the message
    number: np.ndarray  # int64 field number
    wire: np.ndarray  # int64 wire type
    value: np.ndarray  # uint64: varint value, fixed64/32 bits, or payload length
    start: np.ndarray  # int64: payload start (length-delimited), else -1


def iter_rounds(buf: Buffer, start: np.ndarray, end: np.ndarray):
    """Yield the fields of the messages at ``buf[start:end]``, one lock-step round at a time.

    Round k holds the k-th field of every message that has one, as
    ``(message index, number, wire, value, payload start or -1)``.
    """
    active = np.flatnonzero(start < end)
    pos = start[active].astype(np.int64)
    e = end[active]
    while active.size:
        number, wire, value, payload, nxt = _read_round(buf, pos, e)
        yield active, number, wire, value, payload
        keep = nxt < e
        if keep.all():
            pos = nxt
        else:
            active, pos, e = active[keep], nxt[keep], e[keep]


def read_fields(buf: Buffer, start: np.ndarray, end: np.ndarray) -> Fields:
    """All fields of the messages at ``buf[start:end]``: the rounds of :func:`iter_rounds`
    concatenated, so one message's fields appear in wire order (what "last one wins" needs),
    though not next to each other."""
    rounds = list(iter_rounds(buf, start, end))
    if not rounds:
        z = np.zeros(0, dtype=np.int64)
        return Fields(z, z, z, np.zeros(0, dtype=np.uint64), z)
    return Fields(*(np.concatenate(c) for c in zip(*rounds)))


def _read_round(buf: Buffer, pos: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...]:
    """One field at each ``pos``: (number, wire, value, payload start or -1, next position)."""
    tag8 = buf.u8[pos]
    t0 = int(tag8[0])
    if t0 & 7 == 2 and 0 < t0 < 0x80 and (tag8 == t0).all():
        # every message has the same length-delimited field here (a run of stats)
        after = pos + 1
        b = buf.u8[after]
        if b.max() < 0x80:
            nxt = after + 1 + b
            if (nxt > e).any():
                raise Malformed("field runs past the end of its message")
            shape = pos.shape
            number = np.broadcast_to(np.int64(t0 >> 3), shape)
            wire = np.broadcast_to(np.int64(2), shape)
            return number, wire, b.astype(np.uint64), after + 1, nxt
    if tag8.max() < 0x80:  # one-byte tags: field numbers 1..15, the common case
        tag = tag8.astype(np.int64)
        after = pos + 1
    else:
        t, after = read_varints(buf, pos, e)
        tag = t.astype(np.int64)
    number, wire = tag >> 3, tag & 7
    if number.min() == 0 or ((wire == 3) | (wire == 4) | (wire > 5)).any():
        raise Malformed("bad field tag")
    is_len = wire == 2
    if (is_len | (wire == 0)).all():
        b = buf.u8[after]
        if b.max() < 0x80:  # every value or length is one byte
            value = b.astype(np.uint64)
            nxt = after + 1
        else:
            value, nxt = read_varints(buf, after, e)
    else:
        value = np.zeros(pos.size, dtype=np.uint64)
        nxt = after.copy()
        var = np.flatnonzero(is_len | (wire == 0))
        if var.size:
            value[var], nxt[var] = read_varints(buf, after[var], e[var])
        for wtype, width in ((1, 8), (5, 4)):
            fx = np.flatnonzero(wire == wtype)
            if fx.size:
                raw = buf.u64[after[fx]]
                value[fx] = raw if width == 8 else raw & np.uint64(0xFFFFFFFF)
                nxt[fx] = after[fx] + width
    if is_len.any():
        if (value[is_len] > np.uint64(buf.size)).any():
            raise Malformed("length out of range")
        payload = np.where(is_len, nxt, -1)
        nxt = nxt + np.where(is_len, value, np.uint64(0)).astype(np.int64)
    else:
        payload = np.full(pos.size, -1, dtype=np.int64)
    if (nxt > e).any():
        raise Malformed("field runs past the end of its message")
    return number, wire, value, payload, nxt


def scatter_last(n: int, owner: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    """``values`` placed at ``owner`` in an array of ``n``; the last field of a message wins."""
    out = np.full(n, fill, dtype=dtype)
    out[owner] = values.astype(dtype, copy=False)  # numpy assigns in order: last write wins
    return out


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


def decode_events(chunks: list[bytes] | tuple[bytes, ...], lengths: np.ndarray | None = None) -> Events:
    """Decode serialized XEvent messages (given one ``bytes`` per event) into arrays."""
    n = len(chunks)
    if lengths is None:
        lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=n)
    end = np.cumsum(lengths, dtype=np.int64)
    return decode_event_ranges(Buffer.of(b"".join(chunks)), end - lengths, end)


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
    states = _key_states(keep)
    parts = []
    for lo in range(0, n, BLOCK):
        hi = min(n, lo + BLOCK)
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

    @property
    def as_int64(self) -> np.ndarray:
        """Integer value (int64, uint64 reinterpreted, or a double truncated)."""
        out = self.num.view(np.int64).copy()
        dbl = self.kind == KIND_DOUBLE
        out[dbl] = self.num[dbl].view(np.float64).astype(np.int64)
        return out


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
    -- need no load at all; others take two 8-byte loads; any other layout is read
    field by field.
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
    ok = (b[:, 2] == _STAT_MD_TAG) & (b[:, 3] < 0x80) & (kind > 0) & (kind != KIND_DOUBLE)
    ok &= (vlen > 0) & (vlen <= 3)
    is_len = (kind == KIND_STR) | (kind == KIND_BYTES)
    payload = start + 3
    payload += vlen
    value_end = payload + np.where(is_len & ok, v, np.uint64(0)).astype(np.int64)
    ok &= value_end == end
    kind[~ok] = 0
    str_start = np.where(ok & is_len, payload, -1)
    str_len = np.where(ok & is_len, v.astype(np.int64), 0)
    num = v
    num[~ok | is_len] = 0
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


_HASH_M1 = np.uint64(0x9E3779B97F4A7C15)
_HASH_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
#: _BYTE_MASKS[k]: the low k bytes of a word (k = 0..8).
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_ROWS = 1 << 14  # strings hashed per block: a block's words stay in cache


def _column_multipliers(width: int, seed: int) -> np.ndarray:
    """Odd 64-bit multipliers, one per word column (the same ones on every call)."""
    return np.random.default_rng(seed).integers(0, 1 << 63, width, dtype=np.uint64) * np.uint64(2) + _ONE


def _hash_strings(buf: Buffer, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each byte string.

    Strings are hashed as 2-D blocks, one column per string and one row per 8-byte word.
    A string of 8 bytes or more is covered by words that start inside it -- the last one
    ends at the string's end, overlapping the one before (and repeats on the rows past the
    string's own words) -- so no word holds bytes from outside it and none needs masking;
    shorter ones are masked.  Each word is multiplied by its row's own odd constant and
    folded (``x ^ x >> 29``); a string's first hash is the wrapping sum of its column, the
    second the sum with other per-row multipliers -- a handful of whole-array operations
    per block.
    """
    n = start.size
    h1 = length.astype(np.uint64) * _HASH_M1
    h2 = length.astype(np.uint64) * _HASH_M2
    words = (length + 7) >> 3
    # strings of similar word counts together (widths 1, 2, 4, 8, ...), so padding stays small
    width_class = np.zeros(n, dtype=np.int8)
    for c in range(1, 64):
        over = words > (1 << (c - 1))
        if not over.any():
            break
        width_class[over] = c
    classes = np.flatnonzero(np.bincount(width_class))
    for c in classes.tolist():
        rows = np.flatnonzero(width_class == c) if classes.size > 1 else np.arange(n)
        width = int(words[rows].max())
        if width == 0:
            continue
        m1 = _column_multipliers(width, 1)[:, None]
        m2 = _column_multipliers(width, 2)[:, None]
        offsets = np.arange(width, dtype=np.int64)[:, None] * 8
        for lo in range(0, rows.size, _ROWS):
            r = rows[lo : lo + _ROWS]
            s, ln = start[r], length[r]
            if c == 0:  # up to 8 bytes: one word, masked to the string
                w = buf.u64[s][None, :] & _BYTE_MASKS[ln][None, :]
            else:
                at = np.minimum(offsets, ln - 8)
                at += s
                w = buf.u64[at]
            w *= m1
            w ^= w >> np.uint64(29)
            h1[r] += w.sum(axis=0, dtype=np.uint64)
            w *= m2
            h2[r] += w.sum(axis=0, dtype=np.uint64)
    return h1, h2


def distinct_strings(buf: Buffer, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Group equal byte strings without a Python step per string: (codes, distinct texts).

    Strings are grouped by one 64-bit hash of their bytes and length, and a second,
    independent one must agree within every group, else the strings are compared exactly.
    Only one representative per group is decoded.
    """
    n = start.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    h1, h2 = _hash_strings(buf, start, length)
    codes, uniques = pd.factorize(h1)
    first = np.full(uniques.size, -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)  # first occurrence of each group
    if not (h2 == h2[first[codes]]).all():  # a 64-bit collision: compare exactly instead
        texts_all = [buf.text(s, ln) for s, ln in zip(start.tolist(), length.tolist())]
        codes, uniq = pd.factorize(np.array(texts_all, dtype=object))
        return codes.astype(np.int64), [str(u) for u in uniq]
    texts = [buf.text(s, ln) for s, ln in zip(start[first].tolist(), length[first].tolist())]
    return codes.astype(np.int64), texts
