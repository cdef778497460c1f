"""Measures what graph collection adds to a TF2 variant's first call: the harness's part of that call.

A TF2 variant's capture child makes its step's first call -- Python tracing, Grappler, partitioning
and the first step, which any program running the step pays -- with graph collection on, to read the
partition graphs (the placement).  What collection adds on top is the harness's own cost; the rest is
TensorFlow's.  Per built-in TF2 variant, pairs of fresh processes (forked from a fork server that
imported TensorFlow once) build the step at the preset and time its first call, one with collection
on (``collect_partition_graphs``, as the capture child) and one with it off (``step()``, as a plain
program), the pair's order alternating; the figures are the median of the pairs' ratios (on / off)
and of their differences.

    python -m benchmarks.bench_collection [--preset cpu] [--collection-pairs 4] [--quick]

``make bench`` runs it inside its harness figure (:mod:`.bench_harness`), which counts a TF2 variant's
first call as ``graph collection`` (the harness's) and ``first call`` (TensorFlow's) by the ratio;
run alone it writes ``reports/bench_collection.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.collection_child import OFF, ON
from benchmarks.common import REPO, BenchOptions, Part, Spread, run_alone, spread_json
from tfprof_towers.rundir.paths import write_json
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import PRESETS

#: What the fork server imports once: TensorFlow and the runners, and the child.
PRELOAD = ("tfprof_towers.capture.preload", "benchmarks.collection_child")


def pair_order(i: int) -> tuple[str, str]:
    """Pair ``i``'s order: collection on first in even pairs, off first in odd ones."""
    return (ON, OFF) if i % 2 == 0 else (OFF, ON)


def collection_figures(on: Sequence[float], off: Sequence[float], on_cpu: Sequence[float] = (),
                       off_cpu: Sequence[float] = ()) -> dict[str, Any]:
    """One variant's pairs (first-call wall seconds with collection on, off, pair by pair; and their
    process CPU seconds) in figures: the median of the paired ratios and of the paired differences,
    their spreads, and the median of the paired CPU-time ratios (less moved by a loaded machine)."""
    ratios = paired_ratios(on, off)
    diffs = [a - b for a, b in zip(on, off)]
    cpu = paired_ratios(on_cpu, off_cpu)
    return {"on_s": list(on), "off_s": list(off), "on_cpu_s": list(on_cpu), "off_cpu_s": list(off_cpu),
            "pairs": len(diffs), "ratio": statistics.median(ratios) if ratios else None,
            "diff_s": statistics.median(diffs) if diffs else None,
            "cpu_ratio": statistics.median(cpu) if cpu else None,
            "ratios": spread_json(Spread.of(ratios)), "diffs_s": spread_json(Spread.of(diffs))}


def paired_ratios(on: Sequence[float], off: Sequence[float]) -> list[float]:
    """Each pair's on / off (pairs whose off is not positive left out)."""
    return [a / b for a, b in zip(on, off) if b > 0]


@dataclass(frozen=True)
class CollectionCost:
    """What graph collection adds to a first call, as measured: each variant's ratio (on / off), and
    every pair's for a first call no variant's pairs measured (a cluster task's, a TF2 variant measured
    nowhere).  Each is the larger of the median wall-time ratio and the median CPU-time ratio, so that
    other jobs' load on the machine, which moves the wall times most, never makes the harness's part
    smaller than its CPU work says.  ``pooled`` None: nothing was measured."""

    ratios: Mapping[str, float] = field(default_factory=dict)
    pooled: float | None = None

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> CollectionCost | None:
        """From :func:`measure_collection`'s document (None: not measured)."""
        if not doc or "skipped" in doc:
            return None
        ratios = {v: r for v, f in (doc.get("variants") or {}).items()
                  if (r := larger(f.get("ratio"), f.get("cpu_ratio"))) is not None}
        return cls(ratios, larger(doc.get("pooled_ratio"), doc.get("pooled_cpu_ratio")))

    def ratio(self, variant: str) -> float | None:
        return self.ratios.get(variant, self.pooled)

    def cost(self, variant: str, first_call_s: float) -> float:
        """Seconds graph collection added to ``variant``'s first call of ``first_call_s``: the call less
        the call at the measured ratio, ``first_call_s x (1 - 1/ratio)`` (0 where the ratio is at most
        1: collection measured free); with no ratio at all, the whole call (counted as the harness's)."""
        r = self.ratio(variant)
        if r is None:
            return first_call_s
        return first_call_s * (1.0 - 1.0 / r) if r > 1.0 else 0.0


def larger(*ratios: float | None) -> float | None:
    """The largest of the ratios given (None where none is)."""
    known = [float(r) for r in ratios if r is not None]
    return max(known) if known else None


def cost_of(collection: CollectionCost | None, variant: str, first_call_s: float) -> float:
    """:meth:`CollectionCost.cost`, or the whole call where nothing was measured."""
    return first_call_s if collection is None else collection.cost(variant, first_call_s)


def tf2_variants(opts: BenchOptions) -> list[str]:
    """The built-in TF2 variants among the bench's."""
    return [v for v in opts.variants
            if (b := registry.builtin(v)) is not None and b.family == registry.TF2_STRATEGY]


def _run_child(opts: BenchOptions, variant: str, mode: str, tmp: Path, label: str) -> dict[str, Any]:
    """One fresh process's first call, supervised; forked from the fork server while one serves."""
    from tfprof_towers.procs import supervise

    spec = {"variant": variant, "mode": mode, "preset": asdict(PRESETS[opts.preset]), "accelerators": None}
    spec_path, result_path, err = (tmp / f"{label}.spec.json", tmp / f"{label}.result.json",
                                   tmp / f"{label}.stderr.txt")
    write_json(spec_path, spec)
    args = (str(spec_path), str(result_path))
    ended = supervise.run(supervise.Command(
        (opts.python, "-m", "benchmarks.collection_child", *args), err,
        deadline_s=opts.timeout_s, env=supervise.tf_child_env(), cwd=str(REPO), label=label,
        entry=supervise.Entry("benchmarks.collection_child:collection_entry", args)))
    if not ended.ok or not result_path.is_file():
        tail = "\n".join(err.read_text(errors="replace").strip().splitlines()[-5:]) if err.is_file() else ""
        raise RuntimeError(f"first-call child for {variant} ({mode}) failed "
                           f"(exit {ended.returncode}):\n{tail}")
    return json.loads(result_path.read_text())


def measure_collection(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """Each TF2 variant's first call with graph collection on and off, ``opts.collection_pairs`` pairs."""
    variants = tf2_variants(opts)
    if not variants or opts.collection_pairs < 1:
        return {"skipped": "no tf2-strategy variant" if not variants else "--collection-pairs 0"}
    from tfprof_towers.procs import forkserver, supervise

    per_variant: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="tfprof-bench-collection-") as tmp, forkserver.serving(
            PRELOAD, Path(tmp) / "fork-server.txt", supervise.tf_child_env(), say):
        for v in variants:
            say(f"  graph collection: {v}'s first call, on and off, {opts.collection_pairs} pair(s) ...")
            times: dict[str, list[float]] = {ON: [], OFF: [], ON + "_cpu": [], OFF + "_cpu": []}
            for i in range(opts.collection_pairs):
                for mode in pair_order(i):
                    res = _run_child(opts, v, mode, Path(tmp), f"{v}-{i}-{mode}")
                    if "skipped" in res:
                        skipped[v] = res["skipped"]
                        break
                    times[mode].append(float(res["first_call_s"]))
                    times[mode + "_cpu"].append(float(res["first_call_cpu_s"]))
                if v in skipped:
                    break
            if v not in skipped:
                per_variant[v] = collection_figures(times[ON], times[OFF], times[ON + "_cpu"],
                                                    times[OFF + "_cpu"])
    ratios = [r for f in per_variant.values() for r in paired_ratios(f["on_s"], f["off_s"])]
    cpu = [r for f in per_variant.values() for r in paired_ratios(f["on_cpu_s"], f["off_cpu_s"])]
    return {
        "method": "per tf2-strategy variant, pairs of processes forked from a fork server that imported "
                  "TensorFlow once; each builds the step at the preset and times its first call, with "
                  "graph collection on (collect_partition_graphs, as the capture child) or off (step(), "
                  "as a plain program); the pair's order alternates; median of the pairs' ratios "
                  "(on / off, wall and process CPU time) and differences; a first call counts the larger "
                  "of the two ratios",
        "preset": opts.preset, "pairs": opts.collection_pairs, "variants": per_variant,
        "skipped_variants": skipped,
        "pooled_ratio": statistics.median(ratios) if ratios else None,
        "pooled_cpu_ratio": statistics.median(cpu) if cpu else None,
    }


def format_collection(doc: Mapping[str, Any]) -> list[str]:
    if "skipped" in doc:
        return [f"Graph collection: skipped ({doc['skipped']})"]
    lines = [f"Graph collection: a TF2 variant's first call (trace, optimise, first step) with collection "
             f"on / off, {doc['pairs']} pair(s) of fresh processes, preset {doc['preset']}"]
    for v, f in doc["variants"].items():
        ratio, diff, cpu = f.get("ratio"), f.get("diff_s"), f.get("cpu_ratio")
        on, off = statistics.median(f["on_s"]), statistics.median(f["off_s"])
        lines.append(f"  {v:<22} on {on:.3f} s, off {off:.3f} s (medians); ratio "
                     f"{'n/a' if ratio is None else f'{ratio:.3f}'}, difference "
                     f"{'n/a' if diff is None else f'{diff * 1e3:+.0f} ms'}, CPU-time ratio "
                     f"{'n/a' if cpu is None else f'{cpu:.3f}'} (medians of the pairs)")
    for v, why in (doc.get("skipped_variants") or {}).items():
        lines.append(f"  {v:<22} skipped: {why}")
    pooled, pooled_cpu = doc.get("pooled_ratio"), doc.get("pooled_cpu_ratio")
    if pooled is not None:
        lines.append(f"  every pair: median ratio {pooled:.3f}, CPU-time ratio "
                     f"{'n/a' if pooled_cpu is None else f'{pooled_cpu:.3f}'} "
                     "(for a first call no pair measured)")
    lines.append("  a first call counts the larger of its wall-time and CPU-time ratios as graph collection: "
                 "s x (1 - 1/ratio)")
    return lines


#: This figure as a part of a bench run (its functions looked up when called, so a test may replace them).
PART = Part("graph_collection", lambda opts, say: measure_collection(opts, say),
            lambda doc: format_collection(doc))


def main(argv: Sequence[str] | None = None) -> int:
    """Measures this figure alone and writes ``reports/bench_collection.json``."""
    return run_alone("collection", PART, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
