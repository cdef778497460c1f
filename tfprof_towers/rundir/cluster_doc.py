"""A cluster variant's view across its tasks (``summary.json`` -> ``variants[].cluster``) as a record.

Built by :func:`tfprof_towers.analysis.cluster_view.cluster_view` from the variant's record (its
``cluster`` document, kept as the capture wrote it), its placement and its trace's per-task steps; read
by the straggler rule and the report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.fields import Fields, Record, meta


def _as_written(f: Fields, key: str) -> Any:
    """The value as the document holds it (a part of the capture's cluster document)."""
    return f.data.get(key)


@dataclass(frozen=True)
class NetworkLink(Record):
    """Bytes per step between two tasks (from the step's graph), and the trace's count where it has one."""

    src: str
    dst: str
    src_task: str = meta("", key="from")  # "worker:0"
    dst_task: str = meta("", key="to")
    via: str = "send/recv"  # or "ring all-reduce"
    bytes_per_step: int = 0
    tensors: int = 0
    # the trace's events (and bytes) per step on the link (None: not traced)
    traced_per_step: Any = meta(None, read=_as_written)
    traced_bytes_per_step: Any = meta(None, read=_as_written)
    loopback: bool = False


@dataclass(frozen=True)
class ClusterView(Record):
    """What summary.json and the report show of a cluster variant: the capture's cluster document's parts
    as written, the bytes between tasks, and the per-step view of who reached the collectives late."""

    family: str | None = None
    loopback: bool | None = meta(None, read=_as_written)
    attached: Any = meta(None, read=_as_written)
    cluster: Any = meta(None, read=_as_written)
    failed_task: str | None = None
    tasks: Any = meta(None, read=_as_written)
    attempts: Any = meta(None, read=_as_written)
    capture: Any = meta(None, read=_as_written)
    host_tasks: Any = meta(None, read=_as_written)
    stepping_tasks: tuple[str, ...] | None = None  # the tasks that ran the steps (None: every task)
    captured_tasks: Any = meta(None, read=_as_written)
    gpus: Any = meta(None, read=_as_written)
    notes: Any = meta(None, read=_as_written)
    network: tuple[NetworkLink, ...] = ()
    network_note: str = ""
    steps: tuple[Mapping[str, Any], ...] = ()  # cluster_view.step_rows: one row per (task, step)
    stragglers: tuple[Mapping[str, Any], ...] = ()  # cluster_view.stragglers
    straggler_params: Mapping[str, float] = meta(factory=dict)
    WHERE = "summary.json: variants[].cluster"

    @property
    def on_loopback(self) -> bool:
        """Every task ran on this machine (127.0.0.1)."""
        return bool(self.loopback)
