"""`tfprof-towers worker`: run one task of a cluster run on this machine."""

from __future__ import annotations

import argparse

from tfprof_towers.cli import add_command


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "worker", run)
    p.add_argument("--cluster", required=True, metavar="FILE",
                   help='the cluster spec: {"chief": ["host:port"], "ps": [...], "worker": ["host:port"]} '
                        "(or a whole TF_CONFIG); the same file on every machine")
    p.add_argument("--task", required=True, metavar="JOB:INDEX",
                   help="this machine's task, e.g. worker:1 (also /job:worker/task:1)")
    p.add_argument("--run-dir", required=True, metavar="DIR",
                   help="the run directory of `tfprof-towers profile --cluster FILE --out DIR` (on a "
                        "filesystem every machine shares), or an attempt folder holding spec.json")


def run(args: argparse.Namespace) -> int:
    """Run one task of a cluster run (the same code every loopback task runs).

    On a real cluster, start `tfprof-towers profile --cluster cluster.json --out DIR`
    on one machine and `tfprof-towers worker --cluster cluster.json --task JOB:I
    --run-dir DIR` on each machine of the cluster (chief, ps and worker tasks alike),
    in any order: a task waits (up to 5 minutes) for the run's spec, sets its own
    TF_CONFIG, builds the variant's strategy and step, runs and profiles it when the
    profiler client traces every task, writes its record into DIR and leaves.  DIR
    must be a folder every machine can read and write (an NFS mount, for example):
    the tasks write their traces and progress markers there.  Each attempt runs in a
    child process whose output goes to the attempt's tasks/JOB-I/stderr.txt; when an
    attempt fails in a way another may not (TensorFlow's profiler crashing a task, a
    trace missing), the task joins the driver's next attempt.  Exit code 0 when the
    task finished, 3 when it failed (its record says why), 124 when it passed its
    own deadline, 130/143 when interrupted.
    """
    from pathlib import Path

    from tfprof_towers.capture.cluster.docs import SPEC_JSON

    run_dir = Path(args.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        from tfprof_towers.vocab.errors import TowersError

        raise TowersError(f"--run-dir {run_dir}: not a directory (give the run directory of `tfprof-towers "
                          "profile --cluster FILE --out DIR`)")
    if not (run_dir / SPEC_JSON).is_file():  # a run directory: serve the attempts its driver names
        from tfprof_towers.capture.cluster.worker import serve

        return serve(args.cluster, args.task, run_dir)
    from tfprof_towers.capture.child import exit_now
    from tfprof_towers.capture.cluster.task import run_task

    code = run_task(args.cluster, args.task, args.run_dir)  # one attempt, in this process
    exit_now(code)  # no TensorFlow teardown (its coordination service would wait for its peers)
    return code
