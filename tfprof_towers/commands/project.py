"""`tfprof-towers project`: projected step times of the placements on a hardware profile."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tfprof_towers.cli import add_command
from tfprof_towers.commands import console
from tfprof_towers.procs import forkserver, supervise
from tfprof_towers.projection.api import PROJECTION_JSON, KerasModel, project, run_preset, run_variants
from tfprof_towers.projection.hardware import BUILDS, builtin_names
from tfprof_towers.render.projection import profile_toml
from tfprof_towers.rundir.paths import RunDir, json_text, write_json
from tfprof_towers.rundir.projection_doc import ProjectionDoc
from tfprof_towers.rundir.records import RunDoc, load_run
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import PRESETS, VariantSpec, get_preset, parse_variant_names
from tfprof_towers.variants.variant_files import check_keras_file, resolve_variants, variant_notices
from tfprof_towers.vocab.errors import EXIT_NOTHING_PROJECTED, TowersError
from tfprof_towers.vocab.fmt import fmt_step, fmt_workload

DEFAULT_PRESET = "seed"
#: What the fork server imports once for the graph builders (one child per variant, no new import).
PROJECTION_PRELOAD = ("tfprof_towers.projection.graphcost", "tfprof_towers.projection.strategy_graphs",
                      "tfprof_towers.projection.keras_graphs")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "project", run)
    p.add_argument("run_dir", nargs="?", type=Path, default=None, metavar="RUN_DIR",
                   help="a run directory written by `profile`: its variants, preset and measurements "
                        "calibrate the projection (optional)")
    p.add_argument("--hardware", required=True, metavar="NAME|FILE.toml",
                   help="a built-in profile (" + ", ".join(builtin_names()) + ") or a TOML file; "
                        "see `tfprof-towers hardware`")
    p.add_argument("--preset", default=None, choices=list(PRESETS),
                   help=f"workload size (default: the run's preset, or {DEFAULT_PRESET} without RUN_DIR)")
    p.add_argument("--batch", type=_batch, default=None, metavar="N",
                   help="the preset's batch size instead (the seed workload's input is [N, dim, dim]); with "
                        "--keras-model the global batch instead of the file's GLOBAL_BATCH_SIZE: memory and "
                        "time grow with it")
    p.add_argument("--keras-model", default=None, metavar="FILE",
                   help="project your Keras model file (build_model, make_dataset: the file `profile "
                        "--keras-model` takes) under each tf2-strategy variant instead of the seed workload")
    p.add_argument("--variants", default=None, metavar="A,B,...",
                   help="built-in variants to project (default: the run's, or all built-ins)")
    p.add_argument("--variant-file", action="append", default=[], metavar="PATH",
                   help="a Python file with build_variant(devices); repeatable")
    p.add_argument("--host-build", default=None, choices=BUILDS,
                   help="TensorFlow build assumed on the host (default: the profile's)")
    p.add_argument("--workers", type=_hosts, default=None, metavar="N",
                   help="project the cluster variants instead: multi_worker against parameter_server on N "
                        "hosts of a multi-host profile (one with a [network] section, e.g. 8x-a100-100gbe)")
    p.add_argument("--ps", type=_hosts, default=None, metavar="M",
                   help="with --workers: parameter-server hosts for parameter_server (default 1)")
    p.add_argument("--json", action="store_true", help="print the projection as JSON")


def _hosts(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= v <= MAX_HOSTS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_HOSTS}: {text}")
    return v


#: Largest --batch taken (the seed's is 64).
MAX_BATCH = 1 << 16


def _batch(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= v <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_BATCH}: {text}")
    return v


#: Most hosts a cluster projection takes.
MAX_HOSTS = 4096


def run_cluster(args: argparse.Namespace) -> dict[str, Any]:
    """``project --workers N``: the cluster variants on N hosts (no graph is built, no run is read)."""
    from tfprof_towers.projection.cluster import project_cluster
    from tfprof_towers.projection.hardware import load_hardware

    if args.run_dir is not None or args.variants or args.variant_file or args.keras_model:
        raise TowersError("--workers projects the built-in cluster variants on the seed workload; it takes "
                          "no RUN_DIR, --variants, --variant-file or --keras-model")
    hw = load_hardware(args.hardware)
    if args.host_build:
        hw = hw.with_host_build(args.host_build)
    return project_cluster(hw, get_preset(args.preset or DEFAULT_PRESET), args.workers, args.ps or 1)


def _project_cluster_run(args: argparse.Namespace, run_dir: RunDir, cluster: Any, preset: Any,
                         write: bool = True) -> dict[str, Any]:
    """``project RUN_DIR`` of a cluster run: its variants on as many hosts as it had workers."""
    from tfprof_towers.projection.cluster import project_cluster_run

    doc = project_cluster_run(run_dir, args.hardware, preset, cluster, args.host_build, write=write)
    if write:
        _rerender(run_dir)
    return doc


def run(args: argparse.Namespace) -> int:
    """Project each placement's step time on a machine you do not have at hand.

    Builds each variant's graph at the preset's full size without running it,
    places it as TensorFlow would, and projects the step on a hardware profile:
    two bounds (copies overlapped with compute, and fully serialised), the
    bottleneck (host compute, accelerator compute or a named link), per-device
    work and per-link bytes, a ranking and a recommendation.  With RUN_DIR the
    run's measurements calibrate the host's per-op overhead and efficiency, the
    static placement is checked against the run's partition graphs, and the
    result is also written to RUN_DIR/projection.json.  Every number printed is
    projected, not measured.
    """
    doc, run_dir, code = document(args)
    show(doc, run_dir, args.json)
    return code


def document(args: argparse.Namespace, write: bool = True) -> tuple[dict[str, Any], RunDir | None, int]:
    """What ``project --json`` prints, the run directory it read and the exit code.  ``write`` False:
    RUN_DIR is only read (no projection.json written, no report re-rendered)."""
    if args.workers is not None:
        return run_cluster(args), None, 0
    if args.ps is not None:
        raise TowersError("--ps goes with --workers N (the cluster projection)")
    run_dir = RunDir(args.run_dir) if args.run_dir is not None else None
    run = load_run(run_dir) if run_dir is not None else None
    if args.preset:
        preset = get_preset(args.preset)
    else:
        preset = run_preset(run) if run is not None else get_preset(DEFAULT_PRESET)
    keras = keras_model(args, run)
    if args.batch is not None and keras is None:  # a size of its own: named so, never calibrated as the run's
        preset = dataclasses.replace(preset, batch=args.batch, name=f"{preset.name}-batch{args.batch}")
    if run is not None and run.config is not None and run.config.cluster is not None:
        return _project_cluster_run(args, run_dir, run.config.cluster, preset, write), run_dir, 0
    variants = _variants(args, run, keras)
    # a Keras model's graphs can take minutes each: a line as each is built
    model = {"keras": keras, "progress": console.err} if keras is not None else {}
    with tempfile.TemporaryDirectory(prefix="tfprof-project-") as tmp, forkserver.serving(
            PROJECTION_PRELOAD, Path(tmp) / "fork-server.txt", supervise.tf_child_env(), console.err):
        doc = project(args.hardware, preset, variants, run_dir=run_dir, host_build=args.host_build, **model)
    if run_dir is not None and write:
        write_json(run_dir.root / PROJECTION_JSON, doc)
        _rerender(run_dir)  # the report's "measured vs projected" section shows it
    return doc, run_dir, 0 if doc["ranking"] else EXIT_NOTHING_PROJECTED


def show(doc: dict[str, Any], run_dir: RunDir | None, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json_text(doc) + "\n")
    else:
        print_projection(doc, run_dir)


def _rerender(run_dir: RunDir) -> None:
    """summary.json and report.html again, with the projection just written (the analysis side,
    pandas included, is imported only here: a projection without RUN_DIR never needs it)."""
    from tfprof_towers.session.report import finish_run

    finish_run(run_dir)


def keras_model(args: argparse.Namespace, run: RunDoc | None) -> KerasModel | None:
    """The Keras model to project: ``--keras-model``, else the run's; None for the seed workload."""
    from_run = run.config.keras_model if run is not None and run.config is not None else None
    if args.keras_model is None and from_run is None:
        return None
    if args.variant_file:
        raise TowersError("--keras-model projects your model under the built-in tf2-strategy variants; it "
                          "cannot be combined with --variant-file")
    if args.preset:
        raise TowersError("--preset sizes the seed workload; a Keras model's sizes are its file's "
                          "(--batch N sets its global batch)")
    if args.keras_model is not None and from_run is not None \
            and Path(args.keras_model).resolve() != Path(from_run).resolve():
        raise TowersError(f"the run trained {from_run}; project it without --keras-model, or --keras-model "
                          "without the run directory")
    return KerasModel(check_keras_file(args.keras_model) if args.keras_model else from_run, args.batch)


def _variants(args: argparse.Namespace, run: RunDoc | None,
              keras: KerasModel | None = None) -> tuple[VariantSpec, ...]:
    if keras is not None:  # the model under each tf2-strategy built-in (the run's, or those asked for)
        if args.variants is None and run is not None:
            return run_variants(run)
        return resolve_variants(parse_variant_names(args.variants, family=registry.TF2_STRATEGY), [])
    if args.variants or args.variant_file:
        builtin = parse_variant_names(args.variants) if args.variants else ()
        variants = resolve_variants(builtin, list(args.variant_file))
        for notice in variant_notices(variants):
            console.err(notice)
        return variants
    if run is not None:
        return run_variants(run)
    return tuple(VariantSpec.builtin(n) for n in registry.BUILTIN_NAMES)


def projection_table(doc: ProjectionDoc | Mapping[str, Any]) -> Table:
    doc = as_projection_doc(doc)
    p = doc.preset or {}
    family = registry.CLUSTER if doc.cluster else registry.TF1_GRAPH
    size = f"(preset {p['name']}: batch {p['batch']}, dim {p.get('dim')})"
    if doc.keras_model:
        family, size = registry.TF2_STRATEGY, fmt_workload(dict(p))
    t = Table(title=escape(f"PROJECTED step time on {doc.hardware} {size}; not measured"))
    baseline = registry.baseline_name(family)
    for col, just in (("#", "right"), ("variant", "left"), ("overlapped", "right"), ("serial", "right"),
                      (f"vs {baseline}", "right"), ("peak memory", "right"), ("bottleneck", "left")):
        t.add_column(col, justify=just)
    base_entry = doc.entry(baseline)
    base = base_entry.projected_step_s.overlapped \
        if base_entry is not None and base_entry.projected_step_s is not None else None
    for name in doc.ranking:
        e = doc.entry(name)
        s, b = e.projected_step_s, e.bottleneck
        speed = f"{base / s.overlapped:.2f}x" if base else "-"
        t.add_row(str(e.rank), escape(name), fmt_step(s.overlapped), fmt_step(s.serial), speed,
                  console.memory_cell(e.memory_fit), escape(f"{b.text} ({b.share:.0%} of step)"))
    for e in doc.variants:
        if e.error is not None:
            t.add_row("-", escape(e.name), "-", "-", "-", "-", f"[red]{escape(e.error)}[/]")
    return t


def as_projection_doc(doc: ProjectionDoc | Mapping[str, Any]) -> ProjectionDoc:
    """``doc`` typed: a document as ``project --json`` prints it, read as ``projection.json`` is."""
    return doc if isinstance(doc, ProjectionDoc) else ProjectionDoc.from_json(doc)


def print_projection(doc: ProjectionDoc | Mapping[str, Any], run_dir: RunDir | None) -> None:
    doc = as_projection_doc(doc)
    out = Console(highlight=False, width=max(Console().width, 150))
    out.print(projection_table(doc))
    rec = doc.recommendation
    if rec.variant:
        out.print(f"Projected recommendation: [bold]{escape(rec.variant)}[/] — {escape(rec.reason)}")
    elif rec.reason:
        out.print(f"[yellow]No projected recommendation[/]: {escape(rec.reason)}")
    mem = doc.memory
    if mem is not None:
        out.print(escape(f"Memory: {mem.basis}, on each device of the target; "
                         + (mem.note if mem.note else str(mem.headroom_why)) + "."))
        for e in doc.variants:
            fit = e.fit
            if fit.fits is False and fit.why:
                out.print(escape(f"{e.name} {fit.verdict}: {fit.why}."))
            elif fit.may_not_fit:  # named, in one line: the verdict says why
                out.print(escape(f"{e.name} {fit.verdict}."))
    prof = doc.profile  # the hardware profile's own numbers, as its TOML has them
    host = prof["host"]
    out.print(
        f"Assumes: {escape(prof['description'])}; host {host['peak_gflops']:.0f} GFLOP/s peak "
        f"({host['tensorflow_build']} TensorFlow build) x {host['efficiency']:.2f} efficiency. "
        f"Sources: {escape(sources_of(prof))}.", markup=True,
    )
    net = prof.get("network")
    if net and doc.cluster:
        out.print(f"Hosts linked by {escape(net['name'])}: {net['bandwidth_gbs']:g} GB/s per direction x "
                  f"{net['efficiency']:.2f} efficiency, {net['latency_us']:g} µs latency.")
    cal = doc.calibration
    if cal is not None:
        for note in cal.notes:
            out.print(f"calibration: {escape(note)}")
        for name, check in cal.placement_checks.items():
            agree = ("bytes per link agree" if check.links_agree else
                     f"bytes per link differ by up to {_or_unknown(check.max_link_difference_bytes)} B")
            out.print(f"placement check {escape(name)}: {check.ops_same_device}/{check.ops_compared} "
                      f"ops on the measured device; {agree}")
    if run_dir is not None:
        out.print(f"projection: {run_dir.root / PROJECTION_JSON}", markup=False)
        out.print(f"report (re-rendered with the projection): {run_dir.report_html}", markup=False)


def _or_unknown(value: int | None) -> int | str:
    return "?" if value is None else value


def sources_of(profile: Mapping[str, Any]) -> str:
    """Where a profile's numbers are sourced: the command printing a built-in's TOML, or the file."""
    where = profile_toml(str(profile.get("origin") or ""))
    if where.startswith("tfprof-towers "):
        return f"`{where}`"
    return f"the comments in {where}" if where else f"`tfprof-towers hardware {profile.get('name', '')}`"
