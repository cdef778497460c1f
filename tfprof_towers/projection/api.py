"""What-if projection: rank placements on hardware the user does not have at hand.

Each variant's graph is built at the preset's full size in a child process *without running it*
(:mod:`.graphcost`), projected on a hardware profile (:mod:`.model`), optionally calibrated by a
run directory (:mod:`.calibrate`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.advice import recommend as recommender
from tfprof_towers.projection.calibrate import Calibration, calibrate, placement_check
from tfprof_towers.projection.hardware import Hardware, load_hardware
from tfprof_towers.projection.memory_fit import ESTIMATED, HEADROOM, HEADROOM_WHY, NOT_CHECKED, with_memory
from tfprof_towers.projection.model import GraphWork, Rates, project_work
from tfprof_towers.rundir.paths import PROJECTION_JSON, RunDir, read_json, write_json
from tfprof_towers.rundir.projection_doc import ProjectionEntry
from tfprof_towers.rundir.records import RunDoc, load_record, load_run
from tfprof_towers.variants import registry
from tfprof_towers.variants.config import Preset, VariantSpec
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.errors import TowersError

SCHEMA = 2  # 2: variants[].memory (per device, estimated) and memory_fit; "memory" (the headroom, the basis)
#: Per-variant limit on building a graph when neither a run nor a preset gives one.
BUILD_TIMEOUT_S = 900.0

ASSUMPTIONS = (
    "projected, not measured: the graph is built at full size and never run",
    "placement: each op's tf.device request, overridden by its colocation group or the device of its "
    "resource input; soft placement of ops without an accelerator kernel and Grappler rewrites are "
    "not modelled",
    "op time = per-op overhead + max(FLOPs / compute rate, bytes / memory bandwidth); rates are the "
    "profile's nominal numbers times its efficiency for the op's class (matmul/convolution, elementwise, "
    "reduction, small); XLA's fusion is not modelled",
    "copy time = link latency + bytes / (bandwidth x efficiency); one copy at a time per link "
    "direction; staged peer copies hold both GPUs' host links",
    "NCCL all-reduce: ring, 2(n-1)/n x bytes per device each way",
    "overlapped: copies run while devices compute; serial: a copy also holds both its devices",
    "input feeding from Python and the optimizer's bookkeeping outside the graph are not modelled",
)


@dataclass(frozen=True)
class KerasModel:
    """A ``--keras-model`` file to project instead of the seed workload, at the global batch ``batch``
    (None: the file's ``GLOBAL_BATCH_SIZE``) times ``scale``."""

    file: str
    batch: int | None = None
    scale: int = 1  # the global batch is ``scale`` times the file's (or ``batch``): weak scaling

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "batch": self.batch, "scale": self.scale}


def builder_layout(hw: Hardware) -> dict[str, Any]:
    n = hw.accelerator.count
    return {"host": "/cpu:0", "accelerators": [f"/gpu:{i}" for i in range(n)], "kind": "gpu"}


def build_graphs(
    variants: Sequence[VariantSpec], preset: Preset, layout: dict[str, Any],
    check_layout: dict[str, Any] | None = None, timeout_s: float | None = BUILD_TIMEOUT_S,
    keras: KerasModel | None = None, progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build each variant's graph in a child of its own: ``{"variants": {name: work | {"error"}},
    "checks": {...}, "tensorflow": version}``.

    With ``keras`` every variant is a tf2-strategy built-in and its graph is the Keras model's training
    step under its strategy (:func:`.keras_graphs.keras_step_graph`).  ``progress`` is told, in one
    line, when each variant's graph is built (or is not).

    Each child (``python -P -m tfprof_towers.projection.graphcost``, or ``.strategy_graphs`` for a
    tf2-strategy variant) is supervised
    (:mod:`tfprof_towers.procs.supervise`) with ``timeout_s`` (None: no limit),
    up to :func:`_parallel` at a time: a variant that blocks, crashes or times out
    gets ``{"error": why}`` -- its real error, not TensorFlow's log lines -- and the
    others are still built.
    """
    from tfprof_towers.procs import supervise

    out: dict[str, Any] = {"tensorflow": None, "variants": {}, "checks": {}}
    with tempfile.TemporaryDirectory(prefix="tfprof-project-") as tmp:
        jobs: dict[str, tuple[Path, Path, Path]] = {}
        families = {v.name: v.family for v in variants}
        for i, v in enumerate(variants):
            spec_path, out_path = Path(tmp) / f"spec-{i}.json", Path(tmp) / f"work-{i}.json"
            write_json(spec_path, {
                "preset": asdict(preset), "layout": layout, "check_layout": check_layout,
                "variants": [{"name": v.name, "file": v.file, "family": v.family}], "out": str(out_path),
                **({"keras": keras.to_json()} if keras is not None else {}),
            })
            jobs[v.name] = (spec_path, out_path, Path(tmp) / f"stderr-{i}.txt")
        env = supervise.tf_child_env()
        todo = list(jobs)
        running: dict[str, supervise.Supervised] = {}
        started: dict[str, float] = {}
        try:
            while todo or running:
                while todo and len(running) < _parallel():
                    name = todo.pop(0)
                    module = KERAS_GRAPHS_MODULE if keras is not None else builder_module(families[name])
                    argv = supervise.python_argv(module, str(jobs[name][0]))
                    entry = supervise.Entry(f"{module}:main", (str(jobs[name][0]),))
                    running[name] = supervise.start(supervise.Command(
                        tuple(argv), jobs[name][2], deadline_s=timeout_s, env=env, label=name, entry=entry))
                    started[name] = time.perf_counter()
                sup = next(supervise.as_ended(running.values()))
                name = next(n for n, s in running.items() if s is sup)
                del running[name]
                _merge(out, name, sup, jobs[name][1], timeout_s)
                if progress is not None:
                    progress(_built_line(name, out["variants"].get(name), layout,
                                         time.perf_counter() - started[name]))
        finally:
            supervise.stop_all(running.values())
    return out


def _built_line(name: str, work: dict[str, Any] | None, layout: dict[str, Any], seconds: float) -> str:
    """``"mirrored: graph built for 8 accelerators (74647 ops) in 85 s"``, or why it was not."""
    if not work or "error" in work:
        return f"{name}: no graph: {(work or {}).get('error', 'not built')}"
    ops, count = len(work.get("ops", ())), len(layout["accelerators"])
    cpu = f", {work['build_cpu_s']:.0f} s of CPU" if isinstance(work.get("build_cpu_s"), float) else ""
    return f"{name}: graph built for {count} accelerator(s) ({ops} ops) in {seconds:.0f} s{cpu}"


GRAPHCOST_MODULE = "tfprof_towers.projection.graphcost"
STRATEGY_GRAPHS_MODULE = "tfprof_towers.projection.strategy_graphs"
KERAS_GRAPHS_MODULE = "tfprof_towers.projection.keras_graphs"


def builder_module(family: str) -> str:
    """The child module that builds a variant of ``family``'s graph (tf2-strategy: traced eagerly)."""
    return STRATEGY_GRAPHS_MODULE if family == registry.TF2_STRATEGY else GRAPHCOST_MODULE


def _parallel() -> int:
    """Graph builds at once: one per core, at most 4 (each is a TensorFlow process)."""
    return max(1, min(4, os.cpu_count() or 1))


def _merge(out: dict[str, Any], name: str, sup: Any, out_path: Path, timeout_s: float | None) -> None:
    """One build child's result into ``out``; a failed build becomes ``{"error": why}``."""
    ended = sup.ended
    doc = None
    if ended.ok and out_path.is_file():
        with contextlib.suppress(TowersError):
            doc = read_json(out_path)
    if isinstance(doc, dict):
        out["tensorflow"] = out["tensorflow"] or doc.get("tensorflow")
        for key in ("variants", "checks"):
            out[key].update(doc.get(key) or {})
        return
    if ended.timed_out:
        why = f"building the graph timed out after {timeout_s:g} s"
    elif ended.lost:
        why = ended.lost
    else:
        cause = textcap.last_cause(textcap.read_tail(sup.command.stderr_path), 300)
        why = f"building the graph failed: {cause or f'exit code {ended.returncode}'}"
    out["variants"][name] = {"error": textcap.one_line(why)}


def build_timeout(run: RunDoc | None, preset: Preset) -> float | None:
    """The run's own variant timeout (None: no limit), else the preset's."""
    if run is not None and run.config is not None:
        return run.config.variant_timeout_s
    return preset.variant_timeout_s


def memory_assumptions(hw: Hardware) -> dict[str, Any]:
    """What the memory verdicts assume: the basis, the headroom and why, the target's sizes."""
    checked = hw.accelerator.memory_gb is not None
    return {"basis": ESTIMATED, "headroom": HEADROOM, "headroom_why": HEADROOM_WHY,
            "accelerator_memory_gb": hw.accelerator.memory_gb, "host_memory_gb": hw.host.memory_gb,
            "note": None if checked else NOT_CHECKED}


def rank(entries: Sequence[dict[str, Any]]) -> list[str]:
    ok = [e for e in entries if "projected_step_s" in e]
    ok.sort(key=lambda e: (e["projected_step_s"]["overlapped"], e["projected_step_s"]["serial"], e["name"]))
    return [e["name"] for e in ok]


def recommend(
    entries: Sequence[dict[str, Any]], ranking: Sequence[str], hw_name: str,
    sources: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``{"variant", "reason"}`` from :func:`.advice.recommend.projected` (the one recommender), which
    reads the entries as ``projection.json`` holds them."""
    typed = [ProjectionEntry.from_json(e) for e in entries]
    return recommender.projected(typed, ranking, hw_name, sources).brief()


def project(
    hardware: str | Hardware,
    preset: Preset,
    variants: Sequence[VariantSpec],
    run_dir: RunDir | None = None,
    host_build: str | None = None,
    graphs: dict[str, Any] | None = None,
    keras: KerasModel | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Project every variant on ``hardware``; calibrated by ``run_dir`` when given.  With ``keras`` the
    variants (tf2-strategy built-ins) run the Keras model's step; the preset then gives only the name."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    if host_build:
        hw = hw.with_host_build(host_build)
    calibration, check_layout, run = _calibration(run_dir, preset, same_graphs=keras is None)
    if graphs is None:
        graphs = build_graphs(variants, preset, builder_layout(hw), check_layout, build_timeout(run, preset),
                              keras=keras, progress=progress)
    at_run = memory_at_run(graphs, variants, run, preset, check_layout, keras)
    rates = Rates.of(hw)
    if calibration is not None:
        rates = calibration.apply(rates, hw.host.peak_flops())
    entries: list[dict[str, Any]] = []
    for v in variants:
        doc = graphs["variants"].get(v.name) or {"error": "not built"}
        if "error" in doc:
            entries.append({"name": v.name, "error": doc["error"]})
            continue
        entry = with_memory(project_work(GraphWork.from_json(doc), hw, rates), doc.get("memory"), hw)
        entries.append({**entry, **at_run.get(v.name, {})})
    ranking = rank(entries)
    for e in entries:
        e["rank"] = ranking.index(e["name"]) + 1 if e["name"] in ranking else None
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "label": "projected",
        "hardware": hw.name,
        "profile": hw.summary(),
        "preset": asdict(preset),
        "assumptions": list(ASSUMPTIONS),
        "rates": {**{k: v for k, v in asdict(rates).items() if k != "calibrated"},
                  "calibrated": list(rates.calibrated)},
        "variants": entries,
        "memory": memory_assumptions(hw),
        "ranking": ranking,
        "recommendation": recommend(entries, ranking, hw.name, {v.name: v.source for v in variants}),
        "calibration": None,
        "tensorflow": graphs.get("tensorflow"),
    }
    if keras is not None:  # the model's own sizes, not the preset's
        result["keras_model"] = keras_doc(keras, graphs)
        result["preset"] = {"name": Path(keras.file).name, "batch": result["keras_model"]["global_batch"],
                            "keras_model": keras.file}
    if run_dir is not None and calibration is not None:
        result["calibration"] = _calibration_doc(run_dir, calibration, graphs, variants)
    return result


def memory_at_run(graphs: dict[str, Any], variants: Sequence[VariantSpec], run: RunDoc | None,
                  preset: Preset, check_layout: dict[str, Any] | None,
                  keras: KerasModel | None = None) -> dict[str, dict[str, Any]]:
    """Per variant ``{"memory_at_run": {"preset", "devices": {device: {peak_bytes, ...}}}}``: the memory
    estimate of the run's own graph, at the run's size on the run's devices, which the report sets
    beside what the run measured.  Built here when the run's preset is not the projected one."""
    if run is None or run.topology is None or not run.topology.accelerators or run.preset is None:
        return {}
    checks = graphs.get("checks") or {}
    if check_layout is None:
        layout = {"host": run.topology.host, "accelerators": list(run.topology.accelerators),
                  "kind": run.topology.kind or "gpu"}
        try:
            built = build_graphs(variants, run.preset, layout, None, build_timeout(run, run.preset),
                                 keras=keras)
            checks = built["variants"]
        except TowersError:
            return {}
    out = {}
    for v in variants:
        mem = (checks.get(v.name) or {}).get("memory") or {}
        if mem.get("devices"):
            devices = {d: {k: r[k] for k in ("peak_bytes", "transient_bytes", "persistent_bytes",
                                             "peak_low_bytes", "peak_high_bytes") if k in r}
                       for d, r in mem["devices"].items()}
            out[v.name] = {"memory_at_run": {"preset": run.preset.name, "devices": devices}}
    return out


def keras_doc(keras: KerasModel, graphs: dict[str, Any]) -> dict[str, Any]:
    """``projection.json`` -> ``keras_model``: the file and the global batch its graphs were traced at."""
    batches = {w["keras_model"]["global_batch"] for w in graphs["variants"].values() if "keras_model" in w}
    return {"file": keras.file, "global_batch": min(batches) if batches else keras.batch,
            "batch_given": keras.batch is not None}


#: Why a Keras model's run does not calibrate its projection.
KERAS_NOT_CALIBRATED = ("not calibrated: the run trained a Keras model with fit, whose measured steps hold "
                        "the input pipeline and Keras' own loop besides the graph; the profile's rates are "
                        "used")


def _calibration(run_dir: RunDir | None, preset: Preset, same_graphs: bool = True):
    """The run's calibration, the layout to check the placement on (None: not checked) and the run.
    ``same_graphs``: the projected graphs are the run's own; a Keras model's are not (its measured steps
    are fit's), so its run calibrates nothing and its placement is not checked."""
    if run_dir is None:
        return None, None, None
    run = load_run(run_dir)
    if not same_graphs:
        return Calibration(None, None, None, None, (KERAS_NOT_CALIBRATED,)), None, run
    topology = run.topology
    run_preset_name = run.preset.name if run.preset is not None else None
    same = run_preset_name == preset.name
    cal = calibrate(run_dir, same_preset=same)
    check = None
    if same and topology is not None and topology.host and topology.accelerators:
        check = {"host": topology.host, "accelerators": list(topology.accelerators),
                 "kind": topology.kind or "gpu"}
    return cal, check, run


def _calibration_doc(run_dir: RunDir, cal: Calibration, graphs: dict[str, Any],
                     variants: Sequence[VariantSpec]) -> dict[str, Any]:
    doc = {"run_dir": str(run_dir.root), **cal.to_json(), "placement_checks": {}}
    checks = graphs.get("checks") or {}
    for v in variants:
        static = checks.get(v.name)
        if not static or "error" in static:
            continue
        record = load_record(run_dir, v.name)
        if not record.placement:  # failed or skipped (NCCL without GPUs): nothing measured to check
            continue
        doc["placement_checks"][v.name] = placement_check(GraphWork.from_json(static), record.to_json())
    if not checks and KERAS_NOT_CALIBRATED not in doc["notes"]:
        doc["notes"].append("placement not checked: the run's preset differs from the projected one")
    return doc


def run_variants(run: RunDoc) -> tuple[VariantSpec, ...]:
    """The variants a run directory's run.json asked for (built-ins and variant files)."""
    if not run.variants:
        raise TowersError("the run directory names no variants in run.json")
    return run.variants


def run_preset(run: RunDoc) -> Preset:
    if run.preset is None:
        raise TowersError("the run directory's run.json names no preset")
    return run.preset


def project_run(run_dir: RunDir, hardware: str, preset: Preset | None = None,
                variants: Sequence[VariantSpec] | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Project a finished run's variants (default: all it asked for) on ``hardware`` at ``preset``
    (default: the run's); write projection.json.

    For ``tfprof-towers profile``: call after the run's records are written.  Raises
    :class:`TowersError` (one line) on an unknown profile.
    """
    hw = load_hardware(hardware)
    run = load_run(run_dir)
    keras = None
    if run.config is not None and run.config.keras_model:  # the run's model, at the file's own batch
        keras = KerasModel(run.config.keras_model)
    chosen = run_variants(run) if variants is None else tuple(variants)
    doc = project(hw, preset or run_preset(run), chosen, run_dir=run_dir, keras=keras, progress=progress)
    write_json(run_dir.root / PROJECTION_JSON, doc)
    return doc


def failed_projection(hardware: str, preset: Preset, error: str) -> dict[str, Any]:
    """The projection.json of a projection that could not be made: which, at what size, and why."""
    return {"schema": SCHEMA, "label": "projected", "hardware": hardware, "preset": asdict(preset),
            "error": error}
