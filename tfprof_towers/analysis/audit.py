"""Placement audit of one variant: where the compute went, who put it there, what crossed the bus.

Input: a variant's record (its ``placement`` section, see
:mod:`tfprof_towers.capture.placement`), the run's topology, and optionally the
variant's measured trace breakdown (``summary.json`` -> ``variants[].breakdown``,
see :func:`tfprof_towers.analysis.pipeline.analyze_variant`).  Output: an
:class:`~tfprof_towers.rundir.placement_audit.Audit` (:func:`audit_variant`) that the advice rules
and the report read.  Its ``links`` hold
measured times where the trace has device copies (GPU runs) and, always, clearly labelled
*modeled* times at the links of the projection's hardware profile
(:func:`link_models_from_profile`; the :data:`LINK_MODELS` bandwidths for a run without a
projection), listed once per summary (``summary.json`` -> ``link_models``: :class:`LinkModel`), not per audit.

No TensorFlow, no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from tfprof_towers.rundir.placement_audit import (
    Audit,
    AuditDevice,
    AuditLink,
    CollectiveOp,
    HostComputeGroup,
    LinkModel,
    LinkTensor,
    MovedOps,
    VariablePulls,
)
from tfprof_towers.rundir.placement_doc import PlacedDevice, PlacedNode, Placement
from tfprof_towers.rundir.records import Topology, VariantRecord
from tfprof_towers.rundir.trace_doc import TraceDoc
from tfprof_towers.vocab.categories import COMPUTE_CATEGORIES
from tfprof_towers.vocab.device_names import HOST_THREADS, device_role, device_sort_key, link_kind

#: Partition-graph plumbing that is not the user's computation (as in capture.placement).
PLUMBING_OPS = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval", "NoOp"})

#: Op types that are heavy compute even where their FLOPs could not be estimated.
HEAVY_TYPES = frozenset({
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D", "Conv2DBackpropInput",
    "Conv2DBackpropFilter", "Conv3D", "DepthwiseConv2dNative", "Einsum",
})

#: Op types whose output is a variable's value: an edge they produce is a variable pull.
VARIABLE_READ_TYPES = frozenset({"ReadVariableOp", "VariableV2", "VarHandleOp", "_ReadVariablesOp"})

VARIABLE_HANDLE_TYPES = frozenset({"VarHandleOp", "VariableV2", "Variable"})

NO_SCOPE_SOURCE = "no tf.device scope (placed by TensorFlow's placer: colocation or default)"
MAX_MOVED_EXAMPLES = 3
MAX_LINK_TENSORS = 5


_PCIE3_SOURCE = (
    "PCIe 3.0 signals 8 GT/s per lane with 128b/130b encoding: 0.985 GB/s per lane and direction, "
    "15.75 GB/s raw for x16 and 7.88 GB/s for x8 (PCI-SIG, PCI Express Base Specification 3.0). "
    "After packet overhead a pinned-memory cudaMemcpy typically reaches about 12 GB/s on x16 and "
    "6 GB/s on x8 (NVIDIA CUDA samples, bandwidthTest); these effective rates are used."
)

LINK_MODELS: tuple[LinkModel, ...] = (
    LinkModel("pcie3_x16", "PCIe 3.0 x16", 12.0e9, _PCIE3_SOURCE),
    LinkModel("pcie3_x8", "PCIe 3.0 x8", 6.0e9, _PCIE3_SOURCE),
)


def link_model(key: str) -> LinkModel:
    """The link model named ``key`` (e.g. ``"pcie3_x16"``)."""
    found = next((m for m in LINK_MODELS if m.key == key), None)
    if found is None:
        raise KeyError(f"unknown link model {key!r}; known: {', '.join(m.key for m in LINK_MODELS)}")
    return found


def link_models_from_profile(profile: Mapping[str, Any]) -> tuple[LinkModel, ...]:
    """The links of a projection's hardware profile (``hardware.Hardware.summary()``): its
    host<->accelerator link for host<->device copies and its peer link for device<->device ones.
    Raises ``KeyError``/``TypeError``/``ValueError`` on a profile of the wrong shape."""
    hw = str(profile["name"])
    out = []
    links = [("host_link", ("host_to_device", "device_to_host")), ("peer", ("device_to_device",))]
    if profile.get("network"):  # a multi-host profile: each host's network card, for links between tasks
        links.append(("network", ("network",)))
    for key, kinds in links:
        link = profile[key]
        bw, eff = float(link["bandwidth_gbs"]), float(link["efficiency"])
        source = (f"hardware profile {hw} (the projection's): {bw:g} GB/s nominal x {eff:g} efficiency. "
                  f"{link.get('source') or ''}").strip()
        out.append(LinkModel(key, f"{link['name']} ({hw})", bw * 1e9 * eff, source, kinds))
    return tuple(out)


def top_scope(op_name: str) -> str:
    """The op's top-level name scope: ``"tower_0/block1/MatMul"`` -> ``"tower_0"``; ``"x"`` -> ``"x"``."""
    return op_name.split("/", 1)[0]


def short_source(label: str) -> str:
    """``"/a/b/train.py:57"`` -> ``"train.py:57"`` (for tight table cells)."""
    path, _, line = label.rpartition(":")
    return f"{PurePath(path).name}:{line}" if path else label


def _user_nodes(nodes: Iterable[PlacedNode]) -> list[PlacedNode]:
    return [n for n in nodes if n.kernel not in PLUMBING_OPS]


def is_heavy(node: PlacedNode) -> bool:
    return int(node.flops or 0) > 0 or bool({node.type, node.kernel} & HEAVY_TYPES)


def op_label(node: PlacedNode) -> str:
    """The op type, plus the executed kernel where Grappler fused or rewrote it.

    ``Sigmoid`` executed as ``_FusedMatMul`` -> ``"Sigmoid [_FusedMatMul]"``.
    """
    kind, kernel = node.type or "?", node.kernel or ""
    return kind if kernel in ("", kind, f"_Mkl{kind}") else f"{kind} [{kernel}]"


def device_table(
    placement: Placement,
    topology: Mapping[str, Any] | None,
    compute_s: Mapping[str, float] | None = None,
) -> list[AuditDevice]:
    """Per device: role, ops, FLOPs per step and their share; measured compute time and share."""
    devices = placement.devices
    compute_s = dict(compute_s or {})
    names = sorted(set(devices) | set(compute_s), key=device_sort_key)
    total_flops = sum(int(d.flops_per_step or 0) for d in devices.values())
    total_compute = sum(compute_s.values())
    rows = []
    for name in names:
        d = devices.get(name, PlacedDevice())
        flops = int(d.flops_per_step or 0)
        c = compute_s.get(name)
        if name not in devices and not c:
            continue  # a trace-only row (e.g. host threads) with no compute: nothing to audit
        rows.append(AuditDevice(
            device=name,
            role=device_role(name, topology),
            ops=int(d.ops or 0),
            flops_per_step=flops,
            flops_share=flops / total_flops if total_flops else None,
            compute_s=c,
            compute_share=(c / total_compute) if (c is not None and total_compute > 0) else None,
        ))
    return rows


def host_compute_groups(
    nodes: Sequence[PlacedNode], topology: Mapping[str, Any] | None, total_flops: int
) -> list[HostComputeGroup]:
    """Heavy ops on the host, grouped by (top-level scope, innermost ``tf.device`` line), largest first."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for n in _user_nodes(nodes):
        if device_role(n.device, topology) != "host" or not is_heavy(n):
            continue
        chain = [s.label for s in n.sources]
        key = (top_scope(n.name), chain[0] if chain else NO_SCOPE_SOURCE)
        g = groups.setdefault(key, {
            "scope": key[0], "device": n.device, "ops": 0, "flops_per_step": 0,
            "op_types": defaultdict(int), "sources": [], "source_devices": [], "examples": [],
        })
        g["ops"] += 1
        g["flops_per_step"] += int(n.flops or 0)
        g["op_types"][op_label(n)] += 1
        for label, s in zip(chain, n.sources):
            if label not in g["sources"]:
                g["sources"].append(label)
                g["source_devices"].append(str(s.device))
        if len(g["examples"]) < MAX_MOVED_EXAMPLES:
            g["examples"].append(n.name)
    out = [HostComputeGroup(
        scope=g["scope"], device=g["device"], ops=g["ops"], flops_per_step=g["flops_per_step"],
        op_types=dict(sorted(g["op_types"].items())), sources=tuple(g["sources"]),
        source_devices=tuple(g["source_devices"]), examples=tuple(g["examples"]),
        flops_share=g["flops_per_step"] / total_flops if total_flops else None,
    ) for g in groups.values()]
    return sorted(out, key=lambda g: (-g.flops_per_step, -g.ops, g.scope))


def moved_ops(nodes: Sequence[PlacedNode]) -> list[MovedOps]:
    """Ops whose assigned device differs from the fully named device the graph requested."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for n in _user_nodes(nodes):
        req, got = n.requested or "", n.device or ""
        if not req.startswith("/device:") or req == got:
            continue
        key = (n.type or "?", req, got)
        g = groups.setdefault(key, {"count": 0, "examples": [], "sources": []})
        g["count"] += 1
        if len(g["examples"]) < MAX_MOVED_EXAMPLES:
            g["examples"].append(n.name)
        for s in n.sources[:1]:
            if s.label not in g["sources"]:
                g["sources"].append(s.label)
    out = [MovedOps(kind, req, got, g["count"], tuple(g["examples"]), tuple(g["sources"]))
           for (kind, req, got), g in groups.items()]
    return sorted(out, key=lambda g: (-g.count, g.type, g.requested))


def link_table(
    placement: Placement,
    topology: Mapping[str, Any] | None,
    measured: Mapping[tuple[str, str], MeasuredLink] | None = None,
    models: Sequence[LinkModel] = LINK_MODELS,
) -> list[AuditLink]:
    """Bytes and tensors per step by link; measured time where the trace has it; modeled times always.

    ``measured`` maps (src, dst) to what device copy events measured per step (GPU runs).
    """
    measured = dict(measured or {})
    by_link: dict[tuple[str, str], list[LinkTensor]] = defaultdict(list)
    for e in placement.edges or ():
        by_link[(e.src, e.dst)].append(LinkTensor(e.tensor, int(e.bytes or 0), e.producer_type))
    by_member: dict[str, list[LinkTensor]] = defaultdict(list)  # collective ops by device
    for c in placement.collectives:
        tensor = LinkTensor(c.tensor or str(c.name), int(c.bytes or 0), c.kernel or "")
        by_member[str(c.device)].append(tensor)
    rows = []
    for t in placement.transfers:
        key = (t.src, t.dst)
        via = t.kind or "send_recv"  # "collective": all-reduce traffic (TF2 placements)
        nbytes = int(t.bytes_per_step or 0)
        m = measured.get(key)
        m_s = m.s if m and m.s else None
        m_bytes = m.bytes if m else None
        kind = link_kind(*key, topology)
        crosses_bus = kind != "other"
        # a link between tasks is modeled only at a network card's rate, never at a bus's
        applicable = [md for md in models if kind in md.kinds or (not md.kinds and kind != "network")]
        members = by_member.get(key[0], ()) if via == "collective" else by_link.get(key, ())
        biggest = sorted(members, key=lambda e: (-e.bytes, e.tensor))
        rows.append(AuditLink(
            src=key[0], dst=key[1], kind=kind, via=via,
            bytes_per_step=nbytes, tensors=int(t.tensors or 0),
            measured_s=m_s,
            measured_bytes=m_bytes,
            achieved_bytes_per_s=(m_bytes or nbytes) / m_s if m_s else None,
            modeled_s={md.key: nbytes / md.bytes_per_s for md in applicable} if crosses_bus else {},
            largest_tensors=tuple(biggest[:MAX_LINK_TENSORS]),
        ))
    return rows


def variable_pulls(placement: Placement, topology: Mapping[str, Any] | None) -> VariablePulls:
    """Variable reads that cross to accelerators each step: bytes, which accelerators pull them,
    and the ``tf.device`` lines (innermost) that placed the pulled variables."""
    by_dst: dict[str, int] = defaultdict(int)
    srcs: set[str] = set()
    tensors = 0
    for e in placement.edges or ():
        if e.producer_type not in VARIABLE_READ_TYPES or device_role(e.dst, topology) != "accelerator":
            continue
        by_dst[e.dst] += int(e.bytes or 0)
        srcs.add(e.src)
        tensors += 1
    return VariablePulls(
        bytes_per_step=sum(by_dst.values()),
        tensors=tensors,
        by_accelerator=dict(sorted(by_dst.items())),
        sources_from=tuple(sorted(srcs)),
        sources=tuple(variable_source_lines(placement.nodes, srcs)),
    )


def variable_source_lines(nodes: Iterable[PlacedNode], devices: Iterable[str]) -> list[str]:
    """Innermost ``tf.device`` lines of the variable handles on ``devices``, in graph order."""
    devices = set(devices)
    out: list[str] = []
    for n in nodes:
        if n.type not in VARIABLE_HANDLE_TYPES or n.device not in devices or not n.sources:
            continue
        if n.sources[0].label not in out:
            out.append(n.sources[0].label)
    return out


def audit_variant(
    record: VariantRecord,
    topology: Topology | None,
    breakdown: TraceDoc | None = None,
    models: Sequence[LinkModel] = LINK_MODELS,
) -> Audit | None:
    """The placement audit of one variant (the run's topology, else its record's); None without placement
    data."""
    placement = record.placed
    if placement is None:
        return None
    topology = topology or record.topology or Topology(None, None)
    roles = topology.roles
    compute_s = compute_per_device(breakdown)
    devices = device_table(placement, roles, compute_s)
    total_flops = sum(d.flops_per_step for d in devices)
    host_rows = [d for d in devices if d.role == "host"]
    links_measured = measured_links(breakdown, topology.host)
    groups = host_compute_groups(placement.nodes, roles, total_flops)
    return Audit(
        variant=record.name,
        host=topology.host,
        accelerators=topology.accelerators,
        kind=topology.kind,
        total_flops_per_step=total_flops,
        host_flops_share=_role_share([d.flops_share for d in host_rows], 0.0) if total_flops else None,
        host_compute_share=_role_share([d.compute_share for d in host_rows], None),
        devices=tuple(devices),
        host_compute=tuple(groups) if topology.accelerators else (),
        moved=tuple(moved_ops(placement.nodes)),
        links=tuple(link_table(placement, roles, links_measured, models)),
        links_measured=bool(links_measured),
        variable_pulls=variable_pulls(placement, roles),
        strategy=placement.strategy,  # TF2: the tf.distribute strategy and its cross-device ops
        collectives=tuple(  # TF2: all-reduce ops, the bytes each replica contributes per step
            CollectiveOp(c.name, c.device, c.kernel, c.bytes, c.group_size, c.communication_hint)
            for c in placement.collectives
        ),
    )


def _role_share(values: Sequence[float | None], none: float | None) -> float | None:
    """The sum of ``values`` that are known; ``none`` when none is (e.g. no trace analysed)."""
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else none
def compute_per_device(breakdown: TraceDoc | None) -> dict[str, float]:
    """Measured compute seconds per step per device, from a variant's trace breakdown (per step: each
    device's inclusive totals of the compute categories)."""
    if breakdown is None:
        return {}
    out = {}
    for name, dev in breakdown.devices.items():
        seconds = [float(dev.total_of(c).seconds or 0.0) for c in COMPUTE_CATEGORIES]
        if any(c in dev.total for c in COMPUTE_CATEGORIES):
            out[name] = sum(seconds)
    return out


@dataclass(frozen=True)
class MeasuredLink:
    """What device copy events measured on one link, per step."""

    s: float = 0.0
    bytes: int = 0
    count: int = 0


def measured_links(
    breakdown: TraceDoc | None, host: str | None = None
) -> dict[tuple[str, str], MeasuredLink]:
    """(src, dst) -> what was measured per step, from a trace breakdown.

    Only links with a measured time (device copy events) count; the trace names the host
    side of a copy ``/host:CPU``, which is the topology's ``host`` device here.
    """
    if breakdown is None:
        return {}
    host = host or HOST_THREADS
    out: dict[tuple[str, str], MeasuredLink] = {}
    for link in breakdown.links:
        if not link.measured or link.seconds is None:
            continue
        key = tuple(host if d == HOST_THREADS else d for d in (link.src, link.dst))
        m = out.get(key, MeasuredLink())
        out[key] = MeasuredLink(m.s + float(link.seconds), m.bytes + int(link.bytes or 0),
                                m.count + int(link.count or 0))
    return out
