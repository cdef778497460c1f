"""The bench figures' shared helper: arithmetic, process timing, formatting and the command line.

It measures nothing itself.  Every figure of ``make bench`` (:mod:`.bench_overhead`,
:mod:`.bench_harness`, :mod:`.bench_fork`, and the parse and allocator figures that :mod:`.bench`
takes from :mod:`.bench_parse` and :mod:`.bench_memory`) is one :class:`Part`; :func:`run` runs
some of them, rewrites the output file as each part finishes and prints their report.  This
module imports no other benchmark, so no figure's module imports another through it.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.paths import write_json
from tfprof_towers.variants.config import PRESETS
from tfprof_towers.variants.registry import BUILTIN_NAMES, CLUSTER_NAMES

#: The cluster variant whose overhead is measured (a cluster runs as several processes, so its
#: figure comes from a whole `profile --workers 2` run's record; see bench_overhead).
CLUSTER_VARIANT = "multi_worker"
CLUSTER_WORKERS = 2
#: Every family: each tf1-graph and tf2-strategy built-in, and one cluster variant.
DEFAULT_VARIANTS = (*BUILTIN_NAMES, CLUSTER_VARIANT)

SCHEMA = 1
DEFAULT_OUT = Path("reports") / "bench.json"
#: Every part of ``make bench``, in the order they run and print.
ALL_PARTS = ("overhead", "harness", "fork", "parse", "allocator")
REPO = Path(__file__).resolve().parents[1]
#: How `profile` is started (after the interpreter): the real command line.
PROFILE_COMMAND: tuple[str, ...] = ("-m", "tfprof_towers")

Say = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    """What a bench run measures and how often (the command line's options)."""

    preset: str = "cpu"
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    rounds: int = 10
    block_steps: int = 4
    warmup: int = 5
    parts: tuple[str, ...] = ALL_PARTS
    sweep: bool = False
    profile_runs: int = 3
    cluster_runs: int = 1  # whole `profile --workers 2` runs (each starts every task's TensorFlow afresh)
    overhead_runs: int = 3  # runs each overhead figure is the median of (processes; a cluster's whole runs)
    collection_pairs: int = 4  # pairs of first calls (collection on, off) per TF2 variant: an even count
    fork_variants: tuple[str, ...] = ("single", "mirrored")  # a TF1 graph and a TF2 strategy
    full_parse: bool = False
    out: Path = DEFAULT_OUT
    timeout_s: float = 900.0
    python: str = field(default=sys.executable)
    quick: bool = False  # --quick: every part on small sizes (the parse benchmark's too)


#: --quick: enough to see every code path run, not to trust the numbers.
QUICK = BenchOptions(preset="tiny", rounds=2, block_steps=3, warmup=1, profile_runs=1, quick=True,
                     fork_variants=("single",), overhead_runs=1, collection_pairs=1)


@dataclass(frozen=True)
class Part:
    """One figure of the bench: its key in the output document, how it is measured and printed."""

    key: str
    measure: Callable[[BenchOptions, Say], dict[str, Any]]
    format: Callable[[Mapping[str, Any]], list[str]]


# --------------------------------------------------------------------------- arithmetic


@dataclass(frozen=True)
class Spread:
    """min / median / max of repeated measurements."""

    min: float
    median: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        vals = sorted(float(v) for v in values)
        if not vals:
            return None
        return cls(vals[0], statistics.median(vals), vals[-1], len(vals))

    def fmt(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        f = f"{{:.{digits}f}}"
        parts = (f.format(x * scale) for x in (self.min, self.median, self.max))
        return " / ".join(parts) + unit


def spread_json(s: Spread | None) -> dict[str, float] | None:
    """A spread as the output document holds it (None stays None)."""
    return None if s is None else asdict(s)


def median_ratio(on: Sequence[float], off: Sequence[float]) -> float | None:
    """median(on) / median(off), or None when either side is empty or off is zero."""
    if not on or not off:
        return None
    base = statistics.median(off)
    return statistics.median(on) / base if base > 0 else None


# --------------------------------------------------------------------------- process timing


def profile_argv(opts: BenchOptions, out: Path, argv: Sequence[str] = ()) -> list[str]:
    """The whole `tfprof-towers profile` command line a figure times."""
    return [opts.python, *PROFILE_COMMAND, "profile", "--preset", opts.preset, *argv, "--out", str(out)]


def timed_profile(opts: BenchOptions, out: Path, argv: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> float:
    """Runs one whole `profile` into ``out``, start to exit: its wall seconds (a failure raises)."""
    cmd = profile_argv(opts, out, argv)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout_s,
                          env=None if env is None else dict(env))
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (exit {proc.returncode}): {proc.stderr[-500:]}")
    return total


# --------------------------------------------------------------------------- formatting


def short(v: Any) -> str:
    """A value in at most 200 characters (JSON for a dict or list)."""
    text = json.dumps(v, default=str) if isinstance(v, dict | list) else str(v)
    return text if len(text) <= 200 else text[:197] + "..."


def num(x: float | None, digits: int = 3) -> str:
    """A number to ``digits`` places, or "-" for none."""
    return "-" if x is None else f"{x:.{digits}f}"


def ms(x: float | None) -> str:
    """Seconds as milliseconds, or "-" for none."""
    return "-" if x is None else f"{x * 1e3:.1f} ms"


def machine() -> dict[str, Any]:
    """The machine a bench ran on: its name, CPUs, Python and load."""
    return {
        "node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str], prog: str = "python -m benchmarks.bench", description: str = "",
               parts: tuple[str, ...] = ALL_PARTS, out: Path = DEFAULT_OUT) -> BenchOptions:
    """A bench's options from its command line (``parts``: the figures it may run)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--preset", choices=sorted(PRESETS), help="workload size [default: cpu]")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help="built-ins to measure: tf1-graph, tf2-strategy and cluster ones [every tf1-graph and "
                        f"tf2-strategy built-in, and {CLUSTER_VARIANT}]")
    p.add_argument("--rounds", type=_positive, help=f"off/on block pairs per setting [{BenchOptions.rounds}]")
    p.add_argument("--block-steps", type=_positive, help=f"steps per block [{BenchOptions.block_steps}]")
    p.add_argument("--profile-runs", type=int, help=f"whole profile runs [{BenchOptions.profile_runs}]")
    p.add_argument("--cluster-runs", type=int,
                   help=f"whole `profile --workers 2` runs [{BenchOptions.cluster_runs}]")
    p.add_argument("--overhead-runs", type=_positive,
                   help="runs each variant's profiler overhead is the median of: processes of a "
                        f"single-process variant, whole runs of a cluster one [{BenchOptions.overhead_runs}]")
    p.add_argument("--collection-pairs", type=int,
                   help="pairs of fresh processes timing a TF2 variant's first call with graph collection on "
                        f"and off, per variant (the harness figure's) [{BenchOptions.collection_pairs}]")
    p.add_argument("--sweep", action="store_true",
                   help="also measure four other tracer settings' overhead (about 4x the overhead part)")
    p.add_argument("--no-sweep", action="store_true", help="the default: only the harness's profiler setting")
    p.add_argument("--full-parse", action="store_true",
                   help="the parse benchmark at its full size (as `make bench-parse`), not its small one")
    p.add_argument("--only", default=",".join(parts), metavar="PARTS",
                   help=f"which figures: {', '.join(parts)} (comma-separated) [all]")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: tiny preset, 2 rounds of 3 steps, 1 profile run (unless given)")
    p.add_argument("--out", type=Path, default=out)
    a = p.parse_args(list(argv))
    variants = tuple(v.strip() for v in a.variants.split(",") if v.strip())
    unknown = [v for v in variants if v not in BUILTIN_NAMES + CLUSTER_NAMES]
    if unknown:
        p.error(f"unknown variant(s): {', '.join(unknown)}")
    only = tuple(x.strip() for x in a.only.split(",") if x.strip())
    if not only or set(only) - set(parts):
        p.error(f"--only takes some of: {', '.join(parts)}")
    base = QUICK if a.quick else BenchOptions()
    given = {
        "preset": a.preset, "rounds": a.rounds, "block_steps": a.block_steps,
        "profile_runs": a.profile_runs, "cluster_runs": a.cluster_runs, "overhead_runs": a.overhead_runs,
        "collection_pairs": a.collection_pairs,
    }
    return replace(
        base, variants=variants, sweep=a.sweep and not a.no_sweep, parts=only, out=a.out,
        full_parse=a.full_parse,
        **{k: v for k, v in given.items() if v is not None},
    )


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return v


def say(msg: str) -> None:
    """A progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def run(opts: BenchOptions, parts: Mapping[str, Part]) -> int:
    """Measures ``opts.parts`` of ``parts`` in order, rewriting ``opts.out`` after each; prints the report."""
    started = time.perf_counter()
    doc: dict[str, Any] = {
        "schema": SCHEMA, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "options": {**asdict(opts), "out": str(opts.out)},
    }
    say(f"tfprof-towers bench: preset {opts.preset}, {len(opts.variants)} variant(s)")
    for name, part in parts.items():  # what is not measured yet says so, in every rewrite
        doc[part.key] = ({"skipped": "not measured yet (the bench stopped before it)"} if name in opts.parts
                         else {"skipped": f"not in --only {','.join(opts.parts)}"})
    for name, part in parts.items():
        if name not in opts.parts:
            continue
        t0 = time.perf_counter()
        doc[part.key] = part.measure(opts, say)
        doc.setdefault("part_wall_s", {})[name] = time.perf_counter() - t0
        doc["bench_wall_s"] = time.perf_counter() - started
        write_json(opts.out, doc)  # each part kept as soon as it is measured
        say(f"  {name}: {doc['part_wall_s'][name]:.0f} s (wrote {opts.out})")
    doc["bench_wall_s"] = time.perf_counter() - started
    write_json(opts.out, doc)
    print("\n".join([*report_lines(doc, parts), f"wrote {opts.out} ({doc['bench_wall_s']:.0f} s)"]))
    return 0


def run_alone(name: str, part: Part, description: str, argv: Sequence[str] | None = None) -> int:
    """Measures one figure, ``python -m benchmarks.bench_<name>``, into ``reports/bench_<name>.json``."""
    opts = parse_args(sys.argv[1:] if argv is None else argv, prog=f"python -m benchmarks.bench_{name}",
                      description=description, parts=(name,), out=Path("reports") / f"bench_{name}.json")
    return run(opts, {name: part})


def report_lines(doc: Mapping[str, Any], parts: Mapping[str, Part]) -> list[str]:
    """The printed report of a bench document, part by part."""
    lines: list[str] = []
    for part in parts.values():
        got = doc.get(part.key) or {"skipped": "absent"}
        lines += [f"{part.key}: skipped ({got['skipped']})"] if "skipped" in got else part.format(got)
        lines.append("")
    return lines


def cluster_argv(variant: str) -> list[str]:
    """`profile`'s arguments for a loopback cluster run of ``variant``."""
    ps = ["--ps", "1"] if variant == "parameter_server" else []
    return ["--workers", str(CLUSTER_WORKERS), *ps, "--variants", variant]
