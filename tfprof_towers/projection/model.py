"""Projection arithmetic: a placed graph's work on a hardware profile, two step-time bounds.

The graph comes from :mod:`.graphcost` as per-op work (FLOPs, bytes, device, dependencies) and
cross-device copies; the profile from :mod:`.hardware`.

* An op takes ``overhead + max(flops / rate, bytes / memory bandwidth)`` on its
  device (roofline).  Views (no FLOPs, no bytes) take nothing.  On an accelerator
  each op class (:data:`.opcost.OP_CLASSES`) has its own terms: ``matmul``
  (MatMul, BatchMatMul, Einsum, Conv2D and its backprops) runs at ``matmul_tflops``
  x ``efficiency`` (a convolution at ``conv_efficiency``); every other op's FLOPs at
  ``fp32_tflops`` x ``efficiency``;
  ``elementwise`` ops move bytes at ``memory_efficiency`` of the bandwidth,
  ``reduction`` ops at ``reduction_efficiency``; a ``small`` op costs
  ``small_op_overhead_us`` where the others cost ``op_overhead_us``; a 3x3 stride-1
  convolution runs ``winograd_speedup`` times faster than its FLOPs (cuDNN's Winograd).  Host rate =
  cores x GHz x FLOPs/cycle of the assumed TensorFlow build x efficiency, for
  every class.
* A copy takes ``latency + bytes / (bandwidth x efficiency)`` on its route:
  host->accelerator ``i`` uses channel ``h2d:i``, the reverse ``d2h:i``; a peer copy
  uses ``peer:i->j`` (NVLink mesh), ``out:i`` + ``in:j`` (NVSwitch), or, staged
  through the host, ``d2h:i`` + ``h2d:j`` at the staged rate.  Each channel moves
  one copy at a time.
* An NCCL all-reduce of ``S`` bytes over ``n`` devices is a ring: ``2(n-1)`` steps
  of ``S/n`` bytes each way: ``2(n-1) x latency + 2(n-1)/n x S / bandwidth``,
  holding every ring channel.
* The step is list-scheduled (each device runs one op at a time, ops start when
  their inputs have arrived, earliest-ready first): ``overlapped`` lets copies run
  on their channels while devices compute; ``serial`` also holds the source and
  destination devices for the whole copy (copies never overlap compute).

The bottleneck is the busiest resource (a device's compute or a link channel).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfprof_towers.projection.hardware import Hardware
from tfprof_towers.vocab.links import Link, ring_seconds


@dataclass(frozen=True)
class OpWork:
    name: str
    type: str
    device: str
    flops: float
    bytes: float
    matmul: bool = False
    deps: tuple[int, ...] = ()
    copies: tuple[int, ...] = ()
    collective: int | None = None
    op_class: str = ""  # "matmul" | "elementwise" | "reduction" | "small" | "view"; "": from ``matmul``
    winograd: bool = False  # a 3x3 stride-1 convolution (the profile's ``winograd_speedup`` applies)

    @property
    def kind(self) -> str:
        """The op's class; a work document without classes: matmul or elementwise."""
        return self.op_class or ("matmul" if self.matmul else "elementwise")


@dataclass(frozen=True)
class CopyWork:
    tensor: str
    src_op: int
    src: str
    dst: str
    bytes: int


@dataclass(frozen=True)
class CollectiveWork:
    name: str
    ops: tuple[int, ...]
    bytes: int


@dataclass(frozen=True)
class GraphWork:
    """One variant's step: every executed op, cross-device copy and collective."""

    variant: str
    host: str
    accelerators: tuple[str, ...]
    ops: tuple[OpWork, ...]
    copies: tuple[CopyWork, ...] = ()
    collectives: tuple[CollectiveWork, ...] = ()

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> GraphWork:
        return cls(
            variant=doc.get("variant", ""),
            host=doc["host"],
            accelerators=tuple(doc["accelerators"]),
            ops=tuple(
                OpWork(o["name"], o["type"], o["device"], float(o["flops"]), float(o["bytes"]),
                       bool(o.get("matmul")), tuple(o.get("deps", ())), tuple(o.get("copies", ())),
                       o.get("collective"), str(o.get("op_class", "")), bool(o.get("winograd")))
                for o in doc["ops"]
            ),
            copies=tuple(CopyWork(c["tensor"], c["src_op"], c["src"], c["dst"], int(c["bytes"]))
                         for c in doc.get("copies", ())),
            collectives=tuple(CollectiveWork(g["name"], tuple(g["ops"]), int(g["bytes"]))
                              for g in doc.get("collectives", ())),
        )


@dataclass(frozen=True)
class Rates:
    """Effective rates (after efficiencies) the model uses; calibration may replace some."""

    host_flops: float
    host_bytes: float
    host_overhead_s: float
    accel_flops: float
    accel_matmul_flops: float
    accel_bytes: float
    accel_overhead_s: float
    calibrated: tuple[str, ...] = ()
    accel_reduction_bytes: float | None = None  # None: ``accel_bytes``
    accel_small_overhead_s: float | None = None  # None: ``accel_overhead_s``
    accel_winograd: float = 1.0  # speed-up of a 3x3 stride-1 convolution over its FLOPs
    accel_conv_flops: float | None = None  # convolutions' FLOP rate; None: ``accel_matmul_flops``

    @classmethod
    def of(cls, hw: Hardware) -> Rates:
        h, a = hw.host, hw.accelerator
        return cls(
            host_flops=h.peak_flops() * h.efficiency,
            host_bytes=h.memory_bandwidth_gbs * 1e9 * h.memory_efficiency,
            host_overhead_s=h.op_overhead_us * 1e-6,
            accel_flops=a.fp32_tflops * 1e12 * a.efficiency,
            accel_matmul_flops=a.matmul_tflops * 1e12 * a.efficiency,
            accel_bytes=a.memory_bandwidth_gbs * 1e9 * a.memory_efficiency,
            accel_overhead_s=a.op_overhead_us * 1e-6,
            accel_reduction_bytes=a.memory_bandwidth_gbs * 1e9 * a.reduction_fraction,
            accel_small_overhead_s=a.small_op_us * 1e-6,
            accel_winograd=a.winograd,
            accel_conv_flops=a.matmul_tflops * 1e12 * a.conv_fraction,
        )


@dataclass(frozen=True)
class Task:
    """One schedulable piece of the step: an op, a copy or a collective."""

    label: str
    kind: str  # "op" | "copy" | "collective"
    duration: float
    resources: tuple[str, ...]
    serial_resources: tuple[str, ...]
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Schedule:
    step_s: float
    busy_s: dict[str, float] = field(default_factory=dict)
    end_s: tuple[float, ...] = ()


def op_seconds(op: OpWork, role: str, rates: Rates) -> float:
    """Roofline time of one op on its device, with its class's rates on an accelerator; views cost nothing."""
    if op.flops == 0 and op.bytes == 0:
        return 0.0
    if role == "host":
        flops_rate, bytes_rate, overhead = rates.host_flops, rates.host_bytes, rates.host_overhead_s
    else:
        kind = op.kind
        flops_rate = rates.accel_matmul_flops if kind == "matmul" else rates.accel_flops
        if kind == "matmul" and op.type.startswith("Conv") and rates.accel_conv_flops is not None:
            flops_rate = rates.accel_conv_flops
        if kind == "matmul" and op.winograd:
            flops_rate *= rates.accel_winograd
        bytes_rate = rates.accel_bytes
        if kind == "reduction" and rates.accel_reduction_bytes is not None:
            bytes_rate = rates.accel_reduction_bytes
        overhead = rates.accel_overhead_s
        if kind == "small" and rates.accel_small_overhead_s is not None:
            overhead = rates.accel_small_overhead_s
    return overhead + max(op.flops / flops_rate, op.bytes / bytes_rate)


@dataclass(frozen=True)
class Route:
    """How bytes get from one device to another: channels held, and the link's terms."""

    channels: tuple[str, ...]
    link: Link
    label: str

    def seconds(self, nbytes: float) -> float:
        return self.link.latency_us * 1e-6 + nbytes / self.link.bytes_per_s


def route(src: str, dst: str, work: GraphWork, hw: Hardware) -> Route:
    accel = {name: i for i, name in enumerate(work.accelerators)}
    if src == work.host and dst in accel:
        return Route((f"h2d:{accel[dst]}",), hw.host_link, hw.host_link.name)
    if dst == work.host and src in accel:
        return Route((f"d2h:{accel[src]}",), hw.host_link, hw.host_link.name)
    if src in accel and dst in accel:
        i, j = accel[src], accel[dst]
        if hw.peer.kind == "staged":
            return Route((f"d2h:{i}", f"h2d:{j}"), hw.peer.link, hw.peer.link.name)
        if hw.peer.topology == "switch":
            return Route((f"out:{i}", f"in:{j}"), hw.peer.link, hw.peer.link.name)
        return Route((f"peer:{i}->{j}",), hw.peer.link, hw.peer.link.name)
    raise ValueError(f"no route from {src} to {dst}")


def ring_links(devices: Sequence[str]) -> list[tuple[str, str]]:
    n = len(devices)
    return [(devices[k], devices[(k + 1) % n]) for k in range(n)] if n > 1 else []


def build_tasks(work: GraphWork, hw: Hardware, rates: Rates) -> list[Task]:
    """Ops, copies and collectives as tasks with resources and dependencies."""
    n_ops, n_copies = len(work.ops), len(work.copies)
    task_of_collective = [n_ops + n_copies + k for k in range(len(work.collectives))]

    def done(op_index: int) -> int:
        c = work.ops[op_index].collective
        return op_index if c is None else task_of_collective[c]

    tasks: list[Task] = []
    for op in work.ops:
        role = "host" if op.device == work.host else "accelerator"
        dur = 0.0 if op.collective is not None else op_seconds(op, role, rates)
        deps = tuple(sorted({done(d) for d in op.deps} | {n_ops + c for c in op.copies}))
        tasks.append(Task(op.name, "op", dur, (op.device,), (op.device,), deps))
    for c in work.copies:
        r = route(c.src, c.dst, work, hw)
        tasks.append(Task(f"{c.src}->{c.dst}:{c.tensor}", "copy", r.seconds(c.bytes), r.channels,
                          (*r.channels, c.src, c.dst), (done(c.src_op),)))
    for g in work.collectives:
        members = [work.ops[i] for i in g.ops]
        devices = [m.device for m in members]
        channels: list[str] = []
        for a, b in ring_links(devices):
            channels.extend(route(a, b, work, hw).channels)
        link = hw.peer.link
        deps: set[int] = set()
        for m in members:
            deps |= {done(d) for d in m.deps} | {n_ops + c for c in m.copies}
        tasks.append(Task(f"all-reduce:{g.name}", "collective", ring_seconds(g.bytes, len(devices), link),
                          tuple(dict.fromkeys(channels)), (*dict.fromkeys(channels), *devices),
                          tuple(sorted(deps))))
    # member ops complete with their collective
    for i, op in enumerate(work.ops):
        if op.collective is not None:
            t = tasks[i]
            tasks[i] = Task(t.label, t.kind, 0.0, t.resources, t.serial_resources,
                            (task_of_collective[op.collective],))
    return tasks


def simulate(tasks: Sequence[Task], serial: bool) -> Schedule:
    """List-schedule ``tasks``: earliest-ready first (ties: lower index), one task per resource at a time."""
    succ: dict[int, list[int]] = defaultdict(list)
    pending = [len(set(t.deps)) for t in tasks]
    for i, t in enumerate(tasks):
        for d in set(t.deps):
            succ[d].append(i)
    ready_at = [0.0] * len(tasks)
    end = [0.0] * len(tasks)
    free: dict[str, float] = defaultdict(float)
    busy: dict[str, float] = defaultdict(float)
    heap = [(0.0, i) for i, n in enumerate(pending) if n == 0]
    heapq.heapify(heap)
    done = 0
    while heap:
        ready, i = heapq.heappop(heap)
        t = tasks[i]
        held = t.serial_resources if serial else t.resources
        start = max([ready, *(free[r] for r in held)]) if t.duration > 0 else ready
        end[i] = start + t.duration
        if t.duration > 0:
            for r in held:
                free[r] = end[i]
            for r in t.resources:
                busy[r] += t.duration
        done += 1
        for s in succ[i]:
            ready_at[s] = max(ready_at[s], end[i])
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(heap, (ready_at[s], s))
    if done != len(tasks):
        raise ValueError("the graph has a cycle: cannot schedule it")
    return Schedule(max(end, default=0.0), dict(busy), tuple(end))


# --------------------------------------------------------------------------- summaries

def per_device(work: GraphWork, tasks: Sequence[Task]) -> dict[str, dict[str, Any]]:
    def blank(role: str) -> dict[str, Any]:
        return {"role": role, "compute_s": 0.0, "flops": 0.0, "bytes": 0.0, "ops": 0}

    out = {name: blank("host" if name == work.host else "accelerator")
           for name in (work.host, *work.accelerators)}
    for op, t in zip(work.ops, tasks):
        d = out.setdefault(op.device, blank("other"))
        d["compute_s"] += t.duration
        d["flops"] += op.flops
        d["bytes"] += op.bytes
        d["ops"] += 1 if t.duration > 0 else 0
    return out


def per_link(work: GraphWork, hw: Hardware) -> list[dict[str, Any]]:
    """Bytes and seconds per (src, dst) device pair, largest first; all-reduce rings included."""
    links: dict[tuple[str, str], dict[str, Any]] = {}

    def add(src: str, dst: str, nbytes: float, seconds: float, via: str) -> None:
        e = links.setdefault((src, dst), {"src": src, "dst": dst, "bytes_per_step": 0, "tensors": 0,
                                          "seconds": 0.0, "route": via})
        e["bytes_per_step"] += round(nbytes)
        e["tensors"] += 1
        e["seconds"] += seconds

    for c in work.copies:
        r = route(c.src, c.dst, work, hw)
        add(c.src, c.dst, c.bytes, r.seconds(c.bytes), r.label)
    for g in work.collectives:
        devices = [work.ops[i].device for i in g.ops]
        n = len(devices)
        for a, b in ring_links(devices):
            r = route(a, b, work, hw)
            add(a, b, 2 * (n - 1) / n * g.bytes, ring_seconds(g.bytes, n, r.link),
                f"{r.label} (all-reduce ring)")
    return sorted(links.values(), key=lambda e: (-e["bytes_per_step"], e["src"], e["dst"]))


def channel_label(channel: str, work: GraphWork, hw: Hardware) -> str:
    kind, _, rest = channel.partition(":")
    if kind in ("h2d", "d2h"):
        accel = work.accelerators[int(rest)]
        pair = f"{work.host} -> {accel}" if kind == "h2d" else f"{accel} -> {work.host}"
        return f"link {pair} ({hw.host_link.name})"
    if kind == "peer":
        i, j = (int(x) for x in rest.split("->"))
        return f"link {work.accelerators[i]} -> {work.accelerators[j]} ({hw.peer.link.name})"
    side = "out of" if kind == "out" else "into"
    return f"link {side} {work.accelerators[int(rest)]} ({hw.peer.link.name})"


def bottleneck(work: GraphWork, schedule: Schedule, hw: Hardware) -> dict[str, Any]:
    """The busiest resource of the overlapped schedule, with its share of the step."""
    if not schedule.busy_s:
        return {"kind": "none", "resource": "", "busy_s": 0.0, "share": 0.0, "text": "no work"}
    resource, busy = max(sorted(schedule.busy_s.items()), key=lambda kv: kv[1])
    if resource == work.host:
        kind, text = "host compute", f"host compute ({resource})"
    elif resource in work.accelerators:
        kind, text = "accelerator compute", f"accelerator compute ({resource})"
    else:
        kind, text = "link", channel_label(resource, work, hw)
    share = busy / schedule.step_s if schedule.step_s else 0.0
    return {"kind": kind, "resource": resource, "busy_s": busy, "share": share, "text": text}


def project_work(work: GraphWork, hw: Hardware, rates: Rates | None = None) -> dict[str, Any]:
    """One variant's projection: both bounds, bottleneck, per-device work and per-link traffic."""
    rates = rates or Rates.of(hw)
    if len(work.accelerators) != hw.accelerator.count:
        raise ValueError(
            f"graph has {len(work.accelerators)} accelerators, profile {hw.name} has {hw.accelerator.count}"
        )
    tasks = build_tasks(work, hw, rates)
    overlapped = simulate(tasks, serial=False)
    serial = simulate(tasks, serial=True)
    return {
        "name": work.variant,
        "projected_step_s": {"overlapped": overlapped.step_s, "serial": serial.step_s},
        "bottleneck": bottleneck(work, overlapped, hw),
        "per_device": per_device(work, tasks),
        "per_link": per_link(work, hw),
        "busy_s": dict(sorted(overlapped.busy_s.items())),
    }
