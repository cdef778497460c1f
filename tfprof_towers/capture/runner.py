"""The parent side of capture: one child process per variant, isolated and bounded.

A child that raises writes its own failed record; one that crashes, is killed or hangs past the
timeout gets a failed record written here, with a one-line reason and the tail of its stderr
(both bounded in bytes).  A disk that fills up during a variant fails that variant; the run goes
on.  Never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tfprof_towers.procs import supervise
from tfprof_towers.rundir.paths import RunDir, is_disk_error, read_json, write_json
from tfprof_towers.rundir.records import FAILED, OK, ChildSpec, RecordError, VariantRecord
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import ProfileOptions, VariantSpec
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.errors import TowersError

#: Free space a run wants per variant before it starts.  A CPU-preset variant
#: writes well under 1 MB; a GPU trace of a few steps can take tens of MB.
MIN_FREE_BYTES_PER_VARIANT = 32 * 2**20
_OOM_MARKERS = ("MemoryError", "ResourceExhaustedError", "std::bad_alloc", "Out of memory", "OOM when")
CHILD_MODULE = "tfprof_towers.capture.child"


class Interrupted(Exception):
    """Ctrl-C or SIGTERM arrived while a variant ran; carries the exit code to use."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


@dataclass(frozen=True)
class Outcome:
    """What happened to one variant (the record itself is on disk, where the disk allowed)."""

    name: str
    status: str
    error: str | None
    wall_s: float
    disk_full: str | None = None  # "no space left on device while writing variants/x/spec.json"


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
        if not is_disk_error(exc):
            raise
        where = exc.filename or folder
        raise TowersError(f"{where}: cannot write ({exc.strerror or exc}); the run stopped there") from None


def child_spec(options: ProfileOptions, variant: VariantSpec, run_dir: RunDir) -> ChildSpec:
    return ChildSpec(
        name=variant.name, family=variant.family, file=variant.file, preset=options.preset,
        accelerators=options.accelerators, warmup=options.warmup, steps=options.steps,
        profile_steps=options.profile_steps, logdir=str(run_dir.logdir(variant.name).resolve()),
        record=str(run_dir.record_json(variant.name).resolve()), keras_model=options.keras_model,
        cluster=options.cluster if variant.family == registry.CLUSTER else None,
        timeout_s=options.variant_timeout_s,
    )


def crash_reason(returncode: int | None, tail: str, timed_out: bool, timeout_s: float | None) -> str:
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
    if returncode == 0:
        return "exited with code 0 before finishing"
    if returncode is None:
        return "ended without a record or an exit code"
    last = textcap.last_cause(tail)
    return f"crashed: exit code {returncode}" + (f": {last}" if last else "")


#: Time a cluster variant's driver gets, once asked to stop, to stop its tasks and write its record.
CLUSTER_STOP_GRACE_S = 15.0


def child_command(options: ProfileOptions, spec_path: Path, err_path: Path, label: str,
                  python: str = sys.executable, family: str | None = None) -> supervise.Command:
    grace = {"stop_grace_s": CLUSTER_STOP_GRACE_S} if family == registry.CLUSTER else {}
    return supervise.Command(
        argv=tuple(supervise.python_argv(CHILD_MODULE, str(spec_path), python=python)),
        stderr_path=err_path, deadline_s=options.variant_timeout_s, env=supervise.tf_child_env(), label=label,
        entry=_entry(spec_path) if python == sys.executable else None, **grace,
    )


def _entry(spec_path: Path) -> supervise.Entry:
    """The child as a call, for the fork server (only when it runs this interpreter: a test's or a
    user's other ``python`` always starts fresh)."""
    return supervise.Entry(f"{CHILD_MODULE}:main", (str(spec_path),))


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
    t0 = time.perf_counter()
    spawned_unix = time.time()
    ended = supervise.run(child_command(options, spec_path, err_path, variant.name, python, variant.family))
    ended_unix = time.time()
    wall = time.perf_counter() - t0
    tail = textcap.file_tail(err_path)
    record = None if ended.timed_out else _read_record(record_path)
    if not isinstance(record, VariantRecord):
        why = record or ended.lost or crash_reason(ended.returncode, tail, ended.timed_out,
                                                   options.variant_timeout_s)
        record = VariantRecord.failed(variant.name, why, source=variant.source, family=variant.family,
                                      stage="unknown")
    xplanes = tuple(str(p.relative_to(run_dir.root)) for p in run_dir.xplane_files(variant.name))
    record = replace(
        record, error=None if record.error is None else textcap.one_line(record.error),
        returncode=ended.returncode, wall_s=wall,
        process_s=process_times(record.clock_unix, spawned_unix, ended_unix),
        stderr_tail=tail if record.status != OK else "", xplane_files=xplanes,
    )
    if record.ok and not xplanes:
        record = replace(record, status=FAILED, error="the profiler wrote no trace file")
    write_json(record_path, read_record_doc(record))
    return Outcome(variant.name, record.status, record.error, wall)


def read_record_doc(record: VariantRecord) -> dict[str, Any]:
    """``record.to_json()`` of a record read from JSON: its placement, plain JSON as read (most of a
    graph's record), passed through as it is rather than copied value by value (the same document)."""
    doc = replace(record, placement=None).to_json()
    if record.placement is not None:
        doc["placement"] = record.placement
    return doc


def disk_failure(run_dir: RunDir, variant: VariantSpec, exc: OSError) -> VariantRecord:
    """The failed record of a variant that could not write its files (a full disk).  What the child
    wrote of its own record goes (it would contradict this one, and frees a little space)."""
    with contextlib.suppress(OSError):
        run_dir.record_json(variant.name).unlink()
    where = Path(exc.filename).name if exc.filename else "its files"
    why = textcap.one_line(f"cannot write {where} ({exc.strerror or exc}); "
                           "the variant's files are incomplete")
    return VariantRecord.failed(variant.name, why, source=variant.source, family=variant.family,
                                stage="unknown", xplane_files=(),
                                stderr_tail=textcap.file_tail(run_dir.stderr_txt(variant.name)))


def disk_cause(run_dir: RunDir, exc: OSError) -> str:
    """``"no space left on device while writing variants/x/spec.json"`` (the path relative to the run)."""
    what = (exc.strerror or str(exc)).strip()
    what = what[:1].lower() + what[1:]
    where = "its files"
    if exc.filename:
        path = Path(exc.filename)
        with contextlib.suppress(ValueError, OSError):
            path = path.resolve().relative_to(run_dir.root.resolve())
        where = path.as_posix()
    return f"{what} while writing {where}"


def write_pending(run_dir: RunDir, pending: dict[str, VariantRecord]) -> None:
    """Write the failed records a full disk kept out, now that it may take them (removes those written)."""
    for name, record in list(pending.items()):
        try:
            write_json(run_dir.record_json(name), record.to_json())
        except OSError as exc:
            if not is_disk_error(exc):
                raise
            continue
        del pending[name]


def process_times(
    clock: Mapping[str, float] | None, spawned_unix: float, ended_unix: float
) -> dict[str, float] | None:
    """Seconds from spawn to the child's main() (``start``: the interpreter and the harness's imports)
    and from its end to the parent seeing it exit (``exit``: TensorFlow's shutdown, unless the child
    skips it).  None when the child never reported its clock (it crashed or was killed)."""
    if not clock or "main_start" not in clock or "main_end" not in clock:
        return None
    return {"start": max(0.0, clock["main_start"] - spawned_unix),
            "exit": max(0.0, ended_unix - clock["main_end"])}


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
    Variants finished before keep their records and traces.  A variant that meets a full disk
    fails; its record is written as soon as the disk takes it, and the next variant runs."""
    outcomes: list[Outcome] = []
    previous = signal.getsignal(signal.SIGTERM)

    def _on_term(signum, frame):
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, _on_term)
    running: VariantSpec | None = None
    pending: dict[str, VariantRecord] = {}  # failed records a full disk did not take yet
    try:
        for variant in options.variants:
            running = variant
            if on_progress:
                on_progress(variant.name, "start")
            t0 = time.perf_counter()
            try:
                outcome = run_one(options, variant, run_dir)
            except OSError as exc:  # a full disk fails this variant; the run goes on
                if not is_disk_error(exc):
                    raise
                pending[variant.name] = disk_failure(run_dir, variant, exc)
                outcome = Outcome(variant.name, FAILED, pending[variant.name].error, time.perf_counter() - t0,
                                  disk_full=disk_cause(run_dir, exc))
            write_pending(run_dir, pending)
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
    """The variant running when the signal came did not finish: say so in its record (keeping
    what a cluster variant's driver wrote of its tasks as it stopped them)."""
    own = _read_record(run_dir.record_json(variant.name))
    cluster = own.cluster if isinstance(own, VariantRecord) else None
    record = VariantRecord.failed(
        variant.name, f"interrupted by {signal.Signals(signum).name} before it finished",
        source=variant.source, family=variant.family, stage="interrupted",
        stderr_tail=textcap.file_tail(run_dir.stderr_txt(variant.name)), xplane_files=(),
        cluster=cluster, host_tasks=own.host_tasks if isinstance(own, VariantRecord) else None,
    )
    try:
        write_json(run_dir.record_json(variant.name), record.to_json())
    except OSError as exc:
        if not is_disk_error(exc):
            raise  # the summary then says the record is missing


def nvidia_smi(*args: str) -> str | None:
    """``nvidia-smi ARGS``'s output, when the tool exists and answers (in 20 s, with exit code 0)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def gpu_topology_text() -> str | None:
    return (nvidia_smi("topo", "-m") or "").strip() or None
