"""Ctrl-C during a many-host `analyze`: the command stops its pool and exits 130 at once.

A real `analyze` of hundreds of synthetic hosts (one host's trace under many names: hard links) runs
on a local pool of two processes (forced: on a busy machine the pool would otherwise shrink to this
process alone).  Once the map is under way it gets SIGINT; it must exit 130 with one line, print no
result, write no page, and leave no process of its session behind.  The bound on the time is loose (it
only separates "stops now" from "runs the map to its end", minutes here); the time is printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfprof_towers.testing.synth import pod_host_trace

pytestmark = pytest.mark.slow

HOSTS = 400
#: Runs the installed command's `main` with the local pool forced to two processes, and says on stderr
#: when the hosts' map starts.
DRIVER = """
import sys
from tfprof_towers.trace import executors
executors.idle_cores = lambda: 2
started = executors.LocalPool.map
def map(self, jobs, progress=None):
    sys.stderr.write(f"map of {len(jobs)} hosts started\\n")
    sys.stderr.flush()
    return started(self, jobs, progress)
executors.LocalPool.map = map
from tfprof_towers.cli import main
sys.exit(main(sys.argv[1:]))
"""


def pod(root: Path) -> Path:
    first = pod_host_trace(0, 40_000, gpus=2, steps=4).write_logdir(root, run="r1", host="host0")
    for i in range(1, HOSTS):
        os.link(first, first.with_name(f"host{i}.xplane.pb"))
    return root


def session_processes(sid: int) -> list[int]:
    """Processes of session ``sid`` still alive (zombies not counted)."""
    left = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            left.append(int(d))
    return left


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find leftover processes")
def test_ctrl_c_stops_a_many_host_analyze_at_once(tmp_path: Path) -> None:
    root = pod(tmp_path / "pod")
    page = tmp_path / "page.html"
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, "analyze", str(root), "--html", str(page)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                            start_new_session=True)
    try:
        line = proc.stderr.readline()  # the map has started
        assert line == f"map of {HOSTS} hosts started\n", line + proc.stderr.read()
        time.sleep(1.0)  # the workers are analysing hosts
        assert proc.poll() is None
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    print(f"exit {proc.returncode} {took:.2f} s after SIGINT, with {HOSTS} hosts queued")
    assert proc.returncode == 130, err
    assert err.strip() == "tfprof-towers: interrupted", err
    assert out == "" and not page.exists()
    assert took < 10, f"{took:.1f} s after SIGINT"
    deadline = time.monotonic() + 10
    while session_processes(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_processes(proc.pid) == []
