"""View model of report.html's "Measured here vs projected on HARDWARE" section.

Input: ``summary["projection"]`` (the compact form ``pipeline.compact_projection``
writes into summary.json) next to the measured variants.  Output: plain
strings and numbers for the template, which autoescapes them; nothing here
returns markup.  Every projected number the template shows sits in a column
headed "projected" and styled ``.projected``, distinct from measured ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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


def projection_view(summary: Mapping[str, Any], ranked: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``None`` without a projection; ``{"error": ...}`` for an unreadable one; else the section's data."""
    proj = summary.get("projection")
    if not proj:
        return None
    if proj.get("error"):
        return {"error": str(proj["error"]), "hardware": proj.get("hardware")}
    topology = summary.get("topology") or {}
    rec = summary.get("recommendation") or {}
    measured_rec = rec.get("measured_pick") if rec.get("basis") == "projected" else rec.get("variant")
    return {
        "error": None,
        "hardware": proj["hardware"],
        "here": here_text(topology),
        "here_short": here_short(topology),
        "rows": comparison_rows(ranked, proj, measured_rec),
        "recommendation": proj.get("recommendation") or {},
        "measured_recommendation": measured_rec,
        "assumptions": list(proj.get("assumptions") or ()),
        "calibrated": [str(c).replace("_", " ") for c in proj.get("calibrated") or ()],
        "calibration_notes": list(proj.get("calibration_notes") or ()),
        "preset": proj.get("preset") or {},
        "tensorflow": proj.get("tensorflow"),
        "profile": profile_view(proj.get("profile") or {}),
        "notes": mismatch_notes(summary, proj),
    }


def here_short(topology: Mapping[str, Any]) -> str:
    n = len(topology.get("accelerators") or ())
    kind = topology.get("kind")
    if kind == "logical-cpu":
        return f"{n} logical CPU devices"
    if kind == "gpu":
        return f"{n} GPU{'s' if n != 1 else ''}"
    return f"{n} accelerator(s)"


def here_text(topology: Mapping[str, Any]) -> str:
    short = here_short(topology)
    if topology.get("kind") == "logical-cpu":
        return f"this machine, with {short} standing in for accelerators (they share the same CPU cores)"
    return f"this machine, on {short}"


def comparison_rows(
    ranked: Sequence[Mapping[str, Any]], proj: Mapping[str, Any], measured_rec: str | None
) -> list[dict[str, Any]]:
    """One row per variant, measured order first, then variants only the projection has."""
    projected = {e["name"]: e for e in proj.get("variants") or ()}
    names = [v["name"] for v in ranked]
    names += [n for n in projected if n not in names]
    measured = {v["name"]: v for v in ranked}
    projected_rec = (proj.get("recommendation") or {}).get("variant")
    return [_row(n, measured.get(n), projected.get(n), n == measured_rec, n == projected_rec) for n in names]


def _row(name: str, m: Mapping[str, Any] | None, p: Mapping[str, Any] | None,
         measured_pick: bool, projected_pick: bool) -> dict[str, Any]:
    ok = bool(m) and m.get("status") == "ok"
    return {
        "name": name,
        "measured_step_s": ((m or {}).get("step_time_s") or {}).get("median") if ok else None,
        "measured_rank": (m or {}).get("rank") if ok else None,
        "measured_note": "" if ok else ("not in this run" if m is None else f"{m.get('status')} here"),
        "projected_step_s": (p or {}).get("projected_step_s"),
        "projected_rank": (p or {}).get("rank"),
        "bottleneck": (p or {}).get("bottleneck") or "",
        "projected_note": "not projected" if p is None else (p.get("error") or ""),
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


def mismatch_notes(summary: Mapping[str, Any], proj: Mapping[str, Any]) -> list[str]:
    """Where the measured run and the projection differ in what they describe."""
    notes = []
    measured_preset = (((summary.get("config") or {}).get("preset")) or {}).get("name")
    projected_preset = (proj.get("preset") or {}).get("name")
    keras = (proj.get("preset") or {}).get("keras_model")  # at the model file's own sizes, as measured
    if measured_preset and projected_preset and measured_preset != projected_preset and not keras:
        notes.append(f"projected at the {projected_preset} preset, measured at {measured_preset}: "
                     "compare the rankings, not the times")
    here = len((summary.get("topology") or {}).get("accelerators") or ())
    accel = (proj.get("profile") or {}).get("accelerator") or {}
    there = accel.get("count") if isinstance(accel, Mapping) else None
    if here and isinstance(there, int) and there != here:
        notes.append(f"measured with {here} accelerator(s) here, projected with {there}")
    return notes
