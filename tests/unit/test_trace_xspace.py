"""The vectorised wire-format decoder against the protobuf runtime, and fuzzing of the loader."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference_kit import decode_events
from trace_kit import two_gpu_trace
from xspace_kit import only_trace_errors

from tfprof_towers.xplane import events as xev
from tfprof_towers.xplane import schema, wire
from tfprof_towers.xplane.strings import distinct_strings

stat_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(lambda v: ("int64_value", v)),
    st.integers(0, 2**64 - 1).map(lambda v: ("uint64_value", v)),
    st.floats(allow_nan=False).map(lambda v: ("double_value", v)),
    st.text(max_size=40).map(lambda v: ("str_value", v)),
    st.binary(max_size=300).map(lambda v: ("bytes_value", v)),
    st.integers(0, 2**40).map(lambda v: ("ref_value", v)),
    st.none(),
)
events = st.lists(
    st.tuples(
        st.integers(0, 2**40),  # metadata id
        st.integers(-(2**50), 2**62),  # offset
        st.integers(0, 2**62),  # duration
        st.lists(st.tuples(st.integers(0, 2**31), stat_values), max_size=6),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(events)
def test_decoder_matches_protobuf(evs) -> None:
    chunks = []
    for md, off, dur, stats in evs:
        e = schema.XEvent(metadata_id=md, offset_ps=off, duration_ps=dur)
        for sid, val in stats:
            s = e.stats.add(metadata_id=sid)
            if val is not None:
                setattr(s, val[0], val[1])
        chunks.append(e.SerializeToString())
    got = decode_events(chunks)
    assert got.metadata_id.tolist() == [e[0] for e in evs]
    assert got.offset_ps.tolist() == [e[1] for e in evs]
    assert got.duration_ps.tolist() == [e[2] for e in evs]
    md = xev.stat_metadata_ids(got)
    vals = xev.decode_stat_values(got.buf, got.stat_start, got.stat_end)
    order = np.lexsort((np.arange(md.size), got.stat_owner))  # an event's stats in wire order
    flat = [(i, sid, val) for i, e in enumerate(evs) for sid, val in e[3]]
    assert len(flat) == md.size
    for k, (owner, sid, val) in zip(order.tolist(), flat):
        assert got.stat_owner[k] == owner and md[k] == sid
        if val is None:
            assert vals.kind[k] == 0
            continue
        field, v = val
        kind = {
            "double_value": 2,
            "uint64_value": 3,
            "int64_value": 4,
            "str_value": 5,
            "bytes_value": 6,
            "ref_value": 7,
        }[field]
        assert vals.kind[k] == kind
        if kind in (5, 6):
            raw = got.buf.u8[vals.str_start[k] : vals.str_start[k] + vals.str_len[k]].tobytes()
            assert raw == (v.encode() if isinstance(v, str) else v)
        elif kind == 2:
            assert vals.num[k : k + 1].view(np.float64)[0] == v
        elif kind == 4:
            assert vals.num[k : k + 1].view(np.int64)[0] == v
        else:
            assert int(vals.num[k]) == v


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "",
                "a",
                "ab",
                "size:8 dest:0 async:1",
                "size:16 dest:0 async:1",
                "x" * 20,
                "x" * 21,
                "é" * 9,
                "0123456789abcdef",
            ]
        ),
        min_size=1,
        max_size=40,
    )
)
def test_distinct_strings(strings) -> None:
    data = "".join(strings).encode()
    lens = np.array([len(s.encode()) for s in strings], dtype=np.int64)
    starts = np.cumsum(lens) - lens
    codes, texts = distinct_strings(wire.Buffer.of(data), starts, lens)
    assert [texts[c] for c in codes] == strings
    assert len(texts) == len(set(strings))


VALID = two_gpu_trace().to_bytes()


@settings(max_examples=150, deadline=None)
@given(st.integers(0, len(VALID) - 1))
def test_fuzz_truncations(n) -> None:
    only_trace_errors(VALID[:n])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_fuzz_byte_flips(flips) -> None:
    data = bytearray(VALID)
    for pos, value in flips:
        data[pos] = value
    only_trace_errors(bytes(data))




def test_schema_is_private() -> None:
    from google.protobuf import descriptor_pool

    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("tfprof_towers.xplane.XSpace")
