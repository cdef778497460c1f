"""One variant, in its own process: the family's runner, then ``record.json``.

Run as ``python -m tfprof_towers.capture.child SPEC.json``.  The spec
(:class:`tfprof_towers.records.ChildSpec`, written by :mod:`.runner`) names the
variant, its family, sizes, step counts and output paths.  The child imports
the family's runner (:mod:`tfprof_towers.registry` -> ``capture/families/``),
lets it fill a :class:`~.families.Draft` phase by phase, and writes
``record.json`` (atomically) whether the variant succeeds or raises; if it
crashes outright the parent writes the failed record instead.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from .. import registry
from ..errors import TowersError
from ..records import ChildSpec
from ..rundir import read_json, write_json
from .families import PROFILER_OPTIONS, Draft

__all__ = ["PROFILER_OPTIONS", "main", "run_spec"]


def run_spec(spec: ChildSpec, draft: Draft) -> None:
    """Dispatch on the spec's family to its runner."""
    registry.family(spec.family).load_runner().run(spec, draft)


def main(argv: list[str]) -> int:
    started = time.time()
    spec = ChildSpec.from_json(read_json(Path(argv[0])), argv[0])
    draft = Draft()
    error = None
    code = 0
    try:
        run_spec(spec, draft)
    except TowersError as exc:
        error = exc.message
        code = 3
    except Exception as exc:  # a variant's own bug: record it, with the traceback on stderr
        traceback.print_exc()
        first = " ".join(str(exc).split())[:300]
        error = f"{type(exc).__name__} during {draft.stage}" + (f": {first}" if first else "")
        code = 3
    # Wall-clock bounds of main(), so the parent can tell process start-up and
    # TensorFlow's shutdown apart from the phases (see runner.process_times).
    clock = {"main_start": started, "main_end": time.time()}
    write_json(Path(spec.record), draft.record(spec, error, os.getpid(), clock).to_json())
    return code


def exit_now(code: int) -> None:
    """Leave without TensorFlow's interpreter teardown (about 0.6 s per child on CPU).

    Everything the child owes is on disk by then: the record is fsynced and
    renamed, the profiler has written its trace and the session is closed.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
