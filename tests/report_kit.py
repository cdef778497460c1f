"""A small run directory built in code, for the report, audit and browser tests (no TensorFlow).

Two built-in variants and a failed one on a logical-CPU topology (host
``/device:CPU:0``, accelerators ``/device:CPU:1`` and ``/device:CPU:2``):

* ``single``: one MatMul (1,000 FLOPs) on accelerator 0; 4,096 bytes host -> accelerator 0;
  step times median 10 ms (p10 9 ms, p90 11 ms).
* ``towers_bug``: a 600-FLOP MatMul on the host placed by ``train.py:57`` inside
  ``train.py:55``, 200 FLOPs on each accelerator; variables on the host read by both
  towers; step times median 50 ms (p10 48 ms, p90 52 ms).
* ``broken``: failed, with an error message.

Each successful variant has a trace of three steps (``train`` markers) whose host
thread runs its ops; with ``hostile=True`` op names, tensor names and the error
message carry :data:`HOSTILE`.

:func:`write_projection` adds the ``projection.json`` of ``profile --project-on``:
the real projection model (``project.api.project``) on the built-in
``2x-gtx1060-pcie3`` profile, over hand-built graph-work documents (no
TensorFlow): ``single`` and ``towers_bug`` as above, ``replicated`` (projected
only, not in the run) and ``broken`` (could not be built).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tfprof_towers.testing.synth import TraceBuilder

HOSTILE = "</script><img src=x onerror=alert(1)>"
HOST, ACC0, ACC1 = "/device:CPU:0", "/device:CPU:1", "/device:CPU:2"
TOPOLOGY = {"kind": "logical-cpu", "host": HOST, "accelerators": [ACC0, ACC1], "tensorflow": "2.99.0"}
US = 1_000_000  # picoseconds per microsecond

#: Step windows (start, end) in ps: 1 µs, 2 µs and 1.5 µs long.
STEPS = ((0, 1 * US), (1 * US, 3 * US), (3 * US, int(4.5 * US)))


def _node(name: str, device: str, flops: int = 0, kind: str = "MatMul", requested: str | None = None,
          sources: list[dict[str, Any]] | None = None, kernel: str | None = None) -> dict[str, Any]:
    return {"name": name, "type": kind, "kernel": kernel or kind, "device": device,
            "requested": device if requested is None else requested, "flops": flops,
            "flops_known": True, "fused": [], "sources": sources or []}


def _edge(src: str, dst: str, tensor: str, nbytes: int, producer: str = "Identity") -> dict[str, Any]:
    return {"src": src, "dst": dst, "tensor": f"{tensor}:0", "edge": f"edge_{tensor}",
            "producer_type": producer, "bytes": nbytes, "bytes_source": "measured"}


def _placement(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    from tfprof_towers.capture.placement import summarise_devices, summarise_transfers

    return {"nodes": nodes, "devices": summarise_devices(nodes), "edges": edges,
            "transfers": summarise_transfers(edges)}


def _timings(median: float, p10: float, p90: float) -> dict[str, Any]:
    return {"step_time_s": {"median": median, "p10": p10, "p90": p90, "min": p10, "max": p90, "n": 5},
            "profiled_step_time_s": {"median": median * 1.1, "p10": median, "p90": median * 1.2,
                                     "min": median, "max": median * 1.2, "n": 3}}


def variant_records(hostile: bool = False) -> dict[str, dict[str, Any]]:
    scope = HOSTILE if hostile else "tower_0"
    train = [{"device": "/cpu:0", "file": "/src/train.py", "line": 57},
             {"device": "/cpu:1", "file": "/src/train.py", "line": 55}]
    single_nodes = [_node("block0/MatMul", ACC0, 1000, sources=[{"device": "/cpu:1", "file": "/src/s.py",
                                                                 "line": 3}])]
    bug_nodes = [
        _node(f"{scope}/block0/MatMul", HOST, 600, sources=train),
        _node("tower_0/gradients/MatMul_grad", ACC0, 200),
        _node("tower_1/gradients/MatMul_grad", ACC1, 200),
        _node("W", HOST, 0, kind="VarHandleOp", sources=[{"device": "/cpu:0", "file": "/src/train.py",
                                                           "line": 40}]),
        _node("moved/Unique", HOST, 0, kind="Unique", requested=ACC0),
    ]
    bug_edges = [
        _edge(HOST, ACC0, "W/read" if not hostile else HOSTILE, 1024, "ReadVariableOp"),
        _edge(HOST, ACC1, "W/read_1", 1024, "ReadVariableOp"),
        _edge(HOST, ACC0, f"{scope}/block0/Sigmoid", 2048),
        _edge(ACC0, HOST, "tower_0/grad", 512),
    ]
    ok = {"status": "ok", "error": None, "source": "builtin", "topology": dict(TOPOLOGY)}
    return {
        "single": {**ok, "name": "single", "timings": _timings(0.010, 0.009, 0.011),
                   "placement": _placement(single_nodes, [_edge(HOST, ACC0, "input", 4096)])},
        "towers_bug": {**ok, "name": "towers_bug", "timings": _timings(0.050, 0.048, 0.052),
                       "placement": _placement(bug_nodes, bug_edges)},
        "broken": {"name": "broken", "status": "failed", "source": "builtin", "topology": None,
                   "error": f"crashed: exit code 1: {HOSTILE if hostile else 'boom'}", "timings": {},
                   "placement": None, "stderr_tail": f"Traceback\n{HOSTILE if hostile else 'boom'}"},
    }


def build_trace(nodes: list[dict[str, Any]], hostile: bool = False) -> TraceBuilder:
    """Three steps; in each, every node runs once on the host thread, 100 ns apart, 200 ns long."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    line = host.line("tf_Compute", timestamp_ns=0)
    for i, (s, e) in enumerate(STEPS):
        line.event("train", start_ps=s, dur_ps=e - s, stats={"step_num": i})
        t = s + 100_000
        for n in nodes:
            line.event(f"{n['name']}:{n['type']}", start_ps=t, dur_ps=200_000)
            t += 300_000
        if hostile:
            line.event(HOSTILE, start_ps=s + 50_000, dur_ps=10_000)
    return b


PROJECTION_PROFILE = "2x-gtx1060-pcie3"
GPU0, GPU1 = "/device:GPU:0", "/device:GPU:1"


def _work_op(name: str, device: str, flops: float, nbytes: float, deps: tuple[int, ...] = (),
             copies: tuple[int, ...] = ()) -> dict[str, Any]:
    return {"name": name, "type": "MatMul", "device": device, "flops": flops, "bytes": nbytes,
            "matmul": True, "deps": list(deps), "copies": list(copies)}


def _work_copy(tensor: str, src_op: int, src: str, dst: str, nbytes: int) -> dict[str, Any]:
    return {"tensor": tensor, "src_op": src_op, "src": src, "dst": dst, "bytes": nbytes}


GIB = 1 << 30


def memory_estimate(peaks_gib: dict[str, float], variables: int = 0, persistent_gib: float = 0.0
                    ) -> dict[str, Any]:
    """A graph child's memory estimate (``graphcost.estimate_memory``): per device its peak in GiB, the
    largest live tensor a quarter of it; ``variables``/``persistent_gib`` on the first device."""
    devices = {}
    for i, (dev, g) in enumerate(peaks_gib.items()):
        peak = int(g * GIB)
        persistent = int(persistent_gib * GIB) if i == 0 else 0
        devices[dev] = {"peak_bytes": peak, "transient_bytes": peak - persistent,
                        "persistent_bytes": persistent, "variables": variables if i == 0 else 0,
                        "top_tensors": [["big/<b>act</b>", peak // 4], ["small", 1024]]}
    return {"devices": devices, "estimator": "liveness"}


#: Estimates for :func:`projection_graphs` (``memory=True``): on 2x 6 GiB, single does not fit.
MEMORY = {
    "single": memory_estimate({GPU0: 7.2, HOST: 0.25}, variables=38, persistent_gib=0.07),
    "towers_bug": memory_estimate({HOST: 3.0, GPU0: 0.6, GPU1: 0.6}, variables=38, persistent_gib=0.07),
    "replicated": memory_estimate({GPU0: 3.1, GPU1: 3.1, HOST: 0.5}, variables=38, persistent_gib=0.07),
}


def projection_graphs(memory: bool = False) -> dict[str, Any]:
    """Graph-work documents in the form ``project.graphcost`` writes (two accelerators); ``memory``: with
    the memory estimates of :data:`MEMORY`."""
    def work(name: str, ops: list[dict[str, Any]], copies: list[dict[str, Any]]) -> dict[str, Any]:
        return {"variant": name, "host": HOST, "accelerators": [GPU0, GPU1], "ops": ops, "copies": copies,
                "collectives": []}

    graphs: dict[str, Any] = {
        "tensorflow": "2.99.0",
        "variants": {
            "single": work("single", [_work_op("x", HOST, 1e6, 1e6),
                                      _work_op("mm", GPU0, 4e9, 4e7, copies=(0,))],
                           [_work_copy("x:0", 0, HOST, GPU0, 4_000_000)]),
            "towers_bug": work("towers_bug", [_work_op("fwd", HOST, 2e9, 4e7),
                                              _work_op("g0", GPU0, 1e9, 1e7, copies=(0,)),
                                              _work_op("g1", GPU1, 1e9, 1e7, copies=(1,))],
                               [_work_copy("fwd:0", 0, HOST, GPU0, 8_000_000),
                                _work_copy("fwd:0", 0, HOST, GPU1, 8_000_000)]),
            "replicated": work("replicated", [_work_op("t0", GPU0, 2e9, 2e7), _work_op("t1", GPU1, 2e9, 2e7)],
                               []),
            "broken": {"error": "building the graph failed: ValueError: no"},
        },
    }
    if memory:
        for name, estimate in MEMORY.items():
            graphs["variants"][name]["memory"] = estimate
    return graphs


def make_projection(hardware_name: str | None = None, memory: bool = False) -> dict[str, Any]:
    """A projection document from the real model; ``hardware_name`` renames the profile; ``memory``: the
    graphs carry :data:`MEMORY`'s estimates."""
    from dataclasses import replace

    from tfprof_towers.projection.api import project
    from tfprof_towers.projection.hardware import load_hardware
    from tfprof_towers.variants.config import Preset, VariantSpec

    hw = load_hardware(PROJECTION_PROFILE)
    if hardware_name is not None:
        hw = replace(hw, name=hardware_name, description=f"renamed: {hardware_name}")
    variants = [VariantSpec(n) for n in ("single", "towers_bug", "replicated", "broken")]
    return project(hw, Preset("tiny", batch=4, dim=16), variants, graphs=projection_graphs(memory))


def write_projection(root: Path, hardware_name: str | None = None, memory: bool = False) -> dict[str, Any]:
    """Write ``root/projection.json`` (as ``profile --project-on`` does) and return the document."""
    doc = make_projection(hardware_name, memory)
    (root / "projection.json").write_text(json.dumps(doc))
    return doc


def make_run_dir(root: Path, hostile: bool = False) -> Path:
    """Write the run directory under ``root`` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    records = variant_records(hostile)
    names = list(records)
    run = {
        "schema": 1, "tool": "tfprof-towers", "started": "2026-01-01T00:00:00+00:00",
        "finished": "2026-01-01T00:01:00+00:00", "interrupted": False,
        "config": {"preset": {"name": "tiny", "batch": 4, "dim": 16, "blocks": 6}, "warmup": 1, "steps": 5,
                   "profile_steps": 3, "accelerators": None, "variants": [{"name": n, "source": "builtin"}
                                                                           for n in names]},
        "versions": {"python": "3.11.0", "tensorflow": "2.99.0"}, "topology": dict(TOPOLOGY),
    }
    (root / "run.json").write_text(json.dumps(run))
    for name, rec in records.items():
        vdir = root / "variants" / name
        vdir.mkdir(parents=True, exist_ok=True)
        if rec["status"] == "ok":
            logdir = root / "tensorboard" / name
            path = build_trace(rec["placement"]["nodes"], hostile).write_logdir(logdir)
            rec["xplane_files"] = [path.relative_to(root).as_posix()]
        else:
            rec["xplane_files"] = []
        (vdir / "record.json").write_text(json.dumps(rec))
    return root


def sweep_run_dir(root: Path, projected_name: str = "towers_bug") -> Path:
    """make_run_dir's run with a weak sweep of single (1) and towers_bug (2, 4; skipped at 1): the
    points reuse the run's own traces, with their own step times."""
    import shutil

    from tfprof_towers.analysis.scaling import Point, projected_section
    from tfprof_towers.rundir.paths import RunDir
    from tfprof_towers.rundir.scaling import PlannedPoint, ScalingDoc, point_name, scaling_json

    run = make_run_dir(root)
    medians = {("single", 1): 0.010, ("towers_bug", 2): 0.010, ("towers_bug", 4): 0.025}
    for (name, n), median in medians.items():
        rec = json.loads((run / "variants" / name / "record.json").read_text())
        rec["timings"]["step_time_s"].update(median=median, p10=median, p90=median)
        (run / "variants" / point_name(name, n)).mkdir(parents=True)
        (run / "variants" / point_name(name, n) / "record.json").write_text(json.dumps(rec))
        shutil.copytree(run / "tensorboard" / name, run / "tensorboard" / point_name(name, n))
    skipped = {"name": "towers_bug", "status": "skipped", "error": "needs at least 2 accelerators"}
    (run / "variants" / "towers_bug@1").mkdir()
    (run / "variants" / "towers_bug@1" / "record.json").write_text(json.dumps(skipped))
    proj = projected_section("weak", "8x-a100-nvlink", "seed", [
        Point("single", 1, family="tf1-graph", baseline=True, step_median_s=0.1, global_batch=64,
              bottleneck="accelerator compute"),
        Point(projected_name, 2, family="tf1-graph", step_median_s=0.1, global_batch=128, bottleneck="x"),
        Point(projected_name, 8, family="tf1-graph", step_median_s=0.2, global_batch=512,
              bottleneck=f"link {HOSTILE}"),
    ])
    doc = ScalingDoc("weak", (1, 2, 4), 4, (
        PlannedPoint("single", 1, "tf1-graph", True, 4),
        PlannedPoint("towers_bug", 1, "tf1-graph", False, 4, "needs at least 2 accelerators"),
        PlannedPoint("towers_bug", 2, "tf1-graph", False, 8),
        PlannedPoint("towers_bug", 4, "tf1-graph", False, 16),
    ), projected=proj, finished=True)
    scaling_json(RunDir(run)).write_text(json.dumps(doc.to_json()))
    return run
