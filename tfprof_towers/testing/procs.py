"""Entry points for the fork server's tests (:mod:`tfprof_towers.procs.forkserver`).

``shell`` turns a forked child into ``sh -c SCRIPT`` (so the supervisor's shell-script tests run
the same children forked from a server); ``report`` prints what a forked child sees.
"""

from __future__ import annotations

import json
import os
import sys


def shell(args: list[str]) -> int:
    """Become ``sh -c args[0]`` (never returns)."""
    os.execvp("sh", ["sh", "-c", args[0]])
    return 127  # not reached


def report(args: list[str]) -> int:
    """One JSON line: pid, parent, argv, cwd and which of ``args[1:]`` modules are already imported;
    the exit code is ``args[0]``."""
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "cwd": os.getcwd(),
                      "imported": [m for m in args[1:] if m in sys.modules]}), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    return int(args[0])


def boom(args: list[str]) -> int:
    raise ValueError("the entry raised")


if __name__ == "__main__":  # the same program, started fresh (the fork server's fallback)
    sys.exit(report(sys.argv[1:]))
