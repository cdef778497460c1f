"""A cluster variant's run directory with synthetic multi-host traces, built in code (no TensorFlow):
two workers on loopback, one trace per task, worker:1 late in the first three of four steps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from records_kit import TINY, run_doc, stats, write_run
from trace_kit import US, TraceBuilder

from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import Timings, Topology, VariantRecord

T0 = 1_800_000_000_000_000_000  # ns since the epoch: one clock for both hosts (loopback)
RUN = "2026_12_01_00_00_00"
HOSTS = {"127.0.0.1_6001": "/job:worker/task:0", "127.0.0.1_6002": "/job:worker/task:1"}
W0, W1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
STEP_US = 40_000  # 40 ms steps
LATE_US = (20_000, 21_000, 20_000, 500)  # worker:1 arrives this late in steps 0..3
TRANSFER_US = 2_000  # the all-reduce itself, once both have arrived


def worker(task: int, lates: tuple[int, ...] = LATE_US) -> TraceBuilder:
    """Four synchronous steps: compute, then the all-reduce until the step's end (both leave together)."""
    b = TraceBuilder(hostname="vm")
    host = b.plane("/host:CPU")
    py = host.line("python", timestamp_ns=T0)
    ex = host.line("tf_Compute/1", timestamp_ns=T0)
    for step, late in enumerate(lates):
        t = T0 * 1000 + step * STEP_US * US  # absolute, in ps
        arrival = STEP_US - TRANSFER_US - (0 if task == 1 else late)
        py.event("train", t, STEP_US * US, {"step_num": step, "_r": 1})
        ex.event("block0/MatMul:MatMul", t + 1_000 * US, (arrival - 2_000) * US)
        ex.event("CollectiveReduceV2:CollectiveReduceV2", t + arrival * US, (STEP_US - arrival) * US)
    return b


def cluster_record() -> VariantRecord:
    ring = [{"src": a, "dst": b, "bytes_per_step": 6532, "tensors": 2, "kind": "collective"}
            for a, b in ((W0, W1), (W1, W0))]
    nodes = [{"name": "block0/MatMul", "device": d, "type": "MatMul", "kernel": "MatMul", "flops": 1000}
             for d in (W0, W1)]
    placement = {"nodes": nodes, "edges": [], "transfers": ring,
                 "devices": {d: {"ops": 1, "flops_per_step": 1000} for d in (W0, W1)}}
    tasks = [{"task": f"worker:{i}", "address": f"127.0.0.1:600{i + 1}", "status": "ok", "pid": 100 + i,
              "exit": "exit code 0", "stage": "done", "error": None} for i in range(2)]
    cluster = {"family": "multi_worker", "loopback": True, "attached": False,
               "cluster": {"worker": ["127.0.0.1:6001", "127.0.0.1:6002"]}, "host_tasks": HOSTS,
               "failed_task": None, "tasks": tasks, "attempts": [{"attempt": 1, "status": "ok"}],
               "stepping_tasks": ["worker:0", "worker:1"], "captured_tasks": ["worker:0", "worker:1"]}
    files = tuple(f"tensorboard/multi_worker/plugins/profile/{RUN}/{h}.xplane.pb" for h in HOSTS)
    return VariantRecord(name="multi_worker", status="ok", family="cluster",
                         topology=Topology("cpu", W0, ()), placement=placement,
                         timings=Timings(step_time_s=None), cluster=cluster, host_tasks=HOSTS,
                         xplane_files=files, versions={"tensorflow": "2.21.0"})


def make_cluster_run(root: Path) -> Path:
    """A run directory (``root``) of the ``multi_worker`` variant above, with both tasks' traces."""
    timings = Timings(step_time_s=stats(0.04), profiled_step_time_s=stats(0.04))
    rec = replace(cluster_record(), timings=timings)
    write_run(root, run_doc(["multi_worker"], topology=rec.topology, preset=TINY), [rec])
    logdir = RunDir(root).logdir("multi_worker")
    for i, host in enumerate(HOSTS):
        worker(i).write_logdir(logdir, run=RUN, host=host)
    return root
