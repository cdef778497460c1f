"""Analysis side of the data flow: a run directory in, summary.json and report.html out.

``finish_run`` is shared by ``profile`` (after capture) and ``report`` (on a
saved run), so both produce the same files from the same code.  No TensorFlow.

Steps, each a small function over the summary::

    summary  = build_summary(run_dir)                    records -> ranked entries
    analyses = analyse_traces(run_dir, summary)          xplane.pb -> per-step breakdown (trace/)
    summary  = add_audits(summary, records, analyses)    placement audit per variant
    summary  = add_advice(summary)                       findings, rules, recommendation
    summary  = add_projection(summary, run_dir)          projection.json (if any) -> compact form
    write summary.json, variants/<name>/trace.json (Chrome trace), report.html

A variant whose trace cannot be analysed keeps ``breakdown = {"error": ...}``;
the rest of the report still renders.  Likewise a ``projection.json`` (written by
``profile --project-on NAME`` or ``project RUN_DIR --hardware NAME``) that cannot
be read becomes ``summary["projection"] = {"label": "projected", "error": ...}``;
without one, ``summary["projection"]`` is ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import advise, audit
from .device_names import device_role
from .errors import TowersError
from .project.api import PROJECTION_JSON
from .rundir import RunDir, read_json, write_json
from .summary import build_summary, load_records, load_run

CHROME_TRACE = "trace.json"


@dataclass(frozen=True)
class VariantTrace:
    """What the trace analysis gave one variant: its per-step document, and the trace itself."""

    breakdown: dict[str, Any]
    trace: Any = None  # tfprof_towers.trace.load.Trace, or None when it could not be analysed


def analyse_variant(run_dir: RunDir, name: str) -> VariantTrace:
    """The per-step breakdown of one variant's trace; ``{"error": ...}`` when that fails."""
    try:
        from .run_traces import analyze_run_dir
    except ImportError as exc:  # the trace package is optional for a report
        return VariantTrace({"error": f"trace analysis unavailable ({exc})"})
    try:
        analysis = analyze_run_dir(run_dir.root, name)
    except TowersError as exc:
        return VariantTrace({"error": exc.message})
    except Exception as exc:  # a trace we cannot read must not cost the user the whole report
        return VariantTrace({"error": f"trace analysis failed: {type(exc).__name__}: {exc}"})
    doc = analysis.to_doc(per_step=True)
    doc.pop("source", None)
    return VariantTrace(doc, analysis.trace)


def analyse_traces(run_dir: RunDir, summary: Mapping[str, Any]) -> dict[str, VariantTrace]:
    return {
        v["name"]: analyse_variant(run_dir, v["name"])
        for v in summary["variants"]
        if v["status"] == "ok" and v.get("xplane_files")
    }


def add_breakdowns(summary: dict[str, Any], analyses: Mapping[str, VariantTrace]) -> dict[str, Any]:
    topology = summary.get("topology") or {}
    for v in summary["variants"]:
        t = analyses.get(v["name"])
        if t is None:
            v["breakdown"] = None
            continue
        bd = t.breakdown
        for dev, d in (bd.get("devices") or {}).items():
            d["role"] = device_role(dev, topology)
        v["breakdown"] = bd
    return summary


def add_audits(summary: dict[str, Any], records: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    topology = summary.get("topology") or {}
    for v in summary["variants"]:
        rec = records.get(v["name"]) or {}
        v["audit"] = audit.audit_variant(rec, topology, v.get("breakdown")) if v["status"] == "ok" else None
    summary["link_models"] = [
        {"key": m.key, "name": m.name, "bytes_per_s": m.bytes_per_s, "source": m.source}
        for m in audit.LINK_MODELS
    ]
    return summary


def add_advice(summary: dict[str, Any]) -> dict[str, Any]:
    advice = advise.advise(summary)
    summary["findings"] = advice["findings"]
    summary["rules"] = advice["rules"]
    summary["recommendation"] = advice["recommendation"]
    return summary


# ------------------------------------------------------------------------------------------
# What-if projection (projection.json) -> summary["projection"]


def add_projection(summary: dict[str, Any], run_dir: RunDir) -> dict[str, Any]:
    summary["projection"] = load_projection(run_dir)
    return summary


def load_projection(run_dir: RunDir) -> dict[str, Any] | None:
    """``RUN_DIR/projection.json`` in compact form; ``None`` without one, ``{"error": ...}`` if unreadable."""
    path = run_dir.root / PROJECTION_JSON
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        return compact_projection(read_json(path))
    except TowersError as exc:
        return {"label": "projected", "error": exc.message}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why = f"{path}: not a projection document ({type(exc).__name__}: {exc})"
        return {"label": "projected", "error": why}


def compact_projection(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the report shows of a projection document (see ``project.api.project``).

    Raises ``KeyError``/``TypeError``/``ValueError`` on a document of the wrong shape.
    """
    if not isinstance(doc, Mapping) or doc.get("label") != "projected":
        raise ValueError('no "label": "projected"')
    calibration = doc.get("calibration") or {}
    return {
        "label": "projected",
        "hardware": str(doc["hardware"]),
        "preset": _preset(doc.get("preset")),
        "tensorflow": _optional_text(doc.get("tensorflow")),
        "assumptions": [str(a) for a in doc["assumptions"]],
        "profile": _plain(doc.get("profile") or {}),
        "calibrated": [str(c) for c in (doc.get("rates") or {}).get("calibrated") or ()],
        "calibration_notes": [str(n) for n in calibration.get("notes") or ()],
        "variants": [_projected_variant(e) for e in doc["variants"]],
        "ranking": [str(n) for n in doc.get("ranking") or ()],
        "recommendation": {"variant": _optional_text(doc["recommendation"].get("variant")),
                           "reason": str(doc["recommendation"].get("reason") or "")},
    }


def _projected_variant(entry: Mapping[str, Any]) -> dict[str, Any]:
    name = str(entry["name"])
    if "projected_step_s" not in entry:
        return {"name": name, "error": str(entry.get("error") or "not projected")}
    step = entry["projected_step_s"]
    rank = entry.get("rank")
    return {
        "name": name,
        "rank": None if rank is None else int(rank),
        "projected_step_s": {"overlapped": _seconds(step["overlapped"]), "serial": _seconds(step["serial"])},
        "bottleneck": str((entry.get("bottleneck") or {}).get("text") or ""),
    }


def _seconds(value: Any) -> float:
    s = float(value)
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"projected step time {value!r}")
    return s


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)


def _preset(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    return {k: raw[k] for k in ("name", "batch", "dim", "blocks") if k in raw}


def _plain(value: Any, depth: int = 0) -> Any:
    """JSON scalars, lists and string-keyed dicts only (a profile is two levels deep)."""
    if depth > 3:
        raise ValueError("profile nested too deep")
    if isinstance(value, Mapping):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"unexpected {type(value).__name__} in the profile")


def export_chrome_traces(
    run_dir: RunDir, summary: dict[str, Any], analyses: Mapping[str, VariantTrace]
) -> dict[str, Any]:
    """``variants/<name>/trace.json`` for each analysed trace; the entry names it (relative path)."""
    from .render.chrome_trace import write_chrome_trace

    for v in summary["variants"]:
        t = analyses.get(v["name"])
        v["chrome_trace"] = None
        if t is None or t.trace is None:
            continue
        path = run_dir.variant_dir(v["name"]) / CHROME_TRACE
        try:
            write_chrome_trace(t.trace, path, summary.get("topology"), v["name"])
        except OSError as exc:
            v["chrome_trace_error"] = f"cannot write {path}: {exc.strerror or exc}"
            continue
        v["chrome_trace"] = path.relative_to(run_dir.root).as_posix()
    return summary


def timelines(summary: Mapping[str, Any], analyses: Mapping[str, VariantTrace]) -> list[dict[str, Any]]:
    from .render.timeline import step_timeline

    out = []
    for v in summary["variants"]:
        t = analyses.get(v["name"])
        if t is None or t.trace is None:
            continue
        tl = step_timeline(t.trace, v["name"], summary.get("topology"))
        if tl is not None:
            out.append(tl)
    return out


def finish_run(run_dir: RunDir) -> dict[str, Any]:
    """Build summary.json, the Chrome-trace exports and report.html from ``run_dir``."""
    from .render.html import render_report

    records = load_records(run_dir, load_run(run_dir))
    summary = build_summary(run_dir, records)
    analyses = analyse_traces(run_dir, summary)
    add_breakdowns(summary, analyses)
    add_audits(summary, records)
    add_advice(summary)
    add_projection(summary, run_dir)
    export_chrome_traces(run_dir, summary, analyses)
    write_json(run_dir.summary_json, summary)
    render_report(summary, run_dir, timelines(summary, analyses))
    return summary
