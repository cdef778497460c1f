"""The supervisor (procs/supervise.py): no orphans, its own deadline, bounded output.

Children here are small shell scripts, so the tests need no TensorFlow and take
about a second each; every one is run with descendants tracked by a cgroup (where
this machine lets us make one) and by the /proc process tree alone.  Real variant
files are supervised in tests/e2e/test_survive_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_kit import alive, wait_until

from tfprof_towers.procs import forkserver, supervise
from tfprof_towers.procs.proctree import descendants, new_cgroup, remove_cgroup
from tfprof_towers.procs.supervise import Command, Entry

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="Linux /proc needed")

#: A child whose processes all ignore SIGTERM: a grandchild in a new session (setsid), and a
#: daemon whose parent has exited (double fork); each writes its pid to PIDS.
STUBBORN = """trap '' TERM
setsid sh -c 'trap "" TERM; echo $$ >> {pids}; exec sleep 600' &
(sh -c 'trap "" TERM; echo $$ >> {pids}; exec sleep 600' &)
echo $$ >> {pids}
{tail}
"""


def pids_in(path: Path, n: int) -> list[int]:
    wait_until(lambda: path.is_file() and len(path.read_text().split()) >= n, 10, f"{n} pids in {path}")
    return [int(x) for x in path.read_text().split()]


@pytest.fixture(params=["cgroup", "proc"])
def tracking(request: pytest.FixtureRequest) -> str:
    if request.param == "cgroup":
        probe = new_cgroup(f"tfprof-towers-probe-{os.getpid()}")
        if probe is None:
            pytest.skip("no writable cgroup v2 here")
        remove_cgroup(probe)
    return request.param


@pytest.fixture(params=["exec", "fork-server"])
def via(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """How the child starts: exec'd by its guard, or forked (guard and child) from a fork server;
    the same guarantees must hold either way."""
    if request.param == "exec":
        yield "exec"
        return
    log = tmp_path_factory.mktemp("server") / "server.txt"
    with forkserver.serving(("wave",), log, supervise.child_env()) as server:
        if server is None:
            pytest.skip(f"no fork server here ({forkserver.unavailable_reason()})")
        assert server.wait_ready(60), server.broken
        before = supervise.ENTRY_STARTS["forked"]
        yield "fork-server"
        assert supervise.ENTRY_STARTS["forked"] > before, "not forked from the server"


def command(tmp_path: Path, script: str, tracking: str, **kw) -> Command:
    """``sh -c script``; forked from the fork server, while one serves, as a call that execs sh."""
    return Command(("sh", "-c", script), tmp_path / "stderr.txt", cgroup=tracking == "cgroup",
                   entry=Entry("tfprof_towers.testing.procs:shell", (script,)), **kw)


def test_exit_code_and_output(tmp_path: Path, tracking: str, via: str) -> None:
    ended = supervise.run(command(tmp_path, "echo out; echo err >&2; exit 3", tracking))
    assert (ended.returncode, ended.timed_out, ended.stopped, ended.killed) == (3, False, False, 0)
    assert ended.tracking == tracking
    assert (tmp_path / "stderr.txt").read_text() == "out\nerr\n"
    assert (ended.stderr_bytes, ended.stderr_kept) == (8, 8)


def test_deadline_kills_every_process_even_setsid_and_orphans(tmp_path: Path, tracking: str,
                                                              via: str) -> None:
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    ended = supervise.run(command(tmp_path, STUBBORN.format(pids=pids, tail="exec sleep 600"), tracking,
                                  deadline_s=1.0, grace_s=0.2))
    took = time.monotonic() - t0
    child, *others = pids_in(pids, 3)
    assert sorted(others) != [] and not any(alive(p) for p in [child, *others])
    assert ended.timed_out and ended.returncode == -signal.SIGKILL  # it ignored SIGTERM
    assert ended.killed == 2  # the setsid grandchild and the orphaned daemon
    assert took < 1.0 + 0.2 + 5.0
    assert "deadline of 1 s passed: sent SIGTERM to" in (tmp_path / "stderr.txt").read_text()


def test_what_a_finished_child_leaves_running_is_killed(tmp_path: Path, tracking: str, via: str) -> None:
    pids = tmp_path / "pids"
    wait_then_exit = f"while [ $(wc -l < {pids}) -lt 3 ]; do sleep 0.02; done; exit 0"
    ended = supervise.run(command(tmp_path, STUBBORN.format(pids=pids, tail=wait_then_exit), tracking))
    _, *others = pids_in(pids, 3)
    assert ended.returncode == 0 and not ended.timed_out
    assert ended.killed == 2 and not any(alive(p) for p in others)
    assert "killed 2 process(es) the child left running" in (tmp_path / "stderr.txt").read_text()


def test_the_guard_enforces_the_deadline_without_the_parent(tmp_path: Path, tracking: str, via: str) -> None:
    """Nobody waits on it: the child still ends at its deadline."""
    pids = tmp_path / "pids"
    sup = supervise.start(command(tmp_path, "echo $$ > " + str(pids) + "; exec sleep 600", tracking,
                                  deadline_s=0.5))
    child = pids_in(pids, 1)[0]
    wait_until(lambda: not alive(child), 5, "the child to be killed at its deadline")
    ended = sup.wait()
    assert ended.timed_out and ended.returncode == -signal.SIGTERM


def test_stop_on_request(tmp_path: Path, tracking: str, via: str) -> None:
    pids = tmp_path / "pids"
    sup = supervise.start(command(tmp_path, STUBBORN.format(pids=pids, tail="exec sleep 600"), tracking,
                                  stop_grace_s=0.2))
    all_pids = pids_in(pids, 3)
    ended = sup.stop()
    assert ended.stopped and not ended.timed_out and ended.returncode == -signal.SIGKILL
    assert not any(alive(p) for p in all_pids)


PARENT = """
import sys, time
from pathlib import Path
from tfprof_towers.procs import supervise
command = supervise.Command(("sh", "-c", sys.argv[1]), Path(sys.argv[2]), cgroup=sys.argv[3] == "cgroup",
                            stop_grace_s=0.2)
sup = supervise.start(command)
print(sup.guard.pid, flush=True)
sup.wait()
"""


def test_children_die_with_their_parent_sigkill(tmp_path: Path, tracking: str) -> None:
    """The parent is SIGKILLed (no handler runs): its guard stops every process of the child."""
    pids = tmp_path / "pids"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, STUBBORN.format(pids=pids, tail="exec sleep 600"),
         str(tmp_path / "stderr.txt"), tracking], stdout=subprocess.PIPE, text=True,
    )
    try:
        guard = int(parent.stdout.readline())
        watched = [guard, *pids_in(pids, 3)]
        parent.kill()
        parent.wait()
        wait_until(lambda: not any(alive(p) for p in watched), 15, "every process of the run to die")
    finally:
        parent.kill()
    assert "parent process went away" in (tmp_path / "stderr.txt").read_text()


def test_output_keeps_head_and_tail(tmp_path: Path, tracking: str, via: str) -> None:
    """One 10 MB line, then a last word: the file keeps 1 KiB of head, 1 KiB of tail and says so."""
    script = "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo the-last-word >&2; exit 1"
    ended = supervise.run(command(tmp_path, script, tracking, head_bytes=1024, tail_bytes=1024))
    text = (tmp_path / "stderr.txt").read_text()
    assert ended.returncode == 1 and ended.stderr_bytes == 10_000_000 + 1 + 14
    assert text.startswith("x" * 1024 + "\n[tfprof-towers] ")
    assert f"{10_000_015 - 2048} bytes left out here" in text
    assert text.endswith("x" * (1024 - 15) + "\nthe-last-word\n")
    assert len(text) < 2048 + 200 and ended.stderr_kept == len(text)


def test_unwritable_output_never_blocks_the_child(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    ended = supervise.run(Command(("sh", "-c", "head -c 1000000 /dev/zero; exit 5"),
                                  blocker / "stderr.txt", deadline_s=30))
    assert ended.returncode == 5 and ended.stderr_bytes == 1_000_000
    assert ended.stderr_error is not None and "Not a directory" in ended.stderr_error


def test_huge_deadline_and_no_deadline(tmp_path: Path) -> None:
    """`--variant-timeout 1e7` (and beyond) overflowed poll's milliseconds; none means no limit."""
    for deadline in (1e7, 1e300, None):
        ended = supervise.run(Command(("sh", "-c", "exit 0"), tmp_path / "e.txt", deadline_s=deadline))
        assert ended.ok


def test_a_program_that_cannot_start(tmp_path: Path) -> None:
    ended = supervise.run(Command(("/no/such/program",), tmp_path / "e.txt", deadline_s=30))
    assert ended.returncode == 127
    assert "cannot start /no/such/program" in (tmp_path / "e.txt").read_text()


def test_n_tasks_end_in_order_and_the_rest_are_stopped(tmp_path: Path) -> None:
    """A cluster driver's use: the first task to fail stops the others; none is left."""
    cmds = [Command(("sh", "-c", script), tmp_path / f"t{i}.txt")
            for i, script in enumerate(["sleep 600", "sleep 0.3; exit 7", "sleep 600"])]
    tasks = [supervise.start(c) for c in cmds]
    try:
        first = next(supervise.as_ended(tasks, timeout_s=30))
        assert first is tasks[1] and first.ended.returncode == 7
        ended = supervise.stop_all(tasks)
    finally:
        supervise.stop_all(tasks)
    assert [e.stopped for e in ended] == [True, False, True]
    assert not any(alive(t.pid) for t in tasks)


def test_children_cannot_shadow_modules_from_the_working_directory(tmp_path: Path) -> None:
    """``python -P``: a json.py where the user stands is not imported by the child."""
    (tmp_path / "json.py").write_text("raise SystemExit('the json.py of the working directory')\n")
    (tmp_path / "doc.json").write_text('{"a": 1}')
    argv = supervise.python_argv("json.tool", "doc.json")
    ended = supervise.run(Command(tuple(argv), tmp_path / "out.txt", deadline_s=60, cwd=str(tmp_path)))
    assert ended.returncode == 0, (tmp_path / "out.txt").read_text()
    assert json.loads((tmp_path / "out.txt").read_text()) == {"a": 1}


def test_child_env_puts_this_package_first() -> None:
    env = supervise.child_env(base={"PYTHONPATH": "/elsewhere"})
    root = str(Path(supervise.__file__).resolve().parents[2])
    assert env["PYTHONPATH"].split(os.pathsep) == [root, "/elsewhere"]


def test_descendants_walk_the_tree() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"], start_new_session=True)
    try:
        wait_until(lambda: len(descendants(proc.pid)) == 2, 10, "two sleeps")
        assert proc.pid in descendants(os.getpid())
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
