"""``tfprof_towers.load`` on a 1M-event trace against the whole ``analyze --json`` process.

Both are fresh processes, start to exit, run alternately ``repeats`` times after one warm-up each:

* ``analyze``: ``tfprof-towers analyze FILE --json`` (:func:`benchmarks.analyze_process.whole_process`);
* ``load``: ``import tfprof_towers as tt; p = tt.load(FILE)`` (the analysis; pandas is not
  imported until a frame is asked for);
* ``load + frames``: the same, then every trace frame a user would look at (``events``, ``steps``,
  ``wall``, ``total``, ``idle``, ``links``): pandas' import and the frames' making on top.  This
  child also reports the time of the frames alone (in-process, ``perf_counter``).

The target: ``load`` at most :data:`TARGET_LOAD_RATIO` x the ``analyze`` process, judged on the
median of the interleaved runs' ratios (the machine is shared: compare the ratio, not times);
``load + frames`` is printed beside it.
Part of ``make bench-parse``; ``python -m benchmarks.bench_parse --only-load`` runs this figure alone.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.analyze_process import whole_process

TARGET_LOAD_RATIO = 1.5

_LOAD = (
    "import sys, time\n"
    "t0 = time.perf_counter()\n"
    "import tfprof_towers as tt\n"
    "p = tt.load(sys.argv[1])\n"
    "t1 = time.perf_counter()\n"
    "if sys.argv[2] == 'frames':\n"
    "    rows = sum(len(getattr(p, f)) for f in ('events', 'steps', 'wall', 'total', 'idle', 'links'))\n"
    "    t2 = time.perf_counter()\n"
    "    sys.stderr.write(f'load_s {t1 - t0}\\nframes_s {t2 - t1}\\nrows {rows}\\n')\n"
)


def load_process(path: Path, frames: bool = False) -> tuple[float, dict[str, float]]:
    """The ``load`` child (with ``frames``: and the trace frames), start to exit: (seconds, what it
    reports)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(path), "frames" if frames else "load"],
                          stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"load {path} failed: {proc.stderr.strip()[-300:]}")
    pairs = (line.split() for line in proc.stderr.splitlines() if line.count(" ") == 1)
    got = {k: float(v) for k, v in pairs}
    return seconds, got


def load_figures(path: Path, repeats: int) -> dict[str, Any]:
    whole_process(path)  # warm the page cache and the .pyc files
    load_process(path, frames=True)
    analyze, load, framed, inside = [], [], [], []
    for _ in range(repeats):
        analyze.append(whole_process(path)[0])
        load.append(load_process(path)[0])
        s, got = load_process(path, frames=True)
        framed.append(s)
        inside.append(got)
    return {
        "repeats": repeats,
        "analyze_runs_s": analyze, "load_runs_s": load, "load_frames_runs_s": framed,
        "analyze_median_s": statistics.median(analyze), "load_median_s": statistics.median(load),
        "load_frames_median_s": statistics.median(framed),
        "frames_median_s": statistics.median(g["frames_s"] for g in inside),
        "frame_rows": int(inside[-1]["rows"]),
        "ratio_median": statistics.median(b / a for a, b in zip(analyze, load)),
        "frames_ratio_median": statistics.median(b / a for a, b in zip(analyze, framed)),
        "target": TARGET_LOAD_RATIO,
    }


def report_load(f: dict[str, Any] | None) -> list[str]:
    if not f:
        return []
    ratio = f["ratio_median"]
    return [
        f"tfprof_towers.load, whole process: {f['load_median_s']:.2f} s median against `analyze --json`'s "
        f"{f['analyze_median_s']:.2f} s: {ratio:.2f}x, median of {f['repeats']} interleaved runs "
        f"(target <= {f['target']:.1f}x: {'met' if ratio <= f['target'] else 'NOT met'})",
        f"  with its trace frames ({f['frame_rows']:,} rows; pandas imported, frames made in "
        f"{f['frames_median_s']:.2f} s): {f['load_frames_median_s']:.2f} s median, "
        f"{f['frames_ratio_median']:.2f}x `analyze --json`",
    ]
