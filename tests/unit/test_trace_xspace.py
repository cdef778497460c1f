"""The vectorised wire-format decoder against the protobuf runtime, and fuzzing of the loader.

The decoder and byte-flip property tests draw a quarter of the examples that
tests/e2e/test_trace_xspace_e2e.py draws.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from trace_kit import two_gpu_trace
from xspace_kit import check_decoder_matches_protobuf, events, flipped, only_trace_errors

from tfprof_towers.xplane import wire
from tfprof_towers.xplane.strings import distinct_strings


@settings(max_examples=50, deadline=None)  # 200 in tests/e2e/test_trace_xspace_e2e.py
@given(events)
def test_decoder_matches_protobuf(evs) -> None:
    check_decoder_matches_protobuf(evs)


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


@settings(max_examples=75, deadline=None)  # 300 in tests/e2e/test_trace_xspace_e2e.py
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_fuzz_byte_flips(flips) -> None:
    only_trace_errors(flipped(VALID, flips))


def test_schema_is_private() -> None:
    from google.protobuf import descriptor_pool

    with pytest.raises(KeyError):
        descriptor_pool.Default().FindMessageTypeByName("tfprof_towers.xplane.XSpace")
