"""The start-up of ``tfprof-towers analyze``: what its process imports, and at what cost.

``analyze --help`` and ``analyze FILE --json`` (FILE: ``--trace PATH``, else a copy-heavy trace of
``--events`` events written here) each run ``--repeats`` times in a fresh interpreter under
``python -X importtime``, from compiled modules as an installed package has them: the package's
modules imported, the import time summed over every module and over the package's own (each
module's self time, the least over the runs: other jobs only ever add to it), and the whole
process's wall time (median).  ``--code DIR`` adds the same figures for another checkout's package
(a "before"), its runs alternated with this checkout's.  Target: ``analyze --help`` under 0.25 s,
the whole process.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.analyze_process import CLI, met
from benchmarks.parse_traces import copy_heavy_file

PACKAGE = "tfprof_towers"
HELP_TARGET_S = 0.25
_LINE = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)\s*$")


def self_times(stderr: str) -> dict[str, int]:
    """``-X importtime``'s lines in ``stderr`` as module -> self time (us); other lines are ignored."""
    out: dict[str, int] = {}
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if m:
            out[m[2]] = int(m[1])
    return out


def least(runs: Iterable[dict[str, int]]) -> dict[str, int]:
    """Per module any of ``runs`` imported, its least self time over the runs that imported it."""
    out: dict[str, int] = {}
    for r in runs:
        for m, us in r.items():
            out[m] = min(us, out.get(m, us))
    return out


@dataclass(frozen=True)
class Startup:
    """One command's start-up over its runs."""

    modules: int  # the package's modules imported
    import_ms: float  # every module's least self time, summed
    package_ms: float  # the package's modules' least self time, summed
    wall_s: float  # the whole process, median

    @classmethod
    def of(cls, runs: list[dict[str, int]], walls: list[float]) -> Startup:
        times = least(runs)
        own = [v for m, v in times.items() if m == PACKAGE or m.startswith(PACKAGE + ".")]
        return cls(len(own), sum(times.values()) / 1e3, sum(own) / 1e3, statistics.median(walls))


def one_run(argv: list[str], code: Path | None) -> tuple[dict[str, int], float]:
    """``tfprof-towers ARGV`` in a fresh interpreter under ``-X importtime``: self times, wall seconds."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install keeps compiled modules
    env.pop("TFPROF_BENCH_CODE", None)
    if code is not None:
        env["TFPROF_BENCH_CODE"] = str(Path(code).resolve())
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", CLI, *argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.strip()[-300:]}")
    return self_times(proc.stderr), wall


def measure(argv: list[str], codes: list[Path | None], repeats: int) -> list[Startup]:
    """``argv``'s start-up with each of ``codes`` (None: this checkout), their runs alternated."""
    for code in codes:  # compile the modules and warm the page cache
        one_run(argv, code)
    runs: list[list[dict[str, int]]] = [[] for _ in codes]
    walls: list[list[float]] = [[] for _ in codes]
    for _ in range(repeats):
        for i, code in enumerate(codes):
            times, wall = one_run(argv, code)
            runs[i].append(times)
            walls[i].append(wall)
    return [Startup.of(r, w) for r, w in zip(runs, walls)]


def report(name: str, figures: list[Startup], labels: list[str]) -> list[str]:
    lines = [f"{name}:"]
    for label, f in zip(labels, figures):
        lines.append(f"  {label:16s} {f.modules:3d} package modules; imports {f.import_ms:6.1f} ms "
                     f"(the package {f.package_ms:5.1f} ms); whole process {f.wall_s:.2f} s")
    return lines


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="bench_startup", description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, help="the trace for analyze --json (default: a copy-heavy one)")
    p.add_argument("--events", type=int, default=200_000, help="events of the copy-heavy trace written")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--code", type=Path, help="also time this checkout's package (a 'before')")
    a = p.parse_args(argv)
    codes: list[Path | None] = [None] if a.code is None else [None, a.code]
    labels = ["this checkout", *([] if a.code is None else [str(a.code)])]
    with tempfile.TemporaryDirectory() as tmp:
        trace = a.trace
        if trace is None:
            trace = Path(tmp) / "copy_heavy.xplane.pb"
            copy_heavy_file(trace, a.events)
        helps = measure(["analyze", "--help"], codes, a.repeats)
        jsons = measure(["analyze", str(trace), "--json"], codes, a.repeats)
    print(f"median of {a.repeats} runs (imports: each module's least self time, summed)")
    print("\n".join(report("analyze --help", helps, labels)))
    print(f"  target: the whole process under {HELP_TARGET_S} s: {met(helps[0].wall_s < HELP_TARGET_S)}")
    print("\n".join(report(f"analyze {trace.name} --json", jsons, labels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
