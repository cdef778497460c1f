"""`tfprof-towers diff` on the session's shared real tiny runs (tests/conftest.py): the towers bug's
placement moves with their source lines (``tiny_run``), and the CI gate on a copy of a variant
that sleeps 50 ms per step (``tiny_files_run``, 8 timed steps; the math check's tests read it
too).  The gate at the tiny preset's own 3 steps makes a run of its own, since the shared run has 8."""

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


def _stray_scope_line() -> int:
    src = (REPO / "tfprof_towers" / "capture" / "tf1" / "builders.py").read_text().splitlines()
    return next(i for i, text in enumerate(src, 1) if "the stray host scope" in text)


def _diff(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["diff", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_the_forward_matmuls_moved_to_the_host_with_their_source_lines(tiny_run: Path, capsys) -> None:
    run = tiny_run
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


def test_the_gate_fails_on_50_ms_of_sleep_and_passes_on_itself(tiny_files_run: Path, capsys) -> None:
    v = tiny_files_run / "variants"
    code, doc = _diff(capsys, str(v / "towers_fixed"), str(v / "sleepy_towers"), "--fail-if-slower", "5")
    st = doc["pairs"][0]["step_time"]
    assert code == EXIT_SLOWER, st
    assert st["beyond_noise"] is True and st["new_median_s"] - st["base_median_s"] > 0.045
    assert len(st["base_steps_s"]) == len(st["new_steps_s"]) == 8
    code, doc = _diff(capsys, str(v / "towers_fixed"), str(v / "towers_fixed"), "--fail-if-slower", "5")
    assert code == 0 and doc["gate"]["slower"] == []
    assert doc["pairs"][0]["step_time"]["change_pct"] == 0


def test_the_gate_fails_on_50_ms_of_sleep_at_the_tiny_presets_3_steps(tmp_path: Path, capsys) -> None:
    """3 and 3 steps can never reach p < 0.05, so the gate decides without a p-value."""
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--variant-file", str(FIXED), "--variant-file", str(SLEEPY),
                 "--out", str(out)]) == 0
    capsys.readouterr()
    v = out / "variants"
    code, doc = _diff(capsys, str(v / "towers_fixed"), str(v / "sleepy_towers"), "--fail-if-slower", "5")
    st = doc["pairs"][0]["step_time"]
    assert len(st["base_steps_s"]) == len(st["new_steps_s"]) == 3  # the tiny preset's default --steps
    assert st["beyond_noise"] is False and st["test"]["min_p"] == pytest.approx(0.1)
    assert code == EXIT_SLOWER, doc["gate"]
    assert doc["gate"]["slower"] == ["sleepy_towers"]
    assert min(st["new_steps_s"]) > 1.05 * max(st["base_steps_s"])


def test_load_agrees_with_summary_json_on_a_real_run(tiny_files_run: Path) -> None:
    """Wall time and links (send/recv between logical devices) of every variant, to the picosecond."""
    import numpy as np

    import tfprof_towers as tt

    run = tiny_files_run
    summary = json.loads((run / "summary.json").read_text())
    p = tt.load(run)
    links_seen = 0
    for e in summary["variants"]:
        bd, name = e["breakdown"], e["name"]
        n = bd["steps"]
        wall = p.wall[p.wall.variant == name]
        for dev, d in bd["devices"].items():
            for cat, seconds in d["wall"].items():
                s = wall[(wall.device == dev) & (wall.category == cat)].seconds.to_numpy()
                assert int(np.rint(s * 1e12).astype(np.int64).sum()) / 1e12 * (1.0 / n) == seconds
        links = p.links[p.links.variant == name].astype({"src": str, "dst": str, "kind": str})
        for link in bd["links"]:
            key = (link["src"], link["dst"], link["kind"])
            row = links[(links.src == key[0]) & (links.dst == key[1]) & (links.kind == key[2])]
            assert int(row["bytes"].iloc[0]) * (1.0 / n) == link["bytes"]
            links_seen += 1
        timed = p.step_times[(p.step_times.variant == name) & (p.step_times.phase == "timed")]
        assert len(timed) == 8 and timed.seconds.median() == e["step_time_s"]["median"]
    assert links_seen
