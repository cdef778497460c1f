"""The numpy wire-format decoders against protobuf as the oracle: varints of every length,
events and stats in any field order, unknown fields, the speculative chunked walk of lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_kit import decode_events, read_space
from trace_kit import DERIVED_LINE_IDS, US, TraceBuilder, two_gpu_trace
from wire_kit import (
    buffer,
    check_against_protobuf,
    check_corrupt_line_walk,
    check_distinct_strings_of_every_length,
    field,
    line_bytes,
    varint,
)

from tfprof_towers.trace.load import load_trace, trace_from_bytes
from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane import events as xev
from tfprof_towers.xplane import schema, wire

# --- a tiny encoder: raw fields, so tests can write what protobuf's serializer never does








# --- varints

# one to ten bytes: the limits of each length, and negative int64s (always ten bytes)
VARINT_VALUES = [0, 1, 127, 128, 300, 16383, 16384, 2**21 - 1, 2**21, 2**28, 2**35 - 1, 2**35]
VARINT_VALUES += [2**42 - 1, 2**42, 2**49, 2**56, 2**63 - 1, 2**63, 2**64 - 1, -1, -(2**40), -(2**63)]


def test_read_varints_of_one_to_ten_bytes() -> None:
    encoded = [varint(v) for v in VARINT_VALUES]
    assert sorted({len(e) for e in encoded}) == list(range(1, 11))
    buf, start, end = buffer(*encoded)
    value, after = wire.read_varints(buf, start, end)
    assert value.view(np.int64).tolist() == [((v + 2**63) % 2**64) - 2**63 for v in VARINT_VALUES]
    assert after.tolist() == end.tolist()


def test_read_varints_one_byte_fast_path_and_truncation() -> None:
    buf, start, end = buffer(b"\x05", b"\x7f", b"\x00")
    value, after = wire.read_varints(buf, start, end)
    assert value.tolist() == [5, 127, 0] and after.tolist() == [1, 2, 3]
    buf, start, end = buffer(b"\x80\x80")  # continues past its message
    with pytest.raises(wire.Malformed):
        wire.read_varints(buf, start, end)
    buf, start, end = buffer(b"\xff" * 11)  # longer than ten bytes
    with pytest.raises(wire.Malformed):
        wire.read_varints(buf, start, end)


@pytest.mark.parametrize("max_bits", [7, 14, 28, 49, 64])
def test_word_varints_every_path(max_bits: int) -> None:
    """All one byte, all within two or four bytes (narrower arithmetic), the general case, and
    varints too long for the 7 bytes (length 0); garbage after each varint is ignored."""
    rng = np.random.default_rng(max_bits)
    values = [int(v) >> int(s) for v, s in zip(rng.integers(0, 2**63, 400), rng.integers(0, 64, 400))]
    values = [v % (1 << max_bits) for v in values] + [(1 << max_bits) - 1]
    words, lengths = [], []
    for v in values:
        e = varint(v)
        lengths.append(len(e) if len(e) <= 7 else 0)
        words.append(int.from_bytes((e + rng.integers(0, 256, 8, dtype=np.uint8).tobytes())[:7], "little"))
    got, length = wire.word_varints(np.array(words, dtype=np.uint64))
    assert length.tolist() == lengths
    ok = np.array(lengths) > 0
    assert got[ok].tolist() == [v for v, k in zip(values, lengths) if k]


# --- events and stats: protobuf is the oracle







def test_events_in_several_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xev, "BLOCK", 3)
    chunks = [
        field(1, 0, i) + field(2, 0, -i) + field(4, 2, field(1, 0, i % 4) + field(7, 0, i)) for i in range(10)
    ]
    buf, start, end = buffer(*chunks)
    ev = xev.decode_event_ranges(buf, start, end, values=True)
    check_against_protobuf(chunks, ev, ev.stat_values)
    assert ev.offset_ps.tolist() == [-i for i in range(10)]


def test_stat_filter_keeps_labelled_stats() -> None:
    def stat(md: int, ref: int) -> bytes:
        return field(4, 2, field(1, 0, md) + field(7, 0, ref))

    chunks = [
        field(1, 0, 1) + stat(1, 10) + stat(2, 20) + stat(3, 30),
        field(1, 0, 2) + stat(3, 31) + stat(200, 40) + field(4, 2, field(7, 0, 50) + field(1, 0, 2)),
        b"",
    ]
    buf, start, end = buffer(*chunks)
    table = np.full((2, 256), -1, dtype=np.int8)
    table[0, 2], table[0, 3], table[1, 200], table[1, 2] = 0, 1, 5, 7
    keep = xev.StatFilter(np.array([0, 1, 0]), table)
    ev = xev.decode_event_ranges(buf, start, end, keep, values=True)
    got = sorted(
        zip(ev.stat_owner.tolist(), ev.stat_md.tolist(), ev.stat_label.tolist(), ev.stat_values.num.tolist())
    )
    # event 0: ids 2 and 3 kept (labels 0, 1); event 1 (group 1): id 200 (two-byte id) and id 2
    # given after its value (slow path) kept, id 3 dropped
    assert got == [(0, 2, 0, 20), (0, 3, 1, 30), (1, 2, 7, 50), (1, 200, 5, 40)]


def test_decode_events_of_chunks() -> None:
    chunks = [schema.XEvent(metadata_id=3, offset_ps=-5, duration_ps=7).SerializeToString(), b""]
    ev = decode_events(chunks)
    assert ev.metadata_id.tolist() == [3, 0] and ev.offset_ps.tolist() == [-5, 0]


def test_corrupt_events_raise_malformed_only() -> None:
    for chunk in (b"\x08", b"\x22\x05\x08", b"\x22\x01\x08", b"\x0b", b"\x22\x80"):
        buf, start, end = buffer(chunk)
        with pytest.raises(wire.Malformed):
            ev = xev.decode_event_ranges(buf, start, end, values=True)
            xev.decode_stat_values(buf, ev.stat_start, ev.stat_end)


# --- lines: the speculative chunked walk against a plain walk






# strings that look like the start of an event or a stat (``22 <len> 08``) mislead the guesses




# Lines of up to 12 events (not 60): the flipped byte lies in the first 400 bytes, and 12 events still
# make several chunks of 2 fields after it; generating the long tail cost two thirds of the test's time.
@settings(max_examples=40, deadline=None)  # 150 in tests/e2e/test_xplane_wire_e2e.py
@given(line_bytes(max_events=12), st.integers(0, 400), st.integers(0, 255))
def test_walk_fields_of_a_corrupt_line_raises_malformed(line: bytes, at: int, byte: int) -> None:
    check_corrupt_line_walk(line, at, byte)


def test_read_space_lines_and_event_ranges() -> None:
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    b.plane("/device:GPU:0")  # no lines at all
    busy = host.line("busy", line_id=-7, timestamp_ns=123)
    for i in range(300):
        busy.event(f"op{i % 3}", 123_000 + i * US, US, {"step_num": i})
    host.line("empty", line_id=2)  # a line without events
    data = b.to_bytes()
    space = read_space(wire.Buffer.of(data), data)
    lines = space.lines
    assert [p.name for p in space.planes] == ["/host:CPU", "/device:GPU:0"]
    assert (lines.name, lines.id.tolist(), lines.timestamp_ns.tolist()) == (
        ["busy", "empty"],
        [-7, 2],
        [123, 0],
    )
    assert lines.event_count.tolist() == [300, 0] and lines.plane.tolist() == [0, 0]
    want = [e.SerializeToString() for e in schema.XSpace.FromString(data).planes[0].lines[0].events]
    got = [data[s:e] for s, e in zip(lines.event_start.tolist(), lines.event_end.tolist())]
    assert got == want and space.hostnames == ("testhost",)


# --- the loader


def test_rows_keep_file_order_around_a_derived_line() -> None:
    b = TraceBuilder()
    gpu = b.plane("/device:GPU:0")
    first = gpu.line("Stream #1(Compute)")
    first.event("k1", 0, 10 * US)
    ops = gpu.line("TensorFlow Ops", line_id=DERIVED_LINE_IDS["TensorFlow Ops"])
    ops.event("a:MatMul", 0, 10 * US)
    second = gpu.line("Stream #2(Compute)")
    second.event("k2", 20 * US, 10 * US)
    second.event("k3", 40 * US, 10 * US)
    ev = trace_from_bytes(b.to_bytes()).events
    assert ev["name"].astype(str).tolist() == ["k1", "k2", "k3"]
    assert ev["line"].astype(str).tolist() == [
        "Stream #1(Compute)",
        "Stream #2(Compute)",
        "Stream #2(Compute)",
    ]


def test_load_from_file_equals_load_from_bytes(tmp_path: Path) -> None:
    path = two_gpu_trace().write(tmp_path / "t.xplane.pb")
    a, b = load_trace(path), trace_from_bytes(path.read_bytes())
    assert a.events.equals(b.events) and a.steps.equals(b.steps)


def test_buffer_read_pads_with_zeros(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"\xff" * 13)
    buf, view = wire.Buffer.read(path)
    assert buf.size == 13 and bytes(view[:13]) == b"\xff" * 13
    assert buf.u8[13:].tolist() == [0] * wire.PAD
    assert int(buf.u64[12]) == 0xFF


@pytest.mark.parametrize(
    "data",
    [
        field(1, 2, field(3, 2, field(4, 2, b"\x08"))),  # an event cut inside a varint
        field(1, 2, field(3, 2, field(4, 0, 5) + field(4, 2, b""))),  # odd wire types, empty event
        field(1, 2, field(2, 2, b"\xff\xfe") + field(3, 2, b"")),  # a plane name that is not UTF-8
    ],
)
def test_odd_traces_load_or_raise_trace_error(data: bytes) -> None:
    try:
        trace_from_bytes(data, "odd")
    except TraceError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=50, deadline=None)  # 200 in tests/e2e/test_xplane_wire_e2e.py
@given(st.lists(st.integers(0, 70), min_size=1, max_size=30), st.data())
def test_distinct_strings_of_every_length(lengths: list[int], data) -> None:
    check_distinct_strings_of_every_length(lengths, data)
