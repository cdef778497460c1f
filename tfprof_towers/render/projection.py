"""View model of report.html's "Measured here vs projected on HARDWARE" section.

Input: ``summary.projection`` (the compact form ``pipeline.compact_projection``
writes into summary.json) next to the measured variants.  Output: plain
strings and numbers for the template, which autoescapes them; nothing here
returns markup.  Every projected number the template shows sits in a column
headed "projected" and styled ``.projected``, distinct from measured ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfprof_towers.rundir.projection_doc import ProjectionPreset, ProjectionRow, ProjectionSummary
from tfprof_towers.rundir.records import Topology
from tfprof_towers.rundir.summary import Summary, SummaryEntry

_LINK_NUMBERS = (("bandwidth_gbs", "{} GB/s per direction"), ("efficiency", "× {} efficiency"),
                 ("latency_us", "{} µs latency"))
#: Per part of a hardware profile: the numbers shown, each as (key, format with one ``{}``).
PROFILE_NUMBERS: dict[str, tuple[tuple[str, str], ...]] = {
    "host": (("peak_gflops", "{} GFLOP/s fp32 peak"), ("efficiency", "× {} efficiency"),
             ("memory_bandwidth_gbs", "{} GB/s memory"), ("op_overhead_us", "{} µs per op")),
    "accelerator": (("fp32_tflops", "{} TFLOP/s fp32"), ("matmul_tflops", "{} TFLOP/s matmul"),
                    ("efficiency", "× {} efficiency"), ("memory_bandwidth_gbs", "{} GB/s memory"),
                    ("op_overhead_us", "{} µs per op")),
    "host_link": _LINK_NUMBERS,
    "peer": _LINK_NUMBERS,
}
PROFILE_PARTS = (("host", "host CPU"), ("accelerator", "accelerators"),
                 ("host_link", "host↔accelerator link"), ("peer", "accelerator↔accelerator"))


def projection_view(summary: Summary, ranked: Sequence[SummaryEntry]) -> dict[str, Any] | None:
    """``None`` without a projection; ``{"error": ...}`` for an unreadable one; else the section's data."""
    proj = summary.projection
    if proj is None:
        return None
    if proj.error:
        return {"error": proj.error, "hardware": proj.hardware}
    rec = summary.recommendation
    measured_rec = rec.measured_pick if rec.is_projected else rec.variant
    return {
        "error": None,
        "hardware": proj.hardware,
        "here": here_text(summary.topology),
        "here_short": here_short(summary.topology),
        "rows": comparison_rows(ranked, proj, measured_rec),
        "recommendation": proj.recommendation,
        "measured_recommendation": measured_rec,
        "assumptions": list(proj.assumptions),
        "calibrated": [c.replace("_", " ") for c in proj.calibrated],
        "calibration_notes": list(proj.calibration_notes),
        "preset": proj.preset or ProjectionPreset(),
        "tensorflow": proj.tensorflow,
        "profile": profile_view(proj.profile),
        "notes": mismatch_notes(summary, proj),
    }


def here_short(topology: Topology | None) -> str:
    n = len(topology.accelerators) if topology is not None else 0
    kind = topology.kind if topology is not None else None
    if kind == "logical-cpu":
        return f"{n} logical CPU devices"
    if kind == "gpu":
        return f"{n} GPU{'s' if n != 1 else ''}"
    return f"{n} accelerator(s)"


def here_text(topology: Topology | None) -> str:
    short = here_short(topology)
    if topology is not None and topology.kind == "logical-cpu":
        return f"this machine, with {short} standing in for accelerators (they share the same CPU cores)"
    return f"this machine, on {short}"


def comparison_rows(
    ranked: Sequence[SummaryEntry], proj: ProjectionSummary, measured_rec: str | None
) -> list[dict[str, Any]]:
    """One row per variant, measured order first, then variants only the projection has."""
    projected = {r.name: r for r in proj.variants}
    names = [v.name for v in ranked]
    names += [n for n in projected if n not in names]
    measured = {v.name: v for v in ranked}
    projected_rec = proj.recommendation.variant
    return [_row(n, measured.get(n), projected.get(n), n == measured_rec, n == projected_rec) for n in names]


def _row(name: str, m: SummaryEntry | None, p: ProjectionRow | None,
         measured_pick: bool, projected_pick: bool) -> dict[str, Any]:
    ok = m is not None and m.ok
    return {
        "name": name,
        "measured_step_s": m.median_s if ok else None,
        "measured_rank": m.rank if ok else None,
        "measured_note": "" if ok else ("not in this run" if m is None else f"{m.status} here"),
        "projected_step_s": None if p is None else p.projected_step_s,
        "projected_rank": None if p is None else p.rank,
        "bottleneck": "" if p is None else p.bottleneck,
        "projected_note": "not projected" if p is None else (p.error or ""),
        "measured_pick": measured_pick,
        "projected_pick": projected_pick,
    }


def profile_view(profile: Mapping[str, Any]) -> dict[str, Any]:
    """The hardware profile's key numbers, one row per part, with the part's source when it has one."""
    rows = []
    for key, label in PROFILE_PARTS:
        part = profile.get(key)
        if not isinstance(part, Mapping):
            continue
        numbers = [fmt.format(_num(part[k])) for k, fmt in PROFILE_NUMBERS[key] if k in part]
        source = part.get("source")
        rows.append({"part": label, "what": _what(key, part), "numbers": "; ".join(numbers),
                     "source": str(source) if source else ""})
    return {
        "name": str(profile.get("name") or ""),
        "description": str(profile.get("description") or ""),
        "origin": str(profile.get("origin") or ""),
        "toml": profile_toml(str(profile.get("origin") or "")),
        "rows": rows,
        "has_sources": any(r["source"] for r in rows),
    }


def profile_toml(origin: str) -> str:
    """Where the profile's TOML (with a source beside each number) is: a command or a path."""
    kind, _, where = origin.partition(":")
    if kind == "builtin" and where:
        return f"tfprof-towers hardware {where}"
    return where if kind == "file" else ""


def _what(key: str, part: Mapping[str, Any]) -> str:
    name = str(part.get("model") or part.get("name") or "")
    if key == "host" and part.get("tensorflow_build"):
        return f"{name} ({part['tensorflow_build']} TensorFlow build)"
    if key == "accelerator" and part.get("count") is not None:
        return f"{part['count']} × {name}"
    if key == "host_link":
        return f"{name}, one per accelerator"
    if key == "peer" and part.get("kind"):
        shape = ", ".join(str(part[k]) for k in ("kind", "topology") if part.get(k))
        return f"{name} ({shape})"
    return name


def _num(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:g}"


def mismatch_notes(summary: Summary, proj: ProjectionSummary) -> list[str]:
    """Where the measured run and the projection differ in what they describe."""
    notes = []
    config = summary.config
    measured_preset = config.preset.name if config is not None and config.preset is not None else None
    preset = proj.preset or ProjectionPreset()
    keras = preset.keras_model  # at the model file's own sizes, as measured
    if measured_preset and preset.name and measured_preset != preset.name and not keras:
        notes.append(f"projected at the {preset.name} preset, measured at {measured_preset}: "
                     "compare the rankings, not the times")
    here = len(summary.topology.accelerators) if summary.topology is not None else 0
    there = proj.accelerator_count
    if here and there is not None and there != here:
        notes.append(f"measured with {here} accelerator(s) here, projected with {there}")
    return notes
