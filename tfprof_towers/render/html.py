"""``report.html``: one self-contained page from ``summary.json`` (plus optional timelines).

Jinja2 with autoescaping (``select_autoescape``) and a ``PackageLoader``; the
page inlines its own CSS and JavaScript (``render/static``), so it opens offline
and links nothing.  Data for the charts goes into a
``<script type="application/json">`` block through ``|tojson``, which escapes
``<``, ``>``, ``&`` and ``'``; the script puts every name into the page with
``textContent``.  Trace- and graph-derived text is never marked safe.
"""

from __future__ import annotations

import contextlib
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
from tfprof_towers.render.memory_charts import memory_view
from tfprof_towers.render.projection import projection_view
from tfprof_towers.render.scaling import scaling_view
from tfprof_towers.rundir.math_table import MathRow, MathTable
from tfprof_towers.rundir.paths import RunDir, atomic_write_text
from tfprof_towers.rundir.placement_doc import PlacedTransfer
from tfprof_towers.rundir.records import Topology
from tfprof_towers.rundir.summary import Summary, SummaryEntry
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
    env.bytecode_cache = template_cache(env)
    return env


class TemplateCache(jinja2.FileSystemBytecodeCache):
    """The templates' compiled code kept between runs, in Jinja's own cache folder (in the temp
    folder, this user's alone; Jinja checks its owner and mode).  Jinja keys a template by its file
    and checks its source; the key here adds everything in the environment that changes the compiled
    code (:func:`compile_options`), so a changed option never reuses an old compile.  A folder that
    cannot be read or written costs the compile, nothing else."""

    def __init__(self, env: jinja2.Environment, directory: str | None = None) -> None:
        super().__init__(directory, pattern="tfprof-towers-%s.cache")
        self.env = env

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        import hashlib

        options = repr((compile_options(self.env), _autoescape(self.env, name)))
        return hashlib.sha1(f"{super().get_cache_key(name, filename)}|{options}".encode()).hexdigest()

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except OSError:
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def compile_options(env: jinja2.Environment) -> tuple[Any, ...]:
    """What Jinja's compiler reads from ``env`` besides the template's source: its version, the
    syntax, whitespace and newline options, the extensions, filters, tests, policies and finalize."""
    finalize = env.finalize
    return (jinja2.__version__, env.block_start_string, env.block_end_string, env.variable_start_string,
            env.variable_end_string, env.comment_start_string, env.comment_end_string,
            env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks, env.lstrip_blocks,
            env.newline_sequence, env.keep_trailing_newline, env.optimized, env.is_async,
            sorted(env.extensions), sorted(env.filters), sorted(env.tests),
            sorted((k, repr(v)) for k, v in env.policies.items()),
            env.code_generator_class.__qualname__, env.context_class.__qualname__,
            finalize is not None, getattr(finalize, "jinja_pass_arg", None))


def _autoescape(env: jinja2.Environment, name: str) -> bool:
    return bool(env.autoescape(name) if callable(env.autoescape) else env.autoescape)


def template_cache(env: jinja2.Environment) -> TemplateCache | None:
    """:class:`TemplateCache` for ``env``; None where the temp folder has no cache folder to offer."""
    try:
        return TemplateCache(env)
    except (OSError, RuntimeError):  # Jinja's folder cannot be made, or is not this user's alone
        return None


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


def as_summary(summary: Summary | Mapping[str, Any]) -> Summary:
    """``summary`` typed: a ``summary.json`` document is read as the report would load it."""
    return summary if isinstance(summary, Summary) else Summary.from_json(summary)


def _device_order(devices: Sequence[str], topology: Topology | None) -> list[str]:
    order = [] if topology is None else [topology.host, *topology.accelerators]
    rank = {d: i for i, d in enumerate(order)}
    return sorted(devices, key=lambda d: (rank.get(d, len(rank)), d))


def breakdown_rows(summary: Summary) -> list[dict[str, Any]]:
    """One row per (successful variant, device) with its median per-step wall breakdown."""
    rows = []
    for v in summary.variants:
        devices = v.breakdown.devices if v.breakdown is not None else {}
        for dev in _device_order(list(devices), summary.topology):
            d = devices[dev]
            wall = {k: float(s) for k, s in d.wall.items() if s}
            rows.append({"variant": v.name, "device": dev, "role": d.role or "",
                         "step_s": float(d.window_s or sum(wall.values())), "wall": wall})
    return rows


def idle_rows(summary: Summary) -> list[dict[str, Any]]:
    """Per (variant, accelerator) with an idle split in its breakdown: idle, host wait, kernel wait, other."""
    rows = []
    for v in summary.variants:
        devices = v.breakdown.devices if v.breakdown is not None else {}
        for dev, d in devices.items():
            if d.idle_split is None:
                continue
            rows.append({"variant": v.name, "device": dev, "idle": d.idle,
                         **{k: d.idle_split.get(k) for k in categories.IDLE_SPLIT}})
    return rows


def math_view(summary: Summary) -> tuple[MathTable | None, list[MathRow], int]:
    """``summary.json`` -> ``math``, its rows (none when no variant recorded a loss) and the steps shown."""
    math = summary.math
    rows = list(math.variants) if math is not None else []  # a NaN loss (null plus a flag) reads as NaN
    if not any(r.losses for r in rows):
        return math, [], 0
    return math, rows, max(len(r.losses) for r in rows)


def transfer_matrix(transfers: Sequence[PlacedTransfer], topology: Topology | None) -> dict[str, Any]:
    """Bytes per step from row device to column device (``transfers``: a placement's links)."""
    devices = _device_order(sorted({x for t in transfers for x in (t.src, t.dst)}), topology)
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for t in transfers:  # send/recv and collective (all-reduce) rows of one link add up
        c = cells.setdefault((t.src, t.dst), {"bytes_per_step": 0, "tensors": 0, "collective": 0})
        c["bytes_per_step"] += int(t.bytes_per_step)
        c["tensors"] += int(t.tensors or 0)
        if t.kind == "collective":
            c["collective"] += int(t.bytes_per_step)
    biggest = max((c["bytes_per_step"] for c in cells.values()), default=0)

    def cell(c: dict[str, int] | None) -> dict[str, Any]:
        if c is None:
            return {"bytes": None, "tensors": None, "collective": 0, "alpha": 0}
        return {"bytes": c["bytes_per_step"], "tensors": c["tensors"], "collective": c["collective"],
                "alpha": round(0.08 + 0.5 * c["bytes_per_step"] / biggest, 3) if biggest else 0}

    return {"devices": devices, "rows": [[cell(cells.get((s, d))) for d in devices] for s in devices]}


def view_model(
    summary: Summary | Mapping[str, Any], run_root: Path, timelines: Sequence[Mapping[str, Any]] = (),
    memory_series: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    summary = as_summary(summary)
    topology = summary.topology or Topology(None, None)
    by_name = {v.name: v for v in summary.variants}
    ranked = [by_name[n] for n in summary.ranking if n in by_name]
    ranked += [v for v in summary.variants if v not in ranked]
    findings = by_severity(summary.findings)
    with_timeline = {t["variant"] for t in timelines}
    per_variant = [{
        "entry": v,
        "matrix": transfer_matrix(v.transfers, summary.topology),
        "tensorboard": f"tensorboard --logdir {shlex.quote(str(run_root / 'tensorboard' / v.name))} "
                       "--port 6006",
        "chrome_trace": v.chrome_trace,
        "timeline_id": _dom_id(v.name),
        "has_timeline": v.name in with_timeline,
    } for v in ranked]
    timelines = [{**t, "id": _dom_id(t["variant"])} for t in timelines]
    data = {"breakdown": {"categories": categories.legend(), "rows": breakdown_rows(summary)},
            "timelines": timelines}
    recommendation = summary.recommendation
    picked = by_name.get(recommendation.variant or "")
    math, math_rows, math_steps = math_view(summary)
    reason = recommendation.reason
    return {
        # excluded variants the reason does not already name
        "not_recommended": {n: why for n, why in recommendation.excluded.items() if f"{n} " not in reason},
        "math": math,
        "math_rows": math_rows,
        "math_steps": math_steps,
        "idle_rows": idle_rows(summary),
        "summary": summary,
        "title": f"tfprof-towers report — {Path(summary.run_dir or str(run_root)).name}",
        "baseline": registry.baseline_name(picked.family if picked is not None else registry.TF1_GRAPH),
        "rec_is_baseline": picked is not None and picked.baseline,
        "trace_errors": trace_errors(ranked),
        "topology": topology,
        "ranked": ranked,
        "ok": [v for v in ranked if v.ok],
        "projection": projection_view(summary, ranked),
        "scaling": scaling_view(summary.scaling),
        "memory": memory_view(summary, memory_series),
        "clusters": cluster_views(ranked),
        "failed": [v for v in ranked if v.status not in ("ok", "skipped")],
        "per_variant": per_variant,
        "findings": findings,
        # the trace rules' findings, per variant (below the run's own rules)
        "trace_findings": [(v.name, v.trace_findings) for v in ranked if v.trace_findings],
        "recommendation": recommendation,
        "rules": summary.rules,
        "link_models": summary.link_models,
        "categories": categories.legend(),
        "data": data,
        "logical": topology.kind == "logical-cpu",
        "stand_in_why": recommend.stand_in_why(topology.kind),
        "run_root": str(run_root),
        "tensorboard_all": f"tensorboard --logdir {shlex.quote(str(run_root / 'tensorboard'))} --port 6006",
    }


def trace_errors(entries: Sequence[SummaryEntry]) -> list[dict[str, str]]:
    """Why each successful variant has no trace breakdown (for the empty breakdown section)."""
    out = []
    for v in entries:
        if not v.ok:
            continue
        error = v.breakdown.error if v.breakdown is not None else None
        if error or not v.xplane_files:
            out.append({"variant": v.name, "error": error or "no trace file was recorded"})
    return out


def _dom_id(name: str) -> str:
    """A DOM id for a variant name (names are identifiers; anything else is hex-escaped)."""
    return "".join(c if c.isalnum() or c in "_-" else f"x{ord(c):x}" for c in name)


def render_report_text(
    summary: Summary | Mapping[str, Any], run_root: Path, timelines: Sequence[Mapping[str, Any]] = (),
    memory_series: Mapping[str, Any] | None = None,
) -> str:
    return environment().get_template("report.html").render(
        **view_model(summary, run_root, timelines, memory_series))


def render_report(
    summary: Summary | Mapping[str, Any], run_dir: RunDir | Path, timelines: Sequence[Mapping[str, Any]] = (),
    memory_series: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``RUN_DIR/report.html`` (atomically) and return its path; ``memory_series``: per variant, its
    devices' bytes in use over time (the Memory section's timelines)."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    text = render_report_text(summary, rd.root.resolve(), timelines, memory_series)
    atomic_write_text(rd.report_html, text)
    return rd.report_html
