"""`tfprof-towers` command line: one module per subcommand under ``commands/``.

Each command module has ``register(subparsers)``, which adds its parser and sets
``func``; the function's docstring is its help text.  ``main(argv) -> int`` maps
:class:`TowersError` to a one-line message and its exit code, and Ctrl-C to 130.
Importing this module never imports TensorFlow.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from . import __version__
from .errors import TowersError

#: Subcommands, in the order `--help` lists them; each is ``commands/<name>.py``.
COMMANDS: tuple[str, ...] = ("profile", "variants", "analyze", "report", "project", "hardware")


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus the exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or with ``only`` of that one alone (its module is the only one
    imported: ``tfprof-towers analyze`` never pays for the others' imports)."""
    parser = _OneLineParser(
        prog="tfprof-towers",
        description="Profile one TensorFlow training step under several multi-device placements, "
        "attribute each device's time, audit placement and recommend one.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    sub.required = True
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"{__package__}.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in COMMANDS and argv[0] == first else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except TowersError as exc:
        print(f"tfprof-towers: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("tfprof-towers: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1


def add_command(
    sub: argparse._SubParsersAction, name: str, func, **kwargs
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose help is ``func``'s docstring."""
    doc = (func.__doc__ or "").strip()
    summary = doc.splitlines()[0] if doc else name
    p = sub.add_parser(
        name, help=summary, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    p.set_defaults(func=func)
    return p
