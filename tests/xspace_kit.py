"""Helpers shared by test_trace_xspace.py and test_trace_xspace_e2e.py."""

from __future__ import annotations

import json

from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.vocab.errors import TraceError


def only_trace_errors(data: bytes) -> None:
    """Loading either works (and the analysis of what loaded works too) or raises TraceError."""
    try:
        trace = trace_from_bytes(data, "fuzz")
    except TraceError as exc:
        assert "\n" not in str(exc)
        return
    json.dumps(analyze_trace(trace).to_doc())
