"""Supervised child processes: none outlives its run, none runs past its deadline, output bounded.

Every process the harness starts goes through :func:`start`, which runs it under a **guard**:

* **It dies with its parent.**  The guard holds the read end of a pipe whose write end only
  the parent holds.  When the parent exits for any reason -- SIGKILL, the OOM killer, a
  closed terminal -- the pipe reads end-of-file and the guard stops the child and all its
  descendants.  The child itself has ``PR_SET_PDEATHSIG`` = SIGKILL towards the guard.
* **Its descendants are tracked and all killed.**  The guard is a child subreaper
  (``PR_SET_CHILD_SUBREAPER``): a grandchild whose parent exits, or that calls ``setsid()``,
  is still the guard's descendant, so walking the process tree from ``/proc`` finds it.
  Where a cgroup v2 hierarchy is writable the child also starts in a cgroup of its own, and
  ``cgroup.kill`` takes everything in it at once.  When the child ends, every descendant it
  left is killed; the guard reports only once none is alive.
* **It enforces its own deadline.**  At ``deadline_s`` the guard sends SIGTERM to every
  process of the child, waits ``grace_s``, then SIGKILLs them all.  The parent keeps only a
  backstop, for a guard that is itself lost.
* **Its output is bounded.**  The child's stdout and stderr go through a pipe to the guard,
  which keeps the first :data:`HEAD_BYTES` and the last :data:`TAIL_BYTES` in
  ``stderr_path``, with a line saying how much was left out.  A full disk stops the file,
  never the child.

:func:`run` is the one-process pattern (an exception, Ctrl-C or SIGTERM, stops the child
before it unwinds); :func:`as_ended` and :func:`stop_all` serve N processes.
Linux only (``prctl``, ``/proc``, ``pidfd``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.procs.guard import (
    DEADLINE_GRACE_S,
    HEAD_BYTES,
    KILL_TIMEOUT_S,
    NOTE,
    STOP_GRACE_S,
    TAIL_BYTES,
)
from tfprof_towers.procs.proctree import (
    _LONGEST_WAIT_S,
    kill,
    kill_cgroup,
    process_table,
    remove_cgroup,
    session_members,
    wait_exit,
)

__all__ = [
    "DEADLINE_GRACE_S", "HEAD_BYTES", "NOTE", "STOP_GRACE_S", "TAIL_BYTES", "Command", "Ended", "Entry",
    "Supervised", "as_ended", "child_env", "python_argv", "run", "set_fork_server", "start", "stop_all",
    "tf_child_env", "wait_exit",
]

#: Extra time the parent gives a guard past the child's deadline before it presumes the guard lost.
BACKSTOP_S = 30.0
_CHUNK = 64 * 1024
GUARD_MODULE = "tfprof_towers.procs.guard"


def python_argv(module: str, *args: str, python: str = sys.executable) -> list[str]:
    """``python -P -m module args...``: the folder the user runs from is never on ``sys.path``, so a
    ``json.py`` there cannot shadow what the child imports.  Before Python 3.11 (no ``-P``) a
    bootstrap drops ``sys.path[0]`` and runs the module."""
    if sys.version_info >= (3, 11):
        return [python, "-P", "-m", module, *args]
    boot = ("import runpy, sys; del sys.path[0]; sys.argv = sys.argv[1:]; "
            "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
    return [python, "-c", boot, module, *args]


def child_env(extra: Mapping[str, str] | None = None,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The parent's environment with this package's folder first on PYTHONPATH: the child imports
    exactly the code the parent runs, whatever else is installed."""
    env = dict(os.environ if base is None else base)
    env.update(extra or {})
    root = str(Path(__file__).resolve().parents[2])
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *parts])
    return env


#: TensorFlow's BFC allocator for host memory too, so that a CPU-only run records the allocators'
#: MemoryAllocation/MemoryDeallocation events (read once, when the runtime makes its first CPU
#: allocator: set before the fork server imports TensorFlow, it holds in every forked child).
CPU_BFC = ("TF_CPU_ALLOCATOR_USE_BFC", "true")


def tf_child_env() -> dict[str, str]:
    """The parent's environment for a child that imports TensorFlow: TensorFlow's INFO and
    WARNING lines off unless the user set ``TF_CPP_MIN_LOG_LEVEL``, the host's BFC allocator on
    (:data:`CPU_BFC`) unless the user set it, Python's output unbuffered."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault(*CPU_BFC)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class Command:
    """One process to supervise.  ``deadline_s`` None: no limit.  ``stderr_path`` receives stdout and
    stderr, head and tail.  ``cgroup`` False tracks descendants by the process tree alone."""

    argv: tuple[str, ...]
    stderr_path: Path
    deadline_s: float | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    grace_s: float = DEADLINE_GRACE_S
    stop_grace_s: float = STOP_GRACE_S
    label: str = ""
    cgroup: bool = True
    head_bytes: int = HEAD_BYTES
    tail_bytes: int = TAIL_BYTES
    entry: Entry | None = None  # the same program as a call: a fork server may run it without exec
    pass_fds: tuple[int, ...] = ()  # descriptors the child inherits (a command with any is never forked)


@dataclass(frozen=True)
class Entry:
    """``argv``'s program as a function call, for a fork server: ``function`` (``"module:name"``) is
    called with ``args`` in a fork of a process that imported it already; its return is the exit code."""

    function: str
    args: tuple[str, ...] = ()


#: The fork server children are forked from, while one serves (see :mod:`.forkserver`).
_fork_server: Any = None
#: Commands with an ``entry`` (TensorFlow children) started so far: forked from a server, or fresh.
ENTRY_STARTS = {"forked": 0, "fresh": 0}


def set_fork_server(server: Any) -> None:
    """Used by :func:`.forkserver.serving`: ``start`` forks the commands ``server`` serves from it."""
    global _fork_server
    _fork_server = server


@dataclass(frozen=True)
class Ended:
    """How a supervised child ended (the guard's report).  ``returncode``: negative for the killing
    signal, None when unknown (the guard was lost).  ``killed``: processes the guard killed after the
    child ended or on a stop; ``stuck``: those still alive when it gave up."""

    returncode: int | None
    timed_out: bool = False
    stopped: bool = False  # stopped on request: stop(), or the parent went away
    killed: int = 0
    stuck: int = 0
    stderr_bytes: int = 0  # what the child wrote
    stderr_kept: int = 0  # what stderr_path holds of it
    stderr_error: str | None = None  # why stderr_path is incomplete (a full disk)
    tracking: str = "proc"  # "cgroup" or "proc"
    wall_s: float = 0.0
    lost: str | None = None  # why there is no report from the guard
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.stopped


class Supervised:
    """A child running under its guard, as the parent sees it; see :func:`start`."""

    def __init__(self, command: Command, guard: Any, control_w: int) -> None:
        # guard: the guard's subprocess.Popen, or a forkserver.RemoteGuard (the same calls)
        self.command = command
        self.guard = guard
        self._control_w: int | None = control_w
        self._buffer = b""
        self._other: list[str] = []
        self.started_at = time.monotonic()
        self.pid: int | None = None  # the child's, once the guard says it started
        self.cgroup: str | None = None
        self.ended: Ended | None = None

    def fileno(self) -> int:
        assert self.guard.stdout is not None
        return self.guard.stdout.fileno()

    @property
    def backstop(self) -> float | None:
        """When the parent presumes the guard lost (monotonic clock); None without a deadline."""
        c = self.command
        if c.deadline_s is None:
            return None
        return self.started_at + c.deadline_s + c.grace_s + KILL_TIMEOUT_S + BACKSTOP_S

    def read(self) -> None:
        """Take in what the guard has said (call when :meth:`fileno` is readable)."""
        try:
            data = os.read(self.fileno(), _CHUNK)
        except OSError:
            data = b""
        if not data:
            self._guard_exited()
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._event(line)

    def _event(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            if line.strip() and len(self._other) < 20:
                self._other.append(line.decode(errors="replace")[:500])
            return
        if event.get("event") == "started":
            self.pid, self.cgroup = event.get("pid"), event.get("cgroup")
        elif event.get("event") == "ended":
            self.ended = Ended(
                returncode=event.get("returncode"), timed_out=bool(event.get("timed_out")),
                stopped=bool(event.get("stopped")), killed=int(event.get("killed") or 0),
                stuck=int(event.get("stuck") or 0), stderr_bytes=int(event.get("stderr_bytes") or 0),
                stderr_kept=int(event.get("stderr_kept") or 0), stderr_error=event.get("stderr_error"),
                tracking=str(event.get("tracking") or "proc"), wall_s=float(event.get("wall_s") or 0.0),
                notes=tuple(str(n) for n in event.get("notes") or ()),
            )
            self._close_control()
            self._reap_guard()

    def _guard_exited(self) -> None:
        """The guard's output closed: it exited.  Without its report, clean up after it here."""
        self._reap_guard()
        if self.ended is None:
            why = "; ".join(self._other) or f"the supervisor exited with code {self.guard.returncode}"
            self._lost(why)

    def _reap_guard(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            wait_exit(self.guard, 10.0)
        if self.guard.stdout is not None and self.ended is not None:
            with contextlib.suppress(OSError):
                self.guard.stdout.close()

    def _lost(self, why: str) -> None:
        """The guard is gone without a report (or will not answer): kill what may be left of the child."""
        kill(self.guard.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.guard.wait(timeout=5.0)
        if self.cgroup:
            kill_cgroup(Path(self.cgroup))
        end = time.monotonic() + KILL_TIMEOUT_S
        while True:
            pids = set(session_members(self.guard.pid))
            if self.pid is not None and _alive(self.pid):
                pids.add(self.pid)
            if not pids or time.monotonic() > end:
                break
            for pid in pids:
                kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        if self.cgroup:
            remove_cgroup(Path(self.cgroup))
        self._close_control()
        with contextlib.suppress(OSError):
            if self.guard.stdout is not None:
                self.guard.stdout.close()
        self.ended = Ended(returncode=None, wall_s=time.monotonic() - self.started_at,
                           lost=f"the supervisor was lost ({why})")

    def _close_control(self) -> None:
        if self._control_w is not None:
            with contextlib.suppress(OSError):
                os.close(self._control_w)
            self._control_w = None

    def poll(self) -> Ended | None:
        """The report, if the guard has given it (never blocks)."""
        while self.ended is None and select.select([self.fileno()], [], [], 0)[0]:
            self.read()
        if self.ended is None and self.backstop is not None and time.monotonic() > self.backstop:
            self._lost("no report long after the deadline")
        return self.ended

    def wait(self, timeout_s: float | None = None) -> Ended:
        """Block until the child and every process of it are gone.  ``timeout_s`` bounds this wait only
        (``subprocess.TimeoutExpired``); the child's own deadline is the guard's to enforce."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while self.poll() is None:
            limits = [t for t in (end, self.backstop) if t is not None]
            left = (min(limits) - time.monotonic()) if limits else _LONGEST_WAIT_S
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(self.command.argv, timeout_s or 0.0)
            select.select([self.fileno()], [], [], max(0.0, min(left, _LONGEST_WAIT_S)))
        return self.ended

    def request_stop(self) -> None:
        """Ask the guard to stop the child (SIGTERM, ``stop_grace_s``, SIGKILL); returns at once."""
        self._close_control()

    def stop(self) -> Ended:
        """Stop the child and every process of it; the guard's report."""
        self.request_stop()
        if self.ended is not None:
            return self.ended
        c = self.command
        try:
            return self.wait(timeout_s=c.stop_grace_s + KILL_TIMEOUT_S + BACKSTOP_S)
        except subprocess.TimeoutExpired:
            self._lost("it did not stop the child when asked")
            assert self.ended is not None
            return self.ended


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    table = process_table()
    return pid in table and table[pid].alive


def start(command: Command, python: str = sys.executable) -> Supervised:
    """Start ``command.argv`` under a guard (see the module docstring); returns at once.  While a fork
    server serves (:mod:`.forkserver`) and ``command`` has an ``entry`` it can run, the guard and the
    child are forked from the server instead (same guard, same guarantees, no new interpreter)."""
    control_r, control_w = os.pipe()
    cfg = {
        "argv": list(command.argv), "stderr_path": str(command.stderr_path), "control_fd": control_r,
        "deadline_s": command.deadline_s, "grace_s": command.grace_s, "stop_grace_s": command.stop_grace_s,
        "cgroup": command.cgroup, "head_bytes": command.head_bytes, "tail_bytes": command.tail_bytes,
        "label": command.label,
    }
    try:
        guard: Any = None
        server = _fork_server
        if server is not None and command.entry is not None and server.serves(command):
            guard = server.spawn_guard({**cfg, "call": command.entry.function,
                                        "call_args": list(command.entry.args),
                                        "cwd": command.cwd or os.getcwd(),
                                        "env": server.env_of(command)}, control_r)
        if command.entry is not None:
            ENTRY_STARTS["fresh" if guard is None else "forked"] += 1
        if guard is None:
            guard = subprocess.Popen(
                python_argv(GUARD_MODULE, json.dumps(cfg), python=python),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=child_env(base=command.env) if command.env is not None else child_env(),
                cwd=command.cwd, pass_fds=(control_r, *command.pass_fds), start_new_session=True,
            )
    except BaseException:
        os.close(control_w)
        raise
    finally:
        os.close(control_r)
    return Supervised(command, guard, control_w)


def as_ended(running: Iterable[Supervised], timeout_s: float | None = None) -> Iterator[Supervised]:
    """Each supervised child as it ends (``ended`` set); ``timeout_s`` bounds the whole iteration
    (``subprocess.TimeoutExpired``)."""
    pending = list(running)
    end = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        for sup in [s for s in pending if s.poll() is not None]:
            pending.remove(sup)
            yield sup
        if not pending:
            return
        limits = [t for t in [end, *(s.backstop for s in pending)] if t is not None]
        left = (min(limits) - time.monotonic()) if limits else _LONGEST_WAIT_S
        if end is not None and time.monotonic() >= end:
            raise subprocess.TimeoutExpired("as_ended", timeout_s or 0.0)
        select.select(pending, [], [], max(0.0, min(left, _LONGEST_WAIT_S)))


def stop_all(running: Iterable[Supervised]) -> list[Ended]:
    """Stop every child at once (all guards are asked before any is waited for)."""
    running = list(running)
    for sup in running:
        sup.request_stop()
    return [sup.stop() for sup in running]


def run(command: Command, python: str = sys.executable) -> Ended:
    """Start ``command`` and wait for it; an exception (Ctrl-C) stops it first."""
    sup = start(command, python=python)
    try:
        return sup.wait()
    except BaseException:
        sup.stop()
        raise


