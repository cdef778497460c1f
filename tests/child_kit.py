"""Stand-in capture children and small helpers for the tests that run the runner without TensorFlow.

``fake_python(tmp_path, body)`` is an executable the runner calls instead of the
interpreter (``X -P -m tfprof_towers.capture.child SPEC``; the spec is its last
argument); ``ok_child`` one that writes an ``ok`` record and a trace file as the
real child does; ``use_python`` makes ``runner.run_one`` use one.  ``tmpfs``
mounts a small real filesystem (root only; the test is skipped elsewhere).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfprof_towers.capture import runner
from tfprof_towers.procs.proctree import process_table
from tfprof_towers.variants.config import PRESETS, ProfileOptions, VariantSpec


def alive(pid: int) -> bool:
    """True while ``pid`` is a running process (a zombie awaiting its reaper counts as gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # no /proc: fall back to kill(0)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return fields[0] not in ("Z", "X")


def processes_using(path: Path | str, exclude: int | None = None) -> dict[int, str]:
    """Live processes that name ``path`` in their command line or hold a file under it open (a child
    forked from the fork server has the server's command line; its guard holds its stderr.txt):
    ``{pid: what}``."""
    root = str(path)
    found: dict[int, str] = {}
    for d in Path("/proc").glob("[0-9]*"):
        pid = int(d.name)
        if pid in (os.getpid(), exclude) or not alive(pid):
            continue
        with contextlib.suppress(OSError):
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if root in cmd:
                found[pid] = cmd[:160]
                continue
            for fd in (d / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith(root):
                        found[pid] = f"{cmd[:100]} (open: {target})"
                        break
    return found


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``; [] where there is no /proc."""
    return [p.pid for p in process_table().values() if p.pgrp == pgid and p.alive]


def wait_group_gone(pgid: int, timeout_s: float = 2.0) -> bool:
    """After a SIGKILL, wait (briefly) until no process of the group is alive; True when none is."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def read_pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def last_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """Mid-run, the progress lines come first; the error is still one line, and the last."""
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("tfprof-towers: error: "), err
    return last


def fake_python(tmp_path: Path, body: str, name: str = "fake-python") -> str:
    """An executable that stands in for the interpreter: runner calls it as ``X -P -m module SPEC``."""
    exe = tmp_path / name
    exe.write_text("#!/bin/bash\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def options(tmp_path: Path, names: tuple[str, ...] = ("a",), timeout_s: float = 30.0) -> ProfileOptions:
    return ProfileOptions(
        preset=PRESETS["tiny"], variants=tuple(VariantSpec(n) for n in names),
        variant_timeout_s=timeout_s, out_dir=tmp_path / "run",
    )


@contextlib.contextmanager
def tmpfs(path: Path, size: str, read_only: bool = False) -> Iterator[Path]:
    """A small real filesystem at ``path``; skips the test where mounting is not allowed."""
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def ok_child(tmp_path: Path) -> str:
    """A stand-in child that writes an ``ok`` record and a trace file for its spec, as the real one does."""
    writer = tmp_path / "write_ok.py"
    writer.write_text(
        "import json, pathlib, sys\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "trace = pathlib.Path(spec['logdir'], 'plugins', 'profile', 'ts', 'host.xplane.pb')\n"
        "trace.parent.mkdir(parents=True)\n"
        "trace.write_bytes(b'x')\n"
        "rec = {'schema': 1, 'name': spec['name'], 'source': 'builtin', 'status': 'ok', 'error': None,\n"
        "       'timings': {}, 'placement': None, 'topology': None}\n"
        "json.dump(rec, open(spec['record'], 'w'))\n"
    )
    return fake_python(tmp_path, f'exec {sys.executable} {writer} "${{@: -1}}"\n')


_RUN_ONE = runner.run_one


def use_python(monkeypatch: pytest.MonkeyPatch, exe: str) -> None:
    """``runner.run_one`` starts ``exe`` in place of the interpreter (callable again to switch)."""
    monkeypatch.setattr(runner, "run_one", lambda o, v, r: _RUN_ONE(o, v, r, python=exe))
