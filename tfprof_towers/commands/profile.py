"""`tfprof-towers profile`: the arguments, checked into ``ProfileOptions`` before anything runs."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from tfprof_towers.cli import add_command
from tfprof_towers.commands import console
from tfprof_towers.session.profile import ProfileTargets, ProfileView, run_profile
from tfprof_towers.session.scaling import check_request, parse_counts, request_from_args
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import (
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
from tfprof_towers.variants.variant_files import check_keras_file, resolve_variants
from tfprof_towers.vocab.errors import VariantError


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
    p.add_argument("--scaling", type=parse_counts, default=None, metavar="COUNTS|auto",
                   help="after the run, sweep the accelerator count: each variant at each count (e.g. 1,2,4; "
                        "auto: 1, 2, 4, ... up to the GPUs here, or --accelerators without GPUs), each in "
                        "its own child, and project the curves (see docs/scaling.md)")
    p.add_argument("--scaling-mode", default=None, choices=("weak", "strong"),
                   help="weak: the preset's batch is per replica, the global batch grows with N; strong: the "
                        "global batch is fixed and split [default: weak]")
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
        preset=preset, variants=variants, accelerators=args.accelerators,
        warmup=preset.warmup if args.warmup is None else args.warmup, steps=args.steps or preset.steps,
        profile_steps=args.profile_steps or preset.profile_steps,
        variant_timeout_s=_timeout_s(args.variant_timeout, preset.variant_timeout_s),
        out_dir=args.out or args.reports, keras_model=keras_model, cluster=cluster,
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
    scaling = request_from_args(getattr(args, "scaling", None), getattr(args, "scaling_mode", None))
    if scaling is not None:
        check_request(scaling, options)
    targets = ProfileTargets(out=args.out, reports=args.reports, project_on=args.project_on,
                             project_preset=args.project_preset, scaling=scaling)
    return run_profile(options, targets, TERMINAL, t0)


#: The profile's output on this terminal: progress and notices on stderr, the tables on stdout.
TERMINAL = ProfileView(notice=console.err, progress=console.ProgressView, summary=console.print_summary,
                       nothing_succeeded=console.nothing_succeeded)
