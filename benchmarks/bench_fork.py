"""Measures the fork server: the same `profile` with every TensorFlow child fresh, then forked.

One after the other: the whole command's wall time, each variant's median step time (forked over
fresh), and whether losses, placements and trace ops are identical.

    python -m benchmarks.bench_fork [--preset cpu] [--quick]

``make bench`` runs it as its third figure; run alone it writes ``reports/bench_fork.json``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_harness import profile_once
from benchmarks.common import BenchOptions, Part, ms, num, run_alone


def measure_fork(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """The same `profile` with every TensorFlow child fresh, then forked from the fork server."""
    from tfprof_towers.procs.forkserver import ENV_SWITCH

    variants = list(opts.fork_variants)
    argv = ["--variants", ",".join(variants)]
    runs: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tfprof-bench-fork-") as tmp:
        for mode in ("fresh", "forked"):
            say(f"  fork server: `profile --preset {opts.preset} {' '.join(argv)}`, children {mode} ...")
            env = {k: v for k, v in os.environ.items() if k != ENV_SWITCH}
            if mode == "fresh":
                env[ENV_SWITCH] = "0"
            runs[mode] = profile_once(opts, Path(tmp) / mode, argv, env)
        compared = {v: compare_children(Path(tmp) / "fresh", Path(tmp) / "forked", v) for v in variants}
    return {
        "method": "one `profile` run with every TensorFlow child started fresh "
                  "(TFPROF_TOWERS_FORK_SERVER=0), "
                  "then one forked from the fork server; per variant: median step time forked / fresh, "
                  "and whether losses, placements (node -> device and source lines) and trace ops (the TF "
                  "ops its events ran, not the runtime's own events) are equal",
        "preset": opts.preset, "variants": compared,
        "runs": {m: {k: r[k] for k in ("total", "tf_imports", "tf_start_s", "lower_bound_s")}
                 for m, r in runs.items()},
        "identical": all(c["same_losses"] and c["same_placement"] and c["same_ops"]
                         for c in compared.values()),
    }


def compare_children(fresh: Path, forked: Path, variant: str) -> dict[str, Any]:
    """One variant's records and traces, fresh against forked."""
    from tfprof_towers.trace.load import load_trace

    recs = [json.loads((run / "variants" / variant / "record.json").read_text()) for run in (fresh, forked)]
    if any(r.get("status") != "ok" for r in recs):
        return {"status": [r.get("status") for r in recs], "same_losses": False, "same_placement": False,
                "same_ops": False, "step_ratio": None}
    medians = [r["timings"]["step_time_s"]["median"] for r in recs]
    placements = [{n["name"]: (n["device"], [(x["file"], x["line"]) for x in n.get("sources") or ()])
                   for n in r["placement"]["nodes"]} for r in recs]
    ops = [trace_ops(load_trace(run / "tensorboard" / variant).events) for run in (fresh, forked)]
    return {"fresh_step_s": medians[0], "forked_step_s": medians[1],
            "step_ratio": medians[1] / medians[0] if medians[0] else None,
            "same_losses": recs[0].get("math") == recs[1].get("math"),
            "same_placement": placements[0] == placements[1], "same_ops": ops[0] == ops[1]}


def trace_ops(events: Any) -> set[str]:
    """The TensorFlow ops a trace ran (``tf_op`` of its events), not the runtime's own events: those
    come and go with the process (an allocator growing its pool in one run's profiled steps and not
    in the other's is a ``BasicCPUAllocator::Alloc`` event in one trace only)."""
    ops = events["tf_op"].astype(str)
    return set(ops[ops != ""])


def format_fork(doc: Mapping[str, Any]) -> list[str]:
    lines = [f"Fork server: the same `profile --preset {doc['preset']}`, children fresh then forked"]
    for mode, r in doc["runs"].items():
        lines.append(f"  {mode:<7} whole command {r['total']:.1f} s, "
                     f"{r['tf_imports']:.0f} TensorFlow import(s), "
                     f"children's start-up {r['tf_start_s']:.1f} s")
    for v, c in doc["variants"].items():
        same = ", ".join(k[5:] for k in ("same_losses", "same_placement", "same_ops") if c.get(k))
        lines.append(f"  {v:<22} step forked / fresh {num(c.get('step_ratio'), 2):>5} "
                     f"({ms(c.get('forked_step_s'))} / {ms(c.get('fresh_step_s'))}); "
                     f"identical: {same or 'NOTHING'}")
    lines.append(f"  losses, placements and trace ops identical: {'yes' if doc['identical'] else 'NO'}")
    return lines


#: This figure as a part of a bench run (its functions looked up when called, so a test may replace them).
PART = Part("fork_server", lambda opts, say: measure_fork(opts, say), lambda doc: format_fork(doc))


def main(argv: Sequence[str] | None = None) -> int:
    """Measures this figure alone and writes ``reports/bench_fork.json``."""
    return run_alone("fork", PART, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
