"""`make bench --quick` end to end on every family (its arithmetic: tests/unit/test_bench.py)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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
    fork = doc["fork_server"]  # the same tiny profile fresh and forked: identical math, placement, ops
    assert fork["identical"] and fork["runs"]["forked"]["tf_imports"] == 1
    assert fork["runs"]["fresh"]["tf_imports"] >= 2  # the variant and its projection's graph builder
    for run in harness["runs"]:
        assert run["tf_imports"] == 1 and 0 < run["lower_bound_s"] < run["total"]
    assert "Profiler overhead" in done.stdout and "Harness overhead" in done.stdout
    assert "Fork server:" in done.stdout


