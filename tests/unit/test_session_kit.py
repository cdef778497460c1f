"""tests/session_kit.py: what the e2e tier shares between xdist workers is built once, a failed build
is not retried, and ``-n auto`` counts the CPUs a cgroup quota grants."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from session_kit import auto_workers, built_once, cpu_quota


def _worker(root: Path, log: Path, fail: bool) -> str:
    """One "worker": asks for the shared folder and says what it got.  The build logs itself,
    sleeps a little (so that the other worker asks while it builds, on most machines) and makes the
    folder, or raises.  Threads stand in for xdist's processes: each opens the lock file itself, and
    ``flock`` excludes open files, not processes."""

    def build(out: Path) -> None:
        with log.open("a") as fh:
            fh.write("built\n")
        time.sleep(0.3)
        if fail:
            raise RuntimeError("the build broke")
        out.mkdir()
        (out / "made").write_text("yes")

    try:
        return (built_once(root, "thing", build) / "made").read_text()
    except BaseException as exc:  # pytest.fail raises an outcome, not an Exception
        return f"{type(exc).__name__}: {exc}"


def _workers(tmp_path: Path, fail: bool, n: int = 2) -> tuple[list[str], list[str]]:
    log = tmp_path / "builds.log"
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: _worker(tmp_path, log, fail), range(n)))
    return results, log.read_text().split()


def test_two_workers_build_the_shared_folder_once(tmp_path: Path) -> None:
    results, builds = _workers(tmp_path, fail=False)
    assert results == ["yes", "yes"]
    assert len(builds) == 1
    assert (tmp_path / "shared-thing" / "run" / "made").read_text() == "yes"


def test_a_failed_build_is_not_retried_and_both_say_why(tmp_path: Path) -> None:
    results, builds = _workers(tmp_path, fail=True)
    assert len(builds) == 1
    assert sorted(results) == sorted([
        "RuntimeError: the build broke",
        "Failed: the shared run 'thing' failed earlier in this session: RuntimeError: the build broke"])


def test_a_half_made_folder_of_a_killed_worker_is_made_again(tmp_path: Path) -> None:
    (tmp_path / "shared-thing" / "run").mkdir(parents=True)  # no DONE: its maker died mid-way
    (tmp_path / "shared-thing" / "run" / "half").write_text("")
    results, builds = _workers(tmp_path, fail=False, n=1)
    assert results == ["yes"] and len(builds) == 1
    assert not (tmp_path / "shared-thing" / "run" / "half").exists()


@pytest.mark.parametrize(("files", "want"), [
    ({"cpu.max": "200000 100000\n"}, 2),
    ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
    ({"cpu.max": "50000 100000\n"}, 1),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_the_cgroup_quota_in_cpus(tmp_path: Path, files: dict[str, str], want: int | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpu_quota(tmp_path) == want


def test_auto_workers_is_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    assert auto_workers(tmp_path) == cpus  # no quota
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert auto_workers(tmp_path) == 1
    (tmp_path / "cpu.max").write_text(f"{(cpus + 8) * 100000} 100000\n")
    assert auto_workers(tmp_path) == cpus
