"""Measures what the harness itself costs, figure by figure (`make bench`; writes reports/bench.json).

Each figure is a ratio or a breakdown taken inside one run, so that a busy shared machine slows
both sides of a comparison alike; each lives in its own module, runnable alone:

1. **Profiler overhead** (:mod:`.bench_overhead`): profiled over un-profiled step time per built-in
   variant of every family, per tracer setting: the median of 3 processes per variant (of 3 whole
   runs for a cluster variant).
2. **Harness overhead** (:mod:`.bench_harness`): whole default ``profile`` runs (and
   ``profile --workers 2`` runs), their wall time split into TensorFlow's and the harness's own
   (a TF2 first call's graph collection measured in paired fresh processes: :mod:`.bench_collection`).
3. **Fork server** (:mod:`.bench_fork`): the same ``profile`` with every child fresh
   (``TFPROF_TOWERS_FORK_SERVER=0``) and forked from the fork server.
4. **Parse speed**: the trace-parsing benchmark (``benchmarks.bench_parse``) at small
   sizes (``make bench-parse`` runs it at full size; ``--full-parse`` here).
5. **Host allocator**: what the host BFC allocator costs the timed steps
   (``benchmarks.bench_memory``).

Every figure prints min / median / max over its repeated measurements.  ``reports/bench.json``
is rewritten as each part finishes, so a bench stopped half-way keeps what it measured.  The
default measures only the harness's own profiler setting; ``--sweep`` adds the four other tracer
settings (about four times the overhead part's time).

    python -m benchmarks.bench [--preset cpu] [--rounds 10] [--profile-runs 3] [--sweep] [--quick]

``--quick`` (``make bench ARGS=--quick``) runs every part on small sizes; the test suite
runs it on one variant of each family (tests/e2e/test_bench_e2e.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks import bench_fork, bench_harness, bench_overhead
from benchmarks.common import ALL_PARTS, BenchOptions, Part, short
from benchmarks.common import parse_args as _parse_args
from benchmarks.common import report_lines as _report_lines
from benchmarks.common import run as _run

#: --quick: the parse benchmark's sizes (every path it times, on a small trace).
QUICK_PARSE = {"n_events": 20_000, "repeats": 1, "xprof": False, "big_events": 40_000, "whole_repeats": 1,
               "multihost": False}


def measure_parse(say: Callable[[str], None], full: bool = False) -> dict[str, Any]:
    """The trace-parsing benchmark (``benchmarks.bench_parse``), through the function it exposes:
    at its small sizes, or with ``full`` at its own (``make bench-parse``)."""
    try:
        mod = importlib.import_module("benchmarks.bench_parse")
    except ImportError as exc:
        return {"skipped": f"benchmarks/bench_parse.py not importable ({exc})"}
    fn = next((getattr(mod, n) for n in PARSE_ENTRY_POINTS if callable(getattr(mod, n, None))), None)
    if fn is None:
        return {"skipped": f"benchmarks.bench_parse exposes none of {', '.join(PARSE_ENTRY_POINTS)}"}
    say("  parse benchmark ...")
    if full:
        return dict(fn())
    import inspect

    accepted = inspect.signature(fn).parameters
    return dict(fn(**{k: v for k, v in QUICK_PARSE.items() if k in accepted}))


#: Names tried, in order, for the parse benchmark's "figures as a dict" function.
PARSE_ENTRY_POINTS = ("run_benchmark", "figures", "run")


def format_parse(doc: Mapping[str, Any]) -> list[str]:
    if "skipped" in doc:
        return [f"Parse benchmark: skipped ({doc['skipped']})"]
    try:  # the parse benchmark's own wording of its figures, when it has one
        text = importlib.import_module("benchmarks.bench_parse").report(dict(doc))
        return ["Parse benchmark:", *(f"  {line}" for line in str(text).splitlines())]
    except Exception:  # absent, or figures from another version of it: print them plainly
        return ["Parse benchmark:"] + [f"  {k}: {short(v)}" for k, v in doc.items()]


def measure_allocator(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """What the host's BFC allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``, which every profile sets so a
    CPU-only run records memory) costs the timed steps: :func:`benchmarks.bench_memory.allocator_cost`
    on the fork-server variants (a TF1 graph, a TF2 strategy), ``profile_runs`` interleaved runs each."""
    rounds = max(opts.profile_runs, 1)
    say(f"  allocator: {rounds} profile run(s) each of {', '.join(opts.fork_variants)}, BFC on and off")
    cost = importlib.import_module("benchmarks.bench_memory").allocator_cost(
        opts.preset, list(opts.fork_variants), rounds)
    return {"rounds": rounds, "variants": cost}


def format_allocator(part: Mapping[str, Any]) -> list[str]:
    from benchmarks.bench_memory import allocator_lines

    return allocator_lines(part.get("variants") or {}, int(part.get("rounds") or 0))


def parts() -> dict[str, Part]:
    """Every figure of ``make bench``, in the order they run and print."""
    return {
        "overhead": bench_overhead.PART,
        "harness": bench_harness.PART,
        "fork": bench_fork.PART,
        "parse": Part("parse", lambda opts, say: measure_parse(say, opts.full_parse), format_parse),
        "allocator": Part("host_allocator", lambda opts, say: measure_allocator(opts, say), format_allocator),
    }


def parse_args(argv: Sequence[str]) -> BenchOptions:
    """``make bench``'s options from its command line."""
    return _parse_args(argv, description=__doc__.splitlines()[0], parts=ALL_PARTS)


def report_lines(doc: Mapping[str, Any]) -> list[str]:
    """The printed report of a bench.json document."""
    return _report_lines(doc, parts())


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the chosen figures, writes reports/bench.json after each and prints them."""
    return _run(parse_args(list(sys.argv[1:] if argv is None else argv)), parts())


if __name__ == "__main__":
    sys.exit(main())
