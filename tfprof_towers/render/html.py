"""``report.html``: one self-contained page from ``summary.json`` (plus optional timelines).

Jinja2 with autoescaping (``select_autoescape``) and a ``PackageLoader``; the
page inlines its own CSS and JavaScript (``render/static``), so it opens offline
and links nothing.  Data for the charts goes into a
``<script type="application/json">`` block through ``|tojson``, which escapes
``<``, ``>``, ``&`` and ``'``; the script puts every name into the page with
``textContent``.  Trace- and graph-derived text is never marked safe.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from tfprof_towers.advice import recommend
from tfprof_towers.advice.findings import by_severity
from tfprof_towers.render.cluster import cluster_views
from tfprof_towers.render.filters import FILTERS
from tfprof_towers.render.memory import memory_view
from tfprof_towers.render.projection import projection_view
from tfprof_towers.render.scaling import scaling_view
from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.paths import RunDir, atomic_write_text
from tfprof_towers.variants import registry
from tfprof_towers.vocab import categories
from tfprof_towers.vocab.textcap import has_invisible, visible


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tfprof_towers.render", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.do"],
        finalize=isolate,
    )
    env.filters.update(FILTERS)
    env.globals["assets"] = assets
    return env


def isolate(value: object) -> object:
    """Every ``{{ ... }}`` of the templates passes here before it is escaped: a text with control or
    bidi characters (U+202E shows "evil" as "live" and reorders what follows) is shown in ``<bdi>``
    with those characters made visible (``<U+202E>``); the text itself is still escaped
    (``Markup.format`` escapes its argument).  Other values are left to autoescape."""
    if isinstance(value, str) and not isinstance(value, Markup) and has_invisible(value):
        return Markup("<bdi>{}</bdi>").format(visible(value))
    return value


@lru_cache(maxsize=1)
def assets() -> dict[str, Markup]:
    """Our own CSS and JavaScript, inlined (they are package files, not trace data)."""
    static = resources.files("tfprof_towers.render") / "static"
    return {
        "css": Markup(static.joinpath("report.css").read_text(encoding="utf-8")),
        "js": Markup(static.joinpath("report.js").read_text(encoding="utf-8").replace("</", "<\\/")),
    }


# ------------------------------------------------------------------------------------------
# View model


def _device_order(devices: Sequence[str], topology: Mapping[str, Any]) -> list[str]:
    host = topology.get("host")
    accels = list(topology.get("accelerators") or ())
    rank = {d: i for i, d in enumerate([host, *accels])}
    return sorted(devices, key=lambda d: (rank.get(d, len(rank)), d))


def breakdown_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per (successful variant, device) with its median per-step wall breakdown."""
    topology = summary.get("topology") or {}
    rows = []
    for v in summary.get("variants") or ():
        bd = v.get("breakdown") or {}
        devices = bd.get("devices") or {}
        for dev in _device_order(list(devices), topology):
            d = devices[dev]
            wall = {k: float(s) for k, s in (d.get("wall") or {}).items() if s}
            rows.append({"variant": v["name"], "device": dev, "role": d.get("role", ""),
                         "step_s": float(d.get("window_s") or sum(wall.values())), "wall": wall})
    return rows


def idle_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per (variant, accelerator) with an idle split in its breakdown: idle, host wait, kernel wait, other."""
    rows = []
    for v in summary.get("variants") or ():
        devices = (v.get("breakdown") or {}).get("devices") or {}
        for dev, d in devices.items():
            split = d.get("idle_split")
            if not isinstance(split, Mapping):
                continue
            rows.append({"variant": v["name"], "device": dev, "idle": (d.get("wall") or {}).get("idle"),
                         **{k: split.get(k) for k in categories.IDLE_SPLIT}})
    return rows


def math_view(summary: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[Mapping[str, Any]], int]:
    """``summary.json`` -> ``math``, its rows (none when no variant recorded a loss) and the steps shown."""
    math = summary.get("math") or {}
    rows = [{**r, "losses": nonfinite.restore(r, "losses"), "grad_norm": nonfinite.restore(r, "grad_norm")}
            for r in math.get("variants") or ()]  # a NaN loss (null plus a flag) shown as NaN
    if not any(r.get("losses") for r in rows):
        return math, [], 0
    return math, rows, max(len(r.get("losses") or ()) for r in rows)


def transfer_matrix(entry: Mapping[str, Any], topology: Mapping[str, Any]) -> dict[str, Any]:
    """Bytes per step from row device to column device."""
    links = entry.get("transfers") or []
    devices = _device_order(sorted({x for t in links for x in (t["src"], t["dst"])}), topology)
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for t in links:  # send/recv and collective (all-reduce) rows of one link add up
        c = cells.setdefault((t["src"], t["dst"]), {"bytes_per_step": 0, "tensors": 0, "collective": 0})
        c["bytes_per_step"] += int(t["bytes_per_step"])
        c["tensors"] += int(t.get("tensors") or 0)
        if t.get("kind") == "collective":
            c["collective"] += int(t["bytes_per_step"])
    biggest = max((c["bytes_per_step"] for c in cells.values()), default=0)

    def cell(c: dict[str, int] | None) -> dict[str, Any]:
        if c is None:
            return {"bytes": None, "tensors": None, "collective": 0, "alpha": 0}
        return {"bytes": c["bytes_per_step"], "tensors": c["tensors"], "collective": c["collective"],
                "alpha": round(0.08 + 0.5 * c["bytes_per_step"] / biggest, 3) if biggest else 0}

    return {"devices": devices, "rows": [[cell(cells.get((s, d))) for d in devices] for s in devices]}


def view_model(
    summary: Mapping[str, Any], run_root: Path, timelines: Sequence[Mapping[str, Any]] = (),
    memory_series: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    topology = summary.get("topology") or {}
    variants = list(summary.get("variants") or [])
    by_name = {v["name"]: v for v in variants}
    ranked = [by_name[n] for n in summary.get("ranking") or [] if n in by_name]
    ranked += [v for v in variants if v not in ranked]
    findings = by_severity(summary.get("findings") or [], lambda f: f["severity"])
    per_variant = [{
        "entry": v,
        "matrix": transfer_matrix(v, topology),
        "tensorboard": f"tensorboard --logdir {shlex.quote(str(run_root / 'tensorboard' / v['name']))} "
                       "--port 6006",
        "chrome_trace": v.get("chrome_trace"),
        "timeline_id": _dom_id(v["name"]),
        "has_timeline": any(t.get("variant") == v["name"] for t in timelines),
    } for v in ranked]
    timelines = [{**t, "id": _dom_id(t["variant"])} for t in timelines]
    data = {"breakdown": {"categories": categories.legend(), "rows": breakdown_rows(summary)},
            "timelines": timelines}
    recommendation = summary.get("recommendation") or {}
    picked = by_name.get(recommendation.get("variant") or "")
    math, math_rows, math_steps = math_view(summary)
    reason = str(recommendation.get("reason") or "")
    return {
        # excluded variants the reason does not already name
        "not_recommended": {n: why for n, why in (recommendation.get("excluded") or {}).items()
                            if f"{n} " not in reason},
        "math": math,
        "math_rows": math_rows,
        "math_steps": math_steps,
        "idle_rows": idle_rows(summary),
        "summary": summary,
        "title": f"tfprof-towers report — {Path(str(summary.get('run_dir') or run_root)).name}",
        "baseline": registry.baseline_of(picked),
        "rec_is_baseline": bool(picked) and registry.is_baseline(picked["name"], picked.get("source")),
        "trace_errors": trace_errors(ranked),
        "topology": topology,
        "ranked": ranked,
        "ok": [v for v in ranked if v["status"] == "ok"],
        "projection": projection_view(summary, ranked),
        "scaling": scaling_view(summary),
        "memory": memory_view(summary, memory_series),
        "clusters": cluster_views(ranked),
        "failed": [v for v in ranked if v["status"] not in ("ok", "skipped")],
        "per_variant": per_variant,
        "findings": findings,
        # the trace rules' findings, per variant (below the run's own rules)
        "trace_findings": [(v["name"], v.get("trace_findings") or []) for v in ranked
                           if v.get("trace_findings")],
        "recommendation": recommendation,
        "rules": summary.get("rules") or [],
        "link_models": summary.get("link_models") or [],
        "categories": categories.legend(),
        "data": data,
        "logical": topology.get("kind") == "logical-cpu",
        "stand_in_why": recommend.stand_in_why(topology.get("kind")),
        "run_root": str(run_root),
        "tensorboard_all": f"tensorboard --logdir {shlex.quote(str(run_root / 'tensorboard'))} --port 6006",
    }


def trace_errors(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Why each successful variant has no trace breakdown (for the empty breakdown section)."""
    out = []
    for v in entries:
        if v.get("status") != "ok":
            continue
        error = (v.get("breakdown") or {}).get("error")
        if error or not v.get("xplane_files"):
            out.append({"variant": v["name"], "error": error or "no trace file was recorded"})
    return out


def _dom_id(name: str) -> str:
    """A DOM id for a variant name (names are identifiers; anything else is hex-escaped)."""
    return "".join(c if c.isalnum() or c in "_-" else f"x{ord(c):x}" for c in name)


def render_report_text(
    summary: Mapping[str, Any], run_root: Path, timelines: Sequence[Mapping[str, Any]] = (),
    memory_series: Mapping[str, Any] | None = None,
) -> str:
    return environment().get_template("report.html").render(
        **view_model(summary, run_root, timelines, memory_series))


def render_report(
    summary: Mapping[str, Any], run_dir: RunDir | Path, timelines: Sequence[Mapping[str, Any]] = (),
    memory_series: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``RUN_DIR/report.html`` (atomically) and return its path; ``memory_series``: per variant, its
    devices' bytes in use over time (the Memory section's timelines)."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    text = render_report_text(summary, rd.root.resolve(), timelines, memory_series)
    atomic_write_text(rd.report_html, text)
    return rd.report_html
