"""Helpers shared by test_xplane_wire.py and test_xplane_wire_e2e.py (the unit tier draws a few of the
property tests' examples, the e2e tier hundreds)."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import strategies as st

from tfprof_towers.xplane import events as xev
from tfprof_towers.xplane import layout, schema, wire
from tfprof_towers.xplane.strings import distinct_strings


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, v = v & 0x7F, v >> 7
        out.append(byte | 0x80 if v else byte)
        if not v:
            return bytes(out)

def field(number: int, wire: int, value: int | bytes) -> bytes:
    tag = varint(number << 3 | wire)
    if wire == 0:
        return tag + varint(int(value))
    if wire == 1:
        return tag + struct.pack("<Q", int(value) & (1 << 64) - 1)
    if wire == 5:
        return tag + struct.pack("<I", int(value) & 0xFFFFFFFF)
    assert isinstance(value, bytes)
    return tag + varint(len(value)) + value

def buffer(*chunks: bytes) -> tuple[wire.Buffer, np.ndarray, np.ndarray]:
    """A buffer holding the chunks back to back, and each chunk's byte range."""
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    end = np.cumsum(lengths)
    return wire.Buffer.of(b"".join(chunks)), end - lengths, end

int64s = st.integers(-(2**63), 2**63 - 1)

unknown_numbers = st.sampled_from([6, 7, 8, 9, 15, 16, 100, 2047, 5000, 1 << 20])

def unknown_field() -> st.SearchStrategy[bytes]:
    payload = st.one_of(
        st.integers(0, 2**64 - 1).map(lambda v: (0, v)),
        st.integers(0, 2**64 - 1).map(lambda v: (1, v)),
        st.integers(0, 2**32 - 1).map(lambda v: (5, v)),
        st.binary(max_size=20).map(lambda v: (2, v)),
        # a packed repeated field: varints inside one length-delimited field
        st.lists(st.integers(0, 2**64 - 1), max_size=5).map(lambda vs: (2, b"".join(map(varint, vs)))),
    )
    return st.tuples(unknown_numbers, payload).map(lambda t: field(t[0], t[1][0], t[1][1]))

def check_against_protobuf(chunks: list[bytes], ev: xev.Events, values: xev.StatValues) -> None:
    kinds = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5, "bytes_value": 6}
    kinds["ref_value"] = 7
    order = np.lexsort((np.arange(ev.stat_owner.size), ev.stat_owner))  # an event's stats in wire order
    md = xev.stat_metadata_ids(ev)
    k = 0
    for i, chunk in enumerate(chunks):
        want = schema.XEvent.FromString(chunk)
        assert (ev.metadata_id[i], ev.offset_ps[i], ev.duration_ps[i]) == (
            want.metadata_id,
            want.offset_ps,
            want.duration_ps,
        )
        for stat in want.stats:
            j = order[k]
            k += 1
            assert ev.stat_owner[j] == i and md[j] == stat.metadata_id
            which = stat.WhichOneof("value")
            assert values.kind[j] == kinds.get(which, 0)
            if which in ("str_value", "bytes_value"):
                raw = ev.buf.u8[values.str_start[j] : values.str_start[j] + values.str_len[j]].tobytes()
                value = getattr(stat, which)
                assert raw == (value.encode() if isinstance(value, str) else value)
            elif which == "double_value":
                assert values.num[j : j + 1].view(np.float64)[0] == stat.double_value
            elif which is not None:
                assert int(values.num[j]) == getattr(stat, which) % 2**64
    assert k == ev.stat_owner.size

def reference_fields(data: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """(field start, tag) of the fields of data[start:end], one Python step per field."""
    out, p = [], start
    while p < end:
        f0 = p
        tag, p = read_py_varint(data, p)
        wire = tag & 7
        if wire == 0:
            p = read_py_varint(data, p)[1]
        elif wire == 2:
            n, p = read_py_varint(data, p)
            p += n
        else:
            p += 8 if wire == 1 else 4
        out.append((f0, tag))
    assert p == end
    return out

def read_py_varint(data: bytes, p: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = data[p]
        p += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, p

lookalike = st.sampled_from([b"\x22\x05\x08\x01\x10\x02", b"\x22\x40\x08", b"\x22\x81\x01\x08", b"x" * 40])

@st.composite
def line_bytes(draw, max_events: int = 60) -> bytes:
    """An XLine payload: header fields, up to ``max_events`` events (some large, some with misleading
    strings), unknown fields before, between and after them."""
    head = [field(1, 0, draw(int64s)), field(2, 2, b"stream"), field(3, 0, draw(st.integers(0, 2**62)))]
    events = []
    for _ in range(draw(st.integers(0, max_events))):
        body = field(1, 0, draw(st.integers(0, 300))) + field(2, 0, draw(int64s))
        for _ in range(draw(st.integers(0, 4))):
            value = draw(st.one_of(lookalike, st.binary(max_size=30)))
            body += field(4, 2, field(1, 0, draw(st.integers(0, 200))) + field(5, 2, value))
        if draw(st.integers(0, 20)) == 0:  # an event larger than several chunks
            body += field(4, 2, field(6, 2, draw(lookalike) * 200))
        events.append(field(4, 2, body))
    if draw(st.booleans()):
        events.insert(draw(st.integers(0, len(events))), draw(unknown_field()))
    tail = draw(
        st.lists(st.one_of(unknown_field(), st.just(field(9, 0, 5)), st.just(field(11, 2, b"d"))), max_size=2)
    )
    return b"".join(head + events + tail)


def check_corrupt_line_walk(line: bytes, at: int, byte: int) -> None:
    """``line`` with the byte at ``at`` (modulo its length) set to ``byte``: the chunked walk of its fields
    either raises ``Malformed`` or finds the fields a plain walk finds."""
    data = bytearray(line)
    if data:
        data[at % len(data)] = byte
    buf, start, end = buffer(bytes(data))
    try:
        rec = layout.walk_fields(buf, start, end, fields_per_chunk=2, window=8)
    except wire.Malformed:
        return
    want = [(0, f0, tag) for f0, tag in reference_fields(bytes(data), 0, len(data))]
    assert list(zip(rec.owner.tolist(), rec.pos.tolist(), rec.tag.tolist())) == want


def check_distinct_strings_of_every_length(lengths: list[int], data) -> None:
    """Strings of ``lengths`` (0..70 bytes) that differ in one byte anywhere -- at a word's edge, in the
    overlap of a long string's last two words, in its last byte -- are told apart, and
    equal ones grouped, whatever bytes surround them."""
    base = data.draw(st.binary(min_size=70, max_size=70))
    strings = []
    for n in lengths:
        s = bytearray(base[:n])
        if n and data.draw(st.booleans()):
            s[data.draw(st.integers(0, n - 1))] ^= 1 << data.draw(st.integers(0, 7))
        strings.append(bytes(s))
    noise = data.draw(st.binary(min_size=16, max_size=16))
    chunks = [noise[: i % 16] + s for i, s in enumerate(strings)]  # vary the alignment
    buf, _, end = buffer(*chunks)
    lens = np.array([len(s) for s in strings], dtype=np.int64)
    codes, texts = distinct_strings(buf, end - lens, lens)
    first: dict[bytes, int] = {}
    for s in strings:
        first.setdefault(s, len(first))
    assert codes.tolist() == [first[s] for s in strings]
    assert texts == [s.decode("utf-8", "replace") for s in first]
