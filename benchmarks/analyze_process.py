"""A whole ``tfprof-towers analyze`` process, start to exit, as the benchmarks time it.

Shared by the parse, load and multi-host benchmarks (:mod:`.bench_parse`, :mod:`.bench_load`,
:mod:`.bench_hosts`), so that none of them imports another for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

#: ``tfprof-towers analyze`` as its console script runs it, reporting its own peak RSS (VmHWM) at
#: exit: the rusage of a child counts the parent's pages it shared before ``exec``.
CLI = (
    "import atexit, os, sys\n"
    "code = os.environ.get('TFPROF_BENCH_CODE')\n"
    "if code:  # another checkout's package, ahead of an editable install's own finder\n"
    "    sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in type(f).__module__]\n"
    "    sys.path.insert(0, code)\n"
    "def _hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            sys.stderr.write('VmHWM ' + line.split()[1] + '\\n')\n"
    "atexit.register(_hwm)\n"
    "import tfprof_towers\n"
    "sys.stderr.write('package ' + os.path.dirname(tfprof_towers.__file__) + '\\n')\n"
    "from tfprof_towers.cli import main\n"
    "sys.exit(main())\n"
)


def whole_process(
    path: Path, code: Path | None = None, args: tuple[str, ...] = ("--json",)
) -> tuple[float, float]:
    """``tfprof-towers analyze PATH --json`` in a fresh process, start to exit: (seconds, peak RSS MiB)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install keeps compiled modules
    if code is not None:
        env["TFPROF_BENCH_CODE"] = str(Path(code).resolve())
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CLI, "analyze", str(path), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"analyze {path} failed: {proc.stderr.strip()[-300:]}")
    hwm = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("VmHWM ")]
    package = [line.split(" ", 1)[1] for line in proc.stderr.splitlines() if line.startswith("package ")]
    if code is not None and package and not package[0].startswith(str(Path(code).resolve())):
        raise RuntimeError(f"--code {code}: the child ran the package in {package[0]}")
    return seconds, (hwm[-1] / 1024 if hwm else float("nan"))


def met(ok: bool) -> str:
    """A target's verdict as the benchmarks print it."""
    return "met" if ok else "NOT met"
