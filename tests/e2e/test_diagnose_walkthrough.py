"""docs/diagnose.md's walkthrough: a Keras ``fit`` profiled by the TensorBoard callback, then ``analyze``.

Runs examples/keras_tensorboard_profile.py (a real TensorFlow run, about 20 s on a CPU) into a temporary
logdir, then ``tfprof-towers analyze`` on that logdir as the walkthrough does: it finds the trace the
callback wrote under ``LOGDIR/train/plugins/profile``, exits 0, its ``--json`` has the trace rules'
``findings`` and ``rules``, and its output is the one the guide shows (tests/guide_kit.py matches it).
On a CPU-only machine the accelerator rules say why they could not be evaluated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import guide_kit as kit
import pytest

from tfprof_towers.cli import main

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "keras_tensorboard_profile.py"


def test_keras_callback_profile_is_diagnosed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    logdir = tmp_path / "logs"
    done = subprocess.run([sys.executable, str(EXAMPLE), str(logdir)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert list((logdir / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))

    assert main(["analyze", str(logdir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc["findings"], list)
    assert doc["steps"] == 3 and doc["window"] == "markers"  # profile_batch=(3, 5): three steps
    rules = {r["rule"]: r for r in doc["rules"]}
    assert "host_bound" in rules and "straggler" in rules
    if not any(name.startswith("/device:GPU") for name in doc["devices"]):
        assert doc["findings"] == []
        assert rules["host_bound"]["why_not"] == "the trace has no accelerator plane (a CPU-only capture)"

    monkeypatch.chdir(tmp_path)  # the guide's command, as shown: `tfprof-towers analyze logs`
    shown = next(c for c in kit.commands(kit.REPO / "docs" / "diagnose.md") if c.argv == ("analyze", "logs"))
    assert main(list(shown.argv)) == 0
    out = capsys.readouterr().out
    assert "findings from the trace (most severe first):" in out
    assert shown.output and kit.output_problems(shown.output, out) == []
