"""GPU runs: each device's time is what its streams did, and its idle time split HTA's way.

* A run directory of a GPU run whose record places a node on ``/device:GPU:1``: the node's
  host-side event (the executor launching its kernel) stays on the host threads as
  framework time; GPU:1 gets exactly its stream's time.
* The idle split (host wait, kernel wait, other) on synthetic streams, exact to the picosecond.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_kit import US, TraceBuilder

from tfprof_towers.analysis.run_traces import run_dir_trace
from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import write_json
from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.idle import KERNEL_WAIT_PS
from tfprof_towers.trace.load import trace_from_bytes

LOCAL = "/job:localhost/replica:0/task:0"


def gpu_run_trace() -> TraceBuilder:
    """One step [0, 200) us: the executor runs mm (a GPU:1 node, 5 us on the host) and x (a host
    node, 10 us); mm's kernel runs 100 us on GPU:1, launched by cudaLaunchKernel."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 200 * US, {"step_num": 0, "_r": 1})
    ex = host.line("tf_Compute/1")
    ex.event("mm:MatMul", 10 * US, 5 * US)
    ex.event("cudaLaunchKernel", 12 * US, 2 * US, {"correlation_id": 7})
    ex.event("x:Identity", 30 * US, 10 * US)
    gpu = b.plane("/device:GPU:1")
    gpu.line("Stream #7(Compute)").event(
        "volta_sgemm", 20 * US, 100 * US, {"tf_op": "mm:MatMul", "correlation_id": 7}
    )
    return b


def gpu_run_dir(root: Path) -> Path:
    gpu_run_trace().write_logdir(root / "tensorboard" / "gpu_variant", host="box")
    write_json(
        root / "variants" / "gpu_variant" / "record.json",
        {
            "name": "gpu_variant",
            "status": "ok",
            "placement": {
                "nodes": [
                    {"name": "mm", "type": "MatMul", "device": f"{LOCAL}/device:GPU:1"},
                    {"name": "x", "type": "Identity", "device": f"{LOCAL}/device:CPU:0"},
                ],
                "edges": [],
            }
        },
    )
    write_json(
        root / "run.json",
        {
            "topology": {
                "kind": "gpu",
                "host": "/device:CPU:0",
                "accelerators": ["/device:GPU:0", "/device:GPU:1"],
            }
        },
    )
    return root


def test_gpu_node_time_is_its_streams_time(tmp_path: Path, capsys) -> None:
    run = gpu_run_dir(tmp_path / "run")
    assert main(["analyze", str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "gpu"
    gpu1 = doc["devices"]["/device:GPU:1"]
    assert gpu1["total"]["compute"] == {"count": 1, "seconds": pytest.approx(100e-6)}
    assert "host_compute" not in gpu1["total"] and "host_compute" not in gpu1["wall"]
    assert gpu1["wall"]["compute"] == pytest.approx(100e-6)
    assert gpu1["wall"]["idle"] == pytest.approx(100e-6)
    # the launch (host side) stays on the host threads, as framework time
    host = doc["devices"]["/host:CPU"]
    assert host["total"]["framework"] == {"count": 2, "seconds": pytest.approx(7e-6)}
    assert host["total"]["host_compute"] == {"count": 0, "seconds": 0.0}
    # the host node x still joins the host device, which has no plane of its own
    cpu0 = doc["devices"]["/device:CPU:0"]
    assert cpu0["total"]["host_compute"] == {"count": 1, "seconds": pytest.approx(10e-6)}


def test_gpu_node_events_in_the_frame(tmp_path: Path) -> None:
    ev = run_dir_trace(gpu_run_dir(tmp_path / "run")).events
    mm = ev[ev["name"] == "mm:MatMul"]
    assert (mm["device"].tolist(), mm["category"].tolist()) == (["/host:CPU"], ["framework"])
    assert ev.loc[ev["name"] == "x:Identity", "device"].tolist() == ["/device:CPU:0"]


def idle_trace(launch_late: bool = True) -> TraceBuilder:
    """GPU:0, windows [0, 45) and [45, 100) us.  Compute stream: K1 [0,10) launched at -5; K2 [12,20)
    launched at 5 (in time: a 2 us kernel wait); K3 [40,50) launched at 30, after K2 ended (host
    wait 20); K4 [70,80) launched at 45 (in time, gap 10: other).  Copy stream: C [55,60) launched
    at 52, after the device went idle at 50 (host wait 5).  After K4: other 20."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    py.event("train", 0, 45 * US, {"step_num": 1})
    py.event("train", 45 * US, 55 * US, {"step_num": 2})
    api = host.line("tf_gpu_private_0")
    launches = {1: -5, 2: 5, 3: 30 if launch_late else 15, 4: 45, 5: 52}
    for corr, t in launches.items():
        name = "cudaLaunchKernel" if corr != 5 else "cudaMemcpyAsync"
        api.event(name, t * US, US // 2, {"correlation_id": corr})
    gpu = b.plane("/device:GPU:0")
    k = gpu.line("Stream #1(Compute)")
    for corr, (s, e) in {1: (0, 10), 2: (12, 20), 3: (40, 50), 4: (70, 80)}.items():
        k.event("kernel", s * US, (e - s) * US, {"correlation_id": corr})
    gpu.line("Stream #2(MemcpyH2D)").event(
        "MemcpyH2D", 55 * US, 5 * US, {"correlation_id": 5, "memcpy_details": "size:64 dest:0 async:1"}
    )
    return b


def split(doc: dict, device: str = "/device:GPU:0") -> dict[str, float]:
    return {k: round(v / 1e-6, 6) for k, v in doc["devices"][device]["idle_split"].items()}


def test_idle_split_exact() -> None:
    a = analyze_trace(trace_from_bytes(idle_trace().to_bytes()))
    doc = a.to_doc()
    assert KERNEL_WAIT_PS == 5 * US
    assert split(doc) == {"host_wait": 25.0, "kernel_wait": 2.0, "other": 30.0}
    gpu = doc["devices"]["/device:GPU:0"]
    assert sum(gpu["idle_split"].values()) == pytest.approx(gpu["wall"]["idle"])
    assert gpu["wall"]["idle"] == pytest.approx(57e-6)
    per_window = a.breakdown.idle
    got = {
        (s, k): int(v) // US for s, k, v in zip(per_window["step"], per_window["kind"], per_window["dur_ps"])
    }
    assert got == {
        (1, "host_wait"): 20, (1, "kernel_wait"): 2, (1, "other"): 0,
        (2, "host_wait"): 5, (2, "kernel_wait"): 0, (2, "other"): 30,
    }
    wall = a.breakdown.wall
    idle = wall[(wall["device"] == "/device:GPU:0") & (wall["category"] == "idle")]
    assert dict(zip(idle["step"], idle["dur_ps"] // US)) == {1: 22, 2: 35}
    assert split(a.to_doc(per_step=True)) == {"host_wait": 12.5, "kernel_wait": 1.0, "other": 15.0}
    assert "idle_split" not in doc["devices"]["/host:CPU"]


def test_idle_split_when_the_host_is_in_time() -> None:
    """K3 launched at 15, before K2 ended: its 20 us gap is no longer host wait but other."""
    doc = analyze_trace(trace_from_bytes(idle_trace(launch_late=False).to_bytes())).to_doc()
    assert split(doc) == {"host_wait": 5.0, "kernel_wait": 2.0, "other": 50.0}


def test_idle_split_without_launches_is_other_or_kernel_wait() -> None:
    """Kernels without a launch event: nothing is host wait; short gaps are still kernel wait."""
    b = TraceBuilder()
    b.plane("/host:CPU").line("python").event("train", 0, 30 * US, {"step_num": 0})
    s = b.plane("/device:GPU:0").line("Stream #1(Compute)")
    s.event("k", 0, 10 * US)
    s.event("k", 13 * US, 7 * US)
    doc = analyze_trace(trace_from_bytes(b.to_bytes())).to_doc()
    assert split(doc) == {"host_wait": 0.0, "kernel_wait": 3.0, "other": 10.0}


def test_idle_split_in_table_and_html(tmp_path: Path, capsys) -> None:
    path = idle_trace().write(tmp_path / "t.xplane.pb")
    html = tmp_path / "a.html"
    assert main(["analyze", str(path), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    section = out.split("accelerator idle per step")[1]
    assert section.splitlines()[1].split() == ["device", "idle", "host", "wait", "kernel", "wait", "other"]
    row = next(line for line in section.splitlines() if line.startswith("/device:GPU:0"))
    assert row.split() == ["/device:GPU:0", "28.5", "us", "12.5", "us", "43.9%", "1.0", "us", "3.5%",
                           "15.0", "us", "52.6%"]
    text = html.read_text()
    assert "host wait" in text and "kernel wait" in text
