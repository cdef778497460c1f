"""`analyze` as its own process where only a real process shows the behaviour: as user `nobody` on a
directory it cannot read, and with standard output closed or broken.

The runner-level cases of clumsy or hostile use, with stand-in children, are in
tests/unit/test_robust.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def _analyze(*args: str, stdin_closed: bool = False, as_nobody: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tfprof_towers", "analyze", *args]
    if as_nobody:
        cmd = [*AS_NOBODY, *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def nobody_cannot_import(env: dict[str, str] | None = None, package: Path | None = None,
                         cwd: Path | None = None) -> str | None:
    """Why `nobody` cannot run this interpreter and import this checkout's package (None: it can).

    A clone under a 0700 directory (many home directories) is unreadable to `nobody`: the
    test that runs the tool as `nobody` is then skipped with this reason, not failed (nor run
    on another copy of the package that `nobody` happens to find)."""
    import tfprof_towers

    want = (package or Path(tfprof_towers.__file__).parent).resolve()
    code = "import tfprof_towers; print(tfprof_towers.__file__)"
    done = subprocess.run([*AS_NOBODY, sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env, cwd=cwd)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return f"user nobody cannot import tfprof_towers from {want} ({last})"
    got = Path(done.stdout.strip()).parent.resolve()
    if got != want:
        return f"user nobody cannot read {want} (a checkout under a private directory?); it imports {got}"
    return None


def test_nobody_cannot_import_a_package_under_a_0700_directory(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv")
    top = Path(tempfile.mkdtemp(prefix="tfprof-home-"))  # pytest's own tmp_path is private (0700)
    try:
        top.chmod(0o755)
        home = top / "home"
        package = home / "clone" / "tfprof_towers"
        shutil.copytree(Path(__file__).resolve().parents[2] / "tfprof_towers", package)
        home.chmod(0o755)
        env = {**os.environ, "PYTHONPATH": str(home / "clone")}
        assert nobody_cannot_import(env, package, cwd=Path("/")) is None  # readable: the test runs
        home.chmod(0o700)
        why = nobody_cannot_import(env, package, cwd=Path("/"))
        assert why is not None and str(package) in why
    finally:
        shutil.rmtree(top)


def test_analyze_on_an_unreadable_directory() -> None:
    """Mode 000 (root reads anything, so the check runs as `nobody` where we are root)."""
    as_nobody = os.geteuid() == 0
    if as_nobody and not shutil.which("setpriv"):
        pytest.skip("root without setpriv cannot test permissions")
    if as_nobody and (why := nobody_cannot_import()):
        pytest.skip(why)
    top = Path(tempfile.mkdtemp(prefix="tfprof-noperm-"))
    try:
        top.chmod(0o755)
        locked = top / "locked"
        locked.mkdir(mode=0o000)
        locked.chmod(0o000)
        done = _analyze(str(locked), as_nobody=as_nobody)
        assert done.returncode == 2, done.stderr
        why = "permission denied (cannot list the directory)"
        assert done.stderr == f"tfprof-towers: error: {locked}: {why}\n"
    finally:
        (top / "locked").chmod(0o755)
        shutil.rmtree(top)


def test_closed_and_broken_stdout(tmp_path: Path) -> None:
    from report_kit import make_run_dir

    run = make_run_dir(tmp_path / "run")
    closed = subprocess.run(["sh", "-c", f'exec "$0" -m tfprof_towers analyze {run} >&-', sys.executable],
                            capture_output=True, text=True, timeout=60)
    assert closed.returncode == 2
    assert closed.stderr == ("tfprof-towers: error: standard output is closed; run it with stdout open "
                             "(redirect to a file or /dev/null)\n")
    # the reader is gone before the command writes a byte
    broken = subprocess.run(["bash", "-c", f'"$0" -m tfprof_towers analyze {run} | true; '
                             'exit "${PIPESTATUS[0]}"', sys.executable],
                            capture_output=True, text=True, timeout=60)
    assert (broken.returncode, broken.stderr) == (141, "")
