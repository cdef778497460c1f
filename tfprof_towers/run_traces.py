"""Traces of a run directory: each variant's trace with what its run record adds.

The adapter between the run directory's format (:mod:`tfprof_towers.rundir`:
``run.json``, ``variants/<name>/record.json``, ``tensorboard/<name>/``) and the trace
package, which knows nothing of it.  A variant's record gives the node -> device join
(its placement's nodes), the bytes of send/recv edges (its placement's edges) and
``run.json`` the topology kind.

``analyze_run_dir(run_dir, variant)`` analyses one variant; ``analyze_path(path, run)``
takes a run directory (``run`` = variant) or a trace file / logdir (``run`` = profile run),
as ``tfprof-towers analyze`` does.  Never imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .errors import TraceError
from .rundir import RunDir, is_run_dir, read_json
from .trace.analysis import Analysis, analyze_trace, analyze_xplane
from .trace.load import load_trace


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
    trace = replace(trace, notes=notes + trace.notes)
    return analyze_trace(trace, ctx.kind, ctx.edge_bytes, label=variant)


def analyze_path(path: Path | str, run: str | None = None) -> Analysis:
    """A run directory (``run`` = variant) or a trace file / logdir (``run`` = profile run)."""
    path = Path(path)
    if path.is_dir() and is_run_dir(path):
        return analyze_run_dir(path, run)
    return analyze_xplane(path, run=run)
