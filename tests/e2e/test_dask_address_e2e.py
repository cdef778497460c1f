"""`analyze --dask ADDRESS` with a bad address, through the command: one line, exit 2, no stall.

Each address of the list is refused in one line on stderr (no traceback, no "Exception ignored"
at exit) and the command ends at once: not after the 10 s connect timeout nor the 20 s a half-made
client's close waits at exit.  The bound on the time is loose, relative to the time the command takes to
refuse a missing path (its start); the times are printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfprof_towers.testing.synth import pod_host_trace

pytestmark = pytest.mark.slow

ADDRESSES = ["ucx://127.0.0.1:1", "garbage", "http://localhost:8786", "", "inproc://x", "tcp://[::1",
             "tcp://127.0.0.1:1"]


def analyze(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tfprof_towers", "analyze", *argv], capture_output=True,
                          text=True, cwd=tmp_path, env=dict(os.environ), timeout=120)
    return done, time.monotonic() - t


def test_bad_dask_addresses_are_one_line_and_exit_2_at_once(tmp_path: Path) -> None:
    for h in range(2):
        pod_host_trace(h, 2_000, gpus=1, steps=2).write_logdir(tmp_path / "pod", run="r1", host=f"host{h}")
    _, baseline = analyze(tmp_path, str(tmp_path / "missing"))  # the command's start, refused at once
    took = {}
    for a in ADDRESSES:
        done, took[a] = analyze(tmp_path, str(tmp_path / "pod"), "--dask", a)
        err = done.stderr
        assert done.returncode == 2, (a, err)
        assert done.stdout == "" and err.count("\n") == 1, (a, err)
        assert err.startswith(f"tfprof-towers: error: --dask {a if a else repr(a)}"), (a, err)
        assert "Traceback" not in err and "Exception ignored" not in err, (a, err)
    print(f"seconds to exit (a missing path, refused at once: {baseline:.2f}):",
          {a: round(t, 2) for a, t in took.items()})
    # the start is the command's own cost (a loaded machine can double it); the old stall was 20 s beyond it
    assert max(took.values()) < 3 * baseline + 5, (baseline, took)
