"""The three real traces of ``../shared/fixtures`` that TensorFlow's test code did not write, each through
``analyze --json`` and XProf (each in a folder of its own: XProf caches per folder), one test per trace.

Checked: the producer; the step time within 2% of XProf's where XProf gives one (and that it gives none
where we say it has none); the device busy time (window less idle) within 2% of XProf's device compute;
where the two differ by definition, the difference, exactly, from the trace's own stats; every finding's
suggestion fits the detected framework and vendor.

XProf's device compute per trace:

* 8×V100 (TensorFlow, one step from the GPUs' ``Steps`` lines): the overview page's per-step device
  compute, the union of the device events that carry a ``group_id`` in the longest device window (GPU 6's),
  TensorFlow's ``MemcpyH2D``/``MemcpyD2H`` copies with a ``group_id`` counted as compute.  Our busy time
  is every GPU 6 event's union in its window (compute and copies): it differs by GPU 6's copies without a
  ``group_id``.
* the two JAX ROCm traces (no step markers, no ``Steps`` line): XProf's overview finds no step; ours are
  the host's runs of the program it ran most often, the last window ending where the GPU's work ends --
  where XProf's ``op_profile`` span (its total time, idle included) ends, to the picosecond.  XProf's
  device op time is ``op_profile``'s with idle left out, which counts the kernels of XLA programs only
  (those with an ``hlo_op`` stat), over the whole trace; ours counts every kernel in our windows: the
  difference is the kernels without one inside them (on the MI300X, ``__amd_rocclr_copyBuffer`` copies
  ``hipMemcpy`` launched) less the program kernels before the first run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_FIXTURES, run_cli
from test_producer import fits

from tfprof_towers.trace.analysis import analyze_xplane
from tfprof_towers.trace.attribute import sweep
from tfprof_towers.trace.producer import Producer
from tfprof_towers.xplane import DEVICE, read_xspace

REL = 0.02


def fixture(name: str, tmp_path: Path) -> Path:
    src = SHARED_FIXTURES / name
    if not src.exists():
        pytest.skip(f"{src} is absent (a fresh clone without ../shared/fixtures)")
    dst = tmp_path / name  # a folder of its own
    shutil.copyfile(src, dst)
    return dst


def analyze_json(path: Path, capsys) -> dict:
    capsys.readouterr()
    assert run_cli("analyze", str(path), "--json") == 0
    return json.loads(capsys.readouterr().out)


def tool(xprof, path: Path, name: str):
    return json.loads(xprof.xspace_to_tool_data([str(path)], name, {})[0])


def busy_s(device: dict) -> float:
    return device["window_s"] - device["wall"]["idle"]


def check_findings_fit(doc: dict) -> None:
    p = Producer(doc["producer"]["framework"], doc["producer"]["vendor"])
    for f in doc["findings"]:
        assert not fits(f["suggestion"], p), (f["rule"], fits(f["suggestion"], p))


def device_union_ps(path: Path, plane: str, start_ps: int, end_ps: int, stat: str,
                    with_stat: bool | None) -> int:
    """The union, within ``[start_ps, end_ps)`` on the trace's clock, of ``plane``'s events (not on derived
    lines) that have (``with_stat``) or lack ``stat`` (None: all of them)."""
    raw = read_xspace(path, (stat,))
    k = raw.n_kept
    has = np.zeros(k, dtype=bool)
    idx = raw.stats[stat].index
    has[idx[idx < k]] = True
    p = raw.planes.names.index(plane)
    chosen = (has == with_stat) if with_stat is not None else np.ones(k, dtype=bool)
    rows = np.flatnonzero((raw.event_plane[:k] == p) & chosen)
    s = np.maximum(raw.start_ps[rows], start_ps)
    e = np.minimum(raw.start_ps[rows] + raw.dur_ps[rows], end_ps)
    ok = e > s
    zero = np.zeros(int(ok.sum()), dtype=np.int64)
    return int(sweep(zero, zero, s[ok], e[ok], 1, 1)[0]) if ok.any() else 0


def device_sum_ps(path: Path, stat: str, with_stat: bool) -> int:
    """The summed durations of every device plane's events (not on derived lines) with or without ``stat``."""
    raw = read_xspace(path, (stat,))
    k = raw.n_kept
    has = np.zeros(k, dtype=bool)
    idx = raw.stats[stat].index
    has[idx[idx < k]] = True
    dev = (raw.planes.kinds[raw.event_plane[:k]] == DEVICE) & (has == with_stat)
    return int(raw.dur_ps[:k][dev].sum())


def test_8xv100_keras_agrees_with_xprof(xprof, tmp_path, capsys) -> None:
    path = fixture("gpu_multi_worker_8xV100.xplane.pb", tmp_path)
    doc = analyze_json(path, capsys)
    page = tool(xprof, path, "overview_page")
    assert (doc["producer"]["framework"], doc["producer"]["vendor"]) == ("tensorflow", "nvidia")
    rows = page[1]["rows"]
    ids = [c["id"] for c in page[1]["cols"]]
    row = dict(zip(ids, (c.get("v") for c in rows[0]["c"])))
    assert len(rows) == 1 and doc["step_numbers"] == [0]
    assert doc["step_time_s"][0] * 1e3 == pytest.approx(float(row["stepTimeMs"]), rel=REL)
    gpu6 = doc["devices"]["/device:GPU:6"]
    busy = busy_s(gpu6)
    xprof_compute = float(row["deviceComputeTimeMs"]) * 1e9  # ps
    assert busy * 1e12 == pytest.approx(xprof_compute, rel=REL)
    # by definition: our busy time is the union of every GPU 6 event in its window; XProf's compute the
    # union of those with a group_id (TensorFlow's grouping leaves some copies without one)
    steps = analyze_xplane(path).trace.steps_of("/device:GPU:6")  # the window, on the trace's clock
    start, end = int(steps.start_ps[0]), int(steps.end_ps[0])
    grouped = device_union_ps(path, "/device:GPU:6", start, end, "group_id", True)
    every = device_union_ps(path, "/device:GPU:6", start, end, "group_id", None)
    assert grouped / 1e9 == pytest.approx(float(row["deviceComputeTimeMs"]), abs=1e-6)  # XProf's, exactly
    assert round(busy * 1e12) == every  # ours, exactly
    assert every - grouped == 24_384_000  # the ungrouped copies' time outside the rest: 24.384 us
    walls = gpu6["wall"]["compute"] + gpu6["wall"]["h2d"] + gpu6["wall"]["d2h"]
    assert busy == pytest.approx(walls, abs=1e-12)
    check_findings_fit(doc)
    by_rule = {f["rule"]: f for f in doc["findings"]}
    # GPU:1 maps 4.0 GB and runs nothing
    assert sorted(by_rule) == ["idle_accelerators", "idle_device_holds_memory"]
    assert "CUDA_VISIBLE_DEVICES" in by_rule["idle_accelerators"]["suggestion"]
    assert "tf.config.set_visible_devices" in by_rule["idle_device_holds_memory"]["suggestion"]
    assert "CUDA_VISIBLE_DEVICES" in by_rule["idle_device_holds_memory"]["suggestion"]


@pytest.mark.parametrize(("name", "runs", "program"), [
    ("jax_rocm_mi300x_gemm.xplane.pb", 18, "jit_dot:XLA GPU module"),  # 6 GEMM programs, 3 runs each
    ("jax_rocm_gfx950_fused_attn.xplane.pb", 5, "jit_loss_fn:XLA GPU module"),
])
def test_jax_rocm_traces_agree_with_xprof(xprof, tmp_path, capsys, name: str, runs: int,
                                          program: str) -> None:
    path = fixture(name, tmp_path)
    doc = analyze_json(path, capsys)
    assert (doc["producer"]["framework"], doc["producer"]["vendor"]) == ("jax", "amd")
    page = tool(xprof, path, "overview_page")
    assert page[1]["rows"] == [] and float(page[1]["p"]["steptime_ms_average"]) == 0.0  # XProf: no step
    # ours: the host's runs of one compiled program, the last to the end of the GPU's work
    assert doc["window"] == "program-runs" and doc["steps"] == runs
    assert any(f"the {runs} runs of `{program}`" in n for n in doc["notes"])
    trace = analyze_xplane(path).trace
    c = trace.columns
    on_gpu = np.flatnonzero(c.device == c.code_of("/device:GPU:0"))
    first, last = int(c.start_ps[on_gpu].min()), int((c.start_ps[on_gpu] + c.dur_ps[on_gpu]).max())
    profile = tool(xprof, path, "op_profile")
    assert profile["byProgram"]["metrics"]["rawTime"] == last - first  # XProf's span: the GPU's work, exactly
    assert int(trace.step_table.end_ps[-1]) == last
    # busy: XProf's op time counts the kernels of XLA programs (an hlo_op stat) in the whole trace; ours
    # every kernel that starts in a window -- the difference, exactly, from the trace's own stats
    ops_ps = profile["byProgramExcludeIdle"]["metrics"]["rawTime"]
    assert device_sum_ps(path, "hlo_op", True) == ops_ps
    gpu0 = doc["devices"]["/device:GPU:0"]
    kernels_ps = round(gpu0["total"]["compute"]["seconds"] * 1e12)
    in_windows_no_hlo, outside_with_hlo = split_by_windows(path, trace.step_table)
    assert kernels_ps - ops_ps == in_windows_no_hlo - outside_with_hlo  # MI300X: 50.04 - 17.56 = 32.48 us
    assert busy_s(gpu0) * 1e12 == pytest.approx(ops_ps, rel=REL)
    assert busy_s(gpu0) <= gpu0["total"]["compute"]["seconds"] + 1e-12  # busy: their union
    check_findings_fit(doc)
    for f in doc["findings"]:
        assert "tf." not in f["suggestion"] and "CUDA" not in f["suggestion"]
        if f["rule"] == "launch_bound" or "launch overhead" in f["suggestion"]:
            assert "`jax.jit`" in f["suggestion"] and "HIP_FORCE_DEV_KERNARG" in f["suggestion"]


def split_by_windows(path: Path, steps) -> tuple[int, int]:
    """Device kernels' time: those without an ``hlo_op`` that start in a window, and those with one that
    start in none."""
    from tfprof_towers.trace.steps import assign_steps

    raw = read_xspace(path, ("hlo_op",))
    k = raw.n_kept
    has = np.zeros(k, dtype=bool)
    idx = raw.stats["hlo_op"].index
    has[idx[idx < k]] = True
    dev = raw.planes.kinds[raw.event_plane[:k]] == DEVICE
    inside = assign_steps(raw.start_ps[:k], steps) >= 0
    dur = raw.dur_ps[:k]
    return int(dur[dev & ~has & inside].sum()), int(dur[dev & has & ~inside].sum())
