"""Processes as the supervisor sees them: the /proc process tree and cgroup v2.

Linux only; where there is no /proc the lists are empty.  Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_LONGEST_WAIT_S = 3600.0  # select/poll take no more; longer waits loop


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    session: int
    state: str

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def process_table() -> dict[int, Proc]:
    """Every process in /proc (empty where there is none)."""
    table: dict[int, Proc] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                text = fh.read().decode(errors="replace")
            fields = text.rsplit(")", 1)[1].split()
            table[int(name)] = Proc(int(name), int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def descendants(root: int, table: Mapping[int, Proc] | None = None) -> list[int]:
    """Live descendants of ``root`` (not ``root`` itself), from the process tree."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return [p for p in found if table[p].alive]


def session_members(sid: int) -> list[int]:
    return [p.pid for p in process_table().values() if p.session == sid and p.alive]


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> int:
    """``proc.wait(timeout_s)``, but woken the moment the child exits (a pidfd, where Linux has one).

    Raises ``subprocess.TimeoutExpired`` like ``Popen.wait``; signals interrupt it alike.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or the child is already reaped
        return proc.wait(timeout=timeout_s)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        end = time.monotonic() + timeout_s
        while not poller.poll(_poll_ms(end - time.monotonic())):
            if time.monotonic() >= end:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
    finally:
        os.close(fd)
    return proc.wait()


def _poll_ms(seconds: float) -> int:
    return int(max(0.0, min(seconds, _LONGEST_WAIT_S)) * 1000)


def kill(pid: int, sig: int) -> bool:
    """Send ``sig``; False when the process is gone (or not ours)."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def cgroup2_mount() -> Path | None:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on hybrid hosts)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def own_cgroup() -> str | None:
    """This process's cgroup v2 path (``/`` or ``/user.slice/...``)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


def new_cgroup(name: str) -> Path | None:
    """A fresh cgroup below this process's own, where one can be made; None elsewhere."""
    mount, mine = cgroup2_mount(), own_cgroup()
    if mount is None or mine is None:
        return None
    path = mount / mine.lstrip("/") / name
    try:
        path.mkdir()
    except OSError:
        return None
    if not os.access(path / "cgroup.procs", os.W_OK):
        remove_cgroup(path)
        return None
    return path


def cgroup_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(path: Path) -> None:
    """Every process of the cgroup, at once where the kernel has ``cgroup.kill`` (5.14+)."""
    try:
        (path / "cgroup.kill").write_text("1")
    except OSError:
        for pid in cgroup_pids(path):
            kill(pid, signal.SIGKILL)


def remove_cgroup(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()
