"""`make bench-memory`: the memory estimate against the measured peak; what the host's BFC allocator costs.

1. **Estimate vs measured**: one ``profile`` at a preset (default ``cpu``) of every built-in variant
   of both families on logical CPU devices; per variant and device, the estimate at the run's size
   (``projection.json`` -> ``variants[].memory_at_run``, :func:`.projection.graphcost.estimate_memory`)
   beside the measured peak (``summary.json`` -> ``variants[].memory``, basis ``measured``: the host
   allocator's events by the device each op was placed on, plus the device's variables) and their ratio;
   the estimate's range over the executor's orders (low, high) and whether the measured peak lies in
   [0.9 x low, 1.1 x high]; how many devices are within 10% of the point estimate and inside the range.
2. **Allocator cost on the step**: the seed step's shape at the cpu preset timed in ``--rounds`` (default 3)
   interleaved pairs of processes with ``TF_CPU_ALLOCATOR_USE_BFC=true`` (the harness's default) and
   ``=false`` (TensorFlow's default host allocator): the median ratio of the median step, in the process's
   CPU time and in wall time (:func:`allocator_step_cost`).
3. **Allocator cost on profiles** (only with ``--cost-variants``): those variants profiled with
   ``TF_CPU_ALLOCATOR_USE_BFC=true`` and ``=false``, ``--rounds`` runs of
   each, interleaved (default: ``single``, 3 runs each); per variant the ratio of the fastest timed step
   (the figure a busy shared machine disturbs least), of the median one, and the median of each round's
   paired ratio (its BFC run's median step over the default run's right after it), BFC over default.

Prints both tables; writes ``reports/bench_memory.json``.  ``--variants a,b`` and ``--preset P`` narrow it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.summary import in_range
from tfprof_towers.variants import registry

REPO = Path(__file__).resolve().parents[1]


def profile(out: Path, preset: str, variants: list[str], bfc: bool) -> dict:
    """One ``tfprof-towers profile`` run; its summary.json and projection.json."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true" if bfc else "false", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "tfprof_towers", "profile", "--preset", preset,
           "--variants", ",".join(variants), "--out", str(out)]
    # exit 1: a variant skipped or failed (NCCL without GPUs); the others are measured all the same
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"summary": json.loads((out / "summary.json").read_text()),
            "projection": json.loads((out / "projection.json").read_text())}


def estimate_rows(run: dict) -> list[dict]:
    """Per variant and measured device: estimate at the run's size, measured, ratio."""
    rows = []
    for v in run["summary"]["variants"]:
        for dev, m in sorted((v.get("memory") or {}).items()):
            if m.get("basis") != "measured" or not m.get("label"):
                continue
            est = m.get("estimated_peak_bytes")
            low, high = m.get("estimate_low_bytes"), m.get("estimate_high_bytes")
            rows.append({"variant": v["name"], "device": dev, "estimated": est, "measured": m["peak_bytes"],
                         "allocated": m.get("allocated_bytes"), "low": low, "high": high,
                         "ratio": None if not est or not m["peak_bytes"] else est / m["peak_bytes"],
                         "inside": (None if low is None or high is None
                                    else in_range(m["peak_bytes"], low, high))})
    return rows


def agreement_line(rows: list[dict]) -> str:
    """How many estimated devices the point estimate is within 10% of, and how many lie inside the range."""
    estimated = [r for r in rows if r["ratio"] is not None]
    near = sum(1 for r in estimated if abs(r["ratio"] - 1) <= 0.10)
    inside = sum(1 for r in estimated if r["inside"])
    return (f"{near} of {len(estimated)} devices within 10% of the point estimate (the queue's order); "
            f"{inside} of {len(estimated)} inside [0.9 x low, 1.1 x high] (give or take 256 B) of the "
            "executor's orders")


def step_times(out: Path) -> dict[str, list[float]]:
    """Each variant's timed step times (seconds) from its record."""
    times = {}
    for rec in out.glob("variants/*/record.json"):
        doc = json.loads(rec.read_text())
        if doc.get("status") == "ok" and (doc.get("timings") or {}).get("step_times_s"):
            times[doc["name"]] = list(doc["timings"]["step_times_s"])
    return times


def allocator_cost(preset: str, variants: list[str], rounds: int) -> dict[str, dict]:
    """Per variant: its timed steps with the host's BFC allocator and with TensorFlow's default, from
    ``rounds`` interleaved ``profile`` runs of each: the fastest and the median step, and their ratios."""
    times: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    paired: dict[str, list[float]] = {}  # per round: its BFC run's median step over its default run's
    with tempfile.TemporaryDirectory(prefix="bench-allocator-") as tmp:
        for r in range(rounds):
            medians: dict[bool, dict[str, float]] = {}
            for bfc in (True, False):
                out = Path(tmp) / f"{'bfc' if bfc else 'default'}{r}"
                profile(out, preset, variants, bfc)
                run_times = step_times(out)
                medians[bfc] = {name: statistics.median(t) for name, t in run_times.items() if t}
                for name, t in run_times.items():
                    times[bfc].setdefault(name, []).extend(t)
            for name in set(medians[True]) & set(medians[False]):
                paired.setdefault(name, []).append(medians[True][name] / medians[False][name])
    cost = {}
    for name in variants:
        on, off = times[True].get(name), times[False].get(name)
        if on and off:
            cost[name] = {"steps": [len(on), len(off)], "bfc_min_s": min(on), "default_min_s": min(off),
                          "min_ratio": min(on) / min(off), "bfc_median_s": statistics.median(on),
                          "default_median_s": statistics.median(off),
                          "median_ratio": statistics.median(on) / statistics.median(off),
                          "paired_ratios": paired.get(name, []),
                          "paired_median_ratio": (statistics.median(paired[name]) if paired.get(name)
                                                  else None)}
    return cost


#: The step the allocator's cost is timed on: the cpu preset's seed step (batch 16 x 256 rows, dim 256).
STEP_SHAPE = (4096, 256, 6)


def allocator_step_cost(rounds: int, steps: int = 30) -> dict[str, Any]:
    """The allocator's cost on one process's own step: ``rounds`` interleaved pairs of children
    (:mod:`benchmarks.allocator_child`), BFC then default, each timing ``steps`` steps of the seed step's
    shape; per pair, the BFC child's median step over the default child's, in the process's CPU time (what
    other jobs on shared cores disturb least) and in wall time; their medians over the pairs."""
    script = str(Path(__file__).with_name("allocator_child.py"))
    pairs: dict[str, list[float]] = {"cpu": [], "wall": [], "cpu_min": []}
    for _ in range(rounds):
        med = {}
        for bfc in (True, False):
            env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true" if bfc else "false"}
            done = subprocess.run([sys.executable, script, *map(str, STEP_SHAPE), str(steps)], env=env,
                                  capture_output=True, text=True, check=True)
            doc = json.loads(done.stdout.strip().splitlines()[-1])
            med[bfc] = {k: statistics.median(doc[f"{k}_s"]) for k in ("cpu", "wall")}
            med[bfc]["cpu_min"] = min(doc["cpu_s"])  # the step other jobs disturbed least
        for k in pairs:
            pairs[k].append(med[True][k] / med[False][k])
    return {"rounds": rounds, "steps": steps, "shape": list(STEP_SHAPE),
            **{f"{k}_ratios": v for k, v in pairs.items()},
            **{f"{k}_median_ratio": statistics.median(v) if v else None for k, v in pairs.items()}}


def step_cost_lines(cost: dict[str, Any]) -> list[str]:
    """The printed lines of :func:`allocator_step_cost`."""
    if not cost.get("cpu_ratios"):
        return ["host allocator cost on the step: no runs (--rounds 0)"]
    b, d, n = cost["shape"]
    each = {k: ", ".join(f"{x:.3f}" for x in cost[f"{k}_ratios"]) for k in ("cpu", "cpu_min", "wall")}
    return [f"host allocator cost on the step ({n} blocks of [{b}, {d}] fp32 with Adam, {cost['steps']} "
            f"steps, {cost['rounds']} interleaved pairs of processes): BFC / default, median step",
            f"  process CPU time: median ratio {cost['cpu_median_ratio']:.3f} (pairs: {each['cpu']})",
            f"  its fastest step: median ratio {cost['cpu_min_median_ratio']:.3f} (pairs: {each['cpu_min']})",
            f"  wall time:        median ratio {cost['wall_median_ratio']:.3f} (pairs: {each['wall']})"]


def allocator_lines(cost: dict[str, dict], rounds: int) -> list[str]:
    """The printed table of :func:`allocator_cost`."""
    lines = [f"host allocator cost ({rounds} runs each, interleaved): timed step with the BFC allocator / "
             "with TensorFlow's default",
             f"{'variant':24} {'fastest BFC':>12} {'default':>10} {'ratio':>7} "
             f"{'median BFC':>12} {'default':>10} {'ratio':>7}"]
    for name, c in cost.items():
        cells = [f"{c[k] * 1e3:9.2f} ms" for k in ("bfc_min_s", "default_min_s")]
        cells += [f"{c['min_ratio']:7.3f}"]
        cells += [f"{c[k] * 1e3:9.2f} ms" for k in ("bfc_median_s", "default_median_s")]
        lines.append(f"{name:24} {' '.join(cells)} {c['median_ratio']:7.3f}")
    for name, c in cost.items():
        if c.get("paired_median_ratio") is not None:
            each = ", ".join(f"{x:.3f}" for x in c["paired_ratios"])
            lines.append(f"{name}: median of the rounds' paired ratios (BFC run's median step / the default "
                         f"run's after it) {c['paired_median_ratio']:.3f} ({each})")
    if not cost:
        lines.append("(no runs: --rounds 0)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--variants", default=",".join(registry.names(registry.TF1_GRAPH)
                                                   + registry.names(registry.TF2_STRATEGY)))
    ap.add_argument("--cost-variants", default="",
                    help="variants whose profiled steps are also timed with and without the BFC allocator")
    ap.add_argument("--rounds", type=int, default=3, help="allocator on/off runs each (interleaved; 0: none)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        run = profile(Path(tmp) / "all", args.preset, args.variants.split(","), True)
    variants = [v for v in args.cost_variants.split(",") if v]
    cost = allocator_cost(args.preset, variants, args.rounds) if args.rounds and variants else {}
    step_cost = allocator_step_cost(args.rounds)
    rows = estimate_rows(run)
    print(f"memory at the {args.preset} preset, logical devices on this CPU: estimate vs measured")
    print("(measured: the requests, each rounded up to 256 B; blocks: as the allocator handed them out)")
    print("(low / high: the least and the most of the estimate over the executor's orders)")
    print(f"{'variant':24} {'device':15} {'estimated':>12} {'low':>12} {'high':>12} {'measured':>12} "
          f"{'est/meas':>9} {'in range':>8} {'blocks':>12}")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        est, low, high, blocks = ("-" if r[k] is None else f"{r[k]:,}"
                                  for k in ("estimated", "low", "high", "allocated"))
        inside = "-" if r["inside"] is None else ("yes" if r["inside"] else "NO")
        print(f"{r['variant']:24} {r['device']:15} {est:>12} {low:>12} {high:>12} {r['measured']:>12,} "
              f"{ratio:>9} {inside:>8} {blocks:>12}")
    print(agreement_line(rows))
    print("\n" + "\n".join(step_cost_lines(step_cost)))
    if cost:
        print("\n".join(allocator_lines(cost, args.rounds)))
    out = REPO / "reports" / "bench_memory.json"
    out.write_text(json.dumps({"preset": args.preset, "estimate_vs_measured": rows, "allocator_cost": cost,
                               "allocator_step_cost": step_cost}, indent=1))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
