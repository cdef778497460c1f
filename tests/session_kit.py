"""Test sessions on pytest-xdist: one folder all workers of a session share, what is built once in
it for all of them, and how many workers ``-n auto`` starts (tests/conftest.py uses these)."""

from __future__ import annotations

import fcntl
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this test session that every xdist worker sees: the controller's base temp
    (the workers' own are ``<it>/popen-gwN``), or the session's base temp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(root: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``root/shared-<name>/run``, made by ``build(path)`` once for every process that asks with the
    same ``root`` (every xdist worker of a session, given :func:`session_dir`), whichever asks first;
    the others wait for it on the lock (``fcntl.flock``), then read it.

    A build that failed is not retried by the next worker: its tests fail with the first one's
    reason.  Readers must not change the directory (copy it first)."""
    folder = root / f"shared-{name}"
    folder.mkdir(exist_ok=True)
    run, done, failed = folder / "run", folder / "DONE", folder / "FAILED"
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if failed.is_file():
            pytest.fail(f"the shared run {name!r} failed earlier in this session: {failed.read_text()}",
                        pytrace=False)
        if not done.is_file():
            shutil.rmtree(run, ignore_errors=True)  # what a killed worker left half-made
            try:
                build(run)
            except Exception as exc:
                failed.write_text(f"{type(exc).__name__}: {exc}"[:2000])
                raise
            done.write_text(os.environ.get("PYTEST_XDIST_WORKER", "master"))
    return run


def cpu_quota(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The CPUs a cgroup quota grants this process (a container's ``--cpus``), rounded up; None
    where there is no quota (cgroup v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``)."""
    try:
        quota, _, period = (cgroup_root / "cpu.max").read_text().partition(" ")
        if quota.strip() != "max":
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((cgroup_root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((cgroup_root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None


def auto_workers(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """``-n auto``: one xdist worker per CPU this process may run on (its affinity), capped by a
    cgroup quota, so that a CI container on a big host gets as many workers as it has CPUs."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity (macOS)
        cpus = os.cpu_count() or 1
    quota = cpu_quota(cgroup_root)
    return max(1, min(cpus, quota) if quota else cpus)
