"""`tfprof-towers profile`: run the training step under each placement and report."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import math
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from tfprof_towers.capture.runner import (
    Interrupted,
    check_free_space,
    disk_cause,
    disk_errors,
    gpu_topology_text,
    run_all,
)
from tfprof_towers.cli import add_command
from tfprof_towers.commands import console
from tfprof_towers.rundir.paths import (
    RunDir,
    check_writable,
    claim_out_dir,
    is_disk_error,
    missing_dirs,
    new_run_dir,
    point_latest,
    remove_empty,
    save_json,
    utc_now,
    write_json,
)
from tfprof_towers.rundir.records import RunConfig, RunDoc, Topology, load_record
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import (
    CPU_ONLY_CLUSTER_HARDWARE,
    CPU_ONLY_HARDWARE,
    MAX_LOOPBACK_TASKS,
    PRESETS,
    PROJECT_PRESET,
    ClusterOptions,
    Preset,
    ProfileOptions,
    VariantSpec,
    get_preset,
    parse_variant_names,
)
from tfprof_towers.variants.variant_files import check_keras_file, resolve_variants, variant_notices
from tfprof_towers.vocab.errors import EXIT_OK, EXIT_SIGINT, TowersError, VariantError


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "profile", run)
    p.add_argument("--preset", default=None, help="workload size: " + ", ".join(
        f"{n} ({pr.description})" for n, pr in PRESETS.items()) + " [default: cpu]")
    p.add_argument("--variants", default=None, metavar="A,B,...",
                   help="built-in variants to run (default: all; see `tfprof-towers variants`)")
    p.add_argument("--variant-file", action="append", default=[], metavar="PATH",
                   help="a Python file with build_variant(devices) (TF1 graph) or build_step(strategy, "
                        "devices) (TF2 strategy); repeatable; its name is the file's stem")
    p.add_argument("--keras-model", default=None, metavar="FILE",
                   help="a Keras model file (build_model(), make_dataset(global_batch_size), optional "
                        "compile_kwargs()) trained with model.fit under each tf2-strategy variant "
                        "(--variants picks among them)")
    p.add_argument("--accelerators", type=_accelerators, default=None, metavar="N",
                   help="accelerators to use (default: all GPUs; without GPUs, 2 logical CPU devices)")
    p.add_argument("--warmup", type=_warmup, default=None, metavar="N",
                   help="warm-up steps before timing (default: the preset's)")
    p.add_argument("--steps", type=_steps, default=None, metavar="N",
                   help="timed steps without the profiler (default: the preset's)")
    p.add_argument("--profile-steps", type=_profile_steps, default=None, metavar="N",
                   help="steps run under the profiler (default: the preset's)")
    p.add_argument("--variant-timeout", type=_timeout, default=None, metavar="SECONDS|none",
                   help="stop a variant and every process it started after this long; 'none' for no "
                        "limit (default: the preset's)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="run directory to create (default: reports/<YYYYmmdd-HHMMSS>/)")
    p.add_argument("--project-on", default=None, metavar="NAME|FILE",
                   help="project every variant on this hardware profile (name or .toml; see "
                        "`tfprof-towers hardware`). Runs on logical CPU devices are always projected "
                        f"(default {CPU_ONLY_HARDWARE}) and recommend from the projection; on GPUs it is "
                        "shown beside the measured ranking")
    p.add_argument("--project-preset", default=None, choices=list(PRESETS),
                   help=f"the workload size to project at [default: {PROJECT_PRESET}, the seed's sizes]")
    p.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="run the cluster variants instead: N worker task processes on 127.0.0.1 "
                        "(multi_worker: MultiWorkerMirroredStrategy), each with its TF_CONFIG, every task "
                        "captured (see `tfprof-towers variants`)")
    p.add_argument("--ps", type=_ps, default=None, metavar="M",
                   help="with --workers: also parameter_server, with M ps tasks and a chief "
                        "(ParameterServerStrategy with a ClusterCoordinator)")
    p.add_argument("--cluster", default=None, metavar="FILE",
                   help="drive a real cluster: the tasks of FILE ({\"worker\": [\"host:port\", ...], "
                        "\"ps\": [...], \"chief\": [...]}) are started by hand on their machines with "
                        "`tfprof-towers worker --cluster FILE --task JOB:I --run-dir DIR`; DIR is --out, "
                        "on a filesystem every machine shares")
    p.add_argument("--reports", type=Path, default=Path("reports"), help=argparse.SUPPRESS)


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _positive_int(text: str) -> int:
    v = _whole_number(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return v


def _non_negative_int(text: str) -> int:
    v = _whole_number(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return v


#: Largest counts accepted: more would only exhaust memory or disk in every child, slowly.
MAX_ACCELERATORS = 128
MAX_STEPS = 100_000
MAX_PROFILE_STEPS = 1_000  # each profiled step adds to the trace file


def _at_most(parse, top: int, why: str):
    def check(text: str) -> int:
        v = parse(text)
        if v > top:
            raise argparse.ArgumentTypeError(f"must be at most {top} ({why}): {text}")
        return v

    return check


_accelerators = _at_most(_positive_int, MAX_ACCELERATORS, "accelerators in one machine")
_workers = _at_most(_positive_int, MAX_LOOPBACK_TASKS, "task processes on this machine")
_ps = _at_most(_positive_int, MAX_LOOPBACK_TASKS, "task processes on this machine")
_warmup = _at_most(_non_negative_int, MAX_STEPS, "steps")
_steps = _at_most(_positive_int, MAX_STEPS, "steps")
_profile_steps = _at_most(_positive_int, MAX_PROFILE_STEPS, "each adds to the trace")


#: ``--variant-timeout none``: no limit (``inf`` too).
NO_LIMIT = math.inf


def _timeout(text: str) -> float:
    """Seconds (any size), or ``none``/``inf`` for no limit; checked before anything is created."""
    if text.strip().lower() in ("none", "inf", "infinity"):
        return NO_LIMIT
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds or 'none': {text!r}") from None
    if not v > 0 or math.isnan(v):
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds, or 'none' for no limit: {text}")
    return v


def cluster_options(args: argparse.Namespace) -> ClusterOptions | None:
    """``--workers N [--ps M]`` or ``--cluster FILE``, checked; None for a single-machine run."""
    workers, ps = getattr(args, "workers", None), getattr(args, "ps", None)
    file = getattr(args, "cluster", None)
    if workers is None and ps is None and file is None:
        return None
    if file is not None:
        if workers is not None or ps is not None:
            raise VariantError("--cluster names the tasks itself; it cannot be combined with --workers or "
                               "--ps")
        from tfprof_towers.capture.cluster.spec import Cluster

        Cluster.load(file).check_runnable(file)  # a bad file fails here, in one line, before anything runs
        return ClusterOptions(file=str(Path(file).resolve()))
    if workers is None:
        raise VariantError("--ps M adds the parameter_server variant to a cluster run: give --workers N too")
    total = workers + (ps or 0) + (1 if ps else 0)
    if total > MAX_LOOPBACK_TASKS:
        raise VariantError(f"--workers {workers} --ps {ps}: {total} task processes; at most "
                           f"{MAX_LOOPBACK_TASKS} on one machine")
    return ClusterOptions(workers=workers, ps=ps or 0)


def cluster_variants(args: argparse.Namespace, cluster: ClusterOptions) -> tuple[VariantSpec, ...]:
    """The cluster variants a run asks for: multi_worker, parameter_server with --ps (or the one a
    --cluster file's jobs call for), --variants choosing among them; variant files run as multi_worker."""
    if args.keras_model is not None:
        raise VariantError("--keras-model is not supported for cluster runs (--workers/--cluster): the "
                           "cluster variants run the seed step or a variant file's build_step")
    if cluster.file is not None:
        from tfprof_towers.capture.cluster.spec import Cluster

        has_ps = bool(Cluster.load(cluster.file).tasks("ps"))
        allowed: tuple[str, ...] = ("parameter_server",) if has_ps else ("multi_worker",)
        if args.variant_file:
            raise VariantError("--cluster runs the built-in cluster variants; use --variant-file with "
                               "--workers")
    else:
        allowed = registry.CLUSTER_NAMES if cluster.ps else ("multi_worker",)
    names = allowed if args.variants is None else parse_variant_names(args.variants, family=registry.CLUSTER)
    for n in names:
        if n not in allowed:
            why = ("needs --ps M (parameter-server tasks)" if n == "parameter_server" and cluster.file is None
                   else f"does not match the cluster file's jobs (it calls for {allowed[0]})")
            raise VariantError(f"{n} {why}")
    files = resolve_variants((), list(args.variant_file))
    for f in files:
        if f.family != registry.TF2_STRATEGY:
            raise VariantError(f"variant file {f.file}: a cluster run takes a build_step(strategy, devices) "
                               f"file (it runs under MultiWorkerMirroredStrategy), not a {f.family} one")
    return resolve_variants(tuple(names), []) + tuple(
        VariantSpec(f.name, f.file, registry.CLUSTER) for f in files)


def options_from_args(args: argparse.Namespace) -> ProfileOptions:
    """Validate everything before any variant runs; one-line errors."""
    preset = get_preset(args.preset or "cpu")
    cluster = cluster_options(args)
    if cluster is not None:
        return _options(args, preset, cluster_variants(args, cluster), cluster=cluster)
    keras_model = None
    if args.keras_model is not None:
        if args.variant_file:
            raise VariantError("--keras-model trains your model under the built-in tf2-strategy variants; "
                               "it cannot be combined with --variant-file")
        keras_model = check_keras_file(args.keras_model)
        builtin = parse_variant_names(args.variants, family=registry.TF2_STRATEGY)
    else:
        builtin = parse_variant_names(args.variants) if (args.variants or not args.variant_file) else ()
    return _options(args, preset, resolve_variants(builtin, list(args.variant_file)), keras_model=keras_model)


def _options(args: argparse.Namespace, preset: Preset, variants: tuple[VariantSpec, ...],
             keras_model: str | None = None, cluster: ClusterOptions | None = None) -> ProfileOptions:
    """The options of a run of ``variants``: step counts and timeout from the arguments, else the preset."""
    return ProfileOptions(
        preset=preset,
        variants=variants,
        accelerators=args.accelerators,
        warmup=preset.warmup if args.warmup is None else args.warmup,
        steps=args.steps or preset.steps,
        profile_steps=args.profile_steps or preset.profile_steps,
        variant_timeout_s=_timeout_s(args.variant_timeout, preset.variant_timeout_s),
        out_dir=args.out or args.reports,
        keras_model=keras_model,
        cluster=cluster,
    )


def _timeout_s(asked: float | None, preset_s: float) -> float | None:
    """The variant timeout: the preset's by default; None for no limit."""
    if asked is None:
        return preset_s
    return None if math.isinf(asked) else asked


def run(args: argparse.Namespace) -> int:
    """Run one training step under several device placements, each in its own process.

    Writes a run directory (run.json, variants/<name>/record.json, tensorboard/,
    summary.json, report.html) and prints a ranked table and the report's path.
    Without --variants and --variant-file all built-in variants run (the tf1-graph and
    tf2-strategy families side by side); with only --variant-file, only those files run
    (add --variants to compare with built-ins).  With --keras-model, the user's Keras
    model is trained under each tf2-strategy variant (--variants picks).
    """
    t0 = time.perf_counter()
    options = options_from_args(args)
    if args.project_on and options.keras_model:
        raise TowersError("--project-on projects the seed workload and variant files; it cannot project a "
                          "--keras-model run")
    for notice in variant_notices(options.variants):
        console.err(notice)
    if args.project_on:
        from tfprof_towers.projection.hardware import load_hardware

        load_hardware(args.project_on)  # a bad name fails here, before anything runs
    if options.cluster is not None and options.cluster.attached and args.out is None:
        raise TowersError("--cluster needs --out DIR: the run directory every task is started with "
                          "(tfprof-towers worker ... --run-dir DIR), on a filesystem every machine shares")
    made = missing_dirs(args.out if args.out is not None else args.reports)
    try:
        if args.out is not None:
            run_path = claim_out_dir(args.out)
        else:
            try:
                run_path = new_run_dir(args.reports)
            except OSError as exc:
                raise TowersError(f"{args.reports}: cannot create a run directory ({exc.strerror})") from None
            made.append(run_path.absolute())
            check_writable(run_path)
        check_free_space(run_path, len(options.variants))
        with disk_errors(run_path):
            return _capture_and_report(args, options, RunDir(run_path), t0)
    except BaseException:
        # refused before the run started (a nearly full disk), or Ctrl-C before run.json: leave nothing
        remove_empty(made)
        raise


def _capture_and_report(
    args: argparse.Namespace, options: ProfileOptions, run_dir: RunDir, t0: float
) -> int:
    """Run the variants, then write the summary and the report whatever happened to them.

    Exit code: 0 when at least one variant succeeded; 130/143 when interrupted
    (a partial report is written); 4 when none succeeded (summary and report say
    why each failed).  ``reports/latest`` moves to this run only when it
    finished with a report and at least one successful variant.
    """
    from tfprof_towers.session.report import ReportNotWritten, finish_run

    run_doc = start_run_doc(options)
    # Parent-side wall times (seconds), for `make bench`'s harness-overhead breakdown.
    timing = {"setup": time.perf_counter() - t0}
    t1 = time.perf_counter()
    exit_code = EXIT_OK
    outcomes: list = []
    try:
        write_json(run_dir.run_json, run_doc.to_json())
        with console.ProgressView(options, run_dir) as ui:
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
    # a Keras model is not projected (the projection builds the seed workload and variant files)
    hardware = None if options.keras_model else projection_hardware(
        args.project_on, run_doc.topology, cluster=options.cluster is not None)
    if hardware:
        preset = get_preset(args.project_preset or PROJECT_PRESET)
        if exit_code:  # interrupted: leave at once, and say why there is no projection
            _save_failed_projection(run_dir, hardware, preset, "not projected: the run was interrupted")
        else:
            timing["projection"] = _project(run_dir, options, hardware, preset)
    not_written: ReportNotWritten | None = None
    try:
        summary = finish_run(run_dir)
    except ReportNotWritten as exc:  # a full disk: the table still goes to the terminal
        summary, not_written = exc.doc, exc
        if run_doc.stopped is None and exc.errors:  # `report` later names the cause
            run_doc = replace(run_doc, stopped=disk_cause(run_dir, exc.errors[0]))
            save_run_doc(run_dir, run_doc)
    missing = tuple(Path(e.filename) for e in not_written.errors) if not_written else ()
    console.print_summary(summary, run_dir, not_written=missing)
    done = sum(v["status"] == "ok" for v in summary["variants"])
    if exit_code:
        console.err(f"interrupted: wrote a partial report from {done} finished variant(s)")
    timing["finish"] = time.perf_counter() - t2
    save_run_doc(run_dir, replace(run_doc, harness_s=dict(timing)))
    if not_written is not None:
        raise not_written
    if args.out is None and not exit_code and done:
        point_latest(args.reports, run_dir.root)
    if not exit_code and not done:
        return console.nothing_succeeded()
    return exit_code


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


def _project(run_dir: RunDir, options: ProfileOptions, hardware: str, preset: Preset) -> float:
    """Write projection.json; a projection that fails is reported and saved as failed, never
    fatal to the run (the recommendation then says it has nothing to go on).  Seconds taken."""
    from tfprof_towers.projection.api import project_run

    t0 = time.perf_counter()
    # only the variants that ran: one that failed here is never recommended, and a file that
    # crashes while building must not take the projection of the others down with it
    ran = [v for v in options.variants if load_record(run_dir, v.name).ok]
    if not ran:  # nothing to recommend either way: the summary says no variant finished
        return 0.0
    console.err(f"projecting {len(ran)} variant(s) on {hardware} at the {preset.name} preset ...")
    try:
        if options.cluster is not None:
            _project_cluster(run_dir, options, hardware, preset)
        else:
            project_run(run_dir, hardware, preset, ran)
    except OSError as exc:
        if not is_disk_error(exc):
            raise
        console.err(f"projection on {hardware} failed: cannot write ({exc.strerror or exc})")
    except Exception as exc:  # a projection that fails must not cost the run its report
        why = exc.message if isinstance(exc, TowersError) else f"{type(exc).__name__}: {exc}"
        console.err(f"projection on {hardware} failed: {why}")
        _save_failed_projection(run_dir, hardware, preset, why)
    return time.perf_counter() - t0


def _project_cluster(run_dir: RunDir, options: ProfileOptions, hardware: str, preset: Preset) -> None:
    """A cluster run projected on as many hosts of ``hardware`` as it had workers (and its ps, else 1)."""
    from tfprof_towers.projection.cluster import project_cluster_run

    assert options.cluster is not None
    project_cluster_run(run_dir, hardware, preset, options.cluster)


def _save_failed_projection(run_dir: RunDir, hardware: str, preset: Preset, why: str) -> None:
    """``projection.json`` saying why there is no projection (where the disk takes it)."""
    from tfprof_towers.projection.api import PROJECTION_JSON, failed_projection

    with contextlib.suppress(OSError):
        write_json(run_dir.root / PROJECTION_JSON, failed_projection(hardware, preset, why))


def start_run_doc(options: ProfileOptions) -> RunDoc:
    return RunDoc(
        started=utc_now(),
        started_local=_dt.datetime.now().isoformat(timespec="seconds"),
        command=tuple(sys.argv),
        config=RunConfig.from_options(options),
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
