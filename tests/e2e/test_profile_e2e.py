"""End to end on the tiny preset: the five built-in variants in real TensorFlow.

Placement facts and cross-device bytes are checked against values worked out by
hand from the shapes (tiny preset: batch 4, dim 16, 6 blocks, 2 logical-CPU
accelerators, float32).
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tfprof_towers.advice import recommend
from tfprof_towers.capture.seed_values import reference_steps, seed_values
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.summary import Summary
from tfprof_towers.variants.config import PRESETS
from tfprof_towers.variants.registry import TF1_GRAPH, names

pytestmark = pytest.mark.slow
BUILTIN_NAMES = names(TF1_GRAPH)  # the variants of tiny_run

HOST = "/device:CPU:0"
ACC = ("/device:CPU:1", "/device:CPU:2")
VARIANTS_PY = Path(__file__).resolve().parents[2] / "tfprof_towers" / "capture" / "tf1" / "builders.py"


def record(run: Path, name: str) -> dict:
    return json.loads((run / "variants" / name / "record.json").read_text())


def heavy_nodes(rec: dict) -> list[dict]:
    """Partition nodes that carry estimated FLOPs (MatMuls, possibly fused)."""
    return [n for n in rec["placement"]["nodes"] if n["flops"] > 0]


def test_run_directory_is_complete(tiny_run: Path) -> None:
    run = json.loads((tiny_run / "run.json").read_text())
    assert run["topology"]["kind"] == "logical-cpu"
    assert run["topology"]["host"] == HOST
    assert run["topology"]["accelerators"] == list(ACC)
    assert run["versions"]["tensorflow"] and run["versions"]["python"]
    assert run["started"] and run["finished"]
    summary = json.loads((tiny_run / "summary.json").read_text())
    assert [v["name"] for v in summary["variants"]] == list(BUILTIN_NAMES)
    assert summary["topology"]["kind"] == "logical-cpu"
    for v in summary["variants"]:
        assert v["status"] == "ok", v["error"]
        st = v["step_time_s"]
        assert 0 < st["p10"] <= st["median"] <= st["p90"]
        assert v["profiled_step_time_s"]["median"] > 0
        assert v["devices"] and v["transfers"] is not None
        assert v["error"] is None
        files = RunDir(tiny_run).xplane_files(v["name"])
        assert len(files) == 1 and files[0].stat().st_size > 0
    ok = [v for v in summary["variants"] if v["status"] == "ok"]
    fastest = min(ok, key=lambda v: v["step_time_s"]["median"])
    # on logical CPU devices the headline comes from the projection (test below); the measured
    # CPU stand-in ranking still picks as it did, and is what `measured_pick` reports
    rec = recommend.measured(Summary.from_json(summary)).to_json()
    assert rec["fastest"] == fastest["name"]
    # the fastest, or a simpler variant whose step times overlap it (within noise)
    assert rec["variant"] == fastest["name"] or rec["variant"] in rec["within_noise"]
    excluded = summary["recommendation"]["excluded"]
    assert summary["recommendation"]["measured_pick"] == recommend.measured(Summary.from_json(summary),
                                                                             excluded).variant
    for name in BUILTIN_NAMES:
        rec = record(tiny_run, name)
        assert rec["timings"]["step_time_s"]["n"] == PRESETS["tiny"].steps
        assert len(rec["timings"]["profiled_step_times_s"]) == PRESETS["tiny"].profile_steps


def test_cpu_only_runs_recommend_from_the_projection_never_towers_bug(tiny_run: Path) -> None:
    summary = json.loads((tiny_run / "summary.json").read_text())
    rec = summary["recommendation"]
    assert (rec["basis"], rec["hardware"], rec["preset"], rec["label"]) == (
        "projected", "2x-gtx1060-pcie3", "seed", "projected on 2x-gtx1060-pcie3")
    assert rec["variant"] in BUILTIN_NAMES and rec["variant"] != "towers_bug"
    assert "towers_bug" in rec["excluded"]
    projection = json.loads((tiny_run / "projection.json").read_text())
    assert (projection["hardware"], projection["preset"]["name"]) == ("2x-gtx1060-pcie3", "seed")
    html = (tiny_run / "report.html").read_text()
    assert "projected on 2x-gtx1060-pcie3" in html and "CPU stand-in timings, measured here" in html


def test_every_builtin_computes_the_same_math(tiny_run: Path) -> None:
    """Same initial values, same batch: the first two losses agree within 1e-4 relative (and the step-1
    gradient norm within 1e-3) across the built-ins and with the float64 numpy oracle."""
    summary = json.loads((tiny_run / "summary.json").read_text())
    p = PRESETS["tiny"]
    oracle = reference_steps(seed_values(p.batch, p.dim, p.blocks))
    for v in summary["variants"]:
        assert len(v["losses"]) == 2
        assert v["losses"] == pytest.approx(list(oracle.losses), rel=1e-4), v["name"]
        assert v["grad_norm"] == pytest.approx(oracle.grad_norm, rel=1e-3), v["name"]
    assert {r["variant"]: r["status"] for r in summary["math"]["variants"]} == {
        n: "reference" if n == "single" else "same" for n in BUILTIN_NAMES}
    assert not [f for f in summary["findings"] if f["rule"] == "changed_math"]


def test_the_math_steps_stay_out_of_the_measured_steps(tiny_run: Path) -> None:
    """The loss is fetched only in the first two warm-up steps: the placement step (run with the
    variant's own fetches, like the timed ones) never computes the forward loss op."""
    rec = record(tiny_run, "single")
    assert rec["math"]["losses"] and "math" in rec["phases_s"]
    assert not [n["name"] for n in rec["placement"]["nodes"] if n["name"].endswith("/loss")
                or n["name"] == "loss"]


def test_single_keeps_heavy_work_on_accelerator_0(tiny_run: Path) -> None:
    rec = record(tiny_run, "single")
    devices = rec["placement"]["devices"]
    assert devices[ACC[0]]["flops_per_step"] > 0
    assert all(d["flops_per_step"] == 0 for name, d in devices.items() if name != ACC[0])
    assert ACC[1] not in devices  # nothing at all on the second accelerator


def test_towers_host_vars_variables_on_host_matmuls_on_accelerators(tiny_run: Path) -> None:
    rec = record(tiny_run, "towers_host_vars")
    variables = [n for n in rec["placement"]["nodes"] if n["type"] == "VarHandleOp"]
    assert variables and {n["device"] for n in variables} == {HOST}
    assert {n["device"] for n in heavy_nodes(rec)} == set(ACC)
    assert rec["placement"]["devices"][HOST]["flops_per_step"] == 0


def test_towers_accel0_vars_variables_on_accelerator_0(tiny_run: Path) -> None:
    rec = record(tiny_run, "towers_accel0_vars")
    variables = [n for n in rec["placement"]["nodes"] if n["type"] == "VarHandleOp"]
    assert variables and {n["device"] for n in variables} == {ACC[0]}
    assert {n["device"] for n in heavy_nodes(rec)} == set(ACC)


def test_replicated_has_a_copy_of_each_variable_per_accelerator(tiny_run: Path) -> None:
    rec = record(tiny_run, "replicated")
    variables = [n for n in rec["placement"]["nodes"] if n["type"] == "VarHandleOp"]
    for i, acc in enumerate(ACC):
        names = {n["name"] for n in variables if n["device"] == acc}
        model = {f"block{b}/{p}_r{i}" for b in range(6) for p in ("W", "b")}
        assert model <= names, f"{acc} lacks replica variables {sorted(model - names)}"
    # Replicas exchange exactly one copy of every gradient (6 W [16,16] + 6 b [16], float32).
    peer = {(t["src"], t["dst"]): t for t in rec["placement"]["transfers"]}
    grads = 6 * (16 * 16 + 16) * 4
    assert peer[(ACC[0], ACC[1])]["bytes_per_step"] == grads
    assert peer[(ACC[1], ACC[0])]["bytes_per_step"] == grads


def test_towers_bug_forward_on_host_gradients_on_accelerators(tiny_run: Path) -> None:
    rec = record(tiny_run, "towers_bug")
    heavy = heavy_nodes(rec)
    forward = [n for n in heavy if "gradients" not in n["name"]]
    backward = [n for n in heavy if "gradients" in n["name"]]
    assert forward and backward
    assert {n["device"] for n in forward} == {HOST}
    assert {n["device"] for n in backward} == set(ACC)
    # 2 towers x 6 forward matmuls of [32,16]x[16,16] on the host: 2*32*16*16 FLOPs each.
    mm = 2 * 32 * 16 * 16
    assert rec["placement"]["devices"][HOST]["flops_per_step"] == 2 * 6 * mm
    # Each tower's backward: 6 weight gradients + 5 input gradients (block 0 needs none).
    assert rec["placement"]["devices"][ACC[0]]["flops_per_step"] == 11 * mm


def _link_bytes(rec: dict) -> dict[tuple[str, str], int]:
    return {(t["src"], t["dst"]): t["bytes_per_step"] for t in rec["placement"]["transfers"]}


def test_cross_device_bytes_towers_host_vars_by_hand(tiny_run: Path) -> None:
    # Per tower: its input shard [2,16,16] float32 = 2*16*16*4 = 2048 B, and one read of
    # every variable: 6 W [16,16] + 6 b [16] = 6*(256+16)*4 = 6528 B; host -> accelerator.
    # Back: one gradient per variable, 6528 B, accelerator -> host.  Nothing else crosses.
    shard, params = 2 * 16 * 16 * 4, 6 * (16 * 16 + 16) * 4
    assert (shard, params) == (2048, 6528)
    expected = {}
    for acc in ACC:
        expected[(HOST, acc)] = shard + params
        expected[(acc, HOST)] = params
    assert _link_bytes(record(tiny_run, "towers_host_vars")) == expected


def test_cross_device_bytes_towers_bug_by_hand(tiny_run: Path) -> None:
    # The forward pass runs on the host, so the accelerators' gradient ops pull what they
    # need from it, per tower (rows = 2*16 = 32 per matmul):
    #   6 sigmoid outputs [32,16] (for SigmoidGrad; Grappler folds the reshape pairs, so the
    #     next block's matmul input is the same tensor)            6 * 32*16*4 = 12288 B
    #   block 0's matmul input, reshape(shard) [32,16]           1 * 32*16*4 =  2048 B
    #   W of blocks 1..5 for the input gradients dX = dZ @ W^T     5 * 16*16*4 =  5120 B
    # and send back one gradient per variable: 6*(256+16)*4 = 6528 B.
    to_acc = 6 * 32 * 16 * 4 + 32 * 16 * 4 + 5 * 16 * 16 * 4
    assert to_acc == 19456
    expected = {}
    for acc in ACC:
        expected[(HOST, acc)] = to_acc
        expected[(acc, HOST)] = 6528
    assert _link_bytes(record(tiny_run, "towers_bug")) == expected


def _stray_scope_line() -> int:
    lines = VARIANTS_PY.read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if "# the stray host scope (towers_bug)" in ln)


def test_towers_bug_sources_point_at_the_stray_scope(tiny_run: Path) -> None:
    rec = record(tiny_run, "towers_bug")
    line = _stray_scope_line()
    forward = [n for n in heavy_nodes(rec) if "gradients" not in n["name"]]
    for n in forward:
        innermost = n["sources"][0]
        assert innermost["file"] == str(VARIANTS_PY)
        assert innermost["line"] == line
        assert innermost["device"] == "/cpu:0"
        # the tower's own accelerator scope is the next one out
        assert n["sources"][1]["device"] in ("/cpu:1", "/cpu:2")


def _get_json(url: str) -> object:
    """GET a TensorBoard JSON endpoint (it answers gzip-compressed)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = resp.read()
        if resp.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tensorboard_profile_tab_lists_every_variant(tiny_run: Path) -> None:
    exe = Path(sys.executable).with_name("tensorboard")
    assert exe.is_file(), "tensorboard is installed with the package"
    port = _free_port()
    proc = subprocess.Popen(
        [str(exe), "--logdir", str(tiny_run / "tensorboard"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ),
    )
    try:
        runs: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                runs = _get_json(f"http://127.0.0.1:{port}/data/plugin/profile/runs")
                if {r.split("/")[0] for r in runs} >= set(BUILTIN_NAMES):
                    break
            except OSError:
                pass
            time.sleep(1)
        assert {r.split("/")[0] for r in runs} == set(BUILTIN_NAMES), runs
        tools = _get_json(f"http://127.0.0.1:{port}/data/plugin/profile/run_tools?run={runs[0]}")
        assert "trace_viewer@" in tools or "trace_viewer" in tools
    finally:
        proc.terminate()
        proc.wait(timeout=20)
