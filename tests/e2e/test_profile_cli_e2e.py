"""The installed `tfprof-towers` command, and `profile` on real tiny runs: failing variant files kept
apart from the rest, and ``--project-on`` writing ``projection.json``.  The input checks are in
tests/unit/test_profile_cli.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfprof_towers.cli import main
from tfprof_towers.variants.registry import BUILTIN_NAMES


def test_installed_command_runs() -> None:
    exe = Path(sys.executable).with_name("tfprof-towers")
    exe = exe if exe.is_file() else Path(shutil.which("tfprof-towers") or "")
    assert exe.is_file(), "the tfprof-towers console script is installed"
    done = subprocess.run([str(exe), "variants"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "towers_bug" in done.stdout
    done = subprocess.run([str(exe), "profile", "--variants", "bogus"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "tfprof-towers: error: unknown variant 'bogus'; built-in variants are: " + ", ".join(BUILTIN_NAMES)
    )
    done = subprocess.run([sys.executable, "-m", "tfprof_towers", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "profile" in done.stdout


RAISES = """
def build_variant(devices):
    raise RuntimeError("my placement is broken")
"""

ABORTS = """
import os

def build_variant(devices):
    os.abort()
"""

WRONG = """
def build_variant(devices):
    return 42
"""


@pytest.mark.slow
def test_failing_variants_are_isolated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = {}
    for name, text in (("raises", RAISES), ("aborts", ABORTS), ("wrong_return", WRONG)):
        files[name] = tmp_path / f"{name}.py"
        files[name].write_text(text)
    out = tmp_path / "run"
    argv = ["profile", "--preset", "tiny", "--variants", "single,towers_host_vars", "--out", str(out)]
    for f in files.values():
        argv += ["--variant-file", str(f)]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    status = {v["name"]: v for v in summary["variants"]}
    assert status["single"]["status"] == "ok"
    assert status["towers_host_vars"]["status"] == "ok"
    assert status["raises"]["status"] == "failed"
    assert status["raises"]["error"] == "RuntimeError during build: my placement is broken"
    assert "my placement is broken" in status["raises"]["stderr_tail"]
    assert status["aborts"]["status"] == "failed"
    assert status["aborts"]["error"].startswith("crashed: killed by SIGABRT")
    assert status["wrong_return"]["status"] == "failed"
    assert "must return (fetches, feed_dict), got int" in status["wrong_return"]["error"]
    assert summary["recommendation"]["variant"] in ("single", "towers_host_vars")
    assert "\n" not in status["aborts"]["error"]


@pytest.mark.slow
def test_profile_project_on_writes_projection(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["profile", "--preset", "tiny", "--variants", "single,towers_bug",
            "--project-on", "2x-gtx1060-pcie3", "--project-preset", "tiny", "--out", str(out)]
    assert main(argv) == 0
    doc = json.loads((out / "projection.json").read_text())
    assert doc["hardware"] == "2x-gtx1060-pcie3"
    assert [v["name"] for v in doc["variants"]] == ["single", "towers_bug"]
    bug = next(v for v in doc["variants"] if v["name"] == "towers_bug")
    assert bug["projected_step_s"]["serial"] >= bug["projected_step_s"]["overlapped"] > 0
    # the forward activations cross from the host to each GPU (the tiny run's 19456 B per tower)
    to_gpu = {(x["src"], x["dst"]): x["bytes_per_step"] for x in bug["per_link"]}
    assert to_gpu[("/device:CPU:0", "/device:GPU:0")] == 19456
