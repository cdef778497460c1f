"""One variant, in its own process: the family's runner, then ``record.json``.

Run as ``python -P -m tfprof_towers.capture.child SPEC.json`` (a ``ChildSpec``).  It writes
``record.json`` (atomically) whether the variant succeeds or raises; if it crashes outright the
parent writes the failed record instead.  A variant that calls ``sys.exit`` or raises
``KeyboardInterrupt`` itself is recorded as such (a ``KeyboardInterrupt`` is "interrupted by
SIGINT" only when a SIGINT came).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path

from tfprof_towers.capture.families import Draft
from tfprof_towers.rundir.paths import read_json, write_json
from tfprof_towers.rundir.records import ChildSpec
from tfprof_towers.variants import registry
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.errors import TowersError


class _Sigint:
    """Tells a real SIGINT from a ``KeyboardInterrupt`` the variant's own code raised."""

    def __init__(self) -> None:
        self.received = False
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: object) -> None:
        self.received = True
        raise KeyboardInterrupt


def failure(exc: BaseException, stage: str, sigint: _Sigint) -> str:
    """One line (bounded in bytes) saying why the variant did not finish."""
    if isinstance(exc, TowersError):
        return textcap.one_line(exc.message)
    if isinstance(exc, SystemExit):
        code = exc.code
        text = "" if code is None or isinstance(code, int) else f": {code}"
        number = code if isinstance(code, int) else (0 if code is None else 1)
        return textcap.one_line(f"exited with code {number} before finishing (sys.exit during {stage}{text})")
    if isinstance(exc, KeyboardInterrupt):
        if sigint.received:
            return f"interrupted by SIGINT during {stage}"
        return f"KeyboardInterrupt raised by the variant's own code during {stage} (no signal was sent)"
    first = textcap.one_line(str(exc), 300)
    return textcap.one_line(f"{type(exc).__name__} during {stage}" + (f": {first}" if first else ""))


def main(argv: list[str]) -> int:
    started = time.time()
    sigint = _Sigint()
    spec = ChildSpec.from_json(read_json(Path(argv[0])), argv[0])
    draft = Draft()
    error = None
    code = 0
    try:
        registry.family(spec.family).load_runner().run(spec, draft)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # the variant's own doing: record it
        if not isinstance(exc, TowersError):  # a one-line error needs no traceback
            traceback.print_exc()
        error = failure(exc, draft.stage, sigint)
        code = 3
    # Wall-clock bounds of main(), so the parent can tell process start-up and
    # TensorFlow's shutdown apart from the phases (see runner.process_times).
    clock = {"main_start": started, "main_end": time.time()}
    try:
        write_json(Path(spec.record), draft.record(spec, error, os.getpid(), clock).to_json())
    except OSError as exc:  # a full disk: the parent says so in the record it writes
        print(f"cannot write {spec.record} ({exc.strerror or exc})", file=sys.stderr)
        return 4
    return code


def exit_now(code: int) -> None:
    """Leave without TensorFlow's interpreter teardown (about 0.6 s per child on CPU).  Everything
    the child owes is on disk by then: the record fsynced and renamed, the trace written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(sys.argv[1:]))
