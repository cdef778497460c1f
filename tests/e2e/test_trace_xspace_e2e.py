"""Fuzzing of the loader: random bytes either load (and analyse) or raise a one-line TraceError.

The vectorised decoder's fixed cases against the protobuf runtime are in tests/unit/test_trace_xspace.py.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xspace_kit import only_trace_errors


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_fuzz_random_bytes(data) -> None:
    only_trace_errors(data)


