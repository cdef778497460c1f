"""Build TensorFlow-style XSpace traces in code: the generic builder of
:mod:`tfprof_towers.testing.build`, and the ``memcpy_details`` stat text TensorFlow writes."""

from __future__ import annotations

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
    "LineBuilder",
    "PlaneBuilder",
    "Ref",
    "TraceBuilder",
    "copy_heavy_trace",
    "memcpy_details",
]


def memcpy_details(
    size: int, dest: int, kind_src: str | None = None, kind_dst: str | None = None, asynchronous: bool = True
) -> str:
    """The ``memcpy_details`` stat string: the current form when kinds are given, else the older one."""
    tail = f"size:{size} dest:{dest} async:{int(asynchronous)}"
    return f"kind_src:{kind_src} kind_dst:{kind_dst} {tail}" if kind_src is not None else tail


def copy_heavy_trace(
    n_events: int = 1_000_000, gpus: int = 4, steps: int = 20, seed: int = 0
) -> TraceBuilder:
    """A GPU-shaped trace of about ``n_events`` events, a quarter of them ``MemcpyH2D``/``MemcpyD2H``
    copies of varied sizes (so nearly every ``memcpy_details`` text is distinct), built with
    :meth:`~tfprof_towers.testing.build.PlaneBuilder.bulk_line` (seconds for millions of events).

    Per GPU and unit of 10 us: one kernel on the compute stream, one copy on a copy stream
    (H2D and D2H in turn; every eighth in the older ``memcpy_details`` form), and their host
    launches (``cudaLaunchKernel``, ``cudaMemcpyAsync`` with the same ``correlation_id``) on
    that GPU's host thread, one kernel in eleven launched late; plus ``train`` step markers,
    a few TF ops on an executor thread and a derived ``TensorFlow Ops`` line per GPU.
    Deterministic for a seed.
    """
    from tfprof_towers.testing.encode import BulkStat, decimal
    from tfprof_towers.xplane.ragged import Ragged, concat_rows

    rng = np.random.default_rng(seed)
    us = 1_000_000  # ps
    units = max(16, int((n_events - steps) / (gpus * (4 + 1 / 16) + 1 / 8)))
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    step_len = units * 10 * us // steps
    s = np.arange(steps)
    marks = {"step_num": BulkStat("int", s), "_r": BulkStat("int", np.ones(steps, np.int64))}
    host.bulk_line("python", 1, 0, ["train"], s * 0, s * step_len, s * 0 + step_len - 1000, marks)
    ops = [f"layer_{k}/mm:MatMul" for k in range(60)]
    k = np.arange(units // 8)
    host.bulk_line("tf_Compute/1", 2, 0, ops, k % 60, k * 80 * us, k * 0 + 3 * us)
    kernels = [f"volta_sgemm_128x64_nn_{i}" for i in range(12)]
    j = np.arange(units)
    t = j * 10 * us
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
        dev.bulk_line("Stream #13(Compute)", 13, 0, kernels, j % 12, k_start, k_dur, kernel_stats)
        c_start = t + us // 2 + rng.integers(0, us, units)
        c_dur = rng.integers(us, 8 * us, units)
        size = rng.integers(1, 1 << 26, units)
        tail = Ragged.repeat(f" dest:{g} async:1".encode(), units)
        details = concat_rows(head, Ragged.repeat(b"size:", units), decimal(size), tail)
        copy_stats = {"correlation_id": BulkStat("int", corr + 1), "memcpy_details": BulkStat("str", details)}
        copies = ["MemcpyH2D", "MemcpyD2H"]
        dev.bulk_line("Stream #14(Memcpy)", 14, 0, copies, d2h, c_start, c_dur, copy_stats)
        order = np.argsort(np.concatenate([launch, c_start - 2 * us // 5]), kind="stable")
        names = np.repeat([0, 1], units)[order]
        starts = np.concatenate([launch, c_start - 2 * us // 5])[order]
        ids = {"correlation_id": BulkStat("int", np.concatenate([corr, corr + 1])[order])}
        api = ["cudaLaunchKernel", "cudaMemcpyAsync"]
        host.bulk_line(f"tf_gpu_private_{g}", 100 + g, 0, api, names, starts, starts * 0 + us // 4, ids)
        d = j[::16]
        derived = DERIVED_LINE_IDS["TensorFlow Ops"]
        dev.bulk_line("TensorFlow Ops", derived, 0, ops, d % 60, k_start[d], k_dur[d])
    return b
