"""The memory walk's buffer rules checked against the BFC allocator, whatever order the executor chose.

One ``profile`` at the tiny preset of the tf1-graph built-ins, with one inter-op thread so that each
step's ops run one after another on one thread; each variant's step then walked
(:func:`.liveness.walk_peaks`) in the order its own trace shows (:func:`.liveness.trace_order`: the ready
op that started first).  Per logical device, the walk's peak is the measured in-step peak (the host BFC
allocator's events by the device each op was placed on, each request rounded up to 256 B) to within one
256-byte unit.  The estimate's range over the executor's orders holds the measured peak too
(0.9 x low <= measured <= 1.1 x high).  An external oracle: the allocator's own events; the walk never
sees them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfprof_towers.projection.liveness import OpTensors, is_expensive, trace_order, walk_peaks
from tfprof_towers.rundir.summary import in_range
from tfprof_towers.trace.load import load_trace
from tfprof_towers.variants import registry
from tfprof_towers.vocab.device_names import canonical_device

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
VARIANTS = registry.names(registry.TF1_GRAPH)


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("replay") / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_NUM_INTEROP_THREADS": "1",
           "TF_CPU_ALLOCATOR_USE_BFC": "true"}
    done = subprocess.run([sys.executable, "-m", "tfprof_towers", "profile", "--preset", "tiny", "--variants",
                           ",".join(VARIANTS), "--out", str(out)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    ops_json = out.parent / "ops.json"
    script = str(Path(__file__).with_name("step_ops_child.py"))
    child = subprocess.run([sys.executable, script, "tf1-graph", "tiny", ",".join(VARIANTS), str(ops_json)],
                           env=env, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-2000:]
    return out, json.loads(ops_json.read_text())


def first_step_starts(trace_dir: Path) -> dict[str, float]:
    """Each op's first start in the trace's first step, on the executor's threads."""
    e = load_trace(str(trace_dir)).events
    first = e.step[e.step >= 0].min()
    s = e[(e.step == first) & (e.category != "framework") & e.line.str.startswith("tf_Compute")]
    s = s.sort_values("start_ps", kind="stable")
    names = s.name.str.split(":", n=1).str[0]
    return {str(n): float(t) for n, t in zip(names[::-1], s.start_ps.to_numpy()[::-1])}  # the first wins


def ops_of(doc: dict) -> list[OpTensors]:
    """The child's ops; a fed input held from before the step, as the session feeds it (the measured
    in-step peak is the rise over what the device held when the step began: the fed batch is in that)."""
    return [OpTensors(**{**o, "outputs": tuple(o["outputs"]), "inputs": tuple(map(tuple, o["inputs"])),
                         "after": tuple(o["after"]), "held": o["held"] or o["fed"]}) for o in doc["ops"]]


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_walk_in_the_runs_own_order_is_the_measured_peak(replay_run, variant: str) -> None:
    out, docs = replay_run
    summary = json.loads((out / "summary.json").read_text())
    entry = next(v for v in summary["variants"] if v["name"] == variant)
    measured = {d: r for d, r in entry["memory"].items() if r.get("label")}
    assert measured, entry["memory"]
    ops = ops_of(docs[variant])
    starts = first_step_starts(out / "tensorboard" / variant)
    kernels = [op.name for op in ops if not op.held and is_expensive(op)]
    shown = [name for name in kernels if name in starts]
    assert len(shown) > 0.75 * len(kernels), (len(shown), len(kernels))  # the trace names the step's kernels
    walked = walk_peaks(ops, canonical_device(docs[variant]["host"]), trace_order(ops, starts))
    for dev, r in measured.items():
        in_step = r["peak_bytes"] - r["persistent_bytes"]  # the rise within a step over what it held
        replayed = walked.get(dev, (0, []))[0]
        assert abs(replayed - in_step) <= 256, (variant, dev, replayed, in_step)
        low, high = r["estimate_low_bytes"], r["estimate_high_bytes"]
        assert in_range(r["peak_bytes"], low, high), (variant, dev, low, r["peak_bytes"], high)


def test_every_tf2_devices_measured_peak_is_inside_the_range(tiny_tf2_run: Path) -> None:
    """The tf2-strategy built-ins at the tiny preset with the default threads: each logical device's
    measured peak lies in [0.9 x low, 1.1 x high] of the estimate's range over the executor's orders."""
    summary = json.loads((tiny_tf2_run / "summary.json").read_text())
    checked = 0
    for v in summary["variants"]:
        for dev, r in (v.get("memory") or {}).items():
            if not r.get("label") or r.get("estimate_low_bytes") is None:
                continue  # not measured on a logical device, or no estimate of it ("(ops not placed)")
            low, high = r["estimate_low_bytes"], r["estimate_high_bytes"]
            assert low <= r["estimated_peak_bytes"] <= high, (v["name"], dev, r)
            assert in_range(r["peak_bytes"], low, high), (v["name"], dev, low, r["peak_bytes"], high)
            checked += 1
    assert checked >= 8, checked  # one_device's device, two of each mirrored variant, central_storage's
