"""Each logical device's measured peak on a host allocator that several devices share (:func:`placed_peaks`).

An accelerator's own allocator is already one device's (:mod:`tfprof_towers.trace.memory_peaks`); a
host allocator serves every logical device placed on the host, so its events are split by the device
each event's op was placed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfprof_towers.trace.allocator_events import MemoryEvents
from tfprof_towers.trace.steps import StepTable, assign_steps
from tfprof_towers.vocab.device_names import HOST_THREADS, device_sort_key

#: The BFC allocator's unit: every request is rounded up to a multiple of it.
BFC_UNIT = 256


@dataclass(frozen=True)
class PlacedPeak:
    """One logical device's measured peak on a host allocator several devices share: its allocations
    (by the device each event's op was placed on) summed over the trace, plus what it held before."""

    device: str
    #: held_bytes + the most the trace's requests of its ops held at once (each rounded up to the BFC
    #: allocator's 256 bytes: what the step's tensors need)
    peak_bytes: int
    allocated_bytes: int  # the same with the blocks the allocator handed out (its chunks: XProf's measure)
    held_bytes: int  # given: what the device held when the trace began (its variables, optimizer slots)
    peak_ps: int  # when (the event that reached ``peak_bytes``; 0: no allocation of the device's ops)
    allocations: int  # the allocations attributed to it
    allocators: tuple[str, ...]  # the allocators they came from

    def to_doc(self) -> dict[str, Any]:
        return {"peak_bytes": self.peak_bytes, "allocated_bytes": self.allocated_bytes,
                "held_bytes": self.held_bytes, "in_trace_bytes": self.peak_bytes - self.held_bytes,
                "allocations": self.allocations, "allocators": list(self.allocators)}


#: Where allocations of ops the placement does not name go (a collective's scratch chunks, an
#: iterator's buffers): they belong to no logical device that can be told.
NOT_PLACED = "(ops not placed)"


def op_of(tf_op: str) -> str:
    """The node name of an event's ``tf_op`` (``name`` or ``name:Type``)."""
    return tf_op.split(":", 1)[0]


def _step_top(run: np.ndarray, delta: np.ndarray, step: np.ndarray | None) -> tuple[int, int]:
    """The most a running sum rises within one step over what it held when that step began (the whole
    trace when ``step`` is None or marks none), and the index where it does; (0, -1) when it never rises."""
    if not run.size:
        return 0, -1
    if step is None or not (step >= 0).any():
        at = int(np.argmax(run))
        return max(int(run[at]), 0), at if run[at] > 0 else -1
    best, where = 0, -1
    for k in np.unique(step[step >= 0]).tolist():
        idx = np.flatnonzero(step == k)
        base = int(run[idx[0]] - delta[idx[0]])  # held when the step began
        at = idx[int(np.argmax(run[idx]))]
        if int(run[at]) - base > best:
            best, where = int(run[at]) - base, int(at)
    return best, where


def placed_peaks(ev: MemoryEvents, device_of_op: Mapping[str, str], held: Mapping[str, int],
                 host: str = HOST_THREADS, fallback: str | None = None, steps: StepTable | None = None
                 ) -> tuple[PlacedPeak, ...]:
    """Per logical device, the peak of the host allocators' events attributed to it: an allocation goes
    to the device its op was placed on (``device_of_op``: node name -> device), one naming no op (a fed
    input) to ``fallback`` (default: ``/device:CPU:0``), one naming an op the placement does not know
    (a collective's scratch chunk, an iterator) to :data:`NOT_PLACED`; a free
    to its allocation's device (paired by allocator and address; a free of a block allocated before the
    trace counts nothing).  ``held``: what each device held when the trace began, added to its peak.
    Only the allocators named as the host's (``allocator_device``): an accelerator's own allocator is
    already one device's.  Two measures: the requests (rounded up to :data:`BFC_UNIT`) and the blocks
    handed out (a request served from a larger free chunk the allocator did not split holds all of it).

    With ``steps`` (the step windows), a device's peak is the most its bytes rose within one step over
    what it held when that step began: a variable whose update writes a new buffer (a TF2 optimizer's
    assign) frees its old one, allocated before the trace and so unmatched in it, and a running sum
    over the whole trace would count the new buffer on top of ``held`` for good."""
    rows = np.flatnonzero(ev.device == ev.texts.index(host)) if host in ev.texts else np.zeros(0, np.int64)
    if not rows.size:  # no host allocator: what each device held is all there is
        return tuple(PlacedPeak(d, int(h), int(h), int(h), 0, 0, ()) for d, h in
                     sorted(held.items(), key=lambda x: device_sort_key(x[0])) if h)
    names = list(ev.texts)
    dev_index: dict[str, int] = {}
    spare = fallback or "/device:CPU:0"
    owners = [device_of_op.get(op_of(t), NOT_PLACED) if t else spare for t in names]
    code_dev = np.array([dev_index.setdefault(d, len(dev_index)) for d in owners], dtype=np.int64)
    r_dev = code_dev[ev.tf_op[rows]]
    alloc = ev.allocation[rows]
    # pair each free with the allocation before it at the same (allocator, address)
    order = np.lexsort((np.arange(rows.size), ev.address[rows], ev.allocator[rows]))
    addr, allocator = ev.address[rows][order], ev.allocator[rows][order]
    same = np.r_[False, (addr[1:] == addr[:-1]) & (allocator[1:] == allocator[:-1])]
    prev = np.r_[-1, order[:-1]]
    paired = ~alloc[order] & same & alloc[prev]
    owner = np.full(rows.size, -1, np.int64)
    owner[alloc] = r_dev[alloc]
    owner[order[paired]] = r_dev[prev[paired]]
    source = np.arange(rows.size)
    source[order[paired]] = prev[paired]  # a free's sizes are its allocation's
    sign = np.where(alloc, 1, -1) * (owner >= 0)
    requested = -(-ev.requested[rows][source] // BFC_UNIT) * BFC_UNIT
    deltas = (sign * requested, sign * ev.nbytes[rows][source])
    out = []
    for d in sorted(set(dev_index) | set(held), key=lambda d: (d == NOT_PLACED, device_sort_key(d))):
        mine = np.flatnonzero(owner == dev_index.get(d, -1))
        h = int(held.get(d, 0))
        allocs = int(alloc[mine].sum())
        if not allocs and not h:
            continue
        tops, at = [], 0
        step = assign_steps(ev.start_ps[rows[mine]], steps) if steps is not None and len(steps) else None
        for delta in deltas:
            top, where = _step_top(np.cumsum(delta[mine]), delta[mine], step)
            tops.append(top)
            if not at and where >= 0:
                at = int(ev.start_ps[rows[mine[where]]])
        used = sorted({ev.texts[int(a)] for a in ev.allocator[rows[mine]].tolist()})
        out.append(PlacedPeak(d, h + tops[0], h + tops[1], h, at, allocs, tuple(used)))
    return tuple(out)
