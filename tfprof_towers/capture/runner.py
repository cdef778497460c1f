"""The parent side of capture: one child process per variant, isolated and bounded.

Each variant runs as ``python -m tfprof_towers.capture.child SPEC`` in its own
process session (so a timeout or Ctrl-C kills its whole process group).  A child
that raises writes its own failed record; one that crashes, is killed or hangs
past the timeout gets a failed record written here, with a one-line reason and
the tail of its stderr.  Never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ..config import ProfileOptions, VariantSpec
from ..errors import TowersError
from ..records import FAILED, OK, ChildSpec, RecordError, VariantRecord
from ..rundir import RunDir, read_json, write_json

STDERR_TAIL_LINES = 25
#: Free space a run wants per variant before it starts.  A CPU-preset variant
#: writes well under 1 MB; a GPU trace of a few steps can take tens of MB.
MIN_FREE_BYTES_PER_VARIANT = 32 * 2**20
#: OSError numbers that mean "this directory cannot take our files", reported in one line.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
_OOM_MARKERS = ("MemoryError", "ResourceExhaustedError", "std::bad_alloc", "Out of memory", "OOM when")


class Interrupted(Exception):
    """Ctrl-C or SIGTERM arrived while a variant ran; carries the exit code to use."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


@dataclass(frozen=True)
class Outcome:
    """What happened to one variant (the record itself is on disk)."""

    name: str
    status: str
    error: str | None
    wall_s: float


ProgressHook = Callable[[str, str], None]  # (variant name, event: "start" | "ok" | "failed")


def check_free_space(folder: Path, variants: int, per_variant: int = MIN_FREE_BYTES_PER_VARIANT) -> None:
    """Fail in one line, before any variant runs, when ``folder``'s filesystem is nearly full."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError as exc:
        raise TowersError(f"{folder}: cannot check free space ({exc.strerror or exc})") from None
    need = per_variant * max(variants, 1)
    if free < need:
        raise TowersError(
            f"{folder}: only {_mib(free)} free on its filesystem; {variants} variant(s) need about "
            f"{_mib(need)} (free some space or choose another --out)"
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@contextlib.contextmanager
def disk_errors(folder: Path) -> Iterator[None]:
    """Turn a full disk, a quota or a read-only filesystem met while writing into a one-line error."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _DISK_ERRNOS:
            raise
        where = exc.filename or folder
        raise TowersError(f"{where}: cannot write ({exc.strerror or exc}); the run stopped there") from None


def child_spec(options: ProfileOptions, variant: VariantSpec, run_dir: RunDir) -> ChildSpec:
    return ChildSpec(
        name=variant.name,
        family=variant.family,
        file=variant.file,
        preset=options.preset,
        accelerators=options.accelerators,
        warmup=options.warmup,
        steps=options.steps,
        profile_steps=options.profile_steps,
        logdir=str(run_dir.logdir(variant.name).resolve()),
        record=str(run_dir.record_json(variant.name).resolve()),
        keras_model=options.keras_model,
    )


def stderr_tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    keep = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(keep[-lines:])


def crash_reason(returncode: int | None, tail: str, timed_out: bool, timeout_s: float) -> str:
    """One line saying why a child ended without writing its record."""
    if timed_out:
        return f"timed out after {timeout_s:g} s (killed with its process group)"
    oom = next((m for m in _OOM_MARKERS if m in tail), None)
    if oom:
        return f"ran out of memory ({oom})"
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if sig == "SIGKILL" else ""
        return f"crashed: killed by {sig}{hint}"
    last = tail.splitlines()[-1].strip() if tail else ""
    return f"crashed: exit code {returncode}" + (f": {last[:200]}" if last else "")


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> int:
    """``proc.wait(timeout_s)``, but woken the moment the child exits.

    ``Popen.wait`` with a timeout polls, sleeping up to 50 ms between looks;
    on Linux a pidfd lets the parent block until the exit itself.  Raises
    ``subprocess.TimeoutExpired`` like ``Popen.wait``; signals interrupt it alike.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux >= 5.3, or the child is already reaped
        return proc.wait(timeout=timeout_s)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(max(0, int(timeout_s * 1000))):
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
    finally:
        os.close(fd)
    return proc.wait()


def _kill_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM the child's process group, give it ``grace_s``, then SIGKILL the whole group.

    The SIGKILL goes to the group even when the child itself has gone: a
    grandchild that ignores SIGTERM (or that the child never waited for) must
    not outlive its variant.  The child runs in its own session, so its
    process-group id is its pid.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    _signal_group(proc.pid, signal.SIGKILL)
    # A child stuck in the kernel (D state) may outlive even SIGKILL for a while:
    # leave it; the record says it timed out.
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5.0)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``, from /proc; [] where there is no /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def wait_group_gone(pgid: int, timeout_s: float = 2.0) -> bool:
    """After a SIGKILL, wait (briefly) until no process of the group is alive; True when none is.

    The kill is delivered asynchronously: a busy machine may take a few milliseconds
    to schedule the dying processes, and a variant is only over when they are gone.
    """
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    # ProcessLookupError: the group is empty; PermissionError: only zombies left (macOS).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run_one(
    options: ProfileOptions, variant: VariantSpec, run_dir: RunDir, python: str = sys.executable
) -> Outcome:
    """Run one variant's child to completion (or timeout) and leave its record on disk."""
    vdir = run_dir.variant_dir(variant.name)
    vdir.mkdir(parents=True, exist_ok=True)
    spec = child_spec(options, variant, run_dir)
    spec_path = vdir / "spec.json"
    write_json(spec_path, spec.to_json())
    record_path = run_dir.record_json(variant.name)
    err_path = run_dir.stderr_txt(variant.name)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
               PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    spawned_unix = time.time()
    timed_out = False
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [python, "-m", "tfprof_towers.capture.child", str(spec_path)],
            stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env, start_new_session=True,
        )
        try:
            wait_exit(proc, options.variant_timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:
            _kill_group(proc, grace_s=1.0)
            raise
        _signal_group(proc.pid, signal.SIGKILL)  # whatever the child left running in its group
        wait_group_gone(proc.pid)
    ended_unix = time.time()
    wall = time.perf_counter() - t0
    tail = stderr_tail(err_path)
    record = None if timed_out else _read_record(record_path)
    if not isinstance(record, VariantRecord):
        why = record or crash_reason(proc.returncode, tail, timed_out, options.variant_timeout_s)
        record = VariantRecord.failed(variant.name, why, source=variant.source, family=variant.family,
                                      stage="unknown")
    xplanes = tuple(str(p.relative_to(run_dir.root)) for p in run_dir.xplane_files(variant.name))
    record = replace(
        record,
        returncode=proc.returncode,
        wall_s=wall,
        process_s=process_times(record.clock_unix, spawned_unix, ended_unix),
        stderr_tail=tail if record.status != OK else "",
        xplane_files=xplanes,
    )
    if record.ok and not xplanes:
        record = replace(record, status=FAILED, error="the profiler wrote no trace file")
    write_json(record_path, record.to_json())
    return Outcome(variant.name, record.status, record.error, wall)


def process_times(
    clock: Mapping[str, float] | None, spawned_unix: float, ended_unix: float
) -> dict[str, float] | None:
    """Seconds from spawn to the child's main() and from its end to the parent seeing it exit.

    ``start`` is the interpreter and the harness's imports; ``exit`` is the
    child's own shutdown (TensorFlow's, unless the child skips it).  None when
    the child never reported its clock (it crashed or was killed).
    """
    if not clock or "main_start" not in clock or "main_end" not in clock:
        return None
    return {
        "start": max(0.0, clock["main_start"] - spawned_unix),
        "exit": max(0.0, ended_unix - clock["main_end"]),
    }


def _read_record(path: Path) -> VariantRecord | str | None:
    """The child's record; None when it wrote none (or half of one); why, when it is invalid."""
    if not path.is_file():
        return None
    try:
        doc = read_json(path)
    except TowersError:
        return None
    if not isinstance(doc, dict):
        return None
    try:
        return VariantRecord.from_json(doc, str(path))
    except RecordError as exc:
        return f"the child wrote an invalid record: {exc.detail}"


def run_all(
    options: ProfileOptions, run_dir: RunDir, on_progress: ProgressHook | None = None
) -> list[Outcome]:
    """Run every variant in turn; SIGINT/SIGTERM stop the current child and raise Interrupted.

    Variants finished before the interruption keep their records and traces.
    """
    outcomes: list[Outcome] = []
    previous = signal.getsignal(signal.SIGTERM)

    def _on_term(signum, frame):
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, _on_term)
    running: VariantSpec | None = None
    try:
        for variant in options.variants:
            running = variant
            if on_progress:
                on_progress(variant.name, "start")
            outcome = run_one(options, variant, run_dir)
            running = None
            outcomes.append(outcome)
            if on_progress:
                on_progress(variant.name, outcome.status)
    except (KeyboardInterrupt, Interrupted) as exc:
        # The signal may land anywhere in the loop (in the child's wait, in a
        # progress update, between variants): only an unfinished variant is marked.
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        if running is not None:
            _record_interrupted(run_dir, running, signum)
        raise Interrupted(signum) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return outcomes


def _record_interrupted(run_dir: RunDir, variant: VariantSpec, signum: int) -> None:
    """The variant running when the signal came did not finish: say so in its record."""
    record = VariantRecord.failed(
        variant.name, f"interrupted by {signal.Signals(signum).name} before it finished",
        source=variant.source, family=variant.family, stage="interrupted",
        stderr_tail=stderr_tail(run_dir.stderr_txt(variant.name)), xplane_files=(),
    )
    write_json(run_dir.record_json(variant.name), record.to_json())


def gpu_topology_text() -> str | None:
    """``nvidia-smi topo -m`` output, when the tool exists and answers."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
