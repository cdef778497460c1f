"""The XSpace protobuf schema, built in code, and a vectorised decoder for its events.

The schema is that of ``tsl/profiler/protobuf/xplane.proto`` (TensorFlow / XLA TSL,
Apache License 2.0), written out here as a ``FileDescriptorProto`` so that reading a
trace never imports TensorFlow.  The messages live in a *private*
``DescriptorPool``: a process that also imported TensorFlow (which registers the
same file name in the default pool) sees no clash.

Two message families come out of the one schema:

* :data:`XSpace` & co. -- the full schema, for tests and tools that build traces;
* :data:`XSpaceView` -- the same wire format, except that ``XLine.events`` is read
  as ``repeated bytes``.  The protobuf runtime (upb, in C) then walks the planes,
  lines and metadata maps, and hands over each line's events as raw byte strings,
  which :func:`decode_events` decodes for all events of the file at once with
  numpy (a lock-step wire-format decoder: one vectorised pass per field position,
  not one Python step per event).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from ..errors import TraceError

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


def _messages(view: bool) -> dict[str, tuple[list[_Field], list[str]]]:
    """Message name -> (fields, oneof names).  ``view`` reads XLine.events as bytes."""
    p = f".{_PACKAGE}."
    events: _Field = (
        ("events", 4, _BYTES, _REP, None, None) if view else ("events", 4, _MESSAGE, _REP, p + "XEvent", None)
    )
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


def _file_proto(view: bool) -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name=f"tfprof_towers/xplane{'_view' if view else ''}.proto",
        package=_PACKAGE + (".view" if view else ""),
        syntax="proto3",
    )
    prefix = f".{fdp.package}."
    for name, (fields, oneofs) in _messages(view).items():
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
_POOL.Add(_file_proto(view=False))
_POOL.Add(_file_proto(view=True))


def _cls(full_name: str):
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


XSpace = _cls(f"{_PACKAGE}.XSpace")
XPlane = _cls(f"{_PACKAGE}.XPlane")
XLine = _cls(f"{_PACKAGE}.XLine")
XEvent = _cls(f"{_PACKAGE}.XEvent")
XStat = _cls(f"{_PACKAGE}.XStat")
XEventMetadata = _cls(f"{_PACKAGE}.XEventMetadata")
XStatMetadata = _cls(f"{_PACKAGE}.XStatMetadata")
#: XSpace read with each line's events left as raw bytes (see the module docstring).
XSpaceView = _cls(f"{_PACKAGE}.view.XSpace")


def parse_view(data: bytes, source: str):
    """Parse ``data`` as an :data:`XSpaceView`; every decoding failure is a TraceError."""
    try:
        return XSpaceView.FromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise TraceError(
            f"{source}: not a readable XSpace trace (the protobuf data is corrupt or truncated)"
        ) from None


# --------------------------------------------------------------------------------------------
# Vectorised wire-format decoding of XEvent / XStat messages.
#
# All events of a file are concatenated into one byte buffer; their fields are read in
# lock-step: round k reads the k-th field of every event still unfinished, with numpy.
# Varints of up to 8 bytes are decoded from one unaligned 64-bit load with bit tricks;
# longer ones (negative int64s, rare) take a slower byte-by-byte path.  Every read is
# checked against the end of its message, so malformed input raises, never misreads.

#: Stat value kinds (the XStat field number of the value; 0 = no value).
KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = 2, 3, 4, 5, 6, 7

_PAD = 16
_HI = np.uint64(0x8080808080808080)
_LO7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONE = np.uint64(1)
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

    u8: np.ndarray  # uint8, with _PAD zero bytes after ``size``
    u64: np.ndarray  # unaligned little-endian uint64 view: u64[i] = bytes i..i+7
    size: int

    @classmethod
    def of(cls, data: bytes) -> Buffer:
        u8 = np.frombuffer(data + b"\0" * _PAD, dtype=np.uint8)
        u64 = np.ndarray((u8.size - 7,), dtype="<u8", buffer=u8, strides=(1,))
        return cls(u8, u64, len(data))

    def text(self, start: int, length: int) -> str:
        return self.u8[start : start + length].tobytes().decode("utf-8", "replace")


def read_varints(buf: Buffer, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One varint at each ``pos`` (< its ``end``); return (values as uint64, positions after)."""
    first = buf.u8[pos]
    if first.size and first.max() < 0x80:  # all one-byte varints: one load
        if (pos >= end).any():
            raise Malformed("varint runs past the end of its message")
        return first.astype(np.uint64), pos + 1
    word = buf.u64[pos]
    term = ~word & _HI
    low = term & (~term + _ONE)  # lowest terminator bit (0 when the varint is longer than 8 bytes)
    mask = (low << _ONE) - _ONE
    v = word & mask & _LO7
    for keep, shift, moved in _COMPACT:
        v = (v & keep) | ((v >> shift) & moved)
    after = pos + np.bitwise_count(mask).astype(np.int64) // 8
    long = np.flatnonzero(low == 0)
    if long.size:
        v[long], after[long] = _read_long_varints(buf, pos[long])
    if (after > end).any():
        raise Malformed("varint runs past the end of its message")
    return v, after


def _read_long_varints(buf: Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    value = np.zeros(pos.size, dtype=np.uint64)
    after = np.full(pos.size, -1, dtype=np.int64)
    todo = np.arange(pos.size)
    for i in range(10):
        p = np.minimum(pos[todo] + i, buf.u8.size - 1)
        b = buf.u8[p]
        value[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        done = b < 0x80
        after[todo[done]] = p[done] + 1
        todo = todo[~done]
        if not todo.size:
            return value, after
    raise Malformed("varint longer than 10 bytes")


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
    """All events of a file, decoded; stats left as byte ranges until asked for."""

    metadata_id: np.ndarray  # int64, per event
    offset_ps: np.ndarray  # int64, per event
    duration_ps: np.ndarray  # int64, per event
    stat_owner: np.ndarray  # int64 event index, per stat (an event's stats in wire order)
    stat_start: np.ndarray  # int64 byte range of each XStat message in ``buf``
    stat_end: np.ndarray
    buf: Buffer


def decode_events(chunks: list[bytes] | tuple[bytes, ...], lengths: np.ndarray | None = None) -> Events:
    """Decode serialized XEvent messages (given one ``bytes`` per event) into arrays."""
    n = len(chunks)
    if lengths is None:
        lengths = np.fromiter(map(len, chunks), dtype=np.int64, count=n)
    buf = Buffer.of(b"".join(chunks))
    end = np.cumsum(lengths)
    header = [np.zeros(n, dtype=np.int64) for _ in range(3)]  # metadata_id, offset_ps, duration_ps
    owners, starts, lens = [], [], []
    for idx, number, wire, value, payload in iter_rounds(buf, end - lengths, end):
        if number.min() == 4 and number.max() == 4:  # a round of stats only: the common case
            if wire.min() != 2 or wire.max() != 2:
                raise Malformed("stat field is not length-delimited")
            owners.append(idx)
            starts.append(payload)
            lens.append(value)
            continue
        for k, column in enumerate(header, start=1):
            sel = (number == k) & (wire == 0)
            column[idx[sel]] = value[sel].view(np.int64)
        sel = (number == 4) & (wire == 2)
        owners.append(idx[sel])
        starts.append(payload[sel])
        lens.append(value[sel])
    if owners:
        s_start = np.concatenate(starts)
        s_end = s_start + np.concatenate(lens).astype(np.int64)
        s_owner = np.concatenate(owners)
    else:
        s_start = s_end = s_owner = np.zeros(0, dtype=np.int64)
    return Events(header[0], header[1], header[2], s_owner, s_start, s_end, buf)


def stat_metadata_ids(ev: Events) -> np.ndarray:
    """The ``metadata_id`` of every stat (0 when absent), reading only what that needs."""
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


def decode_stat_values(buf: Buffer, start: np.ndarray, end: np.ndarray) -> StatValues:
    """Values of the XStat messages at ``buf[start:end]``.

    Fast path: the usual layout, ``metadata_id`` (one byte) then one value field, read
    with one tag load and one varint per stat; any other layout is read field by field.
    """
    n = start.size
    if n == 0:
        return StatValues(
            np.zeros(0, np.int8), np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        )
    ok = (start + 3 < end) & (buf.u8[start] == 0x08) & (buf.u8[start + 1] < 0x80)
    tag = buf.u8[start + 2].astype(np.int64)
    number, wire = tag >> 3, tag & 7
    ok &= (tag < 0x80) & (number >= 2) & (number <= 7) & (wire == _EXPECTED_WIRE[np.clip(number, 0, 7)])
    is_f64, is_len = wire == 1, wire == 2
    # every row reads one varint: the value (or length) on the fast rows, a padding zero elsewhere
    spare = np.int64(buf.size)
    vpos = np.where(ok & ~is_f64, start + 3, spare)
    v, payload = read_varints(buf, vpos, np.where(ok & ~is_f64, end, spare + 1))
    v = np.where(is_f64, buf.u64[np.where(ok, start + 3, spare)], v)
    after = np.where(is_f64, start + 11, payload + np.where(is_len, v, np.uint64(0)).astype(np.int64))
    ok &= after == end  # exactly one value field, nothing after it
    kind = np.where(ok, number, 0).astype(np.int8)
    num = np.where(ok & ~is_len, v, np.uint64(0))
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
    sel = np.flatnonzero((f.number >= 2) & (f.number <= 7))
    number = f.number[sel]
    if (f.wire[sel] != _EXPECTED_WIRE[number]).any():
        raise Malformed("stat value with the wrong wire type")
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
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def distinct_strings(buf: Buffer, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Group equal byte strings without a Python step per string: (codes, distinct texts).

    Each string is hashed eight bytes at a time (one unaligned load per word, two
    independent 64-bit hashes and the length); strings are grouped by the first hash
    and the second must agree within every group, else the strings are compared
    exactly.  Only one representative per group is decoded.
    """
    n = start.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    h1 = length.astype(np.uint64) * _HASH_M1
    h2 = length.astype(np.uint64) * _HASH_M2
    idx = np.arange(n)
    for k in range(0, int(length.max()), 8):
        if k:
            idx = idx[length[idx] > k]
        rem = length[idx] - k
        word = buf.u64[start[idx] + k]
        short = rem < 8
        if short.any():
            mask = np.where(
                short, (_ONE << (np.minimum(rem, 7).astype(np.uint64) * np.uint64(8))) - _ONE, _ALL_ONES
            )
            word = word & mask
        h1[idx] = (h1[idx] ^ word) * _HASH_M1
        h1[idx] ^= h1[idx] >> np.uint64(29)
        h2[idx] = (h2[idx] + word) * _HASH_M2
        h2[idx] ^= h2[idx] >> np.uint64(31)
    codes, uniques = pd.factorize(h1)
    first = np.full(uniques.size, -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)  # first occurrence of each group
    if not (h2 == h2[first[codes]]).all():  # a 64-bit collision: compare exactly instead
        texts_all = [buf.text(s, ln) for s, ln in zip(start.tolist(), length.tolist())]
        codes, uniq = pd.factorize(np.array(texts_all, dtype=object))
        return codes.astype(np.int64), [str(u) for u in uniq]
    texts = [buf.text(s, ln) for s, ln in zip(start[first].tolist(), length[first].tolist())]
    return codes.astype(np.int64), texts
