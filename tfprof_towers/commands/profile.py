"""`tfprof-towers profile`: run the training step under each placement and report."""

from __future__ import annotations

import argparse
import datetime as _dt
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from .. import registry
from ..capture.runner import Interrupted, check_free_space, disk_errors, gpu_topology_text, run_all
from ..cli import add_command
from ..config import PRESETS, Preset, ProfileOptions, get_preset, parse_variant_names
from ..errors import TowersError, VariantError
from ..pipeline import finish_run
from ..project.api import CPU_ONLY_HARDWARE, PROJECT_PRESET
from ..records import RunConfig, RunDoc, Topology, load_record
from ..rundir import RunDir, check_writable, claim_out_dir, new_run_dir, point_latest, utc_now, write_json
from ..variant_files import check_keras_file, resolve_variants
from . import console


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
    p.add_argument("--accelerators", type=_positive_int, default=None, metavar="N",
                   help="accelerators to use (default: all GPUs; without GPUs, 2 logical CPU devices)")
    p.add_argument("--warmup", type=_non_negative_int, default=None, metavar="N",
                   help="warm-up steps before timing (default: the preset's)")
    p.add_argument("--steps", type=_positive_int, default=None, metavar="N",
                   help="timed steps without the profiler (default: the preset's)")
    p.add_argument("--profile-steps", type=_positive_int, default=None, metavar="N",
                   help="steps run under the profiler (default: the preset's)")
    p.add_argument("--variant-timeout", type=_positive_float, default=None, metavar="SECONDS",
                   help="kill a variant's process group after this long (default: the preset's)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="run directory to create (default: reports/<YYYYmmdd-HHMMSS>/)")
    p.add_argument("--project-on", default=None, metavar="NAME|FILE",
                   help="project every variant on this hardware profile (name or .toml; see "
                        "`tfprof-towers hardware`). Runs on logical CPU devices are always projected "
                        f"(default {CPU_ONLY_HARDWARE}) and recommend from the projection; on GPUs it is "
                        "shown beside the measured ranking")
    p.add_argument("--project-preset", default=None, choices=list(PRESETS),
                   help=f"the workload size to project at [default: {PROJECT_PRESET}, the seed's sizes]")
    p.add_argument("--reports", type=Path, default=Path("reports"), help=argparse.SUPPRESS)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return v


def _non_negative_int(text: str) -> int:
    if text.strip() == "0":
        return 0
    return _positive_int(text)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text}")
    return v


def options_from_args(args: argparse.Namespace) -> ProfileOptions:
    """Validate everything before any variant runs; one-line errors."""
    preset = get_preset(args.preset or "cpu")
    keras_model = None
    if args.keras_model is not None:
        if args.variant_file:
            raise VariantError("--keras-model trains your model under the built-in tf2-strategy variants; "
                               "it cannot be combined with --variant-file")
        keras_model = check_keras_file(args.keras_model)
        builtin = parse_variant_names(args.variants, family=registry.TF2_STRATEGY)
    else:
        builtin = parse_variant_names(args.variants) if (args.variants or not args.variant_file) else ()
    variants = resolve_variants(builtin, list(args.variant_file))
    return ProfileOptions(
        preset=preset,
        variants=variants,
        accelerators=args.accelerators,
        warmup=preset.warmup if args.warmup is None else args.warmup,
        steps=args.steps or preset.steps,
        profile_steps=args.profile_steps or preset.profile_steps,
        variant_timeout_s=args.variant_timeout or preset.variant_timeout_s,
        out_dir=args.out or args.reports,
        keras_model=keras_model,
    )


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
    if args.project_on:
        from ..project.hardware import load_hardware

        load_hardware(args.project_on)  # a bad name fails here, before anything runs
    if args.out is not None:
        run_path = claim_out_dir(args.out)
    else:
        try:
            run_path = new_run_dir(args.reports)
        except OSError as exc:
            raise TowersError(f"{args.reports}: cannot create a run directory ({exc.strerror})") from None
        check_writable(run_path)
    check_free_space(run_path, len(options.variants))
    with disk_errors(run_path):
        return _capture_and_report(args, options, RunDir(run_path), t0)


def _capture_and_report(
    args: argparse.Namespace, options: ProfileOptions, run_dir: RunDir, t0: float
) -> int:
    run_doc = start_run_doc(options)
    write_json(run_dir.run_json, run_doc.to_json())
    if args.out is None:
        point_latest(args.reports, run_dir.root)

    # Parent-side wall times (seconds), for `make bench`'s harness-overhead breakdown.
    timing = {"setup": time.perf_counter() - t0}
    t1 = time.perf_counter()
    ui = console.ProgressView(options, run_dir)
    exit_code = 0
    try:
        with ui:
            run_all(options, run_dir, ui.update)
    except Interrupted as exc:
        run_doc = replace(run_doc, interrupted=True, interrupted_by=exc.args[0])
        exit_code = exc.exit_code
    timing["variants"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    run_doc = finished_run_doc(run_doc, run_dir, options, timing)
    write_json(run_dir.run_json, run_doc.to_json())
    # a Keras model is not projected (the projection builds the seed workload and variant files)
    hardware = None if options.keras_model else projection_hardware(args.project_on, run_doc.topology)
    if hardware:
        preset = get_preset(args.project_preset or PROJECT_PRESET)
        if exit_code:  # interrupted: leave at once, and say why there is no projection
            from ..project.api import PROJECTION_JSON, failed_projection

            why = "not projected: the run was interrupted"
            write_json(run_dir.root / PROJECTION_JSON, failed_projection(hardware, preset, why))
        else:
            timing["projection"] = _project(run_dir, options, hardware, preset)
    summary = finish_run(run_dir)
    console.print_summary(summary, run_dir)
    if exit_code:
        done = sum(v["status"] == "ok" for v in summary["variants"])
        console.err(f"interrupted: wrote a partial report from {done} finished variant(s)")
    timing["finish"] = time.perf_counter() - t2
    write_json(run_dir.run_json, replace(run_doc, harness_s=dict(timing)).to_json())
    return exit_code


def projection_hardware(asked: str | None, topology: Topology | None) -> str | None:
    """The profile to project on: the one asked for; on logical CPU devices, the default one."""
    if asked:
        return asked
    return CPU_ONLY_HARDWARE if topology is not None and topology.kind == "logical-cpu" else None


def _project(run_dir: RunDir, options: ProfileOptions, hardware: str, preset: Preset) -> float:
    """Write projection.json; a projection that fails is reported and saved as failed, never
    fatal to the run (the recommendation then says it has nothing to go on).  Seconds taken."""
    from ..project.api import PROJECTION_JSON, failed_projection, project_run

    t0 = time.perf_counter()
    # only the variants that ran: one that failed here is never recommended, and a file that
    # crashes while building must not take the projection of the others down with it
    ran = [v for v in options.variants if load_record(run_dir, v.name).ok]
    if not ran:  # nothing to recommend either way: the summary says no variant finished
        return 0.0
    console.err(f"projecting {len(ran)} variant(s) on {hardware} at the {preset.name} preset ...")
    try:
        project_run(run_dir, hardware, preset, ran)
    except Exception as exc:  # a projection that fails must not cost the run its report
        why = exc.message if isinstance(exc, TowersError) else f"{type(exc).__name__}: {exc}"
        console.err(f"projection on {hardware} failed: {why}")
        write_json(run_dir.root / PROJECTION_JSON, failed_projection(hardware, preset, why))
    return time.perf_counter() - t0


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
