"""`tfprof-towers diff BASE NEW`: what changed between two runs, two variants or two traces."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from tfprof_towers.rundir.paths import atomic_write_text, json_text
from tfprof_towers.vocab.errors import EXIT_SLOWER, TowersError


def _pct(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a percentage >= 0, not {text}")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    from tfprof_towers.cli import add_command

    p = add_command(sub, "diff", run)
    p.add_argument("base", metavar="BASE", help="a run directory, RUN_DIR/variants/NAME, a trace or a logdir")
    p.add_argument("new", metavar="NEW", help="the same kind of path as BASE")
    p.add_argument("--variant", action="append", default=[], metavar="NAME",
                   help="two run directories: compare only this variant (repeatable)")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON document")
    p.add_argument("--html", metavar="OUT", type=Path, help="also write a self-contained HTML page to OUT")
    p.add_argument("--fail-if-slower", metavar="PCT", type=_pct, default=None,
                   help=f"exit {EXIT_SLOWER} when a variant's median step time is more than PCT %% slower, "
                        "beyond noise")


def run(args: argparse.Namespace) -> int:
    """Compare two profiles: step time (with a noise test), wall time per device and category, ops,
    placement moves, links, findings and math.

    BASE and NEW are two run directories (every variant in both is compared), two variants
    (RUN/variants/A and RUN/variants/B) or two traces or logdirs.  The step times are every
    timed step's duration from record.json (a trace's step windows without a record); a change
    is beyond noise when the two-sided Mann-Whitney U test gives p < 0.05.
    --fail-if-slower PCT exits with code 5 when some variant is more than PCT % slower and the
    change is beyond noise (a CI gate).  Bad input (paths of different kinds, a variant missing
    from one side, an unreadable file) is one line and exit code 2.  Never imports TensorFlow.
    """
    from tfprof_towers.frames import load
    from tfprof_towers.frames.diff import diff
    from tfprof_towers.frames.diff_view import render_html, write_text

    base, new = load(args.base), load(args.new)
    doc = diff(base, new, only=args.variant, fail_if_slower=args.fail_if_slower)
    if args.html is not None:
        if args.html.is_dir():
            raise TowersError(f"--html {args.html}: is a directory; give a file name")
        atomic_write_text(args.html, render_html(doc))
    if args.json:
        sys.stdout.write(json_text(doc) + "\n")
    else:
        write_text(doc, sys.stdout)
        if args.html is not None:
            print(f"\nwrote {args.html}")
    gate = doc.get("gate")
    return EXIT_SLOWER if gate is not None and gate["slower"] else 0
