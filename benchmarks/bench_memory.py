"""`make bench-memory`: the memory estimate against the measured peak; what the host's BFC allocator costs.

1. **Estimate vs measured**: one ``profile`` at a preset (default ``cpu``) of every built-in variant
   of both families on logical CPU devices; per variant and device, the estimate at the run's size
   (``projection.json`` -> ``variants[].memory_at_run``, :func:`.projection.graphcost.estimate_memory`)
   beside the measured peak (``summary.json`` -> ``variants[].memory``, basis ``measured``: the host
   allocator's events by the device each op was placed on, plus the device's variables) and their ratio.
2. **Allocator cost**: the same variants' median timed step with ``TF_CPU_ALLOCATOR_USE_BFC=true``
   (the harness's default) and ``=false`` (TensorFlow's default host allocator), runs interleaved;
   the ratio per variant.

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
            rows.append({"variant": v["name"], "device": dev, "estimated": est, "measured": m["peak_bytes"],
                         "allocated": m.get("allocated_bytes"),
                         "ratio": None if not est or not m["peak_bytes"] else est / m["peak_bytes"]})
    return rows


def medians(run: dict) -> dict[str, float]:
    return {v["name"]: v["step_time_s"]["median"] for v in run["summary"]["variants"]
            if v.get("status") == "ok" and (v.get("step_time_s") or {}).get("median")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--variants", default=",".join(registry.names(registry.TF1_GRAPH)
                                                   + registry.names(registry.TF2_STRATEGY)))
    ap.add_argument("--rounds", type=int, default=2, help="allocator on/off runs each (interleaved)")
    args = ap.parse_args(argv)
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        runs = {True: [], False: []}
        for r in range(args.rounds):
            for bfc in (True, False):
                runs[bfc].append(profile(Path(tmp) / f"{'bfc' if bfc else 'default'}{r}", args.preset,
                                         variants, bfc))
    rows = estimate_rows(runs[True][0])
    print(f"memory at the {args.preset} preset, logical devices on this CPU: estimate vs measured")
    print("(measured: the requests, each rounded up to 256 B; blocks: as the allocator handed them out)")
    print(f"{'variant':24} {'device':16} {'estimated':>12} {'measured':>12} {'est/meas':>9} {'blocks':>12}")
    for r in rows:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        est = "-" if r["estimated"] is None else f"{r['estimated']:,}"
        blocks = "-" if r["allocated"] is None else f"{r['allocated']:,}"
        print(f"{r['variant']:24} {r['device']:16} {est:>12} {r['measured']:>12,} {ratio:>9} {blocks:>12}")
    cost = {}
    for name in variants:
        on = [m[name] for m in map(medians, runs[True]) if name in m]
        off = [m[name] for m in map(medians, runs[False]) if name in m]
        if on and off:
            cost[name] = {"bfc_s": statistics.median(on), "default_s": statistics.median(off),
                          "ratio": statistics.median(on) / statistics.median(off)}
    print("\nhost allocator cost: median timed step with the BFC allocator / with TensorFlow's default")
    for name, c in cost.items():
        print(f"{name:24} {c['bfc_s'] * 1e3:9.2f} ms {c['default_s'] * 1e3:9.2f} ms {c['ratio']:7.3f}")
    if cost:
        print(f"median over variants: {statistics.median(c['ratio'] for c in cost.values()):.3f}")
    out = REPO / "reports" / "bench_memory.json"
    out.write_text(json.dumps({"preset": args.preset, "estimate_vs_measured": rows, "allocator_cost": cost},
                              indent=1))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
