"""Each allocator's memory over a trace, named as its device: peak, when, capacity, what was live at it.

:func:`device_memory` sums up the allocators' events
(:class:`~tfprof_towers.trace.allocator_events.MemoryEvents`) the way XProf's ``memory_profile`` tool does,
so the two agree:

* **in use** at an event: ``bytes_allocated + bytes_reserved`` (XProf's heap + stack);
* **peak**: the largest in use over the whole trace (XProf's ``peakStats.peakBytesInUse``), at
  the last event that reached it; and the largest within the analysed step windows;
* **capacity**: in use + ``bytes_available`` at the peak (XProf's ``memoryCapacity``: the
  allocator's limit, below the GPU's ``memory_size``, which the device plane gives and
  :attr:`DeviceMemory.device_memory_bytes` keeps), else the plane's ``memory_size``;
* **fragmentation**: the allocator's own ``fragmentation`` stat at the peak;
* **live at the peak**: allocations (paired with their free by allocator and address) made
  before the peak and not freed by then, summed per TF op; what the peak holds beyond them
  was allocated before the trace began (variables, optimizer slots, a pre-allocated pool).

A figure that cannot be true (:data:`~tfprof_towers.trace.allocator_events.BAD`) is unknown, never read as
0: an event whose bytes in use cannot be true is left out of the peaks, a capacity or a fragmentation that
cannot be true is None, and :attr:`DeviceMemory.unknown` says which (``analyze`` prints it as a note).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import numpy as np

from tfprof_towers.trace.allocator_events import BAD, MAX_BYTES, MemoryEvents
from tfprof_towers.trace.steps import StepTable
from tfprof_towers.vocab.device_names import device_sort_key

NO_EVENTS_NOTE = "no allocator events in this trace"
EVENTS_NOTE = (
    "from the allocators' MemoryAllocation/MemoryDeallocation events; peak = the most bytes in use; "
    "capacity = in use + available at the peak (the allocator's limit, as XProf's memory profile)"
)
#: The ops listed as live at a peak.
TOP_OPS = 5
#: Points of a timeline, at most (each the largest in use of its stretch of events, as XProf samples).
TIMELINE_POINTS = 400
BEFORE_TRACE = "(allocated before the trace)"
NO_OP = "(no op named)"


@dataclass(frozen=True)
class OpBytes:
    """A TF op's allocations live at a peak: their bytes and how many."""

    op: str
    bytes: int
    count: int


@dataclass(frozen=True)
class DeviceMemory:
    """One allocator's memory over a trace (module docstring), named as its device."""

    device: str
    allocator: str
    peak_bytes: int  # the most in use over the whole trace
    peak_time_s: float  # when (the last event at it), seconds on the trace's clock
    peak_in_steps_bytes: int | None  # the most in use within the analysed step windows; None: no event there
    peak_in_steps_time_s: float | None
    lifetime_peak_bytes: int  # the allocator's own peak_bytes_in_use (since the process began)
    capacity_bytes: int | None  # in use + available at the peak, else the plane's memory_size
    device_memory_bytes: int | None  # the device plane's memory_size
    fragmentation: float | None  # the allocator's fragmentation stat at the peak
    before_trace_bytes: int  # of the peak, what no allocation in the trace accounts for
    top_ops: tuple[OpBytes, ...]  # what was live at the peak, largest first
    events: int
    peak_op: str = ""  # the op whose allocation reached the peak ("" when the peak event names none)
    peak_ps: int = 0  # ``peak_time_s`` in picoseconds (exact, to move it to another clock)
    peak_in_steps_ps: int | None = None
    #: the figures of this allocator that cannot be true, shown as unknown (module docstring)
    unknown: tuple[str, ...] = ()

    def shifted(self, delta_ps: int) -> DeviceMemory:
        """The same figures on a clock ``delta_ps`` later (a host's, put on a multi-host trace's clock)."""
        if not delta_ps:
            return self
        peak = self.peak_ps + delta_ps
        steps = None if self.peak_in_steps_ps is None else self.peak_in_steps_ps + delta_ps
        return replace(self, peak_ps=peak, peak_time_s=float(peak) / 1e12, peak_in_steps_ps=steps,
                       peak_in_steps_time_s=None if steps is None else float(steps) / 1e12)

    def to_doc(self) -> dict[str, Any]:
        return {
            "allocator": self.allocator,
            "peak_bytes": self.peak_bytes,
            "peak_time_s": self.peak_time_s,
            "peak_in_steps_bytes": self.peak_in_steps_bytes,
            "peak_in_steps_time_s": self.peak_in_steps_time_s,
            "lifetime_peak_bytes": self.lifetime_peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "device_memory_bytes": self.device_memory_bytes,
            "fragmentation": self.fragmentation,
            "before_trace_bytes": self.before_trace_bytes,
            "top_ops": [{"op": o.op, "bytes": o.bytes, "count": o.count} for o in self.top_ops],
            "events": self.events,
            "peak_op": self.peak_op,
            **({"unknown": list(self.unknown)} if self.unknown else {}),
        }


def _live_at(ev: MemoryEvents, rows: np.ndarray, peak: int) -> np.ndarray:
    """Of one allocator's events ``rows`` (time order), the allocations live just after the ``peak``-th:
    made at or before it and not freed by then (a free pairs with the allocation before it at its address)."""
    upto = rows[: peak + 1]
    addr, alloc = ev.address[upto], ev.allocation[upto]
    order = np.lexsort((np.arange(upto.size), addr))  # by address, then time
    a, al = addr[order], alloc[order]
    last_of_addr = np.r_[a[1:] != a[:-1], True]  # the latest event at each address by the peak
    live = order[last_of_addr & al]
    return upto[np.sort(live)]


def _top_ops(ev: MemoryEvents, live: np.ndarray, n: int = TOP_OPS) -> tuple[OpBytes, ...]:
    if not live.size:
        return ()
    ops, inv = np.unique(ev.tf_op[live], return_inverse=True)
    total = np.bincount(inv, weights=ev.nbytes[live].astype(np.float64), minlength=ops.size)
    count = np.bincount(inv, minlength=ops.size)
    names = [ev.texts[o] or NO_OP for o in ops.tolist()]
    rank = sorted(range(ops.size), key=lambda i: (-total[i], names[i]))[:n]
    return tuple(OpBytes(names[i], int(total[i]), int(count[i])) for i in rank)


def device_memory(ev: MemoryEvents, steps: StepTable, device_steps: Mapping[str, StepTable] | None = None
                  ) -> tuple[DeviceMemory, ...]:
    """Per allocator (named as its device; two allocators of one device: ``device (allocator)``), sorted
    by device: see the module docstring.  ``steps``/``device_steps``: the analysed windows."""
    if not ev.n:
        return ()
    step = ev.steps(steps, device_steps)
    out = []
    key = ev.device.astype(np.int64) * len(ev.texts) + ev.allocator  # one allocator name on several hosts
    for k in np.unique(key).tolist():
        rows = np.flatnonzero(key == k)
        bad = int(np.count_nonzero(ev.in_use[rows] == BAD))
        unknown = [f"{bad} of its {rows.size} events carry bytes in use that cannot be true (negative, not "
                   "a finite number, or past 1 PiB): left out of its peaks"] if bad else []
        rows = rows[ev.in_use[rows] != BAD]
        if not rows.size:
            continue  # nothing known of this allocator
        a = int(ev.allocator[rows[0]])
        use = ev.in_use[rows]
        top = int(use.max())
        p = int(np.flatnonzero(use == top)[-1])
        at = rows[p]
        avail = int(ev.available[at])
        device = ev.texts[int(ev.device[at])]
        plane_memory = ev.device_memory.get(device)
        capacity = top + avail if avail >= 0 else plane_memory
        if avail == BAD or (capacity is not None and capacity > MAX_BYTES):
            capacity = None
            unknown.append("its bytes_available at the peak cannot be true: capacity unknown")
        frag: float | None = float(ev.fragmentation[at])
        if frag is not None and np.isnan(frag):
            frag = None
        elif frag is not None and not 0.0 <= frag <= 1.0:
            frag = None
            unknown.append("its fragmentation at the peak is not a number from 0 to 1: unknown")
        live = _live_at(ev, rows, p)
        in_steps = np.flatnonzero(step[rows] >= 0)
        if in_steps.size:
            q = in_steps[int(np.flatnonzero(use[in_steps] == use[in_steps].max())[-1])]
            steps_peak, steps_ps = int(use[q]), int(ev.start_ps[rows[q]])
            steps_time: float | None = float(steps_ps) / 1e12
        else:
            steps_peak = steps_time = steps_ps = None
        out.append(DeviceMemory(
            device=device,
            allocator=ev.texts[a],
            peak_bytes=top,
            peak_time_s=float(ev.start_ps[at]) / 1e12,
            peak_in_steps_bytes=steps_peak,
            peak_in_steps_time_s=steps_time,
            lifetime_peak_bytes=int(max(ev.peak_stat[rows].max(), top)),
            capacity_bytes=capacity,
            device_memory_bytes=plane_memory,
            fragmentation=frag,
            before_trace_bytes=max(0, top - int(ev.nbytes[live].sum())),
            top_ops=_top_ops(ev, live),
            events=int(rows.size),
            peak_op=ev.texts[int(ev.tf_op[at])] if ev.allocation[at] else "",
            peak_ps=int(ev.start_ps[at]),
            peak_in_steps_ps=steps_ps,
            unknown=tuple(unknown),
        ))
    out = list(sort_memory(out))
    named: set[str] = set()
    unique = []
    for d in out:
        unique.append(d if d.device not in named else replace(d, device=f"{d.device} ({d.allocator})"))
        named.add(d.device)
    return tuple(unique)


def sort_memory(devices: Sequence[DeviceMemory]) -> tuple[DeviceMemory, ...]:
    """By device (a second allocator of one device, ``device (allocator)``, beside the first), the
    largest peak first."""
    return tuple(sorted(devices, key=lambda d: (device_sort_key(d.device.split(" (")[0]), -d.peak_bytes)))


def memory_doc(devices: Sequence[DeviceMemory]) -> dict[str, Any]:
    """``analyze --json``'s ``memory``: ``{"devices": {device: {...}}, "note": ...}``."""
    return {"devices": {d.device: d.to_doc() for d in devices},
            "note": EVENTS_NOTE if devices else NO_EVENTS_NOTE}


def timelines(ev: MemoryEvents, devices: Sequence[DeviceMemory], points: int = TIMELINE_POINTS
              ) -> dict[str, tuple[list[float], list[int]]]:
    """:func:`timeline` of each device, as lists (what the HTML pages draw)."""
    out = {}
    for d in devices:
        t, b = timeline(ev, d.device, points)
        out[d.device] = (t.tolist(), b.tolist())
    return out


def timeline(ev: MemoryEvents, device: str, points: int = TIMELINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """One device's bytes in use over time, (seconds, bytes): every event, or where there are more than
    ``points``, the largest of each of ``points`` equal stretches of events (XProf's max box filter)."""
    code = ev.texts.index(device) if device in ev.texts else -1
    rows = np.flatnonzero((ev.device == code) & (ev.in_use != BAD)) if code > 0 else np.zeros(0, np.int64)
    t, b = ev.start_ps[rows] / 1e12, ev.in_use[rows]
    if rows.size <= points:
        return t, b
    edges = np.linspace(0, rows.size, points + 1).astype(np.int64)
    best = np.maximum.reduceat(b, edges[:-1])
    pick = edges[:-1] + np.array([int(np.argmax(b[s:e])) for s, e in pairwise(edges.tolist())])
    return t[pick], best
