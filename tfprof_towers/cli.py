"""`tfprof-towers` command line: one module per subcommand under ``commands/``.

Each command module has ``register(subparsers)``, which adds its parser and sets
``func``; the function's docstring is its help text.  ``main(argv) -> int`` maps
:class:`TowersError` to a one-line message and its exit code, Ctrl-C to 130, an
I/O error of the environment (no permission, a full disk) to one line and 2, a
reader that closed the pipe to 141, and refuses to start with stdout closed.
Exit codes are in :mod:`tfprof_towers.vocab.errors`.  Importing this module never
imports TensorFlow.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import io
import os
import sys
from collections.abc import Sequence

from tfprof_towers import __version__
from tfprof_towers.vocab.errors import EXIT_BROKEN_PIPE, EXIT_INPUT, EXIT_SIGINT, TowersError

# At exit the interpreter's last garbage collections walk every object of a process that is ending
# anyway (~6% of `analyze FILE --json` on a small trace): frozen first (atexit handlers run before
# them), they are skipped and the memory goes back with the process.  Objects in reference cycles are
# then not finalized; nothing here relies on that (temporary directories are removed by their context
# managers, or by weakref.finalize's own exit handler).
atexit.register(gc.freeze)

#: Subcommands, in the order `--help` lists them; each is ``commands/<name>.py``.
COMMANDS: tuple[str, ...] = ("profile", "variants", "analyze", "report", "project", "hardware",
                             "export", "diff", "sql", "mcp", "worker")


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
    if not _stdout_usable():
        _say("tfprof-towers: error: standard output is closed; run it with stdout open "
             "(redirect to a file or /dev/null)")
        return EXIT_INPUT
    argv = list(argv) if argv is not None else sys.argv[1:]
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in COMMANDS and argv[0] == first else None
    try:  # Ctrl-C while the subcommand's modules are still being imported is an interrupt too
        args = build_parser(only).parse_args(argv)
        return int(args.func(args) or 0)
    except TowersError as exc:
        _say(f"tfprof-towers: error: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        _say("tfprof-towers: interrupted")
        return EXIT_SIGINT
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except MemoryError:  # numpy's _ArrayMemoryError too: an input too big for this machine, not a bug
        _say("tfprof-towers: error: out of memory (the input is too large for the memory available)")
        return EXIT_INPUT
    except OSError as exc:  # a place that cannot be used (permissions, a full disk), not a bug
        where = f"{exc.filename}: " if exc.filename else ""
        _say(f"tfprof-towers: error: {where}{exc.strerror or exc}")
        return EXIT_INPUT


def _stdout_usable() -> bool:
    """False when the command was started with stdout closed (``>&-``): nothing could be printed."""
    if sys.stdout is None:
        return False
    try:
        os.fstat(sys.stdout.fileno())
    except io.UnsupportedOperation:  # replaced by an in-memory stream (a test harness): fine
        return True
    except (OSError, ValueError, AttributeError):
        return False
    return True


def _say(line: str) -> None:
    """One line on stderr, if there is a stderr (a line break or control character in it, from a path
    the user gave, shown as ``<U+000A>``)."""
    from tfprof_towers.vocab.textcap import single_line

    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):
            print(single_line(line), file=sys.stderr)


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so that the exit flush does not complain."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


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
