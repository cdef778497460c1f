"""The cluster family end to end with real TensorFlow tasks on 127.0.0.1 (slow: each run starts 2-4
TensorFlow processes).

One run of ``profile --workers 2 --ps 1 --preset tiny`` is shared, and the
real-cluster path (tasks started by hand with ``tfprof-towers worker``) runs once.  The faults
keep one real run per kind of crash; how each fault is named, and whether it is retried, is
tested with stand-in processes in ``tests/unit/test_cluster_capture.py``:

* a crash in the step, not retried (loopback, SIGSEGV): ``test_a_task_that_crashes_mid_run``;
* a crash that is retried, the worker joining the next attempt (hand-started, SIGABRT in the
  profiler): ``test_a_hand_started_task_that_crashes_in_the_profiler_joins_the_next_attempt``;
* a task that hangs at start-up: ``test_a_task_that_hangs_is_stopped_at_the_timeout``;
* Ctrl-C during the capture: ``test_ctrl_c_during_the_capture``.

Not run for real, as they would take the same paths again:

* ``test_a_port_already_taken`` (a retried start-up failure, loopback): naming and retry reason
  in ``test_a_taken_port_is_said_and_retried``; the retry loop runs for real in the hand-started
  SIGABRT test above; fresh ports per attempt in ``test_free_ports_are_distinct_and_free``.
* ``test_a_hand_started_task_leaves_when_the_driver_gives_up`` (SIGSEGV in the step, hand-started):
  the crash named and not retried in ``test_a_crash_is_named_not_the_peer_that_saw_its_socket_close``
  (and for real, on loopback, above); a worker leaving once the pointer is final in
  ``test_a_hand_started_task_joins_each_attempt_once_and_never_a_final_one``; its ``remote: killed by
  SIG...`` row in ``test_a_hand_started_task_whose_worker_marked_its_crash_is_named_and_retried``.

After every run no process of it may be left (checked in /proc, among the processes whose command
line names the test's own run directory: another xdist worker's runs are not counted).  No test
here depends on the machine's speed: the timeouts of the subprocesses are only there to stop a
hung run, and the hanging task is judged by what its record says, not by the wall clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_kit import processes_using

from tfprof_towers.capture.cluster.spec import free_ports
from tfprof_towers.capture.families import PROFILER_OPTIONS

pytestmark = pytest.mark.slow
FAULTS = "TFPROF_TOWERS_CLUSTER_FAULTS"


def left_over(root: Path) -> list[str]:
    """Live processes that name ``root`` or hold a file under it open (tasks, their guards, the
    profiler client, and the driver, which is forked from the fork server)."""
    return [f"{pid}: {what}" for pid, what in sorted(processes_using(root).items())]


def no_process_left(root: Path, within_s: float = 10.0) -> None:
    end = time.monotonic() + within_s
    while left_over(root) and time.monotonic() < end:
        time.sleep(0.1)
    assert left_over(root) == []


TOOL = (sys.executable, "-m", "tfprof_towers")


def profile(out: Path, *argv: str, env: dict[str, str] | None = None,
            timeout: float = 900) -> tuple[int, str]:
    done = subprocess.run([*TOOL, "profile", "--preset", "tiny", "--out", str(out), *argv],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout + done.stderr


def record(run: Path, name: str) -> dict:
    return json.loads((run / "variants" / name / "record.json").read_text())


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cluster") / "run"
    code, text = profile(out, "--workers", "2", "--ps", "1")
    assert code == 0, text
    return out


def test_workers_and_ps_both_ok_every_task_captured(cluster_run: Path) -> None:
    summary = json.loads((cluster_run / "summary.json").read_text())
    status = {v["name"]: v["status"] for v in summary["variants"]}
    assert status == {"multi_worker": "ok", "parameter_server": "ok"}
    for name, tasks in (("multi_worker", 2), ("parameter_server", 4)):
        rec = record(cluster_run, name)
        files = rec["xplane_files"]
        assert len(files) == tasks  # one trace per task ...
        assert len({Path(f).parent for f in files}) == 1  # ... in one run folder: the hosts of one run
        assert {Path(f).name.split(".xplane")[0] for f in files} == set(rec["host_tasks"])
        assert rec["profiler_options"] == {**PROFILER_OPTIONS, "remote": False}  # each task's own session
    no_process_left(cluster_run)


def test_devices_keep_their_task_and_bytes_cross_between_tasks(cluster_run: Path) -> None:
    summary = json.loads((cluster_run / "summary.json").read_text())
    by = {v["name"]: v for v in summary["variants"]}
    mw, ps = by["multi_worker"], by["parameter_server"]
    assert set(mw["devices"]) == {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"}
    assert {d["device"] for d in mw["audit"]["devices"]} >= set(mw["devices"])
    assert set(mw["breakdown"]["devices"]) >= set(mw["devices"])  # both tasks' traces, analysed together
    assert sorted(t["task"] for t in mw["breakdown"]["tasks"]) == ["/job:worker/task:0", "/job:worker/task:1"]
    assert [link["kind"] for link in mw["audit"]["links"]] == ["network", "network"]
    assert {d for d in ps["breakdown"]["devices"] if d.endswith("/host:CPU")} == {
        "/job:chief/task:0/host:CPU", "/job:ps/task:0/host:CPU", "/job:worker/task:0/host:CPU",
        "/job:worker/task:1/host:CPU"}
    # the ring all-reduce: 6528 gradient bytes + the 4-byte loss, all of it each way with two workers
    net = {(n["from"], n["to"]): n for n in mw["cluster"]["network"]}
    assert {k: (n["bytes_per_step"], n["via"]) for k, n in net.items()} == {
        ("worker:0", "worker:1"): (6532, "ring all-reduce"),
        ("worker:1", "worker:0"): (6532, "ring all-reduce")}
    assert all(n["loopback"] for n in net.values()) and "not a network card" in mw["cluster"]["network_note"]
    ps_net = {(n["from"], n["to"]): n["bytes_per_step"] for n in ps["cluster"]["network"]}
    # each worker reads the 1632 parameters (6528 bytes) from ps:0 and sends back as many gradient bytes
    for w in ("worker:0", "worker:1"):
        assert ps_net[("ps:0", w)] == 6528 and ps_net[(w, "ps:0")] == 6528
    traced = {(n["from"], n["to"]): n["traced_per_step"] for n in ps["cluster"]["network"]}
    assert sum(traced[("ps:0", w)] for w in ("worker:0", "worker:1")) > 0  # the sends are in the traces
    assert [t["task"] for t in ps["cluster"]["tasks"]] == ["chief:0", "ps:0", "worker:0", "worker:1"]
    # both start from the seed values: the same first losses as any other variant
    assert [(v["variant"], v["status"]) for v in summary["math"]["variants"]] == [
        ("multi_worker", "reference"), ("parameter_server", "same")]
    html = (cluster_run / "report.html").read_text()
    assert 'id="cluster"' in html and "/job:worker/task:1/device:CPU:0" in html and "loopback" in html


def test_parameter_server_records_where_its_ops_ran(cluster_run: Path) -> None:
    """From the tasks' traces: compute (the matmuls, one shard's FLOPs each) on the workers, the
    variables' reads and their Adam updates on the ps task; the audit and FLOPs split read them."""
    summary = json.loads((cluster_run / "summary.json").read_text())
    by = {v["name"]: v for v in summary["variants"]}
    mw, ps = by["multi_worker"], by["parameter_server"]
    workers = ("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0")
    assert set(ps["devices"]) == {*workers, "/job:ps/task:0/device:CPU:0"}
    for w in workers:  # each worker runs one shard's step: the FLOPs of multi_worker's worker
        assert ps["devices"][w]["flops_per_step"] == mw["devices"][w]["flops_per_step"] > 0
    assert ps["devices"]["/job:ps/task:0/device:CPU:0"]["flops_per_step"] == 0
    placement = record(cluster_run, "parameter_server")["placement"]
    kinds = {(n["device"].split("/device")[0], n["type"]) for n in placement["nodes"]}
    assert {("/job:ps/task:0", "ReadVariableOp"), ("/job:ps/task:0", "AssignVariableOp")} <= kinds
    assert ("/job:worker/task:0", "MatMul") in kinds and ("/job:ps/task:0", "MatMul") not in kinds
    audit = {d["device"]: d for d in ps["audit"]["devices"]}
    per_worker = ps["devices"][workers[0]]["flops_per_step"]
    assert set(workers) <= set(audit) and ps["audit"]["total_flops_per_step"] == 2 * per_worker


def test_the_bench_s_paired_blocks_leave_the_run_as_it_was(tmp_path: Path) -> None:
    """The profiler-overhead bench's paired rounds (TFPROF_TOWERS_CLUSTER_OVERHEAD): every stepping task
    records its blocks, the blocks' sessions leave no trace behind, and the run's own trace still holds
    just its profiled steps."""
    out = tmp_path / "run"
    code, text = profile(out, "--workers", "2", "--variants", "multi_worker",
                         env={"TFPROF_TOWERS_CLUSTER_OVERHEAD": '{"rounds": 3, "block_steps": 2}'})
    assert code == 0, text
    last = record(out, "multi_worker")["cluster"]["attempts"][-1]["folder"]  # a port race retries
    tasks = sorted((out / "variants" / "multi_worker" / last / "tasks").glob("worker-*"))
    assert len(tasks) == 2
    for task in tasks:
        doc = json.loads((task / "record.json").read_text())
        blocks = doc["overhead_blocks"]
        for kind in ("on", "off", "on_cpu", "off_cpu"):
            assert len(blocks[kind]) == 3 and all(len(b) == 2 and min(b) > 0 for b in blocks[kind])
        assert len(blocks["start_s"]) == len(blocks["stop_s"]) == 3
        assert doc["phases_s"]["overhead_blocks"] > 0
        assert not (task / "overhead-profile").exists()
    summary = json.loads((out / "summary.json").read_text())
    (mw,) = summary["variants"]
    assert mw["status"] == "ok" and mw["breakdown"]["steps"] == 2  # the tiny preset's 2 profiled steps
    assert len(record(out, "multi_worker")["timings"]["profiled_step_times_s"]) == 2
    no_process_left(out)


def test_a_task_that_crashes_mid_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, text = profile(out, "--workers", "2", env={FAULTS: '{"worker:1": "segv@profiled_step_1"}'})
    assert code == 4, text  # nothing succeeded
    rec = record(out, "multi_worker")
    assert rec["error"] == "worker:1 killed by SIGSEGV during its profiled steps"
    assert rec["cluster"]["failed_task"] == "worker:1"
    assert len(rec["cluster"]["attempts"]) == 1  # a crash in the step would crash again: not retried
    rows = {t["task"]: t for t in rec["cluster"]["tasks"]}
    assert rows["worker:1"]["exit"] == "killed by SIGSEGV"
    assert "UnavailableError" in rows["worker:0"]["error"]  # its peer's consequence, not the cause
    assert "worker:1 killed by SIGSEGV" in (out / "report.html").read_text()
    no_process_left(out)


def test_a_task_that_hangs_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # the start-up wait is a share of the timeout (about 40 s of 80): room for worker:0 to import
    # TensorFlow and reach 'strategy' on a loaded machine (with 40, worker:0 had 18 s)
    code, text = profile(out, "--workers", "2", "--variant-timeout", "80",
                         env={FAULTS: '{"worker:1": "hang@imported"}'})
    assert code == 4, text
    rec = record(out, "multi_worker")
    # stopped within its timeout, however loaded the machine: the hang itself never ends, and a
    # wall-clock bound on the whole command would time TensorFlow's import
    waited = re.match(r"the cluster was not ready after (\d+) s", rec["error"])
    assert waited and 0 < int(waited.group(1)) <= 80, rec["error"]
    assert "worker:1 stuck after 'imported' (the furthest task reached 'strategy')" in rec["error"]
    assert rec["cluster"]["failed_task"] == "worker:1"
    no_process_left(out)


def test_ctrl_c_during_the_capture(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # worker:1 blocks in its second profiled step (worker:0 then waits for it in the collective), so
    # the capture cannot end before the Ctrl-C lands, however slow the machine (a slow step could)
    env = {**os.environ, FAULTS: '{"worker:1": "hang@profiled_step_1"}'}
    p = subprocess.Popen([*TOOL, "profile", "--preset", "tiny", "--workers", "2", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    marker = out / "variants" / "multi_worker" / "attempt-1" / "coord" / "worker-1.tracing"
    end = time.monotonic() + 600
    while not marker.exists() and time.monotonic() < end and p.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), p.communicate()[0]
    p.send_signal(signal.SIGINT)
    text, _ = p.communicate(timeout=600)
    assert p.returncode == 130, text
    rec = record(out, "multi_worker")
    assert rec["error"] == "interrupted by SIGINT before it finished"
    # both were being traced; each was stopped, or left on its own when the driver marked 'abort'
    rows = rec["cluster"]["tasks"]
    assert [t["task"] for t in rows] == ["worker:0", "worker:1"]
    assert all(t["progress"] in ("tracing", "done", "left") and t["status"] == "failed" for t in rows), rows
    assert json.loads((out / "summary.json").read_text())["partial"] is True
    no_process_left(out)


@contextlib.contextmanager
def started_by_hand(tmp_path: Path, n: int) -> Iterator[tuple[Path, list[subprocess.Popen]]]:
    """``worker`` processes for ``n`` workers at free ports, started before the driver; killed at the
    end if still there (the test then fails on its own assertions, not on a stray process)."""
    ports = free_ports(n)
    spec = tmp_path / "cluster.json"
    spec.write_text(json.dumps({"worker": [f"127.0.0.1:{p}" for p in ports]}))
    workers = [subprocess.Popen([*TOOL, "worker", "--cluster", str(spec), "--task", f"worker:{i}",
                                 "--run-dir", str(tmp_path / "run")], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=tmp_path) for i in range(n)]
    try:
        yield spec, workers
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()


def test_a_real_cluster_started_by_hand(tmp_path: Path) -> None:
    """``worker --cluster C --task T --run-dir R`` on each 'machine' (here, processes started by hand, before
    the driver), and ``profile --cluster C --out R``: the path a real cluster takes."""
    run = tmp_path / "run"
    with started_by_hand(tmp_path, 2) as (spec, workers):
        code, text = profile(run, "--cluster", str(spec))
        assert code == 0, text
        assert [w.wait(timeout=60) for w in workers] == [0, 0]
    rec = record(run, "multi_worker")
    assert rec["status"] == "ok" and rec["cluster"]["attached"] is True
    assert len(rec["xplane_files"]) == 2
    # TensorFlow's profiler itself crashes now and then (1 capture in ~7): then a later attempt is the ok one
    attempts = rec["cluster"]["attempts"]
    assert attempts[-1]["status"] == "ok" and all(a["status"] != "ok" for a in attempts[:-1])
    assert json.loads((run / "attach.json").read_text()) == {
        "attempt": f"variants/multi_worker/attempt-{len(attempts)}", "final": True
    }
    no_process_left(run)


def test_a_hand_started_task_that_crashes_in_the_profiler_joins_the_next_attempt(tmp_path: Path) -> None:
    """The `worker` process outlives its attempt's child: it marks the crash (the driver names it at
    once and retries, as on loopback) and joins attempt 2; the crash is injected in attempt 1 only."""
    run = tmp_path / "run"
    with started_by_hand(tmp_path, 2) as (spec, workers):
        code, text = profile(run, "--cluster", str(spec), env={FAULTS: '{"worker:1": "abort@wait_peers#1"}'})
        assert code == 0, text
        outputs = [w.communicate(timeout=60)[0] for w in workers]
        assert [w.returncode for w in workers] == [0, 0], outputs
    rec = record(run, "multi_worker")
    assert rec["status"] == "ok" and rec["cluster"]["attached"] is True
    attempts = rec["cluster"]["attempts"]
    first, last = attempts[0], attempts[-1]  # more than two when TensorFlow's profiler crashed on its own
    assert first["failed_task"] == "worker:1" and last["status"] == "ok" and 2 <= len(attempts) <= 3
    assert first["error"].startswith("worker:1 killed by SIGABRT"), first["error"]
    assert first["retry"] == "a task crashed while the profiler collected its trace"
    assert "attempt-1 ended (killed by SIGABRT)" in outputs[1]
    assert f"attempt-{len(attempts)} ended (ok)" in outputs[1]
    assert json.loads((run / "attach.json").read_text()) == {
        "attempt": f"variants/multi_worker/attempt-{len(attempts)}", "final": True
    }
    no_process_left(run)
