"""What-if projection: rank placements on hardware the user does not have at hand.

``project(...)`` builds each variant's graph at the preset's full size in a child
process *without running it* (:mod:`.graphcost`), projects it on a hardware
profile (:mod:`.model`), optionally calibrated by a run directory
(:mod:`.calibrate`), and returns one JSON-able document.  ``project_run`` is the
entry point for ``profile --project-on NAME``: it projects a finished run's
variants and writes ``RUN_DIR/projection.json``.

Importing this module never imports TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..config import BASELINE_VARIANT, Preset, VariantSpec, get_preset
from ..errors import TowersError
from ..rundir import RunDir, read_json, write_json
from ..summary import load_record, load_run
from .calibrate import Calibration, calibrate, placement_check
from .hardware import Hardware, load_hardware
from .model import GraphWork, Rates, project_work

PROJECTION_JSON = "projection.json"
SCHEMA = 1
#: A simpler placement within this fraction of the fastest is recommended instead.
SIMPLER_WITHIN = 0.05
BUILD_TIMEOUT_S = 900.0

ASSUMPTIONS = (
    "projected, not measured: the graph is built at full size and never run",
    "placement: each op's tf.device request, overridden by its colocation group or the device of its "
    "resource input; soft placement of ops without an accelerator kernel and Grappler rewrites are "
    "not modelled",
    "op time = per-op overhead + max(FLOPs / compute rate, bytes / memory bandwidth); rates are the "
    "profile's nominal numbers times its efficiencies",
    "copy time = link latency + bytes / (bandwidth x efficiency); one copy at a time per link "
    "direction; staged peer copies hold both GPUs' host links",
    "NCCL all-reduce: ring, 2(n-1)/n x bytes per device each way",
    "overlapped: copies run while devices compute; serial: a copy also holds both its devices",
    "input feeding from Python and the optimizer's bookkeeping outside the graph are not modelled",
)


def builder_layout(hw: Hardware) -> dict[str, Any]:
    n = hw.accelerator.count
    return {"host": "/cpu:0", "accelerators": [f"/gpu:{i}" for i in range(n)], "kind": "gpu"}


def build_graphs(
    variants: Sequence[VariantSpec], preset: Preset, layout: dict[str, Any],
    check_layout: dict[str, Any] | None = None, timeout_s: float = BUILD_TIMEOUT_S,
) -> dict[str, Any]:
    """Run :mod:`.graphcost` in a child; ``{"variants": {name: work|{"error"}}, "checks": {...}}``."""
    with tempfile.TemporaryDirectory(prefix="tfprof-project-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "work.json"
        write_json(spec_path, {
            "preset": asdict(preset),
            "layout": layout,
            "check_layout": check_layout,
            "variants": [{"name": v.name, "file": v.file} for v in variants],
            "out": str(out_path),
        })
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "tfprof_towers.project.graphcost", str(spec_path)],
                env=env, capture_output=True, text=True, timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise TowersError(f"building the graphs took longer than {timeout_s:.0f} s") from None
        if proc.returncode != 0 or not out_path.is_file():
            tail = " ".join((proc.stderr or "").strip().splitlines()[-1:]) or f"exit code {proc.returncode}"
            raise TowersError(f"building the graphs failed: {tail[:300]}")
        return read_json(out_path)


def rank(entries: Sequence[dict[str, Any]]) -> list[str]:
    ok = [e for e in entries if "projected_step_s" in e]
    ok.sort(key=lambda e: (e["projected_step_s"]["overlapped"], e["projected_step_s"]["serial"], e["name"]))
    return [e["name"] for e in ok]


def recommend(entries: Sequence[dict[str, Any]], ranking: Sequence[str], hw_name: str) -> dict[str, Any]:
    """The fastest projected variant, unless ``single`` is within 5% of it (then the simpler one)."""
    if not ranking:
        return {"variant": None, "reason": "no variant could be projected; see the errors"}
    by_name = {e["name"]: e for e in entries}
    best = by_name[ranking[0]]
    t_best = best["projected_step_s"]["overlapped"]
    base = by_name.get(BASELINE_VARIANT)
    if base and "projected_step_s" in base and best["name"] != BASELINE_VARIANT:
        t_base = base["projected_step_s"]["overlapped"]
        if t_base <= t_best * (1 + SIMPLER_WITHIN):
            return {"variant": BASELINE_VARIANT, "reason": (
                f"projected within {SIMPLER_WITHIN:.0%} of the fastest ({best['name']}, "
                f"{_fmt(t_best)}) on {hw_name}, with one device: multi-device placement does not pay")}
    lo, hi = best["projected_step_s"]["overlapped"], best["projected_step_s"]["serial"]
    reason = f"projected fastest on {hw_name}: {_fmt(lo)} to {_fmt(hi)} per step (overlapped to serial)"
    if base and "projected_step_s" in base and best["name"] != BASELINE_VARIANT:
        reason += f", {base['projected_step_s']['overlapped'] / lo:.2f}x single"
    reason += f"; bottleneck: {best['bottleneck']['text']}"
    by_serial = min((by_name[n] for n in ranking), key=lambda e: e["projected_step_s"]["serial"])
    if by_serial["name"] != best["name"]:
        reason += f" (if copies never overlap compute, {by_serial['name']} is faster)"
    if len(ranking) > 1:
        runner = by_name[ranking[1]]
        gap = runner["projected_step_s"]["overlapped"] / lo - 1
        reason += f"; next: {runner['name']} ({gap:+.1%})"
    return {"variant": best["name"], "reason": reason}


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.3f} s"


def project(
    hardware: str | Hardware,
    preset: Preset,
    variants: Sequence[VariantSpec],
    run_dir: RunDir | None = None,
    host_build: str | None = None,
    graphs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Project every variant on ``hardware``; calibrated by ``run_dir`` when given."""
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    if host_build:
        hw = hw.with_host_build(host_build)
    calibration, check_layout, run = _calibration(run_dir, preset)
    if graphs is None:
        graphs = build_graphs(variants, preset, builder_layout(hw), check_layout)
    rates = Rates.of(hw)
    if calibration is not None:
        rates = calibration.apply(rates, hw.host.peak_flops())
    entries: list[dict[str, Any]] = []
    for v in variants:
        doc = graphs["variants"].get(v.name) or {"error": "not built"}
        if "error" in doc:
            entries.append({"name": v.name, "error": doc["error"]})
            continue
        entries.append(project_work(GraphWork.from_json(doc), hw, rates))
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
        "ranking": ranking,
        "recommendation": recommend(entries, ranking, hw.name),
        "calibration": None,
        "tensorflow": graphs.get("tensorflow"),
    }
    if run_dir is not None and calibration is not None:
        result["calibration"] = _calibration_doc(run_dir, run, calibration, graphs, variants)
    return result


def _calibration(run_dir: RunDir | None, preset: Preset):
    if run_dir is None:
        return None, None, None
    run = load_run(run_dir)
    topology = run.get("topology") or {}
    run_preset = ((run.get("config") or {}).get("preset") or {}).get("name")
    cal = calibrate(run_dir, same_preset=run_preset == preset.name)
    check = None
    if run_preset == preset.name and topology.get("host") and topology.get("accelerators"):
        check = {"host": topology["host"], "accelerators": list(topology["accelerators"]),
                 "kind": topology.get("kind", "gpu")}
    return cal, check, run


def _calibration_doc(run_dir: RunDir, run: dict[str, Any], cal: Calibration, graphs: dict[str, Any],
                     variants: Sequence[VariantSpec]) -> dict[str, Any]:
    doc = {"run_dir": str(run_dir.root), **cal.to_json(), "placement_checks": {}}
    checks = graphs.get("checks") or {}
    for v in variants:
        static = checks.get(v.name)
        if not static or "error" in static:
            continue
        record = load_record(run_dir, v.name)
        doc["placement_checks"][v.name] = placement_check(GraphWork.from_json(static), record)
    if not checks:
        doc["notes"].append("placement not checked: the run's preset differs from the projected one")
    return doc


def run_variants(run: dict[str, Any]) -> tuple[VariantSpec, ...]:
    """The variants a run directory's run.json asked for (built-ins and variant files)."""
    specs = []
    for v in (run.get("config") or {}).get("variants") or []:
        source = v.get("source", "builtin")
        file = source[len("file:"):] if source.startswith("file:") else None
        specs.append(VariantSpec(v["name"], file))
    if not specs:
        raise TowersError("the run directory names no variants in run.json")
    return tuple(specs)


def run_preset(run: dict[str, Any]) -> Preset:
    raw = (run.get("config") or {}).get("preset") or {}
    if "name" not in raw:
        raise TowersError("the run directory's run.json names no preset")
    try:
        return Preset(**raw)
    except TypeError:
        return get_preset(raw["name"])


def project_run(run_dir: RunDir, hardware: str) -> dict[str, Any]:
    """Project a finished run's variants (at the run's preset) on ``hardware``; write projection.json.

    For ``tfprof-towers profile --project-on NAME``: call after the run's records
    are written.  Raises :class:`TowersError` (one line) on an unknown profile.
    """
    hw = load_hardware(hardware)
    run = load_run(run_dir)
    doc = project(hw, run_preset(run), run_variants(run), run_dir=run_dir)
    write_json(run_dir.root / PROJECTION_JSON, doc)
    return doc
