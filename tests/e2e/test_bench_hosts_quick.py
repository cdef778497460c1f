"""``python -m benchmarks.bench_hosts --quick`` runs end to end (whole ``analyze`` processes, a Dask
LocalCluster): exit 0, the JSON written, the stragglers named, the same ``--json`` everywhere.  No timed
assertion: the figures are measurements."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_quick_runs(tmp_path: Path) -> None:
    out = tmp_path / "bench-hosts.json"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_hosts", "--quick", "--out", str(out)],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "local pool: time" in proc.stdout
    f = json.loads(out.read_text())
    assert f["hosts"] == 3
    assert sorted(f["pool"]["straggler_hosts"]) == f["stragglers"] == ["host001", "host002"]
    assert f["dask"]["identical_to_pool"] and f["dask"]["identical_to_serial"]
    assert f["merged"]["ok"]
