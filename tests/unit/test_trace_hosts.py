"""Several hosts in one analysis (one trace file per task), collectives, network links, tasks' steps.

Two workers on one clock: worker 1 runs 30 us behind worker 0 and worker 0 waits for it in its
all-reduce.  Everything is checked to the microsecond.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trace_kit import US, Ref, TraceBuilder

from tfprof_towers.analysis.run_traces import analyze_run_dir
from tfprof_towers.cli import main
from tfprof_towers.rundir.paths import write_json
from tfprof_towers.trace.analysis import analyze_trace, analyze_xplane
from tfprof_towers.trace.hosts import load_hosts
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.vocab.device_names import (
    canonical_device,
    crosses_tasks,
    device_role,
    device_sort_key,
    task_of,
)

T0 = 1_700_000_000_000_000_000  # ns since the epoch: the first worker's clock at step 0
RUN = "2024_05_01_10_00_00"
HOSTS = ("127.0.0.1_6001", "127.0.0.1_6002")
TASKS = {HOSTS[0]: "/job:worker/replica:0/task:0", HOSTS[1]: "/job:worker/task:1"}
KEY = "/job:worker/replica:0/task:{}/device:CPU:0;1;/job:worker/replica:0/task:{}/device:CPU:0;{};0:0"


def worker(task: int, delay_us: int, wait_us: int) -> TraceBuilder:
    """Steps 0 and 1 of 100 us each, ``delay_us`` after worker 0's; in each, a 20 us MatMul, then the
    all-reduce from ``100 - wait_us`` to the step's end; worker 0 sends its gradient to worker 1."""
    b = TraceBuilder(hostname=HOSTS[task])
    host = b.plane("/host:CPU")
    ts = T0 + delay_us * 1000  # each host's own timestamps: on one clock
    py = host.line("python", timestamp_ns=ts)
    ex = host.line("tf_Compute/1", timestamp_ns=ts)
    coll = host.line("collective_ops/17", timestamp_ns=ts)
    for step in range(2):
        t = ts * 1000 + step * 100 * US
        py.event("train", t, 100 * US, {"step_num": step, "_r": 1})
        ex.event("mm:MatMul", t + 10 * US, 20 * US)
        ex.event("allreduce/CollectiveReduceV2:CollectiveReduceV2", t + (100 - wait_us) * US, wait_us * US)
        coll.event("BaseCollectiveExecutor::ExecuteAsync", t + (100 - wait_us) * US, 5 * US)
        if task == 0:
            ex.event("grad/_1:_Send", t + 40 * US, 2 * US, {"key": Ref(KEY.format(0, 1, "edge_grad"))})
        else:
            ex.event("grad/_2:_Recv", t + 40 * US, 2 * US, {"key": Ref(KEY.format(0, 1, "edge_grad"))})
    return b


def logdir(root: Path) -> Path:
    worker(0, 0, 40).write_logdir(root, run=RUN, host=HOSTS[0])
    worker(1, 30, 10).write_logdir(root, run=RUN, host=HOSTS[1])
    return root


def us(x: float) -> float:
    return round(x / 1e-6, 6)


def test_two_hosts_named_per_task(tmp_path: Path) -> None:
    doc = analyze_xplane(logdir(tmp_path), tasks=TASKS).to_doc()
    assert list(doc["devices"]) == ["/job:worker/task:0/host:CPU", "/job:worker/task:1/host:CPU"]
    w0 = doc["devices"]["/job:worker/task:0/host:CPU"]
    assert {c: (t["count"], us(t["seconds"])) for c, t in w0["total"].items()} == {
        "host_compute": (2, 40.0),
        "send_recv": (2, 4.0),
        "input": (0, 0.0),
        "framework": (0, 0.0),
        "collective": (4, 90.0),  # two all-reduces of 40 us, two executor events of 5 us
    }
    assert us(w0["wall"]["collective"]) == 80.0  # the executor events lie inside the all-reduces
    assert doc["steps"] == 2 and doc["window"] == "markers"
    assert any("assumes their clocks agree" in n for n in doc["notes"])
    assert any(f"{HOSTS[1]} = /job:worker/task:1" in n for n in doc["notes"])


def test_tasks_steps_and_collective_wait(tmp_path: Path) -> None:
    doc = analyze_xplane(logdir(tmp_path), tasks=TASKS).to_doc()
    keys = ("start_s", "end_s", "collective_s")
    got = [
        (t["task"], t["host"], [(s["step"], *(us(s[k]) for k in keys)) for s in t["steps"]])
        for t in doc["tasks"]
    ]
    assert got == [
        ("/job:worker/task:0", HOSTS[0], [(0, 0.0, 100.0, 40.0), (1, 100.0, 200.0, 40.0)]),
        ("/job:worker/task:1", HOSTS[1], [(0, 30.0, 130.0, 10.0), (1, 130.0, 230.0, 10.0)]),
    ]
    assert doc["step_numbers"] == [0, 1]  # the union of the tasks' windows, overlaps trimmed
    trace = load_hosts(tmp_path, tasks=TASKS)
    assert trace.steps.values.tolist() == [[0, 0, 100 * US], [1, 100 * US, 230 * US]]


def test_send_recv_between_tasks_is_a_network_link(tmp_path: Path) -> None:
    doc = analyze_xplane(logdir(tmp_path), tasks=TASKS, edge_bytes={"edge_grad": 4096}).to_doc(per_step=True)
    assert doc["links"] == [
        {
            "src": "/job:worker/task:0/device:CPU:0",
            "dst": "/job:worker/task:1/device:CPU:0",
            "kind": "network",
            "bytes": 4096,
            "count": 1,  # the sends, once per step; the matching recvs are not counted again
            "seconds": None,
            "gbps": None,
            "measured": False,
        }
    ]
    only_recvs = analyze_xplane(logdir(tmp_path), run=f"{RUN}/{HOSTS[1]}").to_doc()
    assert [(ln["kind"], ln["count"]) for ln in only_recvs["links"]] == [("network", 2)]


def test_without_a_task_map_hosts_get_names_of_their_own(tmp_path: Path) -> None:
    doc = analyze_xplane(logdir(tmp_path)).to_doc()
    assert list(doc["devices"]) == [f"/job:{HOSTS[0]}/task:0/host:CPU", f"/job:{HOSTS[1]}/task:0/host:CPU"]
    assert any("no task known" in n for n in doc["notes"])


def test_one_host_of_the_run(tmp_path: Path) -> None:
    doc = analyze_xplane(logdir(tmp_path), run=f"{RUN}/{HOSTS[1]}").to_doc()
    assert list(doc["devices"]) == ["/host:CPU"]
    assert [(s["step"], us(s["start_s"]), us(s["end_s"])) for s in doc["tasks"][0]["steps"]] == [
        (0, 0.0, 100.0),
        (1, 100.0, 200.0),
    ]


def test_parallel_decode_gives_the_same_answer(tmp_path: Path) -> None:
    root = logdir(tmp_path)
    one = analyze_trace(load_hosts(root, tasks=TASKS, workers=1)).to_doc()
    two = analyze_trace(load_hosts(root, tasks=TASKS, workers=2)).to_doc()
    assert json.dumps(one) == json.dumps(two)


def test_cli_analyses_every_host(tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(logdir(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert f"/job:{HOSTS[1]}/task:0/host:CPU" in out
    section = out.split("per task and step")[1]
    rows = [line.split() for line in section.splitlines() if line.startswith(f"/job:{HOSTS[1]}/task:0")]
    row = " ".join(rows[1])
    assert row.split()[1:] == ["1", "130.0", "us", "230.0", "us", "100.0", "us", "10.0", "us"]


# --- collectives


def test_collective_op_types_are_collective_time() -> None:
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    host.line("python").event("train", 0, 100 * US, {"step_num": 0})
    th = host.line("tf_Compute/1")
    ops = ["CollectiveReduceV2", "CollectiveGatherV2", "CollectiveBcastSendV2", "CollectiveBcastRecvV2",
           "CollectiveAllToAllV2", "NcclAllReduce"]
    for i, op in enumerate(ops):
        th.event(f"c{i}:{op}", i * 10 * US, 5 * US)
    th.event("mm:MatMul", 70 * US, 10 * US)
    host.line("collective_ops/3").event("RingReducer::Run", 90 * US, 5 * US)
    nodes = {f"c{i}": "/job:localhost/replica:0/task:0/device:CPU:1" for i in range(3)}
    nodes["mm"] = "/device:CPU:1"
    trace = trace_from_bytes(b.to_bytes(), node_devices=nodes)
    ev = trace.events
    cats = dict(zip(ev["name"].astype(str), ev["category"].astype(str)))
    assert [cats[f"c{i}:{op}"] for i, op in enumerate(ops)] == ["collective"] * 6
    assert (cats["mm:MatMul"], cats["RingReducer::Run"]) == ("host_compute", "collective")
    doc = analyze_trace(trace, kind="logical-cpu").to_doc()
    cpu1, host = doc["devices"]["/device:CPU:1"], doc["devices"]["/host:CPU"]
    assert (cpu1["total"]["collective"]["count"], us(cpu1["wall"]["collective"])) == (3, 15.0)
    assert us(cpu1["wall"]["host_compute"]) == 10.0
    assert (host["total"]["collective"]["count"], us(host["wall"]["collective"])) == (4, 20.0)


# --- device names of tasks


def test_task_device_names() -> None:
    assert canonical_device("/job:worker/task:1/host:CPU") == "/job:worker/task:1/host:CPU"
    assert canonical_device("/job:worker/replica:0/task:1/device:CPU:0") == "/job:worker/task:1/device:CPU:0"
    names = [
        "/job:worker/task:1/device:CPU:0", "/job:worker/task:1/host:CPU", "/job:worker/task:0/device:GPU:0",
        "/host:CPU", "/job:worker/task:0/host:CPU", "/device:GPU:0",
    ]
    assert sorted(names, key=device_sort_key) == [
        "/host:CPU",
        "/device:GPU:0",
        "/job:worker/task:0/host:CPU",
        "/job:worker/task:0/device:GPU:0",
        "/job:worker/task:1/host:CPU",
        "/job:worker/task:1/device:CPU:0",
    ]
    assert device_role("/job:worker/task:1/host:CPU", {}) == "host"
    assert device_role("/job:worker/task:1/device:CPU:0", {}) == "host"
    topo = {"accelerators": ["/job:worker/task:1/device:CPU:1"]}
    assert device_role("/job:worker/task:1/device:CPU:1", topo) == "accelerator"
    assert task_of("/job:worker/task:1/host:CPU") == "/job:worker/task:1"
    assert task_of("/job:worker/task:1/device:GPU:0") == "/job:worker/task:1"
    assert task_of("/device:GPU:0") == task_of("/host:CPU") == ""
    assert crosses_tasks("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0")
    assert not crosses_tasks("/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1")
    assert not crosses_tasks("/device:CPU:0", "/device:CPU:1")


@pytest.mark.parametrize("delay_us", [0, 1_000_000])
def test_clock_alignment_by_timestamps(tmp_path: Path, delay_us: int) -> None:
    worker(0, 0, 40).write_logdir(tmp_path, run=RUN, host=HOSTS[0])
    worker(1, delay_us, 10).write_logdir(tmp_path, run=RUN, host=HOSTS[1])
    doc = analyze_xplane(tmp_path, tasks=TASKS).to_doc()
    assert us(doc["tasks"][1]["steps"][0]["start_s"]) == delay_us


def test_run_directory_variant_with_a_trace_per_task(tmp_path: Path) -> None:
    """A cluster variant: one trace per task, the record names each host's task and places the
    same node (``mm``) on each task's own device."""
    run = tmp_path / "run"
    worker(0, 0, 40).write_logdir(run / "tensorboard" / "multi_worker", run=RUN, host=HOSTS[0])
    worker(1, 30, 10).write_logdir(run / "tensorboard" / "multi_worker", run=RUN, host=HOSTS[1])
    nodes = [
        {"name": "mm", "device": "/job:worker/replica:0/task:0/device:CPU:1"},
        {"name": "mm", "device": "/job:worker/replica:0/task:1/device:CPU:1"},
    ]
    write_json(
        run / "variants" / "multi_worker" / "record.json",
        {"name": "multi_worker", "status": "ok", "host_tasks": TASKS,
         "placement": {"nodes": nodes, "edges": [{"src": "/job:worker/replica:0/task:0/device:CPU:1",
                                                   "dst": "/job:worker/replica:0/task:1/device:CPU:1",
                                                   "edge": "edge_grad", "bytes": 512}]}},
    )
    write_json(run / "run.json", {"topology": {"kind": "logical-cpu"}})
    doc = analyze_run_dir(run, "multi_worker").to_doc(per_step=True)
    mm = {d: us(v["total"]["host_compute"]["seconds"]) for d, v in doc["devices"].items() if "task" in d}
    assert mm == {
        "/job:worker/task:0/host:CPU": 0.0,
        "/job:worker/task:0/device:CPU:1": 20.0,
        "/job:worker/task:1/host:CPU": 0.0,
        "/job:worker/task:1/device:CPU:1": 20.0,
    }
    assert [(ln["kind"], ln["src"], ln["dst"], ln["bytes"]) for ln in doc["links"]] == [
        ("network", "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0", 512)
    ]


def test_parallel_decode_with_another_thread_alive(tmp_path: Path) -> None:
    """With another thread running, workers are not forked from this process (forkserver/spawn)."""
    import threading

    from tfprof_towers.trace import hosts

    root = logdir(tmp_path)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert hosts._start_method().get_start_method() != "fork"
        two = analyze_trace(load_hosts(root, tasks=TASKS, workers=2)).to_doc()
    finally:
        stop.set()
        t.join()
    # fork again once this process has no other thread (a Dask client of another test on this worker
    # may have left its event-loop thread running: then still not fork)
    alone = threading.active_count() == 1
    assert (hosts._start_method().get_start_method() == "fork") == alone
    assert json.dumps(two) == json.dumps(analyze_trace(load_hosts(root, tasks=TASKS, workers=1)).to_doc())
