"""A fork server: a slow import (TensorFlow) paid once, every supervised child forked from it.

Without it each child is ``guard -> exec python -P -m ...``, and a child that imports TensorFlow
spends seconds (7 s on a 2-core machine) before its first line of work.  With it:

* the **server** is a child of the parent (in a session of its own, ``PR_SET_PDEATHSIG`` towards
  the parent, and it leaves when its socket to the parent closes) that imports the modules it is
  given -- nothing more: TensorFlow's
  runtime (devices, the profiler, a graph) is *not* started, so each child still configures
  its own logical devices before its runtime initialises -- then waits on a Unix socket;
* for each request it **forks a guard** (the same :class:`.guard.Guard`, in a session of its
  own, given the parent's control pipe and report pipe over the socket), and that guard forks
  the **child**, which calls ``module:function(args)`` instead of exec'ing a new interpreter.

So every guarantee of :mod:`.supervise` holds unchanged: the guard enforces the deadline, kills
every descendant (subreaper, cgroup), keeps the output bounded, stops the child when the
parent's control pipe closes (Ctrl-C, SIGKILL of the parent) and writes its notes, and reports
one JSON line to the parent.  The server is deliberately *not* under a guard: a guard kills what
its child leaves behind at once, and the forked guards must be left to stop their children and
keep their output.  If the parent dies, the kernel kills the server (``PR_SET_PDEATHSIG``) and
every forked guard stops its child because its control pipe closed.  Each child is a fresh
process (its own TensorFlow runtime, devices, profiler, graph), only without the import.

What crosses the fork, checked: the server has imported TensorFlow and numpy, whose import
starts two native threads (OpenBLAS's worker and jemalloc's background thread); both libraries
re-create them after a fork (``pthread_atfork``).  The server reports its threads when it is
ready; ``run.json`` keeps them.  Nothing else of TensorFlow's is started there: no eager
context, so no devices (each child still sets its own logical devices before its runtime
initialises: ``capture/preload.py`` refuses to serve otherwise), no graph, and no profiler
session (a process-wide singleton each child starts and stops itself).

A command is forked only when it names the same program as a call (:attr:`.supervise.Command.entry`)
and runs with the server's environment; anything else starts fresh, as before.  Where fork
is not available (not Linux), or ``TFPROF_TOWERS_FORK_SERVER=0`` asks for it, or the server
cannot start, every child starts fresh and the caller is told once.

Run as ``python -P -m tfprof_towers.procs.forkserver SOCKET_FD PARENT_PID MODULE[,MODULE...]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfprof_towers.procs import supervise
from tfprof_towers.procs.guard import PR_SET_PDEATHSIG, Guard, report

#: ``TFPROF_TOWERS_FORK_SERVER=0`` starts every child fresh (as before the fork server).
ENV_SWITCH = "TFPROF_TOWERS_FORK_SERVER"
#: How long the first child waits for the server's imports before starting fresh instead.
READY_TIMEOUT_S = 180.0
_MSG = 256 * 1024
SERVER_MODULE = "tfprof_towers.procs.forkserver"


def unavailable_reason() -> str | None:
    """Why children cannot be forked from a server here (None: they can)."""
    if os.environ.get(ENV_SWITCH, "").strip().lower() in {"0", "no", "off", "false"}:
        return f"{ENV_SWITCH}={os.environ[ENV_SWITCH]}"
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return f"no fork server on {sys.platform}"
    if not hasattr(socket, "send_fds") or not hasattr(os, "pidfd_open"):
        return "this Python or kernel cannot pass descriptors or open pidfds"
    return None


# ------------------------------------------------------------------------------------------
# The parent's side


class RemoteGuard:
    """A guard forked by the server, seen by the parent like a ``subprocess.Popen`` of it.

    It is the server's child, not ours: its exit is seen through a pidfd (passed by the server,
    which opened it before the guard could be reaped), and its exit status is the report's."""

    def __init__(self, pid: int, pidfd: int, report_r: int, argv: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(argv)
        self.returncode: int | None = None
        self._pidfd: int | None = pidfd
        self.stdout = os.fdopen(report_r, "rb", buffering=0)

    def poll(self) -> int | None:
        if self.returncode is None and self._pidfd is not None and select.select([self._pidfd], [], [], 0)[0]:
            self._gone()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and self._pidfd is not None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._gone()
        return self.returncode or 0

    def send_signal(self, sig: int) -> None:
        if self._pidfd is not None and self.returncode is None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _gone(self) -> None:
        self.returncode = 0  # the exit status that matters (the child's) is in the report
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None


@dataclass
class ForkServer:
    """The parent's handle on a server: :meth:`spawn_guard` is what ``supervise.start`` calls for a
    command it :meth:`serves`.  The server process starts with the first such command (a run whose
    children are all something else never pays for its imports)."""

    stderr_path: Path
    env: Mapping[str, str]
    preload: tuple[str, ...]
    proc: subprocess.Popen | None = None
    sock: socket.socket | None = None
    ready_doc: dict[str, Any] | None = None
    broken: str | None = None  # why it serves no more: children then start fresh
    forked: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def make(cls, preload: Sequence[str], stderr_path: Path, env: Mapping[str, str]) -> ForkServer:
        return cls(stderr_path=Path(stderr_path), env=supervise.child_env(base=env), preload=tuple(preload))

    def _start(self) -> bool:
        """Start the server process (once); False, and ``broken`` says why, when it cannot start."""
        if self.proc is not None or self.broken is not None:
            return self.broken is None
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = supervise.python_argv(SERVER_MODULE, str(child.fileno()), str(os.getpid()),
                                         ",".join(self.preload))
            with open(self.stderr_path, "wb") as err:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err,
                                             stderr=subprocess.STDOUT, env=dict(self.env),
                                             pass_fds=(child.fileno(),), start_new_session=True)
        except OSError as exc:
            parent.close()
            self._break(f"it could not start ({exc.strerror or exc})")
            return False
        finally:
            child.close()
        self.sock = parent
        return True

    def serves(self, command: supervise.Command) -> bool:
        """True when ``command`` is a call the server can fork: the server's environment (but for
        :data:`VOLATILE` variables, which the child is given as asked), no other descriptors."""
        if self.broken is not None or command.entry is None or command.pass_fds:
            return False
        return _stable(command_env(command)) == _stable(self.env)

    def env_of(self, command: supervise.Command) -> dict[str, str]:
        return command_env(command)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Start the server if need be and block until it has imported its modules; False (and
        ``broken`` says why) if it cannot."""
        if self.ready_doc is not None:
            return True
        if not self._start():
            return False
        assert self.sock is not None
        if not select.select([self.sock], [], [], timeout_s)[0]:
            self._break(f"its imports took longer than {timeout_s:g} s")
            return False
        doc = self._receive()[0]
        if doc is None or doc.get("event") != "ready":
            why = (doc or {}).get("error") or self._server_said() or "it exited while importing"
            self._break(str(why))
            return False
        self.ready_doc = doc
        return True

    def spawn_guard(self, cfg: dict[str, Any], control_r: int) -> RemoteGuard | None:
        """Fork a guard running ``cfg`` (a guard config with ``call``); None when the server cannot,
        and the caller starts the command fresh instead."""
        with self._lock:
            if not self.wait_ready():
                return None
            report_r, report_w = os.pipe()
            try:
                socket.send_fds(self.sock, [json.dumps(cfg).encode()], [control_r, report_w])
                doc, fds = self._receive(timeout_s=30.0)
            except OSError as exc:
                os.close(report_r)
                self._break(f"it stopped answering ({exc.strerror or exc})")
                return None
            finally:
                os.close(report_w)
            if doc is None or doc.get("event") != "forked" or len(fds) != 1:
                os.close(report_r)
                for fd in fds:
                    os.close(fd)
                self._break(str((doc or {}).get("error") or self._server_said() or "it stopped answering"))
                return None
            self.forked += 1
            return RemoteGuard(int(doc["pid"]), fds[0], report_r, cfg["argv"])

    def _receive(self, timeout_s: float | None = None) -> tuple[dict[str, Any] | None, list[int]]:
        assert self.sock is not None
        if timeout_s is not None and not select.select([self.sock], [], [], timeout_s)[0]:
            return None, []
        try:
            msg, fds, _, _ = socket.recv_fds(self.sock, _MSG, 4)
        except OSError:
            return None, []
        if not msg:
            return None, list(fds)
        try:
            doc = json.loads(msg)
        except ValueError:
            doc = None
        return (doc if isinstance(doc, dict) else None), list(fds)

    def _server_said(self) -> str | None:
        from tfprof_towers.vocab import textcap

        with contextlib.suppress(subprocess.TimeoutExpired, AttributeError):
            self.proc.wait(timeout=2.0)
        return textcap.last_cause(textcap.read_tail(self.stderr_path), 300) or None

    def _break(self, why: str) -> None:
        from tfprof_towers.vocab import textcap

        self.broken = textcap.one_line(why, 300)

    def close(self) -> None:
        """Stop the server (a child it forked runs on under its own guard until it ends)."""
        if self.proc is None or self.sock is None:
            return
        with contextlib.suppress(OSError):
            self.sock.close()  # the server leaves by itself when its socket closes
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5.0)

    def summary(self) -> dict[str, Any]:
        """What ``run.json`` keeps: how children were started and what the server's import cost."""
        doc: dict[str, Any] = {"mode": "fork-server" if self.ready_doc else "fresh",
                               "forked": self.forked, "preload": list(self.preload)}
        if self.ready_doc:
            doc["import_s"] = self.ready_doc.get("import_s")
            doc["threads"] = self.ready_doc.get("threads")
        if self.broken:
            doc["not_used"] = self.broken
        return doc


#: Variables that may differ between the server and a child it forks (nothing reads them at import):
#: pytest's name of the running test.  Any other difference starts the child fresh.
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})


def command_env(command: supervise.Command) -> dict[str, str]:
    """The environment ``command``'s child runs with (as :func:`.supervise.start` gives it)."""
    return supervise.child_env(base=command.env) if command.env is not None else supervise.child_env()


def _stable(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in VOLATILE}


_ACTIVE: ForkServer | None = None


@contextlib.contextmanager
def serving(preload: Sequence[str], stderr_path: Path, env: Mapping[str, str],
            notice: Any = None) -> Iterator[ForkServer | None]:
    """Within the block, ``supervise.start`` forks the commands the server serves from it.  Where no
    server can run, yields None (and ``notice`` is told why, once): every child starts fresh."""
    global _ACTIVE
    why = unavailable_reason()
    server = None if why is not None else ForkServer.make(preload, stderr_path, env)
    if server is None:
        if notice is not None and not os.environ.get(ENV_SWITCH):
            notice(f"TensorFlow is imported in every child ({why})")
        yield None
        return
    previous, _ACTIVE = _ACTIVE, server
    supervise.set_fork_server(server)
    fresh_before = supervise.ENTRY_STARTS["fresh"]
    try:
        yield server
    finally:
        _ACTIVE = previous
        supervise.set_fork_server(previous)
        server.close()
        fell_back = supervise.ENTRY_STARTS["fresh"] > fresh_before
        if server.broken and fell_back and notice is not None:
            notice(f"TensorFlow was imported in every child after the fork server failed ({server.broken})")


def active() -> ForkServer | None:
    return _ACTIVE


# ------------------------------------------------------------------------------------------
# The server's side


def _threads() -> list[str]:
    names = []
    with contextlib.suppress(OSError):
        for tid in sorted(os.listdir("/proc/self/task"), key=int):
            with contextlib.suppress(OSError):
                names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
    return names


def _send(sock: socket.socket, doc: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    socket.send_fds(sock, [json.dumps(doc).encode()], list(fds))


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _run_guard(sock: socket.socket, cfg: dict[str, Any], control_r: int, report_w: int) -> int:
    """In the forked guard: a session of its own, the report pipe as stdout/stderr, then the guard."""
    sock.close()
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(report_w, 1)
    os.dup2(report_w, 2)
    for fd in (null, report_w):
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    guard = Guard({**cfg, "control_fd": control_r})
    report(guard.run())
    return 0


def serve(sock: socket.socket, preload: Sequence[str]) -> int:
    t0 = time.perf_counter()
    try:
        import importlib

        for module in preload:
            importlib.import_module(module)
    except BaseException as exc:
        _send(sock, {"event": "failed", "error": f"importing the preloaded modules failed: "
                                                 f"{type(exc).__name__}: {exc}"})
        return 1
    _send(sock, {"event": "ready", "import_s": round(time.perf_counter() - t0, 3), "pid": os.getpid(),
                 "threads": _threads()})
    while True:
        _reap()
        if not select.select([sock], [], [], 1.0)[0]:
            continue
        try:
            msg, fds, _, _ = socket.recv_fds(sock, _MSG, 4)
        except OSError:
            return 0
        if not msg:  # the parent closed its end (or died): no more children
            for fd in fds:
                os.close(fd)
            return 0
        try:
            cfg = json.loads(msg)
            control_r, report_w = fds
        except (ValueError, TypeError):
            for fd in fds:
                os.close(fd)
            _send(sock, {"event": "error", "error": "a malformed request"})
            continue
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                code = _run_guard(sock, cfg, control_r, report_w)
            finally:
                os._exit(code)
        os.close(control_r)
        os.close(report_w)
        pidfd = os.pidfd_open(pid)
        try:
            _send(sock, {"event": "forked", "pid": pid}, [pidfd])
        finally:
            os.close(pidfd)


def _die_with(parent: int) -> None:
    """SIGKILL this server when the parent dies (and leave now if it already has)."""
    import ctypes
    import ctypes.util

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)


def main(argv: Sequence[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    _die_with(int(argv[1]))
    preload = [m for m in (argv[2] if len(argv) > 2 else "").split(",") if m]
    try:
        return serve(sock, preload)
    except (BrokenPipeError, ConnectionResetError):  # the parent went away
        return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown of what was preloaded
