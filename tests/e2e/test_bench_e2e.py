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


def test_the_default_bench_covers_every_family() -> None:
    from tfprof_towers.variants import registry

    opts = bench.parse_args([])
    assert {registry.builtin(v).family for v in opts.variants} == {
        registry.TF1_GRAPH, registry.TF2_STRATEGY, registry.CLUSTER}
    assert set(registry.BUILTIN_NAMES) <= set(opts.variants)


def test_a_quick_bench_runs_every_part_on_every_family(tmp_path: Path) -> None:
    """`make bench ARGS=--quick` on one variant of each family (and one skipped for want of GPUs):
    every part runs to its figures, so a crash like 'one_device is not a tf1-graph variant' cannot land."""
    import json
    import os
    import subprocess

    out = tmp_path / "bench.json"
    variants = "single,one_device,mirrored_nccl,multi_worker"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench", "--quick", "--no-sweep", "--variants",
                           variants, "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=1500, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    overhead = doc["profiler_overhead"]
    assert set(overhead["families"]) == {"tf1-graph", "tf2-strategy", "cluster"}
    assert overhead["families"]["cluster"] == ["multi_worker"]
    measured = {v for vs in overhead["families"].values() for v in vs}
    assert measured | set(overhead["skipped_variants"]) == set(variants.split(","))
    for v in measured:
        assert overhead["variants"][v]["harness"]["ratio"] > 0, v
    harness = doc["harness_overhead"]
    assert len(harness["runs"]) == 1 and len(harness["cluster"]["runs"]) == 1
    for run in (*harness["runs"], *harness["cluster"]["runs"]):
        assert 0 < run["own_share"] < 1 and run["total"] > 0
    assert "skipped" not in doc["parse"]
    assert "Profiler overhead" in done.stdout and "Harness overhead" in done.stdout


def test_run_breakdown_counts_the_projection_once() -> None:
    run_doc = {"harness_s": {"setup": 0.1, "variants": 6.5, "finish": 2.4, "projection": 2.0}}
    parts = bench.run_breakdown(run_doc, [RECORD, RECORD], total_wall_s=9.5)
    assert sum(parts.values()) == pytest.approx(9.5)
    assert parts["projection"] == pytest.approx(2.0) and parts["CLI start and exit"] == pytest.approx(0.5)


def test_a_cluster_record_is_split_from_its_lead_task_s_phases() -> None:
    record = {"family": "cluster", "status": "ok", "wall_s": 20.0, "cluster": {"tasks": [
        {"task": "worker:0", "phases_s": {"tf_import": 5.0, "strategy_init": 1.0, "build": 0.5, "warmup": 0.2,
                                          "first_call_placement": 2.0, "timed": 0.3, "wait_capture": 1.5,
                                          "profiled": 0.4}},
        {"task": "worker:1", "phases_s": {"tf_import": 9.0}}]}}
    parts = bench.cluster_breakdown(record)
    assert parts[bench.TF_STARTUP] == 6.0 and parts["cluster coordination"] == 1.5
    assert parts["placement trace"] == 2.0 and parts["child bookkeeping"] == pytest.approx(20.0 - 10.9)
    assert sum(parts.values()) == pytest.approx(20.0)
    assert bench.cluster_breakdown({**record, "status": "failed"}) == {"failed variants": 20.0}
