"""Traces of a run directory: each variant's trace with what its run record adds.

The adapter between the run directory's format (:mod:`tfprof_towers.rundir.paths`:
``run.json``, ``variants/<name>/record.json``, ``tensorboard/<name>/``) and the trace
package, which knows nothing of it.  A variant's record gives the node -> device join
(its placement's nodes), the bytes of send/recv edges (its placement's edges) and which
task each host's trace is (``host_tasks``: ``{"127.0.0.1_34567": "/job:worker/task:1"}``,
host file name -> task, written by the capture of a cluster variant); ``run.json`` the
topology kind.  A variant's logdir is analysed host by host, then reduced
(:mod:`tfprof_towers.trace.pod`), each host's devices named with its task: the path ``analyze`` takes.
Every host's events in one trace (:func:`~tfprof_towers.trace.hosts.load_hosts`) are read only for
what needs the events themselves (:func:`merged_trace`: the Chrome trace, the step timeline).
Never imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfprof_towers.rundir.paths import RunDir, is_run_dir, read_json
from tfprof_towers.trace.executors import analyze_pod
from tfprof_towers.trace.hosts import load_hosts
from tfprof_towers.trace.load import Trace
from tfprof_towers.trace.pod import PodAnalysis, Progress
from tfprof_towers.vocab.errors import TraceError

if TYPE_CHECKING:
    from tfprof_towers.rundir.records import VariantRecord


@dataclass(frozen=True)
class RunContext:
    """What a variant's run record adds to its trace."""

    node_devices: dict[str, str | list[str]]  # a node on several tasks: all its devices
    edge_bytes: dict[str, int] | None
    kind: str | None
    host_tasks: dict[str, str] | None = None  # host file name -> task (cluster variants)

    @classmethod
    def of(cls, record: VariantRecord | None, kind: str | None) -> RunContext:
        """From a variant's record (its placement's nodes and edges, its ``host_tasks``) and the run's
        topology kind; ``record`` None: a variant without one."""
        nodes: dict[str, str | list[str]] = {}
        edges: dict[str, int] | None = None
        host_tasks: dict[str, str] | None = None
        placement = None if record is None else record.placed
        for n in () if placement is None else placement.nodes:
            if n.name and n.device:
                seen = nodes.get(n.name)
                if seen is None or seen == n.device:
                    nodes[n.name] = n.device
                else:  # the same node on several tasks of a cluster
                    devices = seen if isinstance(seen, list) else [seen]
                    nodes[n.name] = devices if n.device in devices else [*devices, n.device]
        if placement is not None and placement.edges is not None:
            edges = {e.edge: int(e.bytes or 0) for e in placement.edges if e.edge}
        if record is not None and record.host_tasks is not None:
            host_tasks = {str(k): str(v) for k, v in record.host_tasks.items() if v}
        return cls(nodes, edges, kind, host_tasks)


def run_context(run_dir: Path, variant: str) -> RunContext:
    """Node -> device, edge bytes and topology kind from ``run.json`` and the variant's record (an
    invalid or missing one adds nothing)."""
    from tfprof_towers.rundir.records import load_record  # a run's: `analyze FILE` need not import it

    rd = RunDir(Path(run_dir))
    kind = None
    if rd.run_json.is_file():
        topo = (read_json(rd.run_json) or {}).get("topology") or {}
        kind = topo.get("kind") if isinstance(topo, dict) else None
    return RunContext.of(load_record(rd, variant) if rd.record_json(variant).is_file() else None, kind)


def analyze_logdir(logdir: Path, ctx: RunContext, label: str = "", notes: tuple[str, ...] = (),
                   executor: Any = None, progress: Progress | None = None,
                   keep_events: bool = False) -> PodAnalysis:
    """Analyse one variant's logdir host by host, then reduce, with what its run record adds
    (``executor``: where the map runs, :func:`~tfprof_towers.trace.executors.analyze_pod`;
    ``keep_events``: the hosts' events kept on the result where they are small enough, so that
    :func:`merged_trace` need not read them again)."""
    return analyze_pod(logdir, None, ctx.node_devices, ctx.host_tasks, ctx.kind, ctx.edge_bytes, label,
                       notes, executor, progress, keep_events=keep_events)


def merged_trace(logdir: Path, ctx: RunContext, skip: tuple[str, ...] = ()) -> Trace:
    """Every host's events of one variant's logdir in one trace, but the hosts named in ``skip``
    (those the host-by-host analysis could not read): for what needs the events themselves."""
    return load_hosts(logdir, node_devices=ctx.node_devices, tasks=ctx.host_tasks, skip=skip)


def _variant_of(rd: RunDir, variant: str | None, run_dir: Path | str) -> tuple[str, tuple[str, ...]]:
    """The variant to analyse (``None``: the first with a trace), and a note when there was a choice."""
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
    return variant, notes


def analyze_run_dir(
    run_dir: Path | str, variant: str | None = None, host_tasks: dict[str, str] | None = None,
    executor: Any = None, progress: Progress | None = None,
) -> PodAnalysis:
    """Analyse one variant of a run directory (``variant=None``: the first with a trace) host by host,
    then reduce; ``host_tasks`` (host file name -> task) overrides the record's."""
    rd = RunDir(Path(run_dir))
    variant, notes = _variant_of(rd, variant, run_dir)
    ctx = run_context(rd.root, variant)
    if host_tasks is not None:
        ctx = replace(ctx, host_tasks=host_tasks)
    return analyze_logdir(rd.logdir(variant), ctx, variant, notes, executor, progress)


def run_dir_trace(run_dir: Path | str, variant: str | None = None) -> Trace:
    """Every host's events of one variant of a run directory (``variant=None``: the first with a
    trace), in one trace, joined through its record."""
    rd = RunDir(Path(run_dir))
    variant, _ = _variant_of(rd, variant, run_dir)
    return merged_trace(rd.logdir(variant), run_context(rd.root, variant))


def pod_of_path(path: Path | str, run: str | None = None, executor: Any = None,
                progress: Progress | None = None) -> PodAnalysis:
    """A run directory (``run`` = variant) or a trace file / logdir (``run`` = profile run), host by
    host (:mod:`tfprof_towers.trace.pod`): each host mapped on ``executor`` (default: the local process
    pool), then reduced; what ``analyze`` prints."""
    path = Path(path)
    if path.is_dir() and is_run_dir(path):
        return analyze_run_dir(path, run, executor=executor, progress=progress)
    return analyze_pod(path, run, executor=executor, progress=progress)
