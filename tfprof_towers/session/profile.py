"""A profile from checked options to a finished run directory: claim the directory, run every
variant, project where the timings are stand-ins, then ``finish_run``.  Everything printed goes
through the caller's ``ProfileView`` (this layer sits below the terminal code).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from tfprof_towers.capture.runner import (
    Interrupted,
    check_free_space,
    disk_cause,
    disk_errors,
    gpu_topology_text,
    run_all,
)
from tfprof_towers.procs import forkserver, supervise
from tfprof_towers.rundir.paths import (
    RunDir,
    check_writable,
    claim_out_dir,
    is_disk_error,
    missing_dirs,
    new_run_dir,
    point_latest,
    release_out_dir,
    remove_empty,
    save_json,
    utc_now,
    write_json,
)
from tfprof_towers.rundir.records import RunConfig, RunDoc, Topology, load_record
from tfprof_towers.session.scaling import ScalingRequest, run_scaling, scaling_lines
from tfprof_towers.variants.config import (
    CPU_ONLY_CLUSTER_HARDWARE,
    CPU_ONLY_HARDWARE,
    PROJECT_PRESET,
    Preset,
    ProfileOptions,
    get_preset,
)
from tfprof_towers.variants.variant_files import variant_notices
from tfprof_towers.vocab.errors import EXIT_OK, EXIT_SIGINT, TowersError


@dataclass(frozen=True)
class ProfileTargets:
    """Where a profile goes and what it is projected on, beyond ``ProfileOptions``."""

    out: Path | None  # --out: this exact directory (claimed); None: a new one under ``reports``
    reports: Path  # where new run directories go; ``reports/latest`` points at the last good one
    project_on: str | None = None  # --project-on NAME|FILE
    project_preset: str | None = None  # --project-preset
    scaling: ScalingRequest | None = None  # --scaling, --scaling-mode: the sweep after the run


class Progress(Protocol):
    def update(self, name: str, event: str) -> None:
        """``event``: ``start``, or how the variant ended (``ok``, ``skipped``, ``failed``)."""


@dataclass(frozen=True)
class ProfileView:
    """How a profile speaks: the command line passes the terminal's functions."""

    notice: Callable[[str], None]  # one line on stderr
    progress: Callable[[ProfileOptions, RunDir], AbstractContextManager[Progress]]
    summary: Callable[..., None]  # (summary, run_dir, not_written=paths): the ranked table and the paths
    nothing_succeeded: Callable[[], int]  # says so; the exit code


def run_profile(options: ProfileOptions, targets: ProfileTargets, view: ProfileView,
                t0: float | None = None) -> int:
    """Run every variant of ``options`` into a run directory; the exit code.  ``t0``: when the command
    started (``perf_counter``), for the harness timings.  Nothing is created when the options
    cannot run (a bad profile, no ``--out`` for a ``--cluster`` run, a directory that cannot be used).
    """
    t0 = time.perf_counter() if t0 is None else t0
    for notice in variant_notices(options.variants):
        view.notice(notice)
    if targets.project_on:
        from tfprof_towers.projection.hardware import load_hardware

        load_hardware(targets.project_on)  # a bad name fails here, before anything runs
    if options.cluster is not None and options.cluster.attached and targets.out is None:
        raise TowersError("--cluster needs --out DIR: the run directory every task is started with "
                          "(tfprof-towers worker ... --run-dir DIR), on a filesystem every machine shares")
    made = missing_dirs(targets.out if targets.out is not None else targets.reports)
    if targets.out is None:
        return _run_in(None, options, targets, view, t0, made)
    try:
        run_path = claim_out_dir(targets.out)
    except BaseException:
        remove_empty(made)  # what this run created; a folder another run holds has its claim in it
        raise
    try:
        return _run_in(run_path, options, targets, view, t0, made)
    finally:
        release_out_dir(run_path)


def _run_in(run_path: Path | None, options: ProfileOptions, targets: ProfileTargets, view: ProfileView,
            t0: float, made: list[Path]) -> int:
    """Run into ``run_path`` (claimed), or into a new directory under ``targets.reports`` when None."""
    claimed = run_path
    try:
        if run_path is None:
            try:
                run_path = new_run_dir(targets.reports)
            except OSError as exc:
                why = f"{targets.reports}: cannot create a run directory ({exc.strerror})"
                raise TowersError(why) from None
            made.append(run_path.absolute())
            check_writable(run_path)
        check_free_space(run_path, len(options.variants))
        with disk_errors(run_path):
            return _capture_and_report(options, targets, RunDir(run_path), view, t0)
    except BaseException:
        # refused before the run started (a nearly full disk), or Ctrl-C before run.json: leave nothing
        if claimed is not None:
            release_out_dir(claimed)
        remove_empty(made)
        raise


def _capture_and_report(
    options: ProfileOptions, targets: ProfileTargets, run_dir: RunDir, view: ProfileView, t0: float
) -> int:
    """Run the variants, then write the summary and the report whatever happened to them.

    Exit code: 0 when at least one variant succeeded; 130/143 when interrupted
    (a partial report is written); 4 when none succeeded (summary and report say
    why each failed).  ``reports/latest`` moves to this run only when it
    finished with a report and at least one successful variant.
    """
    run_doc = start_run_doc(options)
    # Parent-side wall times (seconds), for `make bench`'s harness-overhead breakdown.
    timing = {"setup": time.perf_counter() - t0}
    t1 = time.perf_counter()
    exit_code = EXIT_OK
    outcomes: list = []
    with tensorflow_children(run_dir, view) as starts:
        import_ahead(REPORT_MODULES)  # while the fork server imports TensorFlow and the variants run
        try:
            write_json(run_dir.run_json, run_doc.to_json())
            with view.progress(options, run_dir) as ui:
                outcomes = run_all(options, run_dir, ui.update)
        except Interrupted as exc:
            run_doc = replace(run_doc, interrupted=True, interrupted_by=exc.args[0])
            exit_code = exc.exit_code
        except KeyboardInterrupt:  # Ctrl-C outside a variant (while the run was starting)
            run_doc = replace(run_doc, interrupted=True, interrupted_by="SIGINT")
            exit_code = EXIT_SIGINT
        timing["variants"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        run_doc = finished_run_doc(run_doc, run_dir, options, timing)
        run_doc = replace(run_doc, stopped=disk_stop(run_dir, outcomes))
        save_run_doc(run_dir, run_doc)  # a full disk: finish_run below says so, in one line
        hardware = projection_hardware(targets.project_on, run_doc.topology,
                                       cluster=options.cluster is not None)
        if hardware:
            preset = get_preset(targets.project_preset or PROJECT_PRESET)
            if exit_code:  # interrupted: leave at once, and say why there is no projection
                _save_failed_projection(run_dir, hardware, preset, "not projected: the run was interrupted")
            else:
                timing["projection"] = _project(run_dir, options, hardware, preset, view)
        if targets.scaling is not None and not exit_code:  # --scaling: the sweep over accelerator counts
            took, exit_code = run_scaling(targets.scaling, options, run_dir, hardware,
                                          get_preset(targets.project_preset or PROJECT_PRESET), view.notice)
            timing.update(took)
    run_doc = replace(run_doc, tensorflow_starts=dict(starts))
    from tfprof_towers.session.report import ReportNotWritten, finish_run

    not_written: ReportNotWritten | None = None
    try:
        summary = finish_run(run_dir)
    except ReportNotWritten as exc:  # a full disk: the table still goes to the terminal
        summary, not_written = exc.doc, exc
        if run_doc.stopped is None and exc.errors:  # `report` later names the cause
            run_doc = replace(run_doc, stopped=disk_cause(run_dir, exc.errors[0]))
            save_run_doc(run_dir, run_doc)
    missing = tuple(Path(e.filename) for e in not_written.errors) if not_written else ()
    view.summary(summary, run_dir, not_written=missing)
    for line in scaling_lines(summary):
        view.notice(line)
    done = sum(v["status"] == "ok" for v in summary["variants"])
    if exit_code:
        view.notice(f"interrupted: wrote a partial report from {done} finished variant(s)")
    timing["finish"] = time.perf_counter() - t2
    save_run_doc(run_dir, replace(run_doc, harness_s=dict(timing)))
    if not_written is not None:
        raise not_written
    if targets.out is None and not exit_code and done:
        point_latest(targets.reports, run_dir.root)
    if not exit_code and not done:
        return view.nothing_succeeded()
    return exit_code


#: What the report step imports: :mod:`~tfprof_towers.session.report`, the modules it imports where it
#: needs them (reading and analysing the traces, the trace rules, the Chrome traces, the page), and the
#: printed summary's, and the few the libraries import on first use (numpy's masked arrays, Jinja's
#: extension, the trace map's futures).  A module left out is imported by the report as before, later.
REPORT_MODULES = ("tfprof_towers.session.report", "tfprof_towers.analysis.run_traces",
                  "tfprof_towers.trace.analysis", "tfprof_towers.trace.placed_memory",
                  "tfprof_towers.xplane.glibc_heap", "tfprof_towers.analysis.memory_calibration",
                  "tfprof_towers.analysis.cluster_view", "tfprof_towers.advice.trace_rules",
                  "tfprof_towers.advice.recommend", "tfprof_towers.render.chrome_trace",
                  "tfprof_towers.render.timeline", "tfprof_towers.render.html", "numpy.ma", "jinja2.ext",
                  "concurrent.futures")


def import_ahead(modules: tuple[str, ...]) -> threading.Thread:
    """Import ``modules`` in a background thread (started, returned): the report's imports are done while
    the parent only waits for its children, not after them.  A module that fails to import is left for
    its importer to fail on, in its place, with its own error."""

    def run() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                return

    thread = threading.Thread(target=run, name="tfprof-towers-import-ahead", daemon=True)
    thread.start()
    return thread


#: What the fork server imports once for every TensorFlow child of a profile: TensorFlow and the
#: capture runners, and the projection's graph builders (see procs/forkserver.py).
FORK_PRELOAD = ("tfprof_towers.capture.preload", "tfprof_towers.projection.graphcost",
                "tfprof_towers.projection.strategy_graphs", "tfprof_towers.projection.keras_graphs")


@contextlib.contextmanager
def tensorflow_children(run_dir: RunDir, view: ProfileView) -> Iterator[dict[str, Any]]:
    """Within the block every TensorFlow child (variants, graph builders, sweep points) is forked
    from one server that imported TensorFlow once; where none can run, each starts fresh (said
    once).  Yields the dict that ``run.json`` keeps as ``tensorflow_starts``, filled on exit."""
    before = dict(supervise.ENTRY_STARTS)
    starts: dict[str, Any] = {}
    with forkserver.serving(FORK_PRELOAD, run_dir.fork_server_txt, supervise.tf_child_env(),
                            view.notice) as server:
        try:
            yield starts
        finally:
            fresh = supervise.ENTRY_STARTS["fresh"] - before["fresh"]
            forked = supervise.ENTRY_STARTS["forked"] - before["forked"]
            starts.update(server.summary() if server is not None else {"mode": "fresh"})
            served = 1 if server is not None and server.ready_doc else 0
            starts.update(forked=forked, fresh=fresh, imports=fresh + served)


def disk_stop(run_dir: RunDir, outcomes: list) -> str | None:
    """"no space left on device while writing X": the first variant whose failed record a full disk
    kept out (run.json then says why its record is missing); None when every record was written."""
    for o in outcomes:
        if o.disk_full and not run_dir.record_json(o.name).is_file():
            return o.disk_full
    return None


def save_run_doc(run_dir: RunDir, run_doc: RunDoc) -> bool:
    """run.json; on a full disk the smallest write that still says how the run ended (in place)."""
    smallest = RunDoc(started=run_doc.started, finished=run_doc.finished, interrupted=run_doc.interrupted,
                      interrupted_by=run_doc.interrupted_by, config=run_doc.config, stopped=run_doc.stopped)
    return save_json(run_dir.run_json, run_doc.to_json(), smallest.to_json())


def projection_hardware(asked: str | None, topology: Topology | None, cluster: bool = False) -> str | None:
    """The profile to project on: the one asked for; where the timings are CPU stand-ins (logical
    CPU devices; a cluster's tasks without GPUs), the default one; on real GPUs none."""
    if asked:
        return asked
    kind = None if topology is None else topology.kind
    if cluster:
        return CPU_ONLY_CLUSTER_HARDWARE if kind == "cpu" else None
    return CPU_ONLY_HARDWARE if kind == "logical-cpu" else None


def _project(run_dir: RunDir, options: ProfileOptions, hardware: str, preset: Preset,
             view: ProfileView) -> float:
    """Write projection.json; a projection that fails is reported and saved as failed, never
    fatal to the run (the recommendation then says it has nothing to go on).  Seconds taken."""
    from tfprof_towers.projection.api import project_run

    t0 = time.perf_counter()
    # only the variants that ran: one that failed here is never recommended, and a file that
    # crashes while building must not take the projection of the others down with it
    ran = [v for v in options.variants if load_record(run_dir, v.name).ok]
    if not ran:  # nothing to recommend either way: the summary says no variant finished
        return 0.0
    size = "the Keras model's own sizes" if options.keras_model else f"the {preset.name} preset"
    view.notice(f"projecting {len(ran)} variant(s) on {hardware} at {size} ...")
    try:
        if options.cluster is not None:
            from tfprof_towers.projection.cluster import project_cluster_run

            # as many hosts of ``hardware`` as the run had workers (and its ps, else 1)
            project_cluster_run(run_dir, hardware, preset, options.cluster)
        else:
            project_run(run_dir, hardware, preset, ran, progress=view.notice if options.keras_model else None)
    except OSError as exc:
        if not is_disk_error(exc):
            raise
        view.notice(f"projection on {hardware} failed: cannot write ({exc.strerror or exc})")
    except Exception as exc:  # a projection that fails must not cost the run its report
        why = exc.message if isinstance(exc, TowersError) else f"{type(exc).__name__}: {exc}"
        view.notice(f"projection on {hardware} failed: {why}")
        _save_failed_projection(run_dir, hardware, preset, why)
    return time.perf_counter() - t0


def _save_failed_projection(run_dir: RunDir, hardware: str, preset: Preset, why: str) -> None:
    """``projection.json`` saying why there is no projection (where the disk takes it)."""
    from tfprof_towers.projection.api import PROJECTION_JSON, failed_projection

    with contextlib.suppress(OSError):
        write_json(run_dir.root / PROJECTION_JSON, failed_projection(hardware, preset, why))


def start_run_doc(options: ProfileOptions) -> RunDoc:
    return RunDoc(
        started=utc_now(), started_local=_dt.datetime.now().isoformat(timespec="seconds"),
        command=tuple(sys.argv), config=RunConfig.from_options(options),
        versions={"python": platform.python_version(), "tensorflow": None},
        host={"node": platform.node(), "machine": platform.machine(), "system": platform.system()},
        nvidia_smi_topo=gpu_topology_text(),
    )


def finished_run_doc(run_doc: RunDoc, run_dir: RunDir, options: ProfileOptions,
                     timing: dict[str, float]) -> RunDoc:
    """``run_doc`` once the variants are done: end time, the devices the children saw, versions."""
    topology = topology_from_records(run_dir, options) or run_doc.topology
    tensorflow = topology.tensorflow if topology is not None else None
    return replace(run_doc, finished=utc_now(), topology=topology,
                   versions={**run_doc.versions, "tensorflow": tensorflow}, harness_s=dict(timing))


def topology_from_records(run_dir: RunDir, options: ProfileOptions) -> Topology | None:
    """The devices the children saw (all children see the same machine), with their TensorFlow."""
    for v in options.variants:
        rec = load_record(run_dir, v.name)
        if rec.topology is not None:
            return replace(rec.topology, tensorflow=rec.versions.get("tensorflow"))
    return None
