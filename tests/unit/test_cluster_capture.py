"""The cluster family (capture/cluster/) without TensorFlow: specs, markers, who failed, records, the
projection across hosts."""

from __future__ import annotations

import functools
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tfprof_towers.capture.cluster.attempt import Attempt, task_rows
from tfprof_towers.capture.cluster.coord import Coord, CoordTimeout, least_progress, where
from tfprof_towers.capture.cluster.diagnose import root_cause
from tfprof_towers.capture.cluster.docs import (
    MULTI_WORKER,
    PARAMETER_SERVER,
    TaskRecord,
    TaskSpec,
    Timeouts,
    roles,
)
from tfprof_towers.capture.cluster.driver import budget_s, merged_placement, per_step_max
from tfprof_towers.capture.cluster.edges import edge_op, edges_with_bytes
from tfprof_towers.capture.cluster.spec import (
    Cluster,
    ClusterError,
    TaskId,
    free_ports,
    loopback_cluster,
)
from tfprof_towers.capture.cluster.watch import late_tasks, missing_traces
from tfprof_towers.procs import supervise
from tfprof_towers.variants.config import PRESETS

TINY = PRESETS["tiny"]


# -- the cluster spec


def test_task_names() -> None:
    assert TaskId.parse("worker:1") == TaskId("worker", 1)
    assert TaskId.parse("/job:worker/replica:0/task:3") == TaskId("worker", 3)
    assert TaskId.parse("/job:ps/task:0") == TaskId("ps", 0)
    t = TaskId("worker", 1)
    assert (str(t), t.slug, t.device_prefix, t.cpu) == (
        "worker:1", "worker-1", "/job:worker/task:1", "/job:worker/task:1/device:CPU:0")
    for bad in ("worker", "worker:x", ":1", "wor ker:1"):
        with pytest.raises(ClusterError, match="expected JOB:INDEX"):
            TaskId.parse(bad)


def test_cluster_spec_is_checked() -> None:
    c = Cluster.from_dict({"cluster": {"worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "ps": ["10.0.0.4:2222"],
                                       "chief": ["10.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}})
    assert [str(t) for t in c.tasks()] == ["chief:0", "ps:0", "worker:0", "worker:1"]
    assert [str(t) for t in c.tasks("worker")] == ["worker:0", "worker:1"]
    want = {"cluster": c.to_dict(), "task": {"type": "worker", "index": 1}}
    assert c.tf_config(TaskId("worker", 1)) == want
    assert c.profiler_service(c.tasks("worker")) == "grpc://10.0.0.2:2222,grpc://10.0.0.3:2222"
    assert c.host_tasks()["10.0.0.3_2222"] == "/job:worker/task:1"
    assert not c.loopback
    assert Cluster.from_dict({"worker": ["127.0.0.1:5000"]}).loopback
    problems = {
        "two tasks share one address": {"worker": ["h:1", "h:1"]},
        "at most one chief": {"chief": ["a:1", "b:1"], "worker": ["c:1"]},
        "is not host:port": {"worker": ["nohost"]},
        "must list": {"worker": []},
        "expected an object": [],
    }
    for why, doc in problems.items():
        with pytest.raises(ClusterError, match=why):
            Cluster.from_dict(doc)
    with pytest.raises(ClusterError, match="task worker:2 is not in the cluster"):
        c.address(TaskId("worker", 2))


def test_cluster_file_errors_are_one_line(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text("{not json")
    with pytest.raises(ClusterError, match="not JSON"):
        Cluster.load(f)
    with pytest.raises(ClusterError, match="cannot read"):
        Cluster.load(tmp_path / "missing.json")


def port_in_use(port: int, host: str = "0.0.0.0") -> bool:
    """True when ``port`` cannot be bound on ``host`` now (another process listens on it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
    except OSError:
        return True
    finally:
        s.close()
    return False


def test_free_ports_are_distinct_and_free() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5
    assert not any(port_in_use(p) for p in ports)
    c = loopback_cluster(2, ps=1, chief=1)
    assert [str(t) for t in c.tasks()] == ["chief:0", "ps:0", "worker:0", "worker:1"]
    assert c.loopback and all(a.startswith("127.0.0.1:") for a in c.to_dict()["worker"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        assert port_in_use(s.getsockname()[1])  # TensorFlow binds 0.0.0.0: a loopback listener blocks it


# -- markers


def test_markers_and_bounded_waits(tmp_path: Path) -> None:
    coord = Coord(tmp_path)
    w0, w1 = TaskId("worker", 0), TaskId("worker", 1)
    coord.mark(w0, "ready", median_step_s=0.5)
    assert coord.read(w0, "ready")["median_step_s"] == 0.5
    assert coord.wait([w0], "ready", 1.0) < 1.0
    with pytest.raises(CoordTimeout) as exc:
        coord.wait([w0, w1], "ready", 0.1)
    assert (exc.value.missing, exc.value.timed_out) == (["worker:1"], True)
    coord.mark(w1, "failed", error="boom")
    t0 = time.monotonic()
    with pytest.raises(CoordTimeout, match=r"worker:1 failed: boom"):
        coord.wait([w1], "done", 30.0, abort=lambda: coord.failure([w0, w1]))
    assert time.monotonic() - t0 < 1.0  # a failed peer ends the wait at once
    for event in ("started", "imported", "strategy"):
        coord.mark(w0, event)
    coord.mark(w1, "started")
    assert least_progress(coord, [w0, w1]) == (["worker:1"], "started", "ready")  # w0 marked ready above
    assert where(coord, w0) == "while waiting for the capture"
    assert where(coord, w1) == "while importing TensorFlow"
    coord.mark("driver", "abort")
    assert coord.failure([]) == "the driver aborted the run"


# -- documents


def test_task_spec_round_trip_and_roles() -> None:
    c = loopback_cluster(2, ps=1, chief=1)
    capture, ready = roles(PARAMETER_SERVER, c.tasks())
    assert ([str(t) for t in capture], [str(t) for t in ready]) == (
        ["chief:0", "ps:0", "worker:0", "worker:1"], ["chief:0"])
    capture, ready = roles(MULTI_WORKER, c.tasks("worker"))
    assert [str(t) for t in capture] == [str(t) for t in ready] == ["worker:0", "worker:1"]
    spec = TaskSpec(MULTI_WORKER, "multi_worker", TINY, 2, 3, 2, ("worker:0",), ("worker:0",),
                    Timeouts.within(40.0), faults={"worker:1": "segv@profiled_step_1"})
    back = TaskSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back == spec
    assert back.fault(TaskId("worker", 1)) == ("segv", "profiled_step_1")
    assert back.fault(TaskId("worker", 0)) == ("", "")
    t = Timeouts.within(40.0)
    assert (t.startup_s, t.collective_s, t.task_s) == (24.0, 10.0, 40.0)
    assert budget_s(300.0) == 290.0 and budget_s(20.0) == 15.0 and budget_s(None) == 600.0


def test_step_times_are_the_slowest_task_per_step() -> None:
    assert per_step_max([(1.0, 2.0, 3.0), (1.5, 1.0, 3.5, 9.0)]) == (1.5, 2.0, 3.5)
    assert per_step_max([(), ()]) == ()


def test_workers_placements_merge_into_ring_transfers_between_tasks() -> None:
    def worker(i: int) -> TaskRecord:
        dev = f"/job:worker/task:{i}/device:CPU:0"
        node = {"name": "MatMul", "device": dev, "type": "MatMul", "kernel": "MatMul", "flops": 100}
        rows = [{"name": f"CollectiveReduceV2{s}", "device": dev, "kernel": "CollectiveReduceV2", "bytes": b,
                 "group_key": 1, "instance_key": None, "group_size": 2, "shared_name": ""}
                for s, b in (("", 6528), ("_1", 4))]
        placement = {"nodes": [node], "edges": [], "collectives": rows}
        return TaskRecord(f"worker:{i}", "", "ok", placement=placement)

    p = merged_placement([worker(0), worker(1)])
    assert sorted(p["devices"]) == ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
    # two workers: each sends 2(n-1)/n = all of each payload to the other
    w0, w1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
    assert [(t["src"], t["dst"], t["bytes_per_step"], t["tensors"], t["kind"]) for t in p["transfers"]] == [
        (w0, w1, 6532, 2, "collective"),
        (w1, w0, 6532, 2, "collective"),
    ]


def test_ps_edges_take_their_bytes_from_the_graph() -> None:
    assert edge_op("edge_161_block0/MatMul/ReadVariableOp") == "block0/MatMul/ReadVariableOp"
    assert edge_op("edge_7_x;0") == "x"
    found = {("/job:ps/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0", "edge_1_w/Read"),
             ("/job:worker/task:0/device:CPU:0", "/job:chief/task:0/device:CPU:0", "edge_9_loss")}
    edges = edges_with_bytes(found, {"w/Read": 1024})
    assert [(e["edge"], e["bytes"], e["bytes_source"]) for e in edges] == [
        ("edge_1_w/Read", 1024, "static"), ("edge_9_loss", 0, "unknown")]


# -- who failed: the root cause among tasks that all end at once


@dataclass
class FakeProc:
    """A supervised task as the watch loop sees it: its report and its stderr file."""

    ended: supervise.Ended | None
    command: supervise.Command
    pid: int = 1234

    def poll(self) -> supervise.Ended | None:
        return self.ended


def no_failure_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """``root_cause`` decides at once: no wait for the other tasks to end (``launch.settle``, whose
    grace defaults to ``FAILURE_GRACE_S`` as it was when the module was imported, so patching the
    constant alone leaves the wait at 1 s)."""
    from tfprof_towers.capture.cluster import diagnose, launch

    monkeypatch.setattr(launch, "FAILURE_GRACE_S", 0.0)
    monkeypatch.setattr(diagnose, "settle", functools.partial(launch.settle, grace_s=0.0))


def attempt(tmp_path: Path, ends: dict[str, int | None], stderr: dict[str, str] | None = None) -> Attempt:
    c = Cluster.from_dict({"worker": ["127.0.0.1:6001", "127.0.0.1:6002"]})
    spec = TaskSpec(MULTI_WORKER, "multi_worker", TINY, 2, 3, 2, ("worker:0", "worker:1"),
                    ("worker:0", "worker:1"))
    tmp_path.mkdir(parents=True, exist_ok=True)
    a = Attempt(1, tmp_path, c, spec, deadline=time.monotonic() + 60)
    for name, rc in ends.items():
        err = tmp_path / f"{name}.txt"
        err.write_text((stderr or {}).get(name, ""))
        ended = None if rc is None else supervise.Ended(returncode=rc)
        a.procs[name] = FakeProc(ended, supervise.Command(("x",), err))  # type: ignore[assignment]
    return a


def test_a_crash_is_named_not_the_peer_that_saw_its_socket_close(tmp_path: Path, monkeypatch) -> None:
    no_failure_grace(monkeypatch)
    a = attempt(tmp_path, {"worker:0": 3, "worker:1": -11, "capture": None})
    a.coord.mark(TaskId("worker", 0), "failed", error="UnavailableError during profiled: Socket closed",
                 stage="profiled")
    for t in ("started", "imported", "strategy", "server_up", "ready", "tracing"):
        a.coord.mark(TaskId("worker", 1), t)
    out = root_cause(a, a.coord, [])
    assert out.failed_task == "worker:1"
    assert out.error == "worker:1 killed by SIGSEGV during its profiled steps"
    assert out.retry is None  # a crash in the step itself would crash again


def test_a_crash_after_the_steps_is_the_profilers_and_is_retried(tmp_path: Path, monkeypatch) -> None:
    no_failure_grace(monkeypatch)
    a = attempt(tmp_path, {"worker:0": 3, "worker:1": -6}, {"worker:1": "munmap_chunk(): invalid pointer"})
    a.coord.mark(TaskId("worker", 1), "done")
    out = root_cause(a, a.coord, [])
    assert out.failed_task == "worker:1"
    assert "killed by SIGABRT after its profiled steps" in out.error
    assert "TensorFlow 2.21's profiler crashes a task" in out.error
    assert out.retry == "a task crashed while the profiler collected its trace"


def test_a_hand_started_task_whose_worker_marked_its_crash_is_named_and_retried(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """On a real cluster the driver has no process of the task: its ``worker`` marks how the child
    ended, and the child's output is in the attempt's task folder."""
    from tfprof_towers.capture.cluster.docs import task_dir
    from tfprof_towers.capture.cluster.worker import mark_for_child

    no_failure_grace(monkeypatch)
    a = attempt(tmp_path, {})
    w0, w1 = TaskId("worker", 0), TaskId("worker", 1)
    a.coord.mark(w0, "failed", error="UnavailableError during wait_release: Socket closed",
                 stage="wait_release")
    for t in ("started", "imported", "strategy", "server_up", "ready", "tracing", "done"):
        a.coord.mark(w1, t)
    task_dir(tmp_path, w1).mkdir(parents=True)
    (task_dir(tmp_path, w1) / "stderr.txt").write_text("double free or corruption (out)\n")
    mark_for_child(a.coord, w1, supervise.Ended(returncode=-6))
    assert a.coord.read(w1, "failed")["signal"] == 6 and a.coord.has(w1, "left")
    out = root_cause(a, a.coord, [])
    assert out.failed_task == "worker:1"
    assert out.error.startswith("worker:1 killed by SIGABRT after its profiled steps (TensorFlow 2.21's")
    assert out.retry == "a task crashed while the profiler collected its trace"
    # the driver has no process of a hand-started task: the row says how its worker saw it end
    assert task_rows(a, {}, out)[1]["exit"] == "remote: killed by SIGABRT"


def test_a_hand_started_task_joins_each_attempt_once_and_never_a_final_one(tmp_path: Path) -> None:
    from tfprof_towers.capture.cluster.worker import Pointer, next_attempt

    run = tmp_path / "run"
    for k in (1, 2):
        (run / f"a{k}").mkdir(parents=True)
        (run / f"a{k}" / "spec.json").write_text("{}")
    pointer = run / "attach.json"
    pointer.write_text(json.dumps({"attempt": "a1", "final": True}))  # a previous run's: not joined
    assert next_attempt(run, None, 0.2) is None
    pointer.write_text(json.dumps({"attempt": "a1"}))
    assert next_attempt(run, None, 0.2) == Pointer("a1")
    assert next_attempt(run, "a1", 0.2) is None  # no word from the driver yet: give up after the wait
    pointer.write_text(json.dumps({"attempt": "a2"}))
    assert next_attempt(run, "a1", 0.2) == Pointer("a2")
    pointer.write_text(json.dumps({"attempt": "a2", "final": True}))
    t0 = time.monotonic()
    assert next_attempt(run, "a2", 30.0) is None and time.monotonic() - t0 < 5  # told: leave now
    pointer.write_text(json.dumps({"attempt": "a3"}))  # named before its spec.json is written
    assert next_attempt(run, "a2", 0.2) is None


def test_faults_for_one_attempt_only(monkeypatch) -> None:
    from tfprof_towers.capture.cluster.driver import attempt_faults

    monkeypatch.setenv("TFPROF_TOWERS_CLUSTER_FAULTS", json.dumps(
        {"worker:1": "abort@wait_peers#1", "worker:0": "segv@imported", "ps:0": "port_taken"}))
    assert attempt_faults(1) == {"worker:1": "abort@wait_peers", "worker:0": "segv@imported"}
    assert attempt_faults(2) == {"worker:0": "segv@imported"}


def test_the_bench_s_paired_blocks_are_asked_for_by_environment(monkeypatch) -> None:
    """Unset: none.  Set: whole numbers in range, for multi_worker only; anything else a one-line error."""
    from tfprof_towers.capture.cluster.driver import OVERHEAD_ENV, overhead_blocks

    monkeypatch.delenv(OVERHEAD_ENV, raising=False)
    assert overhead_blocks("multi_worker") == (0, 0)
    monkeypatch.setenv(OVERHEAD_ENV, json.dumps({"rounds": 10, "block_steps": 4}))
    assert overhead_blocks("multi_worker") == (10, 4)
    with pytest.raises(ClusterError, match="multi_worker only"):
        overhead_blocks("parameter_server")
    for bad, why in (({"rounds": 0, "block_steps": 4}, "rounds must be a whole number from 1 to 100, not 0"),
                     ({"rounds": 2, "block_steps": 4.0}, "block_steps must be .* not 4.0"),
                     ({"rounds": True, "block_steps": 4}, "rounds must .* not True"),
                     ({"rounds": 2}, "block_steps must .* not None"),
                     ({"rounds": 101, "block_steps": 1}, "from 1 to 100, not 101")):
        monkeypatch.setenv(OVERHEAD_ENV, json.dumps(bad))
        with pytest.raises(ClusterError, match=why):
            overhead_blocks("multi_worker")
    monkeypatch.setenv(OVERHEAD_ENV, "{rounds")
    with pytest.raises(ClusterError, match="not JSON"):
        overhead_blocks("multi_worker")


def test_a_hung_peer_is_named(tmp_path: Path, monkeypatch) -> None:
    no_failure_grace(monkeypatch)
    a = attempt(tmp_path, {"worker:0": 3, "worker:1": None})
    a.coord.mark(TaskId("worker", 0), "failed", stage="wait_peers",
                 error="waited 10.0 s for 'done' from worker:1 (timed out) during wait_peers",
                 waited_for={"event": "done", "missing": ["worker:1"], "reason": "timed out"})
    out = root_cause(a, a.coord, [])
    assert out.failed_task == "worker:1"
    assert out.error.startswith("worker:1 hung: no 'done' from it within the wait of worker:0 exit code 3")
    b = attempt(tmp_path / "b", {"worker:0": 3, "worker:1": None})
    b.coord.mark(TaskId("worker", 0), "failed", stage="profiled",
                 error="DeadlineExceededError during profiled: Collective has timed out during execution.")
    b.coord.mark(TaskId("worker", 1), "tracing")
    out = root_cause(b, b.coord, [])
    assert out.failed_task == "worker:1"
    assert out.error.startswith("worker:1 hung during its profiled steps: worker:0 exit code 3")


def test_a_taken_port_is_said_and_retried(tmp_path: Path, monkeypatch) -> None:
    no_failure_grace(monkeypatch)
    a = attempt(tmp_path, {"worker:0": None, "worker:1": 3},
                {"worker:1": "E0000 add_port.cc:83] Failed to add port\nCould not start gRPC server"})
    a.coord.mark(TaskId("worker", 1), "failed", stage="strategy",
                 error="UnknownError during strategy: Could not start gRPC server")
    out = root_cause(a, a.coord, [])
    assert out.error == ("worker:1 exit code 3: UnknownError during strategy: Could not start gRPC server "
                         "(port 127.0.0.1:6002 is already in use)")
    assert out.retry == "a port was taken"


def test_missing_traces_and_a_short_window(tmp_path: Path) -> None:
    a = attempt(tmp_path, {})
    a.coord.mark("capture", "done", files=["plugins/profile/r/127.0.0.1_6001.xplane.pb"],
                 trace_end_unix=100.0)
    assert missing_traces(a, a.coord) == ["worker:1"]
    (a.folder / "coord" / "worker-0.done").write_text(json.dumps({"unix": 99.0}))
    (a.folder / "coord" / "worker-1.done").write_text(json.dumps({"unix": 101.0}))
    assert late_tasks(a, a.coord) == ["worker:1"]


def coordinated(tmp_path: Path, family: str, tasks: dict[str, list[str]],
                act: Callable[[Coord, TaskId], None]) -> tuple[int, Coord]:
    """The capture coordinator's exit code and markers for an attempt whose captured tasks do
    ``act`` (each in a thread, as a task process would)."""
    from tfprof_towers.capture.cluster.client import capture
    from tfprof_towers.rundir.paths import write_json

    cluster = Cluster.from_dict(tasks)
    captured, stepping = roles(family, cluster.tasks())
    spec = TaskSpec(family, family, TINY, 2, 3, 2, tuple(map(str, captured)), tuple(map(str, stepping)),
                    Timeouts.within(20.0))
    write_json(tmp_path / "cluster.json", cluster.to_dict())
    write_json(tmp_path / "spec.json", spec.to_json())
    coord = Coord(tmp_path)
    threads = [threading.Thread(target=act, args=(coord, t), daemon=True) for t in captured]
    for t in threads:
        t.start()
    code = capture(tmp_path)
    for t in threads:
        t.join(5.0)
    return code, coord


def test_the_capture_coordinator_starts_and_stops_every_task_s_own_profiler(tmp_path: Path) -> None:
    """Every stepping task ready -> ``capture.start`` (the run folder) -> each captured task traces;
    the stepping tasks' ``done`` -> ``capture.stop`` (the serving tasks stop then) -> every trace
    ``traced`` -> ``capture.done`` with the files, in the order the tasks could see them."""
    from tfprof_towers.capture.cluster.docs import trace_path
    from tfprof_towers.capture.families import PROFILER_OPTIONS

    seen: dict[str, list[str]] = {}

    def act(coord: Coord, me: TaskId) -> None:
        stepping = me.job == "chief"
        if stepping:
            coord.mark(me, "ready", median_step_s=0.01)
        coord.wait(["capture"], "start", 5.0)
        coord.mark(me, "tracing")
        if stepping:
            coord.wait([TaskId.parse(t) for t in ("ps:0", "worker:0")], "tracing", 5.0)
            # what the steps see: the capture cannot stop before their ``done`` (after it, it may)
            seen[str(me)] = sorted(p.name for p in (coord.folder).glob("capture.*"))
            coord.mark(me, "done")
        else:
            coord.wait(["capture"], "stop", 5.0)
            assert coord.has(TaskId("chief", 0), "done")  # a server stops only after the steps
            seen[str(me)] = sorted(p.name for p in (coord.folder).glob("capture.*"))
        run = coord.read("capture", "start")["run"]
        dest = trace_path(coord.root, run, Cluster.load(coord.root / "cluster.json").host_file(me))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(b"x")
        coord.mark(me, "traced", file=str(dest))

    code, coord = coordinated(tmp_path, PARAMETER_SERVER, {
        "chief": ["127.0.0.1:7005"], "ps": ["127.0.0.1:7002"], "worker": ["127.0.0.1:7006"]}, act)
    assert code == 0
    assert seen == {"chief:0": ["capture.start", "capture.started"],
                    "ps:0": ["capture.start", "capture.started", "capture.stop"],
                    "worker:0": ["capture.start", "capture.started", "capture.stop"]}
    done = coord.read("capture", "done")
    run = coord.read("capture", "start")["run"]
    assert done["files"] == [f"plugins/profile/{run}/127.0.0.1_{p}.xplane.pb" for p in (7002, 7005, 7006)]
    assert done["options"] == PROFILER_OPTIONS
    steps_done = coord.read(TaskId("chief", 0), "done")["unix"]
    assert done["trace_start_unix"] <= steps_done <= done["trace_end_unix"]


def test_the_capture_coordinator_stops_waiting_when_a_task_fails(tmp_path: Path) -> None:
    def act(coord: Coord, me: TaskId) -> None:
        coord.mark(me, "ready", median_step_s=0.01)
        coord.wait(["capture"], "start", 5.0)
        if me.index == 1:
            coord.mark(me, "failed", error="boom")

    t0 = time.monotonic()
    code, coord = coordinated(tmp_path, MULTI_WORKER, {"worker": ["127.0.0.1:7001", "127.0.0.1:7002"]}, act)
    assert code == 3 and time.monotonic() - t0 < 10.0
    assert re.fullmatch(r"waited [0-9.]+ s for 'done' from worker:0, worker:1 \(worker:1 failed: boom\)",
                        coord.read("capture", "failed")["error"])
    assert not coord.has("capture", "done")


def test_gpus_are_shared_out_among_loopback_workers() -> None:
    from tfprof_towers.capture.cluster.launch import gpu_plan

    ws = [TaskId("worker", 0), TaskId("worker", 1)]
    assert gpu_plan(ws, ws, ["0", "1", "2", "3"]) == ({"worker:0": "0,1", "worker:1": "2,3"}, None)
    assert gpu_plan(ws, ws, ["0", "1", "2", "3"], per_task=1) == ({"worker:0": "0", "worker:1": "1"}, None)
    assert gpu_plan(ws, ws, []) == ({"worker:0": "", "worker:1": ""}, None)
    plan, note = gpu_plan(ws, ws, ["0"])
    assert plan == {"worker:0": "", "worker:1": ""}
    assert note == ("2 computing tasks and 1 GPU(s) on this machine: the loopback tasks run on the CPU "
                    "(each worker needs a GPU of its own)")
    ps = loopback_cluster(2, ps=1, chief=1)
    plan, _ = gpu_plan(ps.tasks(), ps.tasks("worker"), ["4", "5"])
    assert plan == {"chief:0": "", "ps:0": "", "worker:0": "4", "worker:1": "5"}


def test_ps_nodes_are_where_the_traces_show_them_and_fused_ops_follow_their_consumer() -> None:
    """parameter_server's placement from the tasks' traces (no partition graph anywhere)."""
    from tfprof_towers.capture.cluster.edges import trace_nodes
    from tfprof_towers.capture.placement import summarise_devices

    ops = {  # name: [type, FLOPs, consumers] as the chief's op table has them
        "w/Read": ["ReadVariableOp", 0, ["mm"]],
        "mm": ["MatMul", 1000, ["sig"]],  # fused into "sig" by Grappler: absent from every trace
        "sig": ["Sigmoid", 0, ["grad"]],
        "grad": ["MatMul", 2000, ["update"]],
        "update": ["AssignSubVariableOp", 0, []],
    }
    ps, w0, w1 = ("/job:ps/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0",
                  "/job:worker/task:1/device:CPU:0")
    found = {(ps, "w/Read"): "ReadVariableOp", (ps, "update"): "AssignSubVariableOp",
             (w0, "sig"): "_MklNativeFusedMatMul", (w0, "grad"): "_MklMatMul",
             (w1, "sig"): "_MklNativeFusedMatMul", (w1, "grad"): "_MklMatMul"}
    nodes = trace_nodes(found, ops)
    by = {(n["device"], n["name"]): n for n in nodes}
    assert by[(w0, "sig")]["flops"] == 1000 and by[(w0, "sig")]["fused"] == ["mm"]
    assert by[(w1, "grad")]["flops"] == 2000 and by[(w1, "grad")]["kernel"] == "_MklMatMul"
    assert by[(ps, "w/Read")]["fused"] == []  # it ran on ps: never folded into a worker's op
    devices = summarise_devices(nodes)
    assert {d: (v["ops"], v["flops_per_step"]) for d, v in devices.items()} == {
        ps: (2, 0), w0: (2, 3000), w1: (2, 3000)}


def test_a_task_s_host_plane_is_its_cpu_and_a_device_plane_its_own() -> None:
    from tfprof_towers.capture.cluster.edges import task_device

    assert task_device("worker:1", "/host:CPU") == "/job:worker/task:1/device:CPU:0"
    assert task_device("worker:1", "/device:GPU:0") == "/job:worker/task:1/device:GPU:0"


def test_the_capture_coordinator_is_due_once_every_task_has_started(tmp_path: Path) -> None:
    """The driver starts the capture coordinator only when every task it runs marked ``started``
    (their start is not slowed by it), and once."""
    from tfprof_towers.capture.cluster.launch import client_due

    a = attempt(tmp_path, {"worker:0": None, "worker:1": None})
    assert client_due(a) is False
    a.coord.mark(TaskId("worker", 0), "started")
    assert client_due(a) is False
    a.coord.mark(TaskId("worker", 1), "started")
    assert client_due(a) is True
    a.procs["capture"] = a.procs["worker:0"]  # started
    assert client_due(a) is False


def test_a_marker_is_the_strict_json_it_always_was() -> None:
    """A marker or task record is encoded as it is, and reads exactly as the document rebuilt with
    ``finite`` did: numpy numbers as numbers, a NaN or infinity as null, a path or object as its text."""
    import math

    import numpy as np

    from tfprof_towers.capture.cluster.coord import marker_text
    from tfprof_towers.rundir.paths import finite

    docs = [
        {"task": "worker:0", "phases_s": {"tf_import": 6.25}, "step_times_s": [0.1, 0.25], "error": None},
        {"a": np.float32(1.5), "b": np.int64(3), "c": np.bool_(True), "d": (1, 2.5, np.float64(0.1)),
         "e": Path("/x"), "f": np.array([2.0]), 4: "four"},
        {"loss": math.nan, "steps": [1.0, math.inf, {"deep": -math.inf}], "n": np.float32("nan")},
    ]
    for doc in docs:
        assert marker_text(doc) == json.dumps(finite(dict(doc)), default=str, allow_nan=False)
    assert json.loads(marker_text(docs[1])) == {"a": 1.5, "b": 3, "c": True, "d": [1, 2.5, 0.1], "e": "/x",
                                                "f": 2.0, "4": "four"}
    assert json.loads(marker_text(docs[2])) == {"loss": None, "steps": [1.0, None, {"deep": None}], "n": None}
