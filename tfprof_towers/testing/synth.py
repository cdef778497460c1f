"""Build TensorFlow-style XSpace traces in code: the generic builder of
:mod:`tfprof_towers.testing.build`, and the ``memcpy_details`` stat text TensorFlow writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof_towers.testing.build import (
    DERIVED_LINE_ID,
    DERIVED_LINE_IDS,
    LineBuilder,
    PlaneBuilder,
    Ref,
    TraceBuilder,
)

__all__ = [
    "DERIVED_LINE_ID",
    "DERIVED_LINE_IDS",
    "TPU_OPS",
    "Alloc",
    "LineBuilder",
    "PlaneBuilder",
    "Ref",
    "TraceBuilder",
    "allocator_events",
    "copy_heavy_trace",
    "group_steps",
    "memcpy_details",
    "pod_host_trace",
    "pod_host_windows",
    "tpu_trace",
]


def memcpy_details(
    size: int, dest: int, kind_src: str | None = None, kind_dst: str | None = None, asynchronous: bool = True
) -> str:
    """The ``memcpy_details`` stat string: the current form when kinds are given, else the older one."""
    tail = f"size:{size} dest:{dest} async:{int(asynchronous)}"
    return f"kind_src:{kind_src} kind_dst:{kind_dst} {tail}" if kind_src is not None else tail


def group_steps(
    b: TraceBuilder,
    windows: Sequence[tuple[int, int, int]],
    per_plane: Mapping[str, Sequence[tuple[int, int, int]]] | None = None,
) -> TraceBuilder:
    """Make a built trace readable by XProf's overview page, as the TensorFlow profiler's grouping
    leaves a real one: on every device plane, each event of a stream line that starts in a step
    window (``(step, start_ps, end_ps)``; ``per_plane`` gives a plane windows of its own) gets a
    ``group_id`` (the step) and, when it has none, a ``correlation_id``; and the plane gets a
    derived ``Steps`` line of its windows, each event with ``group_id`` and ``step_name`` (an
    existing ``Steps`` line only gets the stats).  XProf builds GPU steps from exactly these: a
    device event counts only with both ids, and a step's markers are the ``Steps`` lines'
    events (``xprof/convert/xplane_to_step_events.cc``).  Lines written with ``bulk_line`` are
    left as they are.
    """
    derived = set(DERIVED_LINE_IDS.values())
    corr = 1 << 40  # far from any correlation id a builder gave
    for pb in b._planes:
        plane = pb.proto
        if not plane.name.startswith("/device:"):
            continue
        wins = list((per_plane or {}).get(plane.name, windows))
        steps_line = None
        for line in plane.lines:
            if line.id in derived:
                if line.name == "Steps":
                    steps_line = line
                continue
            for ev in line.events:
                at = line.timestamp_ns * 1000 + ev.offset_ps
                step = next((n for n, a, e in wins if a <= at < e), None)
                if step is None:
                    continue
                names = {pb.stat_metadata_id("group_id"), pb.stat_metadata_id("correlation_id")}
                have = {st.metadata_id for st in ev.stats if st.metadata_id in names}
                ev.stats.add(metadata_id=pb.stat_metadata_id("group_id"), int64_value=step)
                if pb.stat_metadata_id("correlation_id") not in have:
                    corr += 1
                    ev.stats.add(metadata_id=pb.stat_metadata_id("correlation_id"), int64_value=corr)
        if steps_line is None:
            made = pb.line("Steps")
            for n, a, e in wins:
                made.event(str(n), a, e - a)
            steps_line = made.proto
        md = plane.event_metadata
        for ev in steps_line.events:
            n = int(md[ev.metadata_id].name)
            ev.stats.add(metadata_id=pb.stat_metadata_id("group_id"), int64_value=n)
            ev.stats.add(metadata_id=pb.stat_metadata_id("step_name"), str_value=str(n))
    return b


def copy_heavy_units(n_events: int, gpus: int, steps: int) -> int:
    """The units of :func:`copy_heavy_trace` (per GPU: one kernel, one copy and their launches each)."""
    return max(16, int((n_events - steps) / (gpus * (4 + 1 / 16) + 1 / 8)))


def copy_heavy_trace(
    n_events: int = 1_000_000, gpus: int = 4, steps: int = 20, seed: int = 0, groups: bool = False,
    t0_ns: int = 0, hostname: str = "testhost", period_ps: int = 10_000_000,
) -> TraceBuilder:
    """A GPU-shaped trace of about ``n_events`` events, a quarter of them ``MemcpyH2D``/``MemcpyD2H``
    copies of varied sizes (so nearly every ``memcpy_details`` text is distinct), built with
    :meth:`~tfprof_towers.testing.build.PlaneBuilder.bulk_line` (seconds for millions of events).

    Per GPU and unit of 10 us: one kernel on the compute stream, one copy on a copy stream
    (H2D and D2H in turn; every eighth in the older ``memcpy_details`` form), and their host
    launches (``cudaLaunchKernel``, ``cudaMemcpyAsync`` with the same ``correlation_id``) on
    that GPU's host thread, one kernel in eleven launched late; plus ``train`` step markers,
    a few TF ops on an executor thread and a derived ``TensorFlow Ops`` line per GPU.
    Deterministic for a seed.  ``groups``: readable by XProf as well (:func:`group_steps`: the
    GPUs' events carry a ``group_id``, and each GPU a ``Steps`` line of the markers' windows).
    ``t0_ns``: every line's timestamp (epoch ns; times count from it); ``hostname``: the XSpace's;
    ``period_ps``: the unit's length (10 us; longer spreads the same events over longer steps).
    """
    from tfprof_towers.testing.encode import BulkStat, decimal
    from tfprof_towers.xplane.ragged import Ragged, concat_rows

    rng = np.random.default_rng(seed)
    us = 1_000_000  # ps
    units = copy_heavy_units(n_events, gpus, steps)
    b = TraceBuilder(hostname)
    host = b.plane("/host:CPU")
    step_len = units * period_ps // steps
    s = np.arange(steps)
    marks = {"step_num": BulkStat("int", s), "_r": BulkStat("int", np.ones(steps, np.int64))}
    _bulk(host, t0_ns, "python", 1, ["train"], s * 0, s * step_len, s * 0 + step_len - 1000, marks)
    ops = [f"layer_{k}/mm:MatMul" for k in range(60)]
    k = np.arange(units // 8)
    _bulk(host, t0_ns, "tf_Compute/1", 2, ops, k % 60, k * 8 * period_ps, k * 0 + 3 * us)
    kernels = [f"volta_sgemm_128x64_nn_{i}" for i in range(12)]
    j = np.arange(units)
    t = j * period_ps
    k_start = t + 3 * us + (j % 7) * us // 10
    k_dur = 2 * us + (j % 5) * 9 * us // 10
    h2d = j % 2 == 0
    d2h = (~h2d).astype(np.int64)
    kinds = {True: b"kind_src:pinned kind_dst:device ", False: b"kind_src:device kind_dst:pageable "}
    head = Ragged.of([kinds[h] if j % 8 != 7 else b"" for j, h in enumerate(h2d.tolist())])
    late = j % 11 == 5  # launched 0.3 us before its kernel starts: after the previous one ended
    launch = k_start - np.where(late, 3 * us // 10, 5 * us // 2)
    for g in range(gpus):
        dev = b.plane(f"/device:GPU:{g}")
        corr = g * 10**8 + 2 * j
        kernel_stats = {"correlation_id": BulkStat("int", corr), "tf_op": BulkStat("ref", j % 60, tuple(ops))}
        _bulk(dev, t0_ns, "Stream #13(Compute)", 13, kernels, j % 12, k_start, k_dur, kernel_stats)
        c_start = t + us // 2 + rng.integers(0, us, units)
        c_dur = rng.integers(us, 8 * us, units)
        size = rng.integers(1, 1 << 26, units)
        tail = Ragged.repeat(f" dest:{g} async:1".encode(), units)
        details = concat_rows(head, Ragged.repeat(b"size:", units), decimal(size), tail)
        copy_stats = {"correlation_id": BulkStat("int", corr + 1), "memcpy_details": BulkStat("str", details)}
        if groups:  # each event's step: the marker window holding its start (-1: none; no stat)
            kernel_stats["group_id"] = _group_of(k_start, step_len, steps)
            copy_stats["group_id"] = _group_of(c_start, step_len, steps)
        copies = ["MemcpyH2D", "MemcpyD2H"]
        _bulk(dev, t0_ns, "Stream #14(Memcpy)", 14, copies, d2h, c_start, c_dur, copy_stats)
        order = np.argsort(np.concatenate([launch, c_start - 2 * us // 5]), kind="stable")
        names = np.repeat([0, 1], units)[order]
        starts = np.concatenate([launch, c_start - 2 * us // 5])[order]
        ids = {"correlation_id": BulkStat("int", np.concatenate([corr, corr + 1])[order])}
        api = ["cudaLaunchKernel", "cudaMemcpyAsync"]
        _bulk(host, t0_ns, f"tf_gpu_private_{g}", 100 + g, api, names, starts, starts * 0 + us // 4, ids)
        d = j[::16]
        derived = DERIVED_LINE_IDS["TensorFlow Ops"]
        _bulk(dev, t0_ns, "TensorFlow Ops", derived, ops, d % 60, k_start[d], k_dur[d])
        if groups:
            names = [str(x) for x in s.tolist()]
            texts = Ragged.of([n.encode() for n in names])
            ids = {"group_id": BulkStat("int", s), "step_name": BulkStat("str", texts)}
            line_id = DERIVED_LINE_IDS["Steps"]
            _bulk(dev, t0_ns, "Steps", line_id, names, s, s * step_len, s * 0 + step_len - 1000, ids)
    return b


#: The kernel name of :func:`pod_host_trace`'s all-reduce (NCCL's, so ``collective``) and of a slow host's
#: extra compute per step.
ALL_REDUCE_KERNEL = "ncclAllReduceRingLLKernel_sum_f32"
SLOW_KERNEL = "volta_sgemm_128x128_nn_slow"
POD_T0_NS = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z: the hosts' shared epoch clock


def pod_host_windows(n_events: int, gpus: int = 4, steps: int = 10, step_ps: int = 100 * 10**9
                     ) -> tuple[int, int]:
    """``(period_ps, step_len_ps)`` of :func:`pod_host_trace`: the unit of :func:`copy_heavy_trace`
    stretched (never below 10 us) so that a step lasts about ``step_ps``, and the steps' length."""
    units = copy_heavy_units(n_events, gpus, steps)
    period = max(10_000_000, step_ps * steps // units)
    return period, units * period // steps


def pod_host_trace(
    host: int, n_events: int, gpus: int = 4, steps: int = 10, seed: int = 0, slow_ps: int = 0,
    t0_ns: int = POD_T0_NS, step_ps: int = 100 * 10**9, collective_share: float = 0.3,
) -> TraceBuilder:
    """One host (``host<host>``) of a synchronous data-parallel job: :func:`copy_heavy_trace` (``steps``
    steps of about ``step_ps``, its seed ``seed`` and ``host``), every line on the shared clock ``t0_ns``,
    plus per GPU and step an NCCL all-reduce kernel (:data:`ALL_REDUCE_KERNEL`, on ``Stream #20(nccl)``)
    that ends with the step, 1 ns before its ``train`` marker does, on every host alike.  A fast host's
    lasts ``collective_share`` of the step (it waits there for the slowest); a slow host (``slow_ps`` >
    0) computes ``slow_ps`` longer (a :data:`SLOW_KERNEL` on ``Stream #15(Compute)`` just before its
    all-reduce), so arrives ``slow_ps`` later and its all-reduce is that much shorter.  Adds ``gpus x
    steps`` events (twice that on a slow host) to about ``n_events``."""
    from tfprof_towers.testing.encode import BulkStat

    period, step_len = pod_host_windows(n_events, gpus, steps, step_ps)
    coll = int(step_len * collective_share)
    if not 0 <= slow_ps < coll:
        raise ValueError(f"slow_ps {slow_ps} must be in [0, the all-reduce's {coll} ps)")
    b = copy_heavy_trace(n_events, gpus, steps, seed + 7919 * host, t0_ns=t0_ns, hostname=f"host{host}",
                         period_ps=period)
    k = np.arange(steps, dtype=np.int64)
    end = k * step_len + step_len - 2000  # the marker ends at step_len - 1000
    arrive = end - coll + slow_ps
    for g, dev in enumerate(p for p in b._planes if p.proto.name.startswith("/device:GPU:")):
        corr = {"correlation_id": BulkStat("int", (1 << 40) + g * 10**6 + k)}
        _bulk(dev, t0_ns, "Stream #20(nccl)", 20, [ALL_REDUCE_KERNEL], k * 0, arrive, end - arrive, corr)
        if slow_ps:
            extra = k * 0 + slow_ps
            _bulk(dev, t0_ns, "Stream #15(Compute)", 15, [SLOW_KERNEL], k * 0, arrive - slow_ps, extra)
    return b


def _bulk(pb: PlaneBuilder, t0_ns: int, name: str, line_id: int, *args: Any) -> None:
    """:meth:`PlaneBuilder.bulk_line` with the line's timestamp ``t0_ns`` and times after it."""
    pb.bulk_line(name, line_id, t0_ns, *args, relative=True)


def _group_of(start: np.ndarray, step_len: int, steps: int):
    """A ``group_id`` stat: per event, the step whose marker window ``[k * step_len, (k + 1) *
    step_len - 1000)`` holds its start (events in none have no stat)."""
    from tfprof_towers.testing.encode import BulkStat

    k = start // step_len
    inside = (k < steps) & (start - k * step_len < step_len - 1000)
    return BulkStat("int", np.where(inside, k, 0), present=inside)


#: One step of :func:`tpu_trace` on one chip: the ``XLA Ops`` line's ops as ``(name, start_us, dur_us)``
#: after the step's start.  ``while.2`` holds ``convolution.3`` and ``fusion.4`` (nested, as a TPU's op
#: line nests a loop's body): the chip is busy 700 us per step (outermost ops: fusion.1 200, while.2 400,
#: all-reduce.5 100), of which 100 us collective; the ops' durations add up to 1,070 us.
TPU_OPS = (("fusion.1", 20, 200), ("while.2", 250, 400), ("convolution.3", 260, 200), ("fusion.4", 470, 170),
           ("all-reduce.5", 700, 100))


def tpu_trace(chips: int = 4, steps: int = 3, step_us: int = 1000, steps_line: bool = True,
              idle_chips: Sequence[int] = (), sparse_core: bool = False) -> TraceBuilder:
    """A JAX-on-TPU-shaped trace: a host plane (``PjitFunction(train_step)`` per step, PJRT execution), and
    per chip ``/device:TPU:<n>`` the lines a TPU plane has: ``XLA Modules`` (one ``jit_train_step(1)`` run
    per step, [10, 910) us), ``XLA Ops`` (:data:`TPU_OPS`, nested), ``Async XLA Ops`` (an all-reduce
    start..done spanning [650, 850)), ``XLA TraceMe`` and, with ``steps_line``, ``Steps`` (one event per
    step named by its number, [0, step_us)).  Chip ``n`` starts each step ``n`` us later.  Events carry
    ``group_id`` (the step) as XProf's TPU step events need.  ``idle_chips``: chips whose plane has only
    an empty ``XLA Ops`` line.  ``sparse_core``: a ``/device:TPU:0 SparseCore 0`` plane with ops (a plane
    of a kind the analysis does not read)."""
    us = 1_000_000
    b = TraceBuilder("tpu-host")
    host = b.plane("/host:CPU")
    py = host.line("python3")
    for k in range(steps):
        py.event("PjitFunction(train_step)", k * step_us * us, 5 * us)
        py.event("PjRtCApiLoadedExecutable::Execute", (k * step_us + 1) * us, 3 * us)
    for n in range(chips):
        plane = b.plane(f"/device:TPU:{n}").stats({"core_count": 1})
        modules, ops = plane.line("XLA Modules", line_id=1), plane.line("XLA Ops", line_id=2)
        asyncs, traceme = plane.line("Async XLA Ops", line_id=3), plane.line("XLA TraceMe", line_id=4)
        marks = plane.line("Steps", line_id=5) if steps_line else None
        if n in idle_chips:
            continue
        for k in range(steps):
            t0 = (k * step_us + n) * us
            g = {"group_id": k}
            modules.event("jit_train_step(1)", t0 + 10 * us, 900 * us, g)
            for name, start, dur in TPU_OPS:
                ops.event(name, t0 + start * us, dur * us, g)
            asyncs.event("all-reduce-start.5", t0 + 650 * us, 200 * us, g)
            traceme.event("MarkerTraceMe", t0 + 10 * us, 1 * us, g)
            if marks is not None:
                marks.event(str(k), t0, step_us * us, {**g, "step_name": str(k)})
    if sparse_core:
        sc = b.plane("/device:TPU:0 SparseCore 0")
        line = sc.line("Sparse Core Ops", line_id=1)
        for k in range(steps):
            line.event("sparse_gather.1", (k * step_us + 100) * us, 50 * us)
    return b


@dataclass(frozen=True)
class Alloc:
    """One allocator event to write: at ``t_ps``, ``nbytes`` at ``addr`` allocated (or freed, ``free``)
    by ``op`` (``""``: no ``tf_op`` stat); ``block``: the chunk the allocator hands out for it (its
    ``allocation_bytes``, counted in use), when larger than ``nbytes`` (the ``requested_bytes``)."""

    t_ps: int
    nbytes: int
    addr: int
    op: str = ""
    free: bool = False
    block: int | None = None


def allocator_events(
    line: LineBuilder, allocator: str, events: Sequence[Alloc], held: int = 0, limit: int | None = None,
    fragmentation: float | None = None,
) -> list[int]:
    """Write ``events`` (in time order) as TensorFlow's BFC allocator does on a host line: each a
    ``MemoryAllocation``/``MemoryDeallocation`` carrying the allocator's state after it.
    ``held``: bytes already in use before the first event (allocated before the trace);
    ``limit``: the allocator's limit (``bytes_available`` = limit - in use; no such stat when None);
    ``fragmentation``: the ``fragmentation`` stat (a double) of every event.  Returns the bytes in
    use after each event."""
    in_use, peak, out = held, held, []
    for e in events:
        size = e.nbytes if e.block is None else e.block
        in_use += -size if e.free else size
        peak = max(peak, in_use)
        stats: dict[str, int | float | str | Ref] = {
            "allocator_name": Ref(allocator), "bytes_reserved": 0, "bytes_allocated": in_use,
            "peak_bytes_in_use": peak, "requested_bytes": e.nbytes, "allocation_bytes": size,
            "addr": e.addr, "data_type": 1,
        }
        if limit is not None:
            stats["bytes_available"] = limit - in_use
        if fragmentation is not None:
            stats["fragmentation"] = fragmentation
        if e.op:
            stats["tf_op"] = e.op
            stats["region_type"] = "output"
            stats["tensor_shape"] = f"[{e.nbytes // 4}]"
        line.event("MemoryDeallocation" if e.free else "MemoryAllocation", e.t_ps, 0, stats)
        out.append(in_use)
    return out
