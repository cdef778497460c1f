"""Fuzzing of the loader and the decoder against protobuf, on hundreds of hypothesis-made inputs each.

Random bytes, and the 2-GPU trace with bytes written over, either load (and analyse) or raise a one-line
TraceError; events protobuf writes decode to what was written.  tests/unit/test_trace_xspace.py runs the
same checks on a quarter of the examples, with the fixed cases.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_kit import two_gpu_trace
from xspace_kit import check_decoder_matches_protobuf, events, flipped, only_trace_errors

VALID = two_gpu_trace().to_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_fuzz_random_bytes(data) -> None:
    only_trace_errors(data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events)
def test_decoder_matches_protobuf(evs) -> None:
    check_decoder_matches_protobuf(evs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_fuzz_byte_flips(flips) -> None:
    only_trace_errors(flipped(VALID, flips))
