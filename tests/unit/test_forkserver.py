"""The fork server (procs/forkserver.py): children forked from a process that imported once.

The server here preloads ``wave`` (a stdlib module nothing else imports) instead of TensorFlow, so
the tests take about a second each; ``tests/unit/test_supervise.py`` runs the supervisor's own
guarantees (deadline, descendants, stop, bounded output) on forked children too, and the e2e
tier runs real TensorFlow children both ways (``test_forked_children_equal_fresh_ones``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_kit import alive, wait_until

from tfprof_towers.procs import forkserver, supervise
from tfprof_towers.procs.supervise import Command, Entry

pytestmark = pytest.mark.skipif(forkserver.unavailable_reason() is not None and
                                forkserver.ENV_SWITCH not in os.environ,
                                reason=f"no fork server here ({forkserver.unavailable_reason()})")

REPORT = "tfprof_towers.testing.procs:report"


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[forkserver.ForkServer]:
    monkeypatch.delenv(forkserver.ENV_SWITCH, raising=False)
    with forkserver.serving(("wave",), tmp_path / "server.txt", supervise.child_env()) as srv:
        assert srv is not None and srv.wait_ready(60), srv and srv.broken
        yield srv


def report_command(tmp_path: Path, code: int = 0, **kw) -> Command:
    args = (str(code), "wave", "tensorflow")
    argv = (*supervise.python_argv("tfprof_towers.testing.procs"), *args)  # the same program, fresh
    return Command(argv, tmp_path / "out.txt", deadline_s=60, entry=Entry(REPORT, args), **kw)


def reported(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out.txt").read_text().splitlines()[0])


def test_a_forked_child_has_the_preloaded_modules_and_its_own_process(tmp_path: Path, server) -> None:
    (tmp_path / "work").mkdir()
    ended = supervise.run(report_command(tmp_path, code=3, cwd=str(tmp_path / "work")))
    seen = reported(tmp_path)
    assert ended.returncode == 3 and not ended.timed_out
    assert seen["imported"] == ["wave"]  # imported once, by the server; TensorFlow never
    assert seen["pid"] not in (os.getpid(), server.ready_doc["pid"])
    assert seen["argv"] == ["tfprof_towers.testing.procs", "3", "wave", "tensorflow"]
    assert seen["cwd"] == str(tmp_path / "work")
    assert (tmp_path / "out.txt").read_text().endswith("to stderr\n")
    assert server.forked == 1 and server.summary()["mode"] == "fork-server"


def test_the_child_gets_the_environment_it_asks_for(tmp_path: Path, server, monkeypatch) -> None:
    """Only volatile variables may differ from the server's; the child sees its own value."""
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "a value the server never saw")
    script = "import os; print(os.environ['PYTEST_CURRENT_TEST'])"
    ended = supervise.run(Command(("unused",), tmp_path / "out.txt", entry=Entry(
        "tfprof_towers.testing.procs:shell", (f"{sys.executable} -c \"{script}\"",))))
    assert ended.ok and server.forked == 1
    assert (tmp_path / "out.txt").read_text() == "a value the server never saw\n"


def test_any_other_environment_starts_fresh(tmp_path: Path, server) -> None:
    before = dict(supervise.ENTRY_STARTS)
    env = {**supervise.child_env(), "TF_CPP_MIN_LOG_LEVEL": "0"}  # read at import: cannot be forked
    ended = supervise.run(Command(("sh", "-c", "echo $TF_CPP_MIN_LOG_LEVEL"), tmp_path / "out.txt", env=env,
                                  entry=Entry("tfprof_towers.testing.procs:shell", ("exit 9",))))
    assert ended.ok and (tmp_path / "out.txt").read_text() == "0\n"  # argv ran, not the entry
    assert server.forked == 0 and supervise.ENTRY_STARTS["fresh"] == before["fresh"] + 1


def test_an_entry_that_raises_exits_1_with_its_traceback(tmp_path: Path, server) -> None:
    ended = supervise.run(Command(("unused",), tmp_path / "out.txt",
                                  entry=Entry("tfprof_towers.testing.procs:boom")))
    text = (tmp_path / "out.txt").read_text()
    assert ended.returncode == 1 and "ValueError: the entry raised" in text and "Traceback" in text


def test_a_server_that_cannot_import_is_not_used(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(forkserver.ENV_SWITCH, raising=False)
    said: list[str] = []
    with forkserver.serving(("no_such_module_here",), tmp_path / "server.txt", supervise.child_env(),
                            said.append) as srv:
        assert srv is not None and not srv.wait_ready(60)
        assert "ModuleNotFoundError" in srv.broken and "no_such_module_here" in srv.broken
        ended = supervise.run(report_command(tmp_path, code=4))  # falls back: a fresh process
        assert ended.returncode == 4 and reported(tmp_path)["imported"] == []  # nothing preloaded
    assert said == [f"TensorFlow was imported in every child after the fork server failed ({srv.broken})"]
    assert srv.summary()["mode"] == "fresh" and "not_used" in srv.summary()


def test_the_server_starts_only_for_a_command_it_serves(tmp_path: Path, monkeypatch) -> None:
    """A run whose children are all something else (a test's stand-in interpreter) never pays for
    the server's imports."""
    monkeypatch.delenv(forkserver.ENV_SWITCH, raising=False)
    with forkserver.serving(("wave",), tmp_path / "server.txt", supervise.child_env()) as srv:
        assert supervise.run(Command(("sh", "-c", "exit 0"), tmp_path / "out.txt")).ok  # no entry
        assert srv.proc is None and not (tmp_path / "server.txt").exists()
        assert supervise.run(report_command(tmp_path)).ok
        assert srv.proc is not None and srv.forked == 1


def test_switched_off_every_child_starts_fresh(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(forkserver.ENV_SWITCH, "0")
    said: list[str] = []
    with forkserver.serving(("wave",), tmp_path / "server.txt", supervise.child_env(), said.append) as srv:
        assert srv is None
        ended = supervise.run(Command(("sh", "-c", "exit 6"), tmp_path / "out.txt",
                                      entry=Entry("tfprof_towers.testing.procs:shell", ("exit 9",))))
    assert ended.returncode == 6 and said == []  # asked for: no notice
    assert not (tmp_path / "server.txt").exists()


def test_the_server_leaves_when_the_block_ends(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(forkserver.ENV_SWITCH, raising=False)
    with forkserver.serving(("wave",), tmp_path / "server.txt", supervise.child_env()) as srv:
        assert srv.wait_ready(60)
        pid = srv.ready_doc["pid"]
        assert supervise.run(report_command(tmp_path)).ok
    wait_until(lambda: not alive(pid), 10, "the server to exit")
    assert "stopped" not in (tmp_path / "server.txt").read_text()  # it left by itself

    assert forkserver.active() is None and supervise._fork_server is None


PARENT = """
import sys, time
from pathlib import Path
from tfprof_towers.procs import forkserver, supervise
out = Path(sys.argv[1])
with forkserver.serving(("wave",), out / "server.txt", supervise.child_env()) as srv:
    assert srv.wait_ready(60)
    script = ("echo $$ > " + str(out / "child") + "; (setsid sh -c 'trap \\"\\" TERM; echo $$ > "
              + str(out / "grand") + "; exec sleep 600' &); exec sleep 600")
    sup = supervise.start(supervise.Command(("sh", "-c", script), out / "err.txt",
                          entry=supervise.Entry("tfprof_towers.testing.procs:shell", (script,))))
    print(srv.ready_doc["pid"], sup.guard.pid, flush=True)
    sup.wait()
"""


def test_everything_dies_with_the_parent(tmp_path: Path) -> None:
    """SIGKILL of the parent: the server, the forked guard, the child and its setsid grandchild go."""
    env = {k: v for k, v in os.environ.items() if k != forkserver.ENV_SWITCH}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, env=env)
    try:
        server_pid, guard_pid = (int(x) for x in parent.stdout.readline().split())
        wait_until(lambda: (tmp_path / "child").is_file() and (tmp_path / "grand").is_file()
                   and (tmp_path / "grand").read_text().strip(), 15, "the child and its grandchild")
        watched = [server_pid, guard_pid, int((tmp_path / "child").read_text()),
                   int((tmp_path / "grand").read_text())]
        assert all(alive(p) for p in watched)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_until(lambda: not any(alive(p) for p in watched), 20, "every process of the run to die")
    finally:
        parent.kill()
    assert "parent process went away" in (tmp_path / "err.txt").read_text()
