"""`tfprof-towers diff BASE NEW`: what changed between two runs, two variants or two traces."""

from __future__ import annotations

import argparse
import io
import math
import sys
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.paths import json_text
from tfprof_towers.vocab.errors import EXIT_INCONCLUSIVE, EXIT_SLOWER, TowersError
from tfprof_towers.vocab.textcap import single_line, visible


def _pct(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite percentage (e.g. 5), not {text}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a percentage >= 0, not {text}")
    return value + 0.0  # -0 is 0: never "more than -0%"


def register(sub: argparse._SubParsersAction) -> None:
    from tfprof_towers.cli import add_command
    from tfprof_towers.commands.analyze import out_file

    p = add_command(sub, "diff", run)
    p.add_argument("base", metavar="BASE", help="a run directory, RUN_DIR/variants/NAME, a trace or a logdir "
                                                "(LOGDIR:RUN picks a run of a logdir)")
    p.add_argument("new", metavar="NEW", help="the same kind of path as BASE")
    p.add_argument("--variant", action="append", default=[], metavar="NAME",
                   help="two run directories: compare only this variant (repeatable)")
    p.add_argument("--run", metavar="RUN", default=None,
                   help="two logdirs: which profile run of each (BASE:RUN or NEW:RUN picks one side's)")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON document")
    p.add_argument("--html", metavar="OUT", type=out_file,
                   help="also write a self-contained HTML page to OUT")
    p.add_argument("--fail-if-slower", metavar="PCT", type=_pct, default=None,
                   help=f"exit {EXIT_SLOWER} when a variant's median step time is more than PCT %% slower "
                        "(beyond noise) or a variant that ran on BASE did not on NEW; "
                        f"exit {EXIT_INCONCLUSIVE} when too few steps decide nothing")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="with --fail-if-slower: let an inconclusive comparison pass (exit 0)")


def split_run(text: str, run: str | None) -> tuple[Path, str | None]:
    """``PATH`` or ``PATH:RUN`` (an existing path is always a path, colons and all); ``--run`` else."""
    path = Path(text)
    if ":" in text and not (path.exists() or path.is_symlink()):
        head, _, tail = text.rpartition(":")
        if head and tail and (Path(head).exists() or Path(head).is_symlink()):
            return Path(head), tail
    return path, run


def run(args: argparse.Namespace) -> int:
    """Compare two profiles: step time (a noise test), wall time, ops, placement, links, findings, math.

    BASE and NEW are two run directories (every variant in both is compared), two variants
    (RUN/variants/A and RUN/variants/B) or two traces or logdirs (a logdir with several runs:
    the newest, with a note; --run RUN, or BASE:RUN / NEW:RUN, picks one).  The step times are every
    timed step's duration from record.json (a trace's step windows without a record); a change
    is beyond noise when the two-sided Mann-Whitney U test gives p < 0.05.  A side that did not
    run shows its status and reason, and no change tables.

    --fail-if-slower PCT is a CI gate (docs/failures.md):
      exit 5: a variant is more than PCT % slower, beyond noise; or, with too few steps for the
              test ever to reach p < 0.05, every NEW step is more than PCT % slower than every
              BASE step; or a variant that ran on BASE failed, is missing or is unreadable on NEW;
      exit 6: inconclusive (too few steps and the steps overlap, or no step times), unless
              --allow-inconclusive.
    Bad input (paths of different kinds, a variant missing from one side, an unreadable path,
    an --html OUT that is a device, an input or a run's own file) is one line and exit code 2.
    Never imports TensorFlow.
    """
    from tfprof_towers.frames.diff import gate_failed
    from tfprof_towers.frames.diff_view import render_html, write_text
    from tfprof_towers.rundir.outputs import output_path, write_output

    (bpath, _), (npath, _) = split_run(args.base, args.run), split_run(args.new, args.run)
    if args.allow_inconclusive and args.fail_if_slower is None:
        raise TowersError("--allow-inconclusive: applies with --fail-if-slower PCT")
    if args.html is not None:  # refused before anything is read
        output_path(args.html, [bpath, npath], "--html")
    doc = document(args)
    if args.html is not None:
        write_output(args.html, render_html(doc), [bpath, npath], "--html")
    if args.json:
        sys.stdout.write(json_text(doc) + "\n")
    else:
        buf = io.StringIO()
        write_text(doc, buf)
        if args.html is not None:
            buf.write(f"\nwrote {single_line(str(args.html))}\n")
        sys.stdout.write(visible(buf.getvalue()))
    gate = doc.get("gate")
    failed = None if gate is None else gate_failed(gate)
    return {None: 0, "slower": EXIT_SLOWER}.get(failed, EXIT_INCONCLUSIVE)


def document(args: argparse.Namespace) -> dict[str, Any]:
    """What ``diff --json`` prints: BASE and NEW loaded and compared (with the gate's verdict under
    --fail-if-slower)."""
    from tfprof_towers.frames import load
    from tfprof_towers.frames.diff import diff

    (bpath, brun), (npath, nrun) = split_run(args.base, args.run), split_run(args.new, args.run)
    if args.allow_inconclusive and args.fail_if_slower is None:
        raise TowersError("--allow-inconclusive: applies with --fail-if-slower PCT")
    base, new = load(bpath, run=brun), load(npath, run=nrun)
    return diff(base, new, only=args.variant, fail_if_slower=args.fail_if_slower,
                allow_inconclusive=args.allow_inconclusive)
