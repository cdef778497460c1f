"""`tfprof-towers analyze` through the installed command (a subprocess of the tool: e2e tier)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from trace_kit import two_gpu_trace

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    return two_gpu_trace().write(tmp_path / "host.xplane.pb")


def test_installed_script(trace_file: Path) -> None:
    script = shutil.which("tfprof-towers", path=str(REPO / ".venv" / "bin"))
    if script is None:
        pytest.skip("the tfprof-towers script is not installed in .venv (make install)")
    done = subprocess.run(
        [script, "analyze", str(trace_file), "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"] == 2
