"""Helpers shared by test_trace_xspace.py and test_trace_xspace_e2e.py: the loader's fuzz check, and events
made by hypothesis checked against protobuf (the unit tier draws a few, the e2e tier hundreds)."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st
from reference_kit import decode_events

from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane import events as xev
from tfprof_towers.xplane import schema


def only_trace_errors(data: bytes) -> None:
    """Loading either works (and the analysis of what loaded works too) or raises TraceError."""
    try:
        trace = trace_from_bytes(data, "fuzz")
    except TraceError as exc:
        assert "\n" not in str(exc)
        return
    json.dumps(analyze_trace(trace).to_doc())


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


def check_decoder_matches_protobuf(evs: list) -> None:
    """The events ``evs`` (as :data:`events` draws them) written by protobuf, decoded by the numpy decoder:
    every field and stat value as written."""
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


def flipped(data: bytes, flips: Sequence[tuple[int, int]]) -> bytes:
    """``data`` with each ``(position, value)`` of ``flips`` written over it."""
    out = bytearray(data)
    for pos, value in flips:
        out[pos] = value
    return bytes(out)
