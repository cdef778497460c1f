"""Summary statistics of step times (no TensorFlow; numpy only when there are times to sum up, so
that a cluster task or the capture coordinator starts without it)."""

from __future__ import annotations

from collections.abc import Sequence

from tfprof_towers.rundir.records import StepStats


def step_stats(times: Sequence[float]) -> StepStats:
    """Median, p10, p90, min, max (seconds) and count of a list of step times."""
    if len(times) == 0:
        return StepStats()
    import numpy as np

    arr = np.asarray(times, dtype=float)
    return StepStats(median=float(np.median(arr)), p10=float(np.percentile(arr, 10)),
                     p90=float(np.percentile(arr, 90)), min=float(arr.min()), max=float(arr.max()),
                     n=int(arr.size))
