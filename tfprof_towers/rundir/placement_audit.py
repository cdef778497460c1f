"""A variant's placement audit (``summary.json`` -> ``variants[].audit``) as frozen records.

Built by :func:`tfprof_towers.analysis.audit.audit_variant`; read by the advice rules and the report.
The JSON keys are the field names (``from`` is :attr:`VariablePulls.sources_from`'s key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.fields import Record, if_empty, meta


@dataclass(frozen=True)
class LinkModel(Record):
    """A named link bandwidth used to *model* transfer times that cannot be measured
    (``summary.json`` -> ``link_models``: every modeled time of the run's audits is at one of them)."""

    key: str
    name: str
    bytes_per_s: float
    source: str = ""
    kinds: tuple[str, ...] = meta((), omit=if_empty)  # the link kinds (link_kind) it models; (): all
    WHERE = "summary.json: link_models"


@dataclass(frozen=True)
class AuditDevice(Record):
    """One device of the placement: its role, ops and estimated FLOPs, and its measured compute time."""

    device: str
    role: str = "other"  # vocab.device_names.device_role: "host", "accelerator" or "other"
    ops: int = 0
    flops_per_step: int = 0
    flops_share: float | None = None
    compute_s: float | None = None  # measured (the trace's compute categories), per step
    compute_share: float | None = None


@dataclass(frozen=True)
class HostComputeGroup(Record):
    """Heavy ops on the host under one top-level scope, placed there by one ``tf.device`` line."""

    scope: str
    device: str = ""
    ops: int = 0
    flops_per_step: int = 0
    op_types: Mapping[str, int] = meta(factory=dict)  # op label -> count
    sources: tuple[str, ...] = ()  # "file:line" of the tf.device scopes, innermost first
    source_devices: tuple[str, ...] = ()  # the device each of those scopes names
    examples: tuple[str, ...] = ()
    flops_share: float | None = None

    @property
    def source_device(self) -> str:
        """The device the innermost scope named (the group's device where no scope named one)."""
        return self.source_devices[0] if self.source_devices else self.device


@dataclass(frozen=True)
class MovedOps(Record):
    """Ops of one type that the placer put on another device than the one the graph asked for."""

    type: str
    requested: str = ""
    assigned: str = ""
    count: int = 0
    examples: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class LinkTensor(Record):
    """One of the largest tensors crossing a link."""

    tensor: str = ""
    bytes: int = 0
    producer_type: str = ""


@dataclass(frozen=True)
class AuditLink(Record):
    """Bytes and tensors per step on one link; its measured time where the trace has it, modeled times."""

    src: str
    dst: str
    kind: str = "other"  # vocab.device_names.link_kind
    via: str = "send_recv"  # or "collective" (TF2 all-reduce traffic)
    bytes_per_step: int = 0
    tensors: int = 0
    measured_s: float | None = None
    measured_bytes: int | None = None
    achieved_bytes_per_s: float | None = None
    modeled_s: Mapping[str, float] = meta(factory=dict)  # link model key -> seconds per step
    largest_tensors: tuple[LinkTensor, ...] = ()


@dataclass(frozen=True)
class VariablePulls(Record):
    """Variable reads that cross to accelerators each step."""

    bytes_per_step: int = 0
    tensors: int = 0
    by_accelerator: Mapping[str, int] = meta(factory=dict)
    sources_from: tuple[str, ...] = meta((), key="from")  # the devices the variables live on
    sources: tuple[str, ...] = ()  # the innermost tf.device lines that placed them


@dataclass(frozen=True)
class CollectiveOp(Record):
    """A TF2 all-reduce op: the bytes each replica contributes per step."""

    name: str | None = None
    device: str | None = None
    kernel: str | None = None
    bytes: int | None = None
    group_size: int | None = None
    communication_hint: str | None = None

    @property
    def label(self) -> str:
        """``"NcclAllReduce (nccl)"``: the kernel and its communication hint."""
        label = self.kernel or "?"
        return f"{label} ({self.communication_hint})" if self.communication_hint else label


@dataclass(frozen=True)
class Audit(Record):
    """The placement audit of one variant: where the compute went, who put it there, what crossed."""

    variant: str | None = None
    host: str | None = None
    accelerators: tuple[str, ...] = ()
    kind: str | None = None  # the topology's kind
    total_flops_per_step: int = 0
    host_flops_share: float | None = None
    host_compute_share: float | None = None  # measured, where a trace was analysed
    devices: tuple[AuditDevice, ...] = ()
    host_compute: tuple[HostComputeGroup, ...] = ()
    moved: tuple[MovedOps, ...] = ()
    links: tuple[AuditLink, ...] = ()
    links_measured: bool = False
    variable_pulls: VariablePulls = meta(factory=VariablePulls)
    strategy: Mapping[str, Any] | None = None  # TF2: the placement's strategy document (capture's)
    collectives: tuple[CollectiveOp, ...] = ()
    WHERE = "summary.json: variants[].audit"

    def device(self, name: str | None) -> AuditDevice | None:
        return next((d for d in self.devices if d.device == name), None)

    @property
    def accelerators_used(self) -> list[str]:
        """The accelerator devices the placement put ops on."""
        return [d.device for d in self.devices if d.role == "accelerator" and d.ops > 0]

    @property
    def strategy_name(self) -> str | None:
        """The ``tf.distribute`` strategy's class name (TF2), else None."""
        return (self.strategy or {}).get("strategy")

    @property
    def cross_device_ops(self) -> str | None:
        """The strategy's cross-device ops class (``"NcclAllReduce"``, ...), else None."""
        return (self.strategy or {}).get("cross_device_ops")

    @property
    def replicas(self) -> int:
        """The strategy's replicas (1 without a strategy)."""
        return int((self.strategy or {}).get("replicas") or 1)
