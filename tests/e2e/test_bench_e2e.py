"""The bench's arithmetic and printing (no timing, no TensorFlow): `make bench` takes the numbers."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `benchmarks/` sits beside the package, not inside it
    sys.path.insert(0, str(REPO))
bench = importlib.import_module("benchmarks.bench")


RECORD = {
    "wall_s": 3.0,
    "process_s": {"start": 0.1, "exit": 0.05},
    "phases_s": {"tf_import": 1.5, "build": 0.2, "session_init": 0.05, "warmup": 0.3,
                 "placement_trace": 0.02, "placement_extract": 0.01, "timed": 0.5,
                 "profiler_start": 0.001, "profiled": 0.2, "collect": 0.019},
}


def test_run_breakdown_sums_to_the_total_and_share_counts_only_the_harness() -> None:
    run_doc = {"harness_s": {"setup": 0.1, "variants": 6.5, "finish": 0.4}}
    parts = bench.run_breakdown(run_doc, [RECORD, RECORD], total_wall_s=7.5)
    assert sum(parts.values()) == pytest.approx(7.5)
    assert parts["runner bookkeeping"] == pytest.approx(0.5)
    assert parts["CLI start and exit"] == pytest.approx(0.5)
    not_own = 2 * (1.6 + 0.3 + 0.5 + 0.2)
    assert bench.own_share(parts) == pytest.approx((7.5 - not_own) / 7.5)
    assert {name for name, _ in bench.CATEGORIES} == set(parts)
