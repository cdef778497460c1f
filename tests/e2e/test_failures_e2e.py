"""Failures that say what happened, end to end with real TensorFlow children.

A TF1 file, a TF2 ``build_step`` and a Keras model whose loss is NaN keep their timings,
breakdown and trace; the math check shows the NaN; under ``--workers 2`` every task's
record stays strict JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VARIANTS = REPO / "tests" / "variants"
NAN_FINDING = "loss is NaN at step 1 (the model diverges or its inputs hold NaN); timings are still valid"
TOOL = (sys.executable, "-m", "tfprof_towers")


def strict_loads(text: str) -> object:
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def profile(out: Path, *argv: str, timeout: float = 600) -> tuple[int, str]:
    done = subprocess.run([*TOOL, "profile", "--preset", "tiny", "--out", str(out), *argv],
                          capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    return done.returncode, done.stdout + done.stderr


def assert_nan_variant_kept(run: Path, name: str) -> None:
    summary = strict_loads((run / "summary.json").read_text())
    entry = next(v for v in summary["variants"] if v["name"] == name)
    assert entry["status"] == "ok", entry["error"]
    assert entry["step_time_s"]["median"] > 0 and entry["xplane_files"]
    assert entry["breakdown"] and "error" not in entry["breakdown"], entry["breakdown"]
    assert entry["losses"] == [None, None] and entry["not_finite"]["losses[0]"] == "NaN"
    record = strict_loads((run / "variants" / name / "record.json").read_text())
    assert record["math"]["not_finite"]["losses[0]"] == "NaN"
    found = [f["message"] for f in summary["findings"]
             if f["variant"] == name and f["rule"] == "changed_math"]
    assert found == [NAN_FINDING]


def test_tf1_and_tf2_files_whose_loss_is_nan_keep_their_timings(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, text = profile(out, "--variants", "single", "--variant-file", str(VARIANTS / "nan_loss_tf1.py"),
                         "--variant-file", str(VARIANTS / "nan_loss_tf2.py"))
    assert code == 0, text
    assert_nan_variant_kept(out, "nan_loss_tf1")
    assert_nan_variant_kept(out, "nan_loss_tf2")


def test_a_keras_model_whose_loss_is_nan_keeps_its_timings(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, text = profile(out, "--variants", "one_device",
                         "--keras-model", str(VARIANTS / "nan_loss_keras.py"))
    assert code == 0, text
    assert_nan_variant_kept(out, "one_device")


def test_a_nan_loss_under_two_workers_keeps_every_document_strict(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, text = profile(out, "--workers", "2", "--variant-file", str(VARIANTS / "nan_loss_tf2.py"))
    assert code == 0, text
    assert_nan_variant_kept(out, "nan_loss_tf2")
    tasks = sorted(out.glob("variants/nan_loss_tf2/attempt-*/tasks/*/record.json"))
    assert len(tasks) == 2
    for path in tasks:
        doc = strict_loads(path.read_text())
        assert doc["status"] == "ok" and doc["math"]["not_finite"]["losses[0]"] == "NaN"


def test_a_keras_dataset_that_yields_no_batch_is_named(tmp_path: Path) -> None:
    out = tmp_path / "run"
    model = VARIANTS / "empty_dataset_keras.py"
    code, text = profile(out, "--variants", "one_device", "--keras-model", str(model))
    assert code == 4, text
    record = strict_loads((out / "variants" / "one_device" / "record.json").read_text())
    assert record["status"] == "failed"
    assert record["error"] == f"keras model file {model}: make_dataset(32) yielded no batch"
