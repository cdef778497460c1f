"""Runs that survive: signals, crashes mid-write, bad or full disks, hanging variants.

The runner is driven with a stand-in "python" (a shell script) so that process-group
handling is checked without TensorFlow; the same cases with real tiny-preset runs are in
tests/e2e/test_survive_e2e.py.  Filesystem cases that need a real
full or read-only filesystem mount a small tmpfs (root only; skipped elsewhere),
next to always-on versions that fake the condition and say so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from child_kit import (
    alive,
    fake_python,
    group_members,
    last_line_error,
    ok_child,
    one_line_error,
    options,
    read_pids,
    tmpfs,
    use_python,
    wait_group_gone,
    wait_until,
)

from tfprof_towers.capture import runner
from tfprof_towers.capture.runner import Interrupted, run_all, run_one
from tfprof_towers.cli import main
from tfprof_towers.procs import supervise
from tfprof_towers.rundir.paths import RunDir, write_json
from tfprof_towers.vocab.errors import TowersError

# --------------------------------------------------------------------------- helpers


#: A child that ignores SIGTERM and leaves a grandchild (which ignores it too) behind.
STUBBORN = """trap '' TERM
sleep 600 &
echo "$$ $!" > {pids}
{tail}
"""


# --------------------------------------------------------------------------- process groups (fast)


def test_timeout_kills_the_whole_process_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child ignores SIGTERM and has a grandchild that does too: both are SIGKILLed."""
    real = runner.child_command

    def short_grace(*args, **kwargs) -> supervise.Command:
        # the SIGTERM the child ignores is followed by SIGKILL after 0.5 s here, not the 3 s default:
        # how long the grace is does not change what this test checks
        return dataclasses.replace(real(*args, **kwargs), grace_s=0.5)

    monkeypatch.setattr(runner, "child_command", short_grace)
    pids = tmp_path / "pids"
    exe = fake_python(tmp_path, STUBBORN.format(pids=pids, tail="sleep 600"))
    opts = options(tmp_path, timeout_s=1.0)
    run_dir = RunDir(opts.out_dir)
    outcome = run_one(opts, opts.variants[0], run_dir, python=exe)
    child, grandchild = read_pids(pids)
    assert not alive(child) and not alive(grandchild)
    assert outcome.status == "failed"
    assert outcome.error == "timed out after 1 s (killed with its process group)"
    rec = json.loads(run_dir.record_json("a").read_text())
    assert rec["status"] == "failed" and rec["error"] == outcome.error
    assert rec["returncode"] == -signal.SIGKILL


def test_processes_left_behind_by_a_finished_child_are_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    exe = fake_python(tmp_path, STUBBORN.format(pids=pids, tail="exit 0"))
    opts = options(tmp_path)
    outcome = run_one(opts, opts.variants[0], RunDir(opts.out_dir), python=exe)
    _, grandchild = read_pids(pids)
    assert not alive(grandchild)
    assert outcome.status == "failed"
    # it wrote no record: said as such, not as "crashed: exit code 0"
    assert outcome.error == "exited with code 0 before finishing"


def test_wait_exit_returns_the_code_or_times_out() -> None:
    assert supervise.wait_exit(subprocess.Popen(["sh", "-c", "exit 3"]), 30) == 3
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            supervise.wait_exit(proc, 0.1)
        assert proc.poll() is None  # a timeout leaves the child to the caller
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_wait_group_gone_waits_for_the_killed_group() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"], start_new_session=True)
    try:
        wait_until(lambda: len(group_members(proc.pid)) >= 2, 10, "the two sleeps")
        os.killpg(proc.pid, signal.SIGKILL)
        assert wait_group_gone(proc.pid)
        assert group_members(proc.pid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_kill_group_reaches_a_grandchild_after_the_child_obeys_sigterm(tmp_path: Path) -> None:
    """Stopped (as on Ctrl-C): SIGTERM to every process, then SIGKILL to what is left."""
    pids = tmp_path / "pids"
    script = f"(trap '' TERM; exec sleep 600) & echo \"$$ $!\" > {pids}; wait"
    sup = supervise.start(supervise.Command(("sh", "-c", script), tmp_path / "err.txt", stop_grace_s=5.0))
    try:
        wait_until(lambda: pids.is_file() and len(pids.read_text().split()) == 2, 10, "the pid file")
        ended = sup.stop()
        assert ended.returncode == -signal.SIGTERM  # the child went at SIGTERM ...
        grandchild = read_pids(pids)[1]
        wait_until(lambda: not alive(grandchild), 5, "the grandchild to die")  # ... it at SIGKILL
        assert ended.killed == 1 and ended.stopped
    finally:
        sup.stop()


# --------------------------------------------------------------------------- interruption in the runner


@pytest.mark.parametrize("when", ["start", "finished"])
def test_signal_anywhere_in_the_loop_keeps_finished_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Ctrl-C as the second variant starts, or right after the first one's progress line."""
    use_python(monkeypatch, ok_child(tmp_path))
    opts = options(tmp_path, names=("first", "second", "third"))
    run_dir = RunDir(opts.out_dir)

    def hook(name: str, event: str) -> None:
        if (when == "start" and name == "second" and event == "start") or (
            when == "finished" and name == "first" and event != "start"
        ):
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as info:
        run_all(opts, run_dir, hook)
    assert info.value.exit_code == 130
    first = json.loads(run_dir.record_json("first").read_text())
    assert first["status"] == "ok"  # a finished variant is never re-marked
    second = run_dir.record_json("second")
    if when == "start":
        assert json.loads(second.read_text())["error"] == "interrupted by SIGINT before it finished"
    else:
        assert not second.exists()
    assert not run_dir.record_json("third").exists()


def test_sigterm_handler_is_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGTERM)
    use_python(monkeypatch, ok_child(tmp_path))
    opts = options(tmp_path)
    [outcome] = run_all(opts, RunDir(opts.out_dir))
    assert outcome.status == "ok"
    assert signal.getsignal(signal.SIGTERM) == before


# --------------------------------------------------------------------------- atomic files (fast)


def test_interrupted_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    write_json(target, {"status": "ok", "n": 1})

    def crash(fd: int) -> None:
        raise KeyboardInterrupt  # the process dies between writing and renaming

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        write_json(target, {"status": "ok", "n": 2, "big": "x" * 100_000})
    assert json.loads(target.read_text()) == {"status": "ok", "n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


# --------------------------------------------------------------------------- unwritable or full --out (fast)


def test_out_under_a_regular_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Root can write anywhere chmod forbids, so this uses a path that cannot exist."""
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["profile", "--preset", "tiny", "--out", str(blocker / "run")]) == 2
    assert "cannot create directory (Not a directory)" in one_line_error(capsys)


def test_low_free_space_stops_before_any_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Faked: shutil.disk_usage reports 5 MiB free (the tmpfs test below is the real thing)."""
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=5 * 2**20))
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--variants", "single,replicated", "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert "only 5.0 MiB free on its filesystem; 2 variant(s) need about 64.0 MiB" in err
    assert not (out / "variants").exists()


def test_disk_filling_up_mid_run_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Faked: the first write after the preflight checks fails with ENOSPC."""
    from tfprof_towers.session import profile

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "run" / "variants"))

    monkeypatch.setattr(profile, "run_all", full)
    assert main(["profile", "--preset", "tiny", "--out", str(tmp_path / "run")]) == 2
    assert last_line_error(capsys).endswith(
        "variants: cannot write (No space left on device); the run stopped there"
    )


def test_other_os_errors_are_not_disguised(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), runner.disk_errors(tmp_path):
        raise FileNotFoundError(2, "No such file or directory")
    with pytest.raises(TowersError, match="Read-only file system"), runner.disk_errors(tmp_path):
        raise OSError(30, "Read-only file system")


def test_full_filesystem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real 1 MiB tmpfs: the preflight sees it cannot hold a run."""
    with tmpfs(tmp_path / "mnt", "1m") as mnt:
        assert main(["profile", "--preset", "tiny", "--variants", "single", "--out", str(mnt / "run")]) == 2
        err = one_line_error(capsys)
        assert "only 1.0 MiB free on its filesystem" in err
        assert not (mnt / "run" / "variants").exists()


def test_filesystem_fills_up_during_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real tmpfs that passes the preflight, then fills up before the first variant's files."""
    from tfprof_towers.session import profile

    real_run_all = profile.run_all

    def fill_then_run(opts, run_dir, hook=None):
        with open(run_dir.root / "filler", "wb") as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 2**20)
        return real_run_all(opts, run_dir, hook)

    monkeypatch.setattr(profile, "run_all", fill_then_run)
    with tmpfs(tmp_path / "mnt", "40m") as mnt:
        assert main(["profile", "--preset", "tiny", "--variants", "single", "--out", str(mnt / "run")]) == 2
        assert "No space left on device" in last_line_error(capsys)


def test_read_only_filesystem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real read-only tmpfs (EROFS even for root)."""
    with tmpfs(tmp_path / "mnt", "1m", read_only=True) as mnt:
        assert main(["profile", "--preset", "tiny", "--out", str(mnt / "run")]) == 2
        assert "Read-only file system" in one_line_error(capsys)
