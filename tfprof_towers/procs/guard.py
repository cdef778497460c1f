"""The guard: the process that runs one supervised child to its end (see :mod:`.supervise`).

Run as ``python -P -m tfprof_towers.procs.guard CONFIG_JSON`` by :func:`.supervise.start`, in a
session of its own.  It waits for the first of: the child's exit, the deadline, end-of-file on
the control pipe (the parent stopped it or died), or SIGTERM/SIGHUP/SIGINT.  Whatever ended it,
every process of the child is killed before the guard reports, as one JSON line on its stdout::

    {"event": "started", "pid": 123, "cgroup": "/sys/fs/cgroup/.../tfprof-towers-122"}
    {"event": "ended", "returncode": -9, "timed_out": true, "killed": 2, ...}

A guard forked by a fork server (:mod:`.forkserver`) runs the same code with a ``call`` in its
config (``"package.module:function"``): the child is then a fork of the guard that calls that
function with ``argv``'s arguments (its return value the exit code) instead of exec'ing ``argv``,
so what the server imported once is already in it.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import select
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfprof_towers.procs.proctree import (
    cgroup_pids,
    descendants,
    kill,
    kill_cgroup,
    new_cgroup,
    remove_cgroup,
)

#: Defaults of :class:`.supervise.Command` (repeated there for callers).
HEAD_BYTES = 256 * 1024
TAIL_BYTES = 256 * 1024
DEADLINE_GRACE_S = 3.0
STOP_GRACE_S = 1.0
#: How long the guard keeps killing before it reports processes that will not die (D state).
KILL_TIMEOUT_S = 5.0
NOTE = "[tfprof-towers]"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_CHUNK = 64 * 1024


class BoundedLog:
    """A file that keeps the first ``head`` and the last ``tail`` bytes written to it."""

    def __init__(self, path: Path, head: int, tail: int) -> None:
        self.head, self.tail = head, tail
        self.total = 0
        self.kept = 0
        self._ring = bytearray()
        self.error: str | None = None
        try:
            self._fh = open(path, "wb")  # noqa: SIM115 -- closed in close()
        except OSError as exc:
            self._fh = None
            self.error = f"cannot write {path}: {exc.strerror or exc}"

    def fileno(self) -> int | None:
        return None if self._fh is None else self._fh.fileno()

    def feed(self, data: bytes) -> None:
        room = max(0, self.head - self.total)
        self.total += len(data)
        if room:
            self._write(data[:room])
            data = data[room:]
        if data:
            self._ring += data
            if len(self._ring) > self.tail:
                del self._ring[: len(self._ring) - self.tail]

    def _write(self, data: bytes) -> None:
        if self._fh is None or not data:
            return
        try:
            self._fh.write(data)
            self._fh.flush()
            self.kept += len(data)
        except OSError as exc:
            self.error = f"stopped writing: {exc.strerror or exc}"
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None

    def close(self, notes: Sequence[str] = ()) -> None:
        omitted = self.total - self.head - len(self._ring)
        if omitted > 0:
            self._write(f"\n{NOTE} {omitted} bytes left out here: stderr.txt keeps the first "
                        f"{self.head} and the last {self.tail} bytes\n".encode())
        self._write(bytes(self._ring))
        for note in notes:
            self._write(f"\n{NOTE} {note}\n".encode())
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None


class Guard:
    """Runs one child to its end inside the guard process; see the module docstring."""

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.argv: list[str] = list(cfg["argv"])
        self.call: str | None = cfg.get("call")  # "module:function": fork and call, no exec
        self.call_args: list[str] = list(cfg.get("call_args") or ())
        self.cwd: str | None = cfg.get("cwd")
        self.env: dict[str, str] | None = cfg.get("env")  # the called child's os.environ, exactly
        self._wake: tuple[int, int] | None = None
        self.control_fd: int = int(cfg["control_fd"])
        self.deadline_s: float | None = cfg.get("deadline_s")
        self.grace_s = float(cfg.get("grace_s", DEADLINE_GRACE_S))
        self.stop_grace_s = float(cfg.get("stop_grace_s", STOP_GRACE_S))
        self.log = BoundedLog(Path(cfg["stderr_path"]), int(cfg.get("head_bytes", HEAD_BYTES)),
                              int(cfg.get("tail_bytes", TAIL_BYTES)))
        self.cgroup = new_cgroup(f"tfprof-towers-{os.getpid()}") if cfg.get("cgroup", True) else None
        self.pid = 0
        self.status: int | None = None
        self.out_fd: int | None = None
        self.notes: list[str] = []
        self.stop_requested = False
        self.killed: set[int] = set()

    def spawn(self) -> None:
        """Fork and exec the child: in the cgroup, with PDEATHSIG, its output into our pipe.

        A close-on-exec pipe tells the guard when the exec has happened (or why it failed),
        so the child's cgroup membership is settled before anything of the child runs.
        """
        libc = _libc()
        read_fd, write_fd = os.pipe()
        sync_r, sync_w = os.pipe()
        guard = os.getpid()
        cgroup_procs = None if self.cgroup is None else str(self.cgroup / "cgroup.procs")
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            with contextlib.suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the child, until exec (or the call): nothing here may raise
            try:
                os.close(read_fd)
                os.close(sync_r)
                os.close(self.control_fd)
                if libc is not None:
                    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                if os.getppid() != guard:  # the guard died before prctl took effect
                    os._exit(1)
                if cgroup_procs is not None:
                    with contextlib.suppress(OSError):
                        with open(cgroup_procs, "w") as fh:
                            fh.write("0")
                        os.write(sync_w, b"C")  # joined: only now is the cgroup the child's
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGCHLD):
                    signal.signal(sig, signal.SIG_DFL)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(write_fd, 1)
                os.dup2(write_fd, 2)
                if self.call is not None:
                    os._exit(self._call_in_child(sync_w, write_fd, null))
                os.execvp(self.argv[0], self.argv)
            except BaseException as exc:
                with contextlib.suppress(BaseException):
                    os.write(2, f"cannot start {self.argv[0]}: {exc}\n".encode())
            os._exit(127)
        os.close(write_fd)
        os.close(sync_w)
        said = b""
        while True:  # EOF at the exec (or the child's end)
            chunk = os.read(sync_r, 64)
            if not chunk:
                break
            said += chunk
        os.close(sync_r)
        self.pid, self.out_fd = pid, read_fd
        if self.cgroup is not None and b"C" not in said:  # the kernel refused: the tree walk alone
            remove_cgroup(self.cgroup)
            self.cgroup = None

    def _call_in_child(self, *own_fds: int) -> int:
        """In the forked child: drop the guard's descriptors (no exec closes them here), then call
        ``self.call`` with the arguments; its return value is the exit code (an exception: 1)."""
        import importlib
        import traceback

        fds = {*own_fds, *(self._wake or ()), *([self.log.fileno()] if self.log.fileno() is not None else [])}
        for fd in fds - {0, 1, 2}:
            with contextlib.suppress(OSError):
                os.close(fd)
        try:
            if self.env is not None:
                os.environ.clear()
                os.environ.update(self.env)
            if self.cwd:
                os.chdir(self.cwd)
            module, _, function = str(self.call).partition(":")
            sys.argv = [module, *self.call_args]
            code = getattr(importlib.import_module(module), function)(list(self.call_args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        return code if isinstance(code, int) else 0

    def tracked(self) -> set[int]:
        """Live processes of the child: the tree below the guard, and the cgroup's."""
        pids = set(descendants(os.getpid()))
        if self.cgroup is not None:
            pids.update(cgroup_pids(self.cgroup))
        pids.discard(os.getpid())
        return pids

    def reap(self) -> None:
        """Collect exited children (the child, and orphans the subreaper inherited)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid and self.status is None:
                self.status = status

    @property
    def exited(self) -> bool:
        return self.status is not None

    def drain(self, block_s: float = 0.0) -> bool:
        """Read what the child wrote; False once its output is closed."""
        if self.out_fd is None:
            return False
        ready, _, _ = select.select([self.out_fd], [], [], block_s)
        if not ready:
            return True
        try:
            data = os.read(self.out_fd, _CHUNK)
        except OSError:
            data = b""
        if not data:
            os.close(self.out_fd)
            self.out_fd = None
            return False
        self.log.feed(data)
        return True

    def signal_all(self, sig: int) -> int:
        pids = self.tracked()
        for pid in pids:
            kill(pid, sig)
        return len(pids)

    def kill_all(self) -> int:
        """SIGKILL every process of the child until none is alive; returns how many would not die."""
        if self.cgroup is not None:
            self.killed.update(self.tracked() - {self.pid})
            kill_cgroup(self.cgroup)
        end = time.monotonic() + KILL_TIMEOUT_S
        while True:
            self.reap()
            pids = self.tracked()
            if not pids:
                return 0
            if time.monotonic() > end:
                return len(pids)
            for pid in pids:
                if kill(pid, signal.SIGKILL) and pid != self.pid:
                    self.killed.add(pid)
            if not self.drain(0.005):
                time.sleep(0.005)

    def wait_child(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.exited and time.monotonic() < end:
            self.reap()
            if not self.drain(0.02):
                time.sleep(0.01)

    def terminate(self, grace_s: float) -> None:
        self.signal_all(signal.SIGTERM)
        self.wait_child(grace_s)

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wake = (wake_r, wake_w)
        signal.set_wakeup_fd(wake_w)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll below
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.spawn()
        cgroup = None if self.cgroup is None else str(self.cgroup)
        report({"event": "started", "pid": self.pid, "cgroup": cgroup})
        deadline = None if self.deadline_s is None else t0 + self.deadline_s
        timed_out = False
        while True:
            self.reap()
            if self.exited:
                break
            if self.stop_requested:
                self.notes.append("stopped: the run was interrupted or its parent process went away")
                self.terminate(self.stop_grace_s)
                break
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                timed_out = True
                n = self.signal_all(signal.SIGTERM)
                self.notes.append(f"deadline of {self.deadline_s:g} s passed: "
                                  f"sent SIGTERM to {n} process(es)")
                self.wait_child(self.grace_s)
                break
            wait = 1.0 if deadline is None else min(1.0, deadline - now)
            fds = [self.control_fd, wake_r] + ([self.out_fd] if self.out_fd is not None else [])
            ready, _, _ = select.select(fds, [], [], max(0.0, wait))
            if wake_r in ready:
                with contextlib.suppress(OSError):
                    os.read(wake_r, 512)
            if self.control_fd in ready and not os.read(self.control_fd, 512):
                self.stop_requested = True
            if self.out_fd is not None and self.out_fd in ready:
                self.drain()
        stuck = self.kill_all()
        self.wait_child(KILL_TIMEOUT_S)  # a killed child is a zombie until reaped: collect its status
        left = len(self.killed - {self.pid})
        if left and not timed_out and not self.stop_requested:
            self.notes.append(f"killed {left} process(es) the child left running")
        if stuck:
            self.notes.append(f"{stuck} process(es) would not die (stuck in the kernel?)")
        end = time.monotonic() + 2.0
        while self.drain(0.05) and time.monotonic() < end:
            pass
        self.log.close(self.notes)
        if self.cgroup is not None:
            remove_cgroup(self.cgroup)
        status = self.status
        return {
            "event": "ended",
            "returncode": None if status is None else os.waitstatus_to_exitcode(status),
            "timed_out": timed_out, "stopped": self.stop_requested and not timed_out,
            "killed": left, "stuck": stuck, "stderr_bytes": self.log.total, "stderr_kept": self.log.kept,
            "stderr_error": self.log.error, "tracking": "proc" if self.cgroup is None else "cgroup",
            "wall_s": time.monotonic() - t0, "notes": self.notes,
        }

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = True


def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        return libc
    except (OSError, AttributeError):
        return None


def _prctl(option: int, value: int) -> bool:
    libc = _libc()
    return libc is not None and libc.prctl(option, value, 0, 0, 0) == 0


def report(event: Mapping[str, Any]) -> None:
    """One JSON line to the parent (fd 1); a parent that is gone is no error."""
    with contextlib.suppress(OSError):
        os.write(1, (json.dumps(event) + "\n").encode())


def guard_main(argv: Sequence[str]) -> int:
    cfg = json.loads(argv[0])
    guard = Guard(cfg)
    report(guard.run())
    return 0


if __name__ == "__main__":
    sys.exit(guard_main(sys.argv[1:]))
