"""`tfprof-towers report RUN_DIR`: re-render a saved run without running TensorFlow."""

from __future__ import annotations

import argparse
from pathlib import Path

from tfprof_towers.cli import add_command
from tfprof_towers.commands import console
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.session.report import finish_run


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "report", run)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory written by `profile`")


def run(args: argparse.Namespace) -> int:
    """Re-render report.html and summary.json from a saved run directory.

    Needs no TensorFlow: everything comes from the run's records and traces.  A
    missing or corrupt variant record is reported as such; the rest render.
    Exits 4 (after writing both files) when no variant of the run succeeded.
    """
    run_dir = RunDir(args.run_dir)
    summary = finish_run(run_dir)
    console.print_summary(summary, run_dir)
    if not any(v["status"] == "ok" for v in summary["variants"]):
        return console.nothing_succeeded()
    return 0
