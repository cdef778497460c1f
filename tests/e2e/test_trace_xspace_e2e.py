"""The vectorised wire-format decoder against the protobuf runtime, and fuzzing of the loader."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.vocab.errors import TraceError


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
def test_fuzz_random_bytes(data) -> None:
    _only_trace_errors(data)


def _only_trace_errors(data: bytes) -> None:
    """Loading either works (and the analysis of what loaded works too) or raises TraceError."""
    try:
        trace = trace_from_bytes(data, "fuzz")
    except TraceError as exc:
        assert "\n" not in str(exc)
        return
    json.dumps(analyze_trace(trace).to_doc())
