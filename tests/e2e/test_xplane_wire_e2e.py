"""The numpy wire-format decoders against protobuf as the oracle, on hundreds of hypothesis-made
inputs each: events and stats in any field order, unknown fields, and the speculative chunked walk
of lines against a plain walk.  The fixed cases are in tests/unit/test_xplane_wire.py.
"""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_kit import (
    buffer,
    check_against_protobuf,
    check_corrupt_line_walk,
    check_distinct_strings_of_every_length,
    field,
    int64s,
    line_bytes,
    reference_fields,
    unknown_field,
)

from tfprof_towers.xplane import events as xev
from tfprof_towers.xplane import layout

# --- a tiny encoder: raw fields, so tests can write what protobuf's serializer never does








# --- events and stats: protobuf is the oracle





stat_value_fields = st.one_of(
    st.floats(allow_nan=False).map(lambda v: field(2, 1, struct.unpack("<Q", struct.pack("<d", v))[0])),
    st.integers(0, 2**64 - 1).map(lambda v: field(3, 0, v)),
    int64s.map(lambda v: field(4, 0, v)),
    st.text(max_size=150).map(lambda v: field(5, 2, v.encode())),
    st.binary(max_size=150).map(lambda v: field(6, 2, v)),
    st.integers(0, 2**40).map(lambda v: field(7, 0, v)),
)


@st.composite
def stat_bytes(draw) -> bytes:
    """An XStat: its metadata_id (first, later, or absent), a value or none, unknown fields."""
    parts = [field(1, 0, draw(st.integers(0, 300)))] if draw(st.integers(0, 9)) else []
    parts += draw(st.lists(stat_value_fields, max_size=1))
    parts += draw(st.lists(unknown_field(), max_size=1))
    if draw(st.integers(0, 4)) == 0:
        parts = draw(st.permutations(parts))
    return b"".join(parts)


@st.composite
def event_bytes(draw) -> bytes:
    """An XEvent as writers lay it out (header fields, then stats), or with the fields shuffled,
    repeated (the last one wins), num_occurrences in offset's place, unknown fields."""
    parts = []
    for number in (1, 2, 3):
        if draw(st.integers(0, 5)):
            parts.append(field(number, 0, draw(int64s)))
    parts += [field(4, 2, s) for s in draw(st.lists(stat_bytes(), max_size=6))]
    extras = draw(
        st.lists(
            st.one_of(
                unknown_field(),
                st.tuples(st.sampled_from([1, 3, 5]), int64s).map(lambda t: field(t[0], 0, t[1])),
            ),
            max_size=2,
        )
    )
    if extras or draw(st.integers(0, 9)) == 0:
        parts = draw(st.permutations(parts + extras))
    return b"".join(parts)




@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event_bytes(), max_size=25))
def test_events_match_protobuf(chunks: list[bytes]) -> None:
    buf, start, end = buffer(*chunks)
    ev = xev.decode_event_ranges(buf, start, end, values=True)
    check_against_protobuf(chunks, ev, ev.stat_values)
    # the same values read from the buffer (no first words) and from the first words
    plain = xev.decode_event_ranges(buf, start, end)
    for values in (
        xev.decode_stat_values(buf, plain.stat_start, plain.stat_end),
        xev.decode_stat_values(buf, plain.stat_start, plain.stat_end, plain.stat_head),
    ):
        check_against_protobuf(chunks, plain, values)


# --- lines: the speculative chunked walk against a plain walk






# strings that look like the start of an event or a stat (``22 <len> 08``) mislead the guesses




@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(line_bytes(), min_size=1, max_size=6), st.sampled_from([1, 2, 8, 128]), st.sampled_from([8, 64])
)
def test_walk_fields_matches_a_plain_walk(lines: list[bytes], per_chunk: int, window: int) -> None:
    buf, start, end = buffer(*lines)
    data = b"".join(lines)
    rec = layout.walk_fields(buf, start, end, fields_per_chunk=per_chunk, window=window)
    want = [
        (i, f0, tag) for i, (s, e) in enumerate(zip(start, end)) for f0, tag in reference_fields(data, s, e)
    ]
    assert list(zip(rec.owner.tolist(), rec.pos.tolist(), rec.tag.tolist())) == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line_bytes(max_events=12), st.integers(0, 400), st.integers(0, 255))
def test_walk_fields_of_a_corrupt_line_raises_malformed(line: bytes, at: int, byte: int) -> None:
    check_corrupt_line_walk(line, at, byte)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 70), min_size=1, max_size=30), st.data())
def test_distinct_strings_of_every_length(lengths: list[int], data) -> None:
    check_distinct_strings_of_every_length(lengths, data)
