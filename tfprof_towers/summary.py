"""From a run directory's records to ``summary.json`` (no TensorFlow).

``build_summary(run_dir)`` is the one place the run's measurements are put
together: it is called at the end of ``profile`` and again by ``report``, so a
re-rendered report always agrees with a fresh one.  A missing or corrupt
variant record becomes a failed entry that says so; the rest still render.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import BASELINE_VARIANT
from .errors import TowersError
from .rundir import RunDir, read_json

SUMMARY_SCHEMA = 1


def load_run(run_dir: RunDir) -> dict[str, Any]:
    """run.json, or a one-line error naming what is wrong."""
    if not run_dir.root.is_dir():
        raise TowersError(f"{run_dir.root}: no such run directory")
    if not run_dir.run_json.is_file():
        raise TowersError(f"{run_dir.root}: not a tfprof-towers run directory (no run.json)")
    doc = read_json(run_dir.run_json)
    if not isinstance(doc, dict):
        raise TowersError(f"{run_dir.run_json}: corrupt (not a JSON object)")
    return doc


def variant_names(run: Mapping[str, Any], run_dir: RunDir) -> list[str]:
    """Variants in the order the run asked for them, then any others found on disk."""
    asked = [v["name"] for v in run.get("config", {}).get("variants", [])]
    return asked + [n for n in run_dir.variant_names() if n not in asked]


def load_record(run_dir: RunDir, name: str, interrupted: bool = False) -> dict[str, Any]:
    """A variant's record; a failed stand-in (saying why) when it is missing or corrupt."""
    path = run_dir.record_json(name)
    if not path.is_file():
        why = "not run: the profile was interrupted first" if interrupted else "record.json is missing"
        return _stand_in(name, why)
    try:
        doc = read_json(path)
    except TowersError as exc:
        return _stand_in(name, f"record.json is unreadable: {exc}")
    if not isinstance(doc, dict) or "status" not in doc:
        return _stand_in(name, "record.json is corrupt: not a variant record")
    return doc


def _stand_in(name: str, why: str) -> dict[str, Any]:
    return {"name": name, "status": "failed", "error": why, "timings": {}, "placement": None,
            "topology": None, "source": "unknown"}


def _median(record: Mapping[str, Any], key: str) -> float | None:
    stats = (record.get("timings") or {}).get(key) or {}
    return stats.get("median")


def variant_entry(record: Mapping[str, Any], batch: int | None) -> dict[str, Any]:
    placement = record.get("placement") or {}
    timings = record.get("timings") or {}
    median = _median(record, "step_time_s")
    step = timings.get("step_time_s") or {}
    return {
        "name": record["name"],
        "source": record.get("source", "builtin"),
        "status": record["status"],
        "error": record.get("error"),
        "stderr_tail": record.get("stderr_tail", ""),
        "step_time_s": {k: step.get(k) for k in ("median", "p10", "p90", "min", "max", "n")},
        "profiled_step_time_s": {"median": _median(record, "profiled_step_time_s")},
        "examples_per_s": (batch / median) if (batch and median) else None,
        "devices": {
            d: {"ops": v["ops"], "flops_per_step": v["flops_per_step"]}
            for d, v in (placement.get("devices") or {}).items()
        },
        "transfers": list(placement.get("transfers") or []),
        "xplane_files": record.get("xplane_files", []),
    }


def add_speedups(entries: list[dict[str, Any]], accelerators: int) -> None:
    """speedup over ``single`` and scaling efficiency (speedup / accelerators), in place."""
    base = next(
        (e["step_time_s"]["median"] for e in entries
         if e["name"] == BASELINE_VARIANT and e["status"] == "ok"),
        None,
    )
    for e in entries:
        m = e["step_time_s"]["median"]
        e["speedup_vs_single"] = (base / m) if (base and m and e["status"] == "ok") else None
        uses = 1 if e["name"] == BASELINE_VARIANT else max(accelerators, 1)
        e["scaling_efficiency"] = (e["speedup_vs_single"] / uses) if e["speedup_vs_single"] else None


def rank(entries: list[dict[str, Any]]) -> list[str]:
    """Successful variants by median un-profiled step time, fastest first; failed ones last."""
    ok = sorted(
        (e for e in entries if e["status"] == "ok" and e["step_time_s"]["median"] is not None),
        key=lambda e: e["step_time_s"]["median"],
    )
    return [e["name"] for e in ok] + [e["name"] for e in entries if e not in ok]


def simple_recommendation(entries: list[dict[str, Any]], ranking: list[str]) -> dict[str, Any]:
    by_name = {e["name"]: e for e in entries}
    ok = [n for n in ranking if by_name[n]["status"] == "ok"]
    if not ok:
        return {"variant": None, "reason": "no variant finished successfully; see the errors above"}
    best = by_name[ok[0]]
    reason = f"fastest median step time: {best['step_time_s']['median'] * 1e3:.2f} ms"
    if best.get("speedup_vs_single"):
        reason += f" ({best['speedup_vs_single']:.2f}x single)"
    return {"variant": best["name"], "reason": reason}


def load_records(run_dir: RunDir, run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every variant's record (or its failed stand-in), in the run's order."""
    interrupted = bool(run.get("interrupted"))
    return {n: load_record(run_dir, n, interrupted) for n in variant_names(run, run_dir)}


def build_summary(
    run_dir: RunDir, records: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The summary document; ``records`` (from :func:`load_records`) saves re-reading them."""
    run = load_run(run_dir)
    records = list((records if records is not None else load_records(run_dir, run)).values())
    topology = run.get("topology") or next(
        (r["topology"] for r in records if r.get("topology")), None
    )
    batch = (run.get("config", {}).get("preset") or {}).get("batch")
    entries = [variant_entry(r, batch) for r in records]
    accelerators = len((topology or {}).get("accelerators") or []) or run.get("config", {}).get(
        "accelerators", 1
    )
    add_speedups(entries, accelerators)
    ranking = rank(entries)
    for e in entries:
        e["rank"] = ranking.index(e["name"]) + 1 if e["status"] == "ok" else None
    return {
        "schema": SUMMARY_SCHEMA,
        "run_dir": str(run_dir.root),
        "partial": bool(run.get("interrupted")),
        "interrupted_by": run.get("interrupted_by"),
        "topology": topology,
        "config": run.get("config"),
        "versions": run.get("versions"),
        "started": run.get("started"),
        "finished": run.get("finished"),
        "ranking": ranking,
        "variants": entries,
        "recommendation": simple_recommendation(entries, ranking),
    }
