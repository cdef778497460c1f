"""Two real `profile` runs started together: on one ``--out``, and into one reports folder.

A run directory belongs to one run.  Of two runs given the same ``--out`` at the same moment,
one writes its run and the other is refused in one line (exit 2) without touching it; two runs
without ``--out`` get a directory each, and ``reports/latest`` names one of them whole.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TOOL = (sys.executable, "-m", "tfprof_towers")
ARGS = ("profile", "--preset", "tiny", "--variants", "single", "--steps", "2", "--warmup", "1")


def start_two(*argv: str, cwd: Path) -> list[tuple[int, str, str]]:
    """Start two identical `profile` commands at once; each one's (exit code, stdout, stderr)."""
    procs = [subprocess.Popen([*TOOL, *ARGS, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, env=dict(os.environ)) for _ in range(2)]
    done = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        done.append((p.returncode, out, err))
    return done


def assert_whole_run(run: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    assert [v["name"] for v in summary["variants"]] == ["single"]
    assert summary["variants"][0]["status"] == "ok"
    record = json.loads((run / "variants" / "single" / "record.json").read_text())
    assert record["status"] == "ok"
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []  # no claim left behind


def test_two_runs_on_one_out_directory_one_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = start_two("--out", str(out), cwd=tmp_path)
    codes = sorted(code for code, _, _ in done)
    assert codes == [0, 2], done
    _, _, err = next(d for d in done if d[0] == 2)
    line = err.strip()
    assert "\n" not in line and line.startswith(f"tfprof-towers: error: --out {out}: "), err
    assert "another run is writing into this directory" in line or "directory is not empty" in line, line
    assert_whole_run(out)


def test_two_runs_into_one_reports_folder_get_a_directory_each(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    done = start_two("--reports", str(reports), cwd=tmp_path)
    assert [code for code, _, _ in done] == [0, 0], done
    runs = sorted(p for p in reports.iterdir() if p.is_dir() and not p.is_symlink())
    assert len(runs) == 2, runs
    for run in runs:
        assert_whole_run(run)
    latest = reports / "latest"
    assert latest.is_symlink() and latest.resolve() in {r.resolve() for r in runs}
    assert sorted(p.name for p in reports.iterdir()) == sorted([*(r.name for r in runs), "latest"])
