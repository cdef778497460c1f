"""Your numbers in pandas: load a run directory (or a trace), group by, plot.

    python examples/notebook.py reports/latest            # a run directory
    python examples/notebook.py RUN_DIR --plot wall.png    # and a bar chart, if matplotlib is installed

The same lines work in a notebook cell by cell (docs/notebook.md).  No TensorFlow.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tfprof_towers as tt


def wall_per_step(p):
    """Each variant's and device's wall time per step, by category (columns), in milliseconds."""
    steps = p.wall.groupby("variant", observed=True).step.nunique()
    w = p.wall.groupby(["variant", "device", "category"], observed=True).seconds.sum().reset_index()
    w["ms"] = w.seconds / w.variant.map(steps).astype(float) * 1e3
    table = w.pivot_table(index=["variant", "device"], columns="category", values="ms", observed=True,
                          fill_value=0.0)
    return table.loc[:, (table != 0).any()]  # the categories with time somewhere


def step_times(p):
    """Median, p10 and p90 of every timed step, per variant, in milliseconds (run directories)."""
    timed = p.step_times[p.step_times.phase == "timed"]
    q = timed.groupby("variant", observed=True).seconds.quantile([0.1, 0.5, 0.9]).unstack() * 1e3
    return q.rename(columns={0.1: "p10_ms", 0.5: "median_ms", 0.9: "p90_ms"})


def plot(table, out: Path) -> bool:
    """A stacked bar per variant and device; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ax = table.plot.barh(stacked=True, figsize=(8, 0.5 + 0.4 * len(table)))
    ax.set_xlabel("ms per step")
    plt.tight_layout()
    plt.savefig(out)
    plt.close("all")
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="a run directory, RUN_DIR/variants/NAME, a trace or a logdir")
    ap.add_argument("--plot", type=Path, help="write a bar chart of the wall time per step (matplotlib)")
    args = ap.parse_args(argv)
    p = tt.load(args.path)
    print(p)
    print("\nwall time per step (ms):")
    print(wall_per_step(p).round(3).to_string())
    if len(p.step_times):
        print("\ntimed steps (ms):")
        print(step_times(p).round(3).to_string())
    pl = p.placement
    moved = pl[(pl.requested != "") & (pl.device.astype(str) != pl.requested)]
    if len(moved):
        print(f"\n{len(moved)} node(s) placed elsewhere than their graph asked:")
        print(moved[["variant", "node", "requested", "device"]].head(10).to_string(index=False))
    if len(p.findings):
        print("\nfindings:")
        for f in p.findings.itertuples():
            print(f"  [{f.severity}] {f.variant}: {f.rule}")
    if args.plot is not None:
        print(f"\nwrote {args.plot}" if plot(wall_per_step(p), args.plot) else
              "\nmatplotlib is not installed: no plot (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
