"""`tfprof-towers diff` on one real tiny run: the towers bug's placement moves with their source
lines, and the CI gate on a copy of a variant that sleeps 50 ms per step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfprof_towers.cli import main
from tfprof_towers.vocab.errors import EXIT_SLOWER

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIXED = REPO / "examples" / "towers_fixed.py"
SLEEPY = REPO / "tests" / "variants" / "sleepy_towers.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("diff") / "run"
    argv = ["profile", "--preset", "tiny", "--steps", "8", "--variants", "towers_host_vars,towers_bug",
            "--variant-file", str(FIXED), "--variant-file", str(SLEEPY), "--out", str(out)]
    assert main(argv) == 0
    return out


def _stray_scope_line() -> int:
    src = (REPO / "tfprof_towers" / "capture" / "tf1" / "builders.py").read_text().splitlines()
    return next(i for i, text in enumerate(src, 1) if "the stray host scope" in text)


def _diff(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["diff", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_forward_matmuls_moved_to_the_host_with_their_source_lines(run: Path, capsys) -> None:
    v = run / "variants"
    code, doc = _diff(capsys, str(v / "towers_host_vars"), str(v / "towers_bug"))
    assert code == 0
    (pair,) = doc["pairs"]
    host = json.loads((run / "run.json").read_text())["topology"]["host"]
    # a MatMul node, or (oneDNN on CPU) a node its MatMul was fused into: tower_i/blockB/Sigmoid
    moved = [m for m in pair["placement_moves"]
             if m["op_type"] == "MatMul" or any(f.endswith("/MatMul") for f in m["fused"])]
    forward = {m["node"]: m for m in moved if "gradients" not in m["node"]}
    blocks = json.loads((run / "run.json").read_text())["config"]["preset"]["blocks"]
    assert len(forward) == 2 * blocks, pair["placement_moves"]  # every block of both towers
    line = _stray_scope_line()
    for m in forward.values():
        assert m["new_device"] == host and m["base_device"] != host
        assert m["placed_by"] == f"builders.py:{line}"  # the stray `with tf.device(devices.host)`
        assert f"builders.py:{line} (" in m["new_sources"]
    assert pair["math"]["same"] is True
    assert any(f["rule"] == "host_compute" for f in pair["findings"]["appeared"])


def test_the_gate_fails_on_50_ms_of_sleep_and_passes_on_itself(run: Path, capsys) -> None:
    v = run / "variants"
    code, doc = _diff(capsys, str(v / "towers_fixed"), str(v / "sleepy_towers"), "--fail-if-slower", "5")
    st = doc["pairs"][0]["step_time"]
    assert code == EXIT_SLOWER, st
    assert st["beyond_noise"] is True and st["new_median_s"] - st["base_median_s"] > 0.045
    assert len(st["base_steps_s"]) == len(st["new_steps_s"]) == 8
    code, doc = _diff(capsys, str(v / "towers_fixed"), str(v / "towers_fixed"), "--fail-if-slower", "5")
    assert code == 0 and doc["gate"]["slower"] == []
    assert doc["pairs"][0]["step_time"]["change_pct"] == 0
