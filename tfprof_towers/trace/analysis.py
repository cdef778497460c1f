"""The whole analysis of one trace, and its JSON document.

``analyze_xplane(path)`` = load -> attribute -> links, as an :class:`Analysis`;
``analyze_trace(trace, kind, edge_bytes)`` the same for a loaded trace.  (A run
directory's variants, whose records add the node -> device join, the topology kind
and the bytes of send/recv edges: :mod:`tfprof_towers.run_traces`.)
``Analysis.to_doc()`` is the document ``tfprof-towers analyze --json`` prints (see
:mod:`tfprof_towers.trace`).
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
