"""The whole analysis of one trace, and its JSON document.

``analyze_xplane(path)`` = load -> attribute -> links, as an :class:`Analysis`;
``analyze_run_dir(run_dir, variant)`` does the same for one variant of a run
directory, using its run record for the node -> device join, the topology kind and
the bytes of send/recv edges.  ``Analysis.to_doc()`` is the document
``tfprof-towers analyze --json`` prints (see :mod:`tfprof_towers.trace`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..categories import COPY_CATEGORIES, DEVICE_CATEGORIES, HOST_CATEGORIES, TIME_CATEGORIES, WALL_CATEGORIES
from ..device_names import is_accelerator_plane
from ..errors import TraceError
from ..rundir import RunDir, is_run_dir, read_json
from .attribute import Breakdown, attribute
from .links import link_table
from .load import Trace, load_trace

_PS = 1e12


@dataclass(frozen=True)
class Analysis:
    """A trace with its attribution and link table."""

    trace: Trace
    breakdown: Breakdown
    links: pd.DataFrame
    kind: str | None = None  # "gpu" | "logical-cpu" | None (unknown)
    label: str = ""  # e.g. the variant name

    @property
    def n_steps(self) -> int:
        return len(self.trace.steps)

    def to_doc(self, per_step: bool = False) -> dict[str, Any]:
        """The JSON document; ``per_step`` divides every count, time and byte figure by the steps."""
        scale = 1.0 / self.n_steps if per_step and self.n_steps else 1.0
        doc: dict[str, Any] = {
            "source": self.trace.source,
            "steps": self.n_steps,
            "step_numbers": self.trace.steps["step"].tolist(),
            "window": self.trace.window,
            "per_step": bool(per_step),
            "devices": devices_doc(self.breakdown, scale),
            "links": links_doc(self.links, scale),
            "notes": list(self.trace.notes),
        }
        if self.kind:
            doc["kind"] = self.kind
        return doc


def categories_for(device: str) -> tuple[str, ...]:
    return DEVICE_CATEGORIES if is_accelerator_plane(device) else HOST_CATEGORIES


def devices_doc(b: Breakdown, scale: float = 1.0) -> dict[str, Any]:
    """``{device: {"window_s", "total": {cat: {count, seconds, bytes}}, "wall": {cat: s, "idle": s}}}``."""
    window_s = float(b.windows["window_ps"].sum()) / _PS
    total = b.total.groupby(["device", "category"]).agg(
        count=("count", "sum"), dur_ps=("dur_ps", "sum"), bytes=("bytes", "sum")
    )
    wall = b.wall.groupby(["device", "category"])["dur_ps"].sum()
    out: dict[str, Any] = {}
    for dev in b.devices:
        cats = list(categories_for(dev))
        present = total.loc[dev].index.tolist() if dev in total.index.get_level_values(0) else []
        cats += [c for c in TIME_CATEGORIES if c in present and c not in cats]
        tot = {}
        for c in cats:
            row = total.loc[(dev, c)] if (dev, c) in total.index else None
            n, ps, nb = (
                (0, 0, 0) if row is None else (int(row["count"]), int(row["dur_ps"]), int(row["bytes"]))
            )
            entry: dict[str, Any] = {"count": _num(n * scale), "seconds": ps / _PS * scale}
            if c in COPY_CATEGORIES:
                entry["bytes"] = _num(nb * scale)
            tot[c] = entry
        walls = {
            c: float(wall.get((dev, c), 0)) / _PS * scale
            for c in WALL_CATEGORIES
            if c in cats or c == "idle" or wall.get((dev, c), 0)
        }
        out[dev] = {"window_s": window_s * scale, "total": tot, "wall": walls}
    return out


def links_doc(links: pd.DataFrame, scale: float = 1.0) -> list[dict[str, Any]]:
    rows = []
    for r in links.itertuples(index=False):  # one row per link: a handful
        nbytes = None if r.bytes is pd.NA or r.bytes is None else _num(int(r.bytes) * scale)
        seconds = None if not r.measured or math.isnan(r.seconds) else r.seconds * scale
        gbps = None if not r.measured or math.isnan(r.gbps) else float(r.gbps)
        rows.append(
            {
                "src": r.src,
                "dst": r.dst,
                "kind": r.kind,
                "bytes": nbytes,
                "count": _num(r.count * scale),
                "seconds": seconds,
                "gbps": gbps,
                "measured": bool(r.measured),
            }
        )
    return rows


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def analyze_trace(
    trace: Trace, kind: str | None = None, edge_bytes: Mapping[str, int] | None = None, label: str = ""
) -> Analysis:
    return Analysis(trace, attribute(trace), link_table(trace, kind, edge_bytes), kind, label)


def analyze_xplane(
    path: Path | str,
    node_devices: Mapping[str, str] | None = None,
    kind: str | None = None,
    edge_bytes: Mapping[str, int] | None = None,
    run: str | None = None,
) -> Analysis:
    """Load one trace (file or logdir) and analyse it."""
    return analyze_trace(load_trace(path, run=run, node_devices=node_devices), kind, edge_bytes)


# ---------------------------------------------------------------------------------------------
# Run directories


@dataclass(frozen=True)
class RunContext:
    """What a variant's run record adds to its trace."""

    node_devices: dict[str, str]
    edge_bytes: dict[str, int] | None
    kind: str | None


def run_context(run_dir: Path, variant: str) -> RunContext:
    """Node -> device, edge bytes and topology kind from ``run.json`` and the variant's record."""
    rd = RunDir(Path(run_dir))
    kind = None
    if rd.run_json.is_file():
        topo = (read_json(rd.run_json) or {}).get("topology") or {}
        kind = topo.get("kind") if isinstance(topo, dict) else None
    nodes: dict[str, str] = {}
    edges: dict[str, int] | None = None
    if rd.record_json(variant).is_file():
        record = read_json(rd.record_json(variant)) or {}
        placement = record.get("placement") or {}
        for n in placement.get("nodes") or []:
            if isinstance(n, dict) and n.get("name") and n.get("device"):
                nodes[str(n["name"])] = str(n["device"])
        if placement.get("edges") is not None:
            edges = {
                str(e["edge"]): int(e.get("bytes") or 0)
                for e in placement["edges"]
                if isinstance(e, dict) and e.get("edge")
            }
    return RunContext(nodes, edges, kind)


def analyze_run_dir(run_dir: Path | str, variant: str | None = None) -> Analysis:
    """Analyse one variant of a run directory (``variant=None``: the first with a trace)."""
    rd = RunDir(Path(run_dir))
    with_trace = [v for v in rd.variant_names() if rd.xplane_files(v)]
    if not with_trace:
        raise TraceError(
            f"{run_dir}: run directory holds no profile (no tensorboard/<variant>/plugins/profile)"
        )
    notes: tuple[str, ...] = ()
    if variant is None:
        variant = with_trace[0]
        if len(with_trace) > 1:
            notes = (
                f"{len(with_trace)} variants with traces ({', '.join(with_trace)}); "
                f"analysing {variant} (choose with --run)",
            )
    elif variant not in with_trace:
        raise TraceError(
            f"--run {variant}: no such variant with a trace in {run_dir}; "
            f"choose one of: {', '.join(with_trace)}"
        )
    ctx = run_context(rd.root, variant)
    trace = load_trace(rd.logdir(variant), node_devices=ctx.node_devices)
    trace = Trace(trace.source, trace.events, trace.steps, trace.window, trace.hostnames, notes + trace.notes)
    return analyze_trace(trace, ctx.kind, ctx.edge_bytes, label=variant)


def analyze_path(path: Path | str, run: str | None = None) -> Analysis:
    """A run directory (``run`` = variant) or a trace file / logdir (``run`` = profile run)."""
    path = Path(path)
    if path.is_dir() and is_run_dir(path):
        return analyze_run_dir(path, run)
    return analyze_xplane(path, run=run)
