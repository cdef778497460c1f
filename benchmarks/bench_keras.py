"""`make bench-keras`: how long projecting a real Keras model takes (ResNet-50 on 8 GPUs, two strategies).

Runs the whole command a user would run, in a process of its own, and times it from start to exit::

    tfprof-towers project --keras-model examples/keras_resnet50.py --hardware 8x-a100-nvlink \
        --variants mirrored,mirrored_hierarchical

(``keras.applications.ResNet50(weights=None)``, a global batch of 256: each strategy's graph holds
eight replicas of the model's training step.)  The command's progress lines (one per strategy, as its
graph is built, with its wall and CPU seconds) are passed through; the benchmark line at the end gives
the whole command's wall time against the limit it must stay under on a 2-core machine, the load average
around it (the machine may be shared: the builds' CPU seconds say what they cost whatever the load), and
each strategy's projected step.

    python -m benchmarks.bench_keras [--hardware NAME] [--variants a,b] [--model FILE] [--batch N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "examples" / "keras_resnet50.py"
#: The whole command must finish within this on a 2-core machine.
LIMIT_S = 300.0


def run(model: Path, hardware: str, variants: str, batch: int | None) -> tuple[float, dict, str]:
    """The command's wall time, its JSON output and its stderr (the progress lines)."""
    argv = [sys.executable, "-m", "tfprof_towers", "project", "--keras-model", str(model),
            "--hardware", hardware, "--variants", variants, "--json"]
    argv += ["--batch", str(batch)] if batch else []
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bench-keras: the projection failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1:]}")
    return took, json.loads(proc.stdout), proc.stderr


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, default=MODEL)
    p.add_argument("--hardware", default="8x-a100-nvlink")
    p.add_argument("--variants", default="mirrored,mirrored_hierarchical")
    p.add_argument("--batch", type=int, default=None)
    args = p.parse_args(argv)
    load_before = os.getloadavg()[0]
    took, doc, stderr = run(args.model, args.hardware, args.variants, args.batch)
    load_after = os.getloadavg()[0]
    cpu = []
    for line in stderr.splitlines():
        if ": graph built for " in line or ": no graph: " in line:
            print(f"  {line}")
            found = re.search(r", (\d+) s of CPU$", line)
            cpu += [int(found.group(1))] if found else []
    for e in doc["variants"]:
        step = e.get("projected_step_s")
        shown = f"{step['overlapped'] * 1e3:.1f} ms projected step" if step else e.get("error")
        print(f"  {e['name']}: {shown}")
    count = doc["profile"]["accelerator"]["count"]
    verdict = "within" if took <= LIMIT_S else "OVER"
    batch = doc["keras_model"]["global_batch"]
    print(f"bench-keras: {args.model.name} on {count} GPUs ({args.hardware}), {len(doc['variants'])} "
          f"strategies ({args.variants}), global batch {batch}: whole command {took:.0f} s, "
          f"{verdict} the {LIMIT_S:.0f} s limit ({os.cpu_count()} cores, load average {load_before:.1f} "
          f"before, {load_after:.1f} after); the graph builds took "
          f"{' + '.join(f'{c} s' for c in cpu)} of CPU")
    return 0 if took <= LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
