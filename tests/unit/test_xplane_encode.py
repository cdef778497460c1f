"""The bulk encoder writes what protobuf writes: varints, decimals, whole lines of events."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tfprof_towers.testing.build import Ref, TraceBuilder
from tfprof_towers.testing.encode import BulkStat, decimal, varints
from tfprof_towers.xplane.ragged import Ragged, concat_rows
from tfprof_towers.xplane.schema import XSpace, XStat


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20))
def test_varints_are_protobufs(values: list[int]) -> None:
    got = varints(np.array(values, dtype=np.int64))
    want = [XStat(int64_value=v).SerializeToString()[1:] for v in values]  # drop the one-byte tag
    assert got.data.tobytes() == b"".join(want) and got.lengths.tolist() == [len(w) for w in want]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**62), min_size=1, max_size=20))
def test_decimal(values: list[int]) -> None:
    got = decimal(np.array(values, dtype=np.int64))
    assert got.data.tobytes() == "".join(map(str, values)).encode()


def test_concat_rows_and_where() -> None:
    a, b = Ragged.of([b"ab", b"", b"c"]), Ragged.of([b"1", b"22", b""])
    joined = concat_rows(a, b)
    assert joined.data.tobytes() == b"ab122c" and joined.lengths.tolist() == [3, 2, 1]
    assert joined.where(np.array([True, False, True])).data.tobytes() == b"ab1c"


def test_bulk_line_equals_event_by_event() -> None:
    names = ["a", "bb", "MemcpyH2D"]
    idx = np.array([0, 1, 2, 2, 0])
    start = np.array([5, 10_000_000, 2**40, 3, 7]) * 1000 + 1_000_000
    dur = np.array([1, 2, 300_000, 4, -5])
    sizes = np.array([0, 9, 10, 123_456_789, 5])
    corr = np.arange(5) * 1000 - 2
    with_op = np.arange(5) % 2 == 0
    a = TraceBuilder()
    line = a.plane("/device:GPU:0").line("Stream #1", line_id=7, timestamp_ns=1000)
    for i in range(5):
        stats: dict = {"correlation_id": int(corr[i])}
        if with_op[i]:
            stats["tf_op"] = Ref("x:MatMul")
        stats["memcpy_details"] = f"size:{sizes[i]} dest:0"
        line.event(names[idx[i]], int(start[i]), int(dur[i]), stats)
    b = TraceBuilder()
    text = concat_rows(Ragged.repeat(b"size:", 5), decimal(sizes), Ragged.repeat(b" dest:0", 5))
    b.plane("/device:GPU:0").bulk_line(
        "Stream #1", 7, 1000, names, idx, start, dur,
        {
            "correlation_id": BulkStat("int", corr),
            "tf_op": BulkStat("ref", np.zeros(5, np.int64), ("x:MatMul",), with_op),
            "memcpy_details": BulkStat("str", text),
        },
    )
    assert XSpace.FromString(a.to_bytes()) == XSpace.FromString(b.to_bytes())
