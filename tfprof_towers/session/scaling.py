"""``profile --scaling COUNTS``: each selected variant at each accelerator count, then projected.

After the run's own variants, every point runs in its own capture child, as the run's variants
do, its files under ``variants/<name>@<count>/`` and ``tensorboard/<name>@<count>/``.  A family's
baseline (one accelerator) runs once, at 1; every other variant is skipped at 1, saying so.
``weak`` mode (the default) keeps the preset's batch per replica (global batch N times it);
``strong`` splits it (a count it does not divide is skipped, saying so).  Where the run is
projected, the same variants are projected at 1, 2, 4, ... up to the profile's accelerators.
No TensorFlow here.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tfprof_towers.analysis.scaling import MODES, STRONG, WEAK, global_batch
from tfprof_towers.capture.runner import Interrupted, check_free_space, nvidia_smi, run_all
from tfprof_towers.rundir.paths import RunDir, is_disk_error, write_json
from tfprof_towers.rundir.records import SKIPPED, VariantRecord
from tfprof_towers.rundir.scaling import (
    PlannedPoint,
    PointRunDir,
    ProjectedScaling,
    ScalingDoc,
    ScalingSection,
    point_name,
    scaling_json,
)
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import Preset, ProfileOptions, VariantSpec
from tfprof_towers.vocab.errors import TowersError, VariantError

AUTO = "auto"
#: The most accelerators one count may ask for (as --accelerators).
MAX_COUNT = 128
#: Accelerators ``--scaling auto`` goes up to on a machine without GPUs and without --accelerators.
CPU_AUTO_TOP = 2

Say = Callable[[str], None]


@dataclass(frozen=True)
class ScalingRequest:
    """``--scaling COUNTS|auto`` and ``--scaling-mode``."""

    counts: tuple[int, ...] | None  # None: auto
    mode: str = WEAK


def parse_counts(text: str) -> tuple[int, ...] | str:
    """``--scaling``: ``"auto"``, or counts such as ``"1,2,4"`` (distinct, sorted, each 1..128)."""
    if text.strip().lower() == AUTO:
        return AUTO
    counts = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a count of accelerators: {part!r} (say e.g. 1,2,4 or auto)"
                                             ) from None
        if not 1 <= n <= MAX_COUNT:
            raise argparse.ArgumentTypeError(f"each count must be 1 to {MAX_COUNT}: {n}")
        counts.add(n)
    if not counts:
        raise argparse.ArgumentTypeError("--scaling needs counts such as 1,2,4, or auto")
    return tuple(sorted(counts))


def request_from_args(counts: tuple[int, ...] | str | None, mode: str | None) -> ScalingRequest | None:
    """The sweep ``profile`` was asked for, or None (``--scaling-mode`` alone is an error)."""
    if counts is None:
        if mode is not None:
            raise VariantError("--scaling-mode says how to sweep: give --scaling COUNTS (or auto) too")
        return None
    mode = mode or WEAK
    if mode not in MODES:
        raise VariantError(f"--scaling-mode {mode}: choose weak or strong")
    return ScalingRequest(None if counts == AUTO else tuple(counts), mode)  # type: ignore[arg-type]


def check_request(request: ScalingRequest, options: ProfileOptions) -> None:
    """What a sweep cannot do, in one line, before anything runs."""
    if options.cluster is not None:
        raise VariantError("--scaling sweeps accelerators on one machine; a cluster run "
                           "(--workers/--cluster) is projected across hosts instead")


def gpus_here() -> int:
    """GPUs ``nvidia-smi -L`` lists (0 without the tool or GPUs)."""
    out = nvidia_smi("-L") or ""
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def resolve_counts(request: ScalingRequest, accelerators: int | None, gpus: int) -> tuple[int, ...]:
    """The counts: those asked for; ``auto``: 1, 2, 4, ... up to the GPUs here (without GPUs, up to
    ``--accelerators``, else 2 logical CPU devices)."""
    if request.counts is not None:
        return request.counts
    from tfprof_towers.projection.scaling import powers_of_two_to  # the projection's modules: only here

    return powers_of_two_to(gpus or accelerators or CPU_AUTO_TOP)


def sweep_variants(variants: Sequence[VariantSpec]) -> tuple[tuple[VariantSpec, ...], tuple[str, ...]]:
    """The variants to sweep: those asked for, each family's baseline added where a variant of
    its family is swept without it (efficiency is measured against it); notes saying so."""
    out = list(variants)
    notes = []
    for fam in dict.fromkeys(v.family for v in variants):
        if fam not in (registry.TF1_GRAPH, registry.TF2_STRATEGY):
            continue
        base = registry.baseline_name(fam)
        if not any(v.name == base for v in out):
            out.append(VariantSpec.builtin(base))
            notes.append(f"{base} (the {fam} baseline) was added: efficiency is measured against it")
    return tuple(out), tuple(notes)


def is_baseline(v: VariantSpec) -> bool:
    return registry.is_baseline(v.name, v.source)


def plan(request: ScalingRequest, options: ProfileOptions, gpus: int) -> ScalingDoc:
    """Every (variant, count) point: its global batch, or why it is skipped."""
    counts = resolve_counts(request, options.accelerators, gpus)
    variants, notes = sweep_variants(options.variants)
    batch = options.preset.batch
    points = []
    for v in variants:
        base = is_baseline(v)
        for n in ((1,) if base else counts):
            gb = global_batch(request.mode, batch, n)
            why = None
            if n == 1 and not base:
                why = (f"needs at least 2 accelerators (at 1 it is the family's baseline, "
                       f"{registry.baseline_name(v.family) if v.family in registry.FAMILIES else 'single'})")
            elif gpus and n > gpus:
                why = f"this machine has {gpus} GPU(s)"
            elif request.mode == STRONG and gb % n:
                why = f"the global batch {gb} does not split over {n} accelerators (strong mode)"
            points.append(PlannedPoint(v.name, n, v.family, base, gb, why))
    if request.mode == WEAK:
        notes += (f"weak scaling: {batch} examples per replica (the {options.preset.name} preset's batch); "
                  "the global batch grows with N",)
    else:
        notes += (f"strong scaling: a global batch of {batch} (the {options.preset.name} preset's), "
                  "split over N",)
    return ScalingDoc(request.mode, counts, batch, tuple(points), notes=notes)


def _skipped_record(run_dir: RunDir, v: VariantSpec, p: PlannedPoint) -> None:
    rd = PointRunDir(run_dir.root, count=p.count)
    rd.variant_dir(v.name).mkdir(parents=True, exist_ok=True)
    record = VariantRecord(name=v.name, status=SKIPPED, source=v.source, family=v.family, error=p.skipped,
                           stage="not run")
    write_json(rd.record_json(v.name), record.to_json())


def run_points(doc: ScalingDoc, options: ProfileOptions, run_dir: RunDir, say: Say) -> None:
    """Run every planned point, one count at a time (raises Interrupted as run_all does)."""
    specs = {v.name: v for v in sweep_variants(options.variants)[0]}
    for p in doc.points:
        if p.skipped:
            _skipped_record(run_dir, specs[p.variant], p)
    for n in sorted({p.count for p in doc.points if not p.skipped}):
        todo = [p for p in doc.points if p.count == n and not p.skipped]
        batch = todo[0].global_batch or options.preset.batch
        opts = replace(options, accelerators=n, preset=replace(options.preset, batch=batch),
                       variants=tuple(specs[p.variant] for p in todo))
        started: dict[str, float] = {}

        def progress(name: str, event: str, n: int = n, started: dict[str, float] = started) -> None:
            if event == "start":
                started[name] = time.perf_counter()
                return
            took = time.perf_counter() - started.get(name, time.perf_counter())
            say(f"  {point_name(name, n):<24} {event:7} ({took:.1f} s)")

        run_all(opts, PointRunDir(run_dir.root, count=n), progress)


def run_scaling(request: ScalingRequest, options: ProfileOptions, run_dir: RunDir, hardware: str | None,
                project_preset: Preset, say: Say) -> tuple[dict[str, float], int]:
    """The sweep, then its projection; ``scaling.json`` written as it goes.  Returns the seconds each
    part took and the exit code (0, or 130/143 when interrupted: the points run so far are kept).
    A disk too full for the sweep stops it, saying so, and the run's own report is still written."""
    try:
        return _run_scaling(request, options, run_dir, hardware, project_preset, say)
    except TowersError as exc:  # too little free space, before any point ran
        say(f"scaling sweep not run: {exc.message}")
    except OSError as exc:
        if not is_disk_error(exc):
            raise
        say(f"scaling sweep stopped: cannot write {exc.filename or run_dir.root} ({exc.strerror or exc})")
    return {}, 0


def _run_scaling(request: ScalingRequest, options: ProfileOptions, run_dir: RunDir, hardware: str | None,
                 project_preset: Preset, say: Say) -> tuple[dict[str, float], int]:
    check_request(request, options)
    doc = plan(request, options, gpus_here())
    to_run = sum(not p.skipped for p in doc.points)
    check_free_space(run_dir.root, to_run)
    write_json(scaling_json(run_dir), doc.to_json())
    counts = ", ".join(str(n) for n in doc.counts)
    say(f"scaling sweep ({doc.mode}): {to_run} point(s) at {counts} accelerator(s)"
        f"{'' if to_run == len(doc.points) else f', {len(doc.points) - to_run} skipped'}")
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        run_points(doc, options, run_dir, say)
    except Interrupted as exc:
        timing["scaling"] = time.perf_counter() - t0
        with contextlib.suppress(OSError):
            stopped = replace(doc, notes=(*doc.notes, f"interrupted by {exc.args[0]}"))
            write_json(scaling_json(run_dir), stopped.to_json())
        return timing, exc.exit_code
    timing["scaling"] = time.perf_counter() - t0
    if hardware:
        t1 = time.perf_counter()
        doc = replace(doc, projected=project(hardware, project_preset, options, doc.mode, say))
        timing["scaling_projection"] = time.perf_counter() - t1
    write_json(scaling_json(run_dir), replace(doc, finished=True).to_json())
    return timing, 0


def project(hardware: str, preset: Preset, options: ProfileOptions, mode: str, say: Say) -> ProjectedScaling:
    """The projected curves, or why there are none (a projection that fails never costs the run)."""
    from tfprof_towers.projection.scaling import project_scaling  # builds graphs in children

    variants = sweep_variants(options.variants)[0]
    say(f"projecting the scaling curves of {len(variants)} variant(s) on {hardware} at the {preset.name} "
        "preset ...")
    keras = None
    if options.keras_model:
        from tfprof_towers.projection.api import KerasModel

        keras = KerasModel(options.keras_model)
    try:
        return project_scaling(hardware, preset, variants, mode, options.variant_timeout_s, keras)
    except Exception as exc:
        why = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        say(f"scaling projection on {hardware} failed: {why}")
        return ProjectedScaling(hardware=hardware, preset=preset.name, error=str(why))


def scaling_lines(summary: Mapping[str, Any]) -> list[str]:
    """What the terminal says of a sweep: the count-dependent pick, each variant's headline, what grew."""
    doc = summary.get("scaling")  # summary.json's document, as finish_run returns it
    if doc is None:
        return []
    sc = ScalingSection.from_json(doc)
    lines = []
    if sc.recommendation_for is not None and sc.recommendation_for.text:
        text = sc.recommendation_for.text
        lines.append(text[0].upper() + text[1:] + ".")
    projected = sc.projected or ProjectedScaling()
    if projected.recommendation:
        lines.append(f"Scaling, projected on {projected.hardware}: {projected.recommendation}")
    lines += [f"  {v.headline}" for v in projected.variants if v.headline]
    if projected.error:
        lines.append(f"Scaling projection failed: {projected.error}")
    if sc.recommendation:
        lines.append(f"Scaling, {sc.label}: {sc.recommendation}")
    lines += [f"  {v.variant}: {text}" for v in sc.variants for text in v.growth]
    return lines
