"""Device memory from the allocators' events: per device, the peak in use, when, what was live at it.

TensorFlow's BFC allocators write a ``MemoryAllocation`` or ``MemoryDeallocation`` event on the
host plane for every allocation and free.  Each carries the allocator's state *after* it
(``allocator_name``; ``bytes_allocated``, ``bytes_reserved``, ``bytes_available``,
``peak_bytes_in_use``, ``fragmentation``) and the block (``requested_bytes``,
``allocation_bytes``, ``addr``, ``tf_op``, ``region_type``, ``data_type``, ``tensor_shape`` --
older writers: ``shape``).  :func:`memory_events` reads them into :class:`MemoryEvents`
(numpy columns, in time order); :func:`device_memory` sums each allocator up the way XProf's
``memory_profile`` tool does, so the two agree:

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

A figure that cannot be true -- a byte stat that is negative, not a finite number, a string, above
:data:`MAX_BYTES`, or in use whose sum overflows -- is unknown, never read as 0: an event whose bytes
in use cannot be true is left out of the peaks, a capacity or a fragmentation that cannot be true is
None, and :attr:`DeviceMemory.unknown` says which (``analyze`` prints it as a note).

An allocator is named as the device it serves: ``GPU_6_bfc`` -> ``/device:GPU:6``,
``gpu_host_bfc`` / ``xla_gpu_host_bfc`` / ``mklcpu`` -> the host plane (``/host:CPU``), anything else by
its own name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.trace.steps import StepTable, assign_steps
from tfprof_towers.vocab.device_names import HOST_THREADS, device_sort_key
from tfprof_towers.xplane import HOST, RawSpace, StatColumn
from tfprof_towers.xplane.tables import empty_stat

if TYPE_CHECKING:
    import pandas as pd

ALLOCATION, DEALLOCATION = "MemoryAllocation", "MemoryDeallocation"
#: The stats the allocator events carry (``tf_op`` is read for classification already).
MEMORY_STATS = (
    "allocator_name", "bytes_allocated", "bytes_reserved", "bytes_available", "peak_bytes_in_use",
    "fragmentation", "requested_bytes", "allocation_bytes", "addr", "region_type", "data_type",
    "tensor_shape", "tensor_shapes", "shape",
)
NO_EVENTS_NOTE = "no allocator events in this trace"
EVENTS_NOTE = (
    "from the allocators' MemoryAllocation/MemoryDeallocation events; peak = the most bytes in use; "
    "capacity = in use + available at the peak (the allocator's limit, as XProf's memory profile)"
)
#: No device's memory comes near this (1 PiB): a byte figure above it cannot be true.
MAX_BYTES = 1 << 50
#: ``MemoryEvents.in_use``/``available`` of an event whose figure cannot be true (``available`` -1: none).
BAD = -2
#: The ops listed as live at a peak.
TOP_OPS = 5
#: Points of a timeline, at most (each the largest in use of its stretch of events, as XProf samples).
TIMELINE_POINTS = 400
BEFORE_TRACE = "(allocated before the trace)"
NO_OP = "(no op named)"

#: TensorFlow's DataType enum, the values allocator events carry as numbers.
_DTYPES = {
    0: "invalid", 1: "float", 2: "double", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
    8: "complex64",
    9: "int64", 10: "bool", 11: "qint8", 12: "quint8", 13: "qint32", 14: "bfloat16", 15: "qint16",
    16: "quint16", 17: "uint16", 18: "complex128", 19: "half", 20: "resource", 21: "variant",
    22: "uint32", 23: "uint64",
}
_INDEXED = re.compile(r"^([A-Za-z]+)_(\d+)_")
#: Host memory: pinned (``gpu_host_bfc``, ``cuda_host_bfc``, XLA's ``xla_gpu_host_bfc``) or the CPU's own.
_HOST_ALLOCATORS = re.compile(r"(^|_)(host|cpu|mklcpu)(_|$)", re.IGNORECASE)


def allocator_device(allocator: str, prefix: str = "", host: str = HOST_THREADS) -> str:
    """The device an allocator serves (module docstring), with the task ``prefix``."""
    m = _INDEXED.match(allocator)
    if m and m.group(1).upper() in ("GPU", "TPU", "XPU"):
        return f"{prefix}/device:{m.group(1).upper()}:{int(m.group(2))}"
    if _HOST_ALLOCATORS.search(allocator):
        return prefix + host
    return allocator


@dataclass(frozen=True, eq=False)
class MemoryEvents:
    """The allocator events, in time order (ties: file order); ``*`` codes index :attr:`texts`."""

    texts: tuple[str, ...] = ("",)  # code 0 is ""
    start_ps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    allocator: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    device: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    allocation: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # False: a free
    in_use: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # allocated + reserved; BAD
    available: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # -1: not recorded; BAD
    peak_stat: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # peak_bytes_in_use
    fragmentation: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))  # nan: none; -1: bad
    requested: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    nbytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # allocation_bytes
    address: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    tf_op: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    region: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    dtype: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    shape: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    #: per device plane with a ``memory_size`` stat: its memory, bytes
    device_memory: Mapping[str, int] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.start_ps.size)

    def shifted(self, delta: int) -> MemoryEvents:
        return replace(self, start_ps=self.start_ps + delta) if delta else self

    @staticmethod
    def concat(parts: Sequence[MemoryEvents]) -> MemoryEvents:
        """Several hosts' events as one table, in time order."""
        parts = [p for p in parts if p.n or p.device_memory]
        if not parts:
            return MemoryEvents()
        if len(parts) == 1:
            return parts[0]
        index: dict[str, int] = {"": 0}
        luts = [np.array([index.setdefault(t, len(index)) for t in p.texts], dtype=np.int32) for p in parts]
        coded = ("allocator", "device", "tf_op", "region", "dtype", "shape")
        cols: dict[str, Any] = {f: np.concatenate([lut[getattr(p, f)] for p, lut in zip(parts, luts)])
                                for f in coded}
        for f in ("start_ps", "allocation", "in_use", "available", "peak_stat", "fragmentation", "requested",
                  "nbytes", "address"):
            cols[f] = np.concatenate([getattr(p, f) for p in parts])
        order = np.argsort(cols["start_ps"], kind="stable")
        cols = {k: v[order] for k, v in cols.items()}
        memory = {d: b for p in parts for d, b in p.device_memory.items()}
        return MemoryEvents(tuple(index), **cols, device_memory=memory)

    def frame(self, steps: StepTable | None = None, device_steps: Mapping[str, StepTable] | None = None
              ) -> pd.DataFrame:
        """The ``memory`` frame (:data:`MEMORY_COLUMNS`); ``step``: per event the step of its device's
        windows (``device_steps``, else ``steps``), -1 when none or no windows are given."""
        import pandas as pd

        texts = list(self.texts)

        def cat(codes: np.ndarray) -> pd.Categorical:
            used = np.unique(codes)
            remap = np.zeros(len(texts), dtype=np.int32)
            remap[used] = np.arange(used.size, dtype=np.int32)
            return pd.Categorical.from_codes(remap[codes], categories=[texts[u] for u in used.tolist()])

        step = self.steps(steps, device_steps) if steps is not None else np.full(self.n, -1, np.int64)
        activity = pd.Categorical.from_codes(self.allocation.astype(np.int8),
                                             categories=["deallocation", "allocation"])
        return pd.DataFrame({
            "start_ps": self.start_ps,
            "allocator": cat(self.allocator),
            "device": cat(self.device),
            "activity": activity,
            "bytes_in_use": np.maximum(self.in_use, -1),  # -1: cannot be true
            "bytes_available": np.maximum(self.available, -1),  # -1: not recorded, or cannot be true
            "peak_bytes_in_use": self.peak_stat,
            "requested_bytes": self.requested,
            "allocation_bytes": self.nbytes,
            "fragmentation": np.where(self.fragmentation < 0, np.nan, self.fragmentation),
            "tf_op": cat(self.tf_op),
            "region_type": cat(self.region),
            "data_type": cat(self.dtype),
            "tensor_shape": cat(self.shape),
            "step": step.astype(np.int64),
        })

    def steps(self, steps: StepTable, device_steps: Mapping[str, StepTable] | None = None) -> np.ndarray:
        """Per event: the step whose window (its device's own, else ``steps``) holds it, -1 when none."""
        out = assign_steps(self.start_ps, steps).astype(np.int64)
        for d, table in (device_steps or {}).items():
            code = self.texts.index(d) if d in self.texts else -1
            if code > 0:
                rows = np.flatnonzero(self.device == code)
                out[rows] = assign_steps(self.start_ps[rows], table)
        return out


#: The ``memory`` frame's columns and dtypes (``Profile.memory``).
MEMORY_COLUMNS: dict[str, str] = {
    "start_ps": "int64", "allocator": "category", "device": "category", "activity": "category",
    "bytes_in_use": "int64", "bytes_available": "int64", "peak_bytes_in_use": "int64",
    "requested_bytes": "int64", "allocation_bytes": "int64", "fragmentation": "float64",
    "tf_op": "category", "region_type": "category", "data_type": "category", "tensor_shape": "category",
    "step": "int64",
}


def _values(column: StatColumn, rows: np.ndarray, default: int = 0) -> np.ndarray:
    """Per row (event index, ascending): the stat's integer value, ``default`` where it has none."""
    out = np.full(rows.size, default, dtype=np.int64)
    if column.any and rows.size:
        at = np.minimum(np.searchsorted(column.index, rows), column.index.size - 1)
        has = column.index[at] == rows
        out[has] = column.nums[at[has]]
    return out


def _bytes(column: StatColumn, rows: np.ndarray, default: int = 0) -> np.ndarray:
    """:func:`_values` of a byte count, :data:`BAD` where the event's value cannot be one: a string, a
    double that is not finite, negative, or above :data:`MAX_BYTES`."""
    out = np.full(rows.size, default, dtype=np.int64)
    if column.any and rows.size:
        at = np.minimum(np.searchsorted(column.index, rows), column.index.size - 1)
        has = column.index[at] == rows
        codes = column.codes[at[has]]
        values = column.values[at[has]]
        good = (codes < 0) & np.isfinite(values) & (values >= 0) & (values <= MAX_BYTES)
        out[has] = np.where(good, column.nums[at[has]], BAD)
    return out


def _reals(column: StatColumn, rows: np.ndarray) -> np.ndarray:
    """Per row: the stat as a real number, NaN where it has none, -1 where it is a string."""
    out = np.full(rows.size, np.nan, dtype=np.float64)
    if column.any and rows.size:
        at = np.minimum(np.searchsorted(column.index, rows), column.index.size - 1)
        has = column.index[at] == rows
        out[has] = np.where(column.codes[at[has]] >= 0, -1.0, column.values[at[has]])
    return out


def _in_use(allocated: np.ndarray, reserved: np.ndarray) -> np.ndarray:
    """``allocated + reserved``, :data:`BAD` where either is, or where their sum passes :data:`MAX_BYTES`."""
    bad = (allocated == BAD) | (reserved == BAD)
    total = np.where(bad, 0, allocated) + np.where(bad, 0, reserved)  # each <= MAX_BYTES: no overflow
    return np.where(bad | (total > MAX_BYTES), BAD, total)


def _texts(column: StatColumn, rows: np.ndarray, raw: RawSpace, index: dict[str, int],
           numbers: Mapping[int, str] | None = None) -> np.ndarray:
    """Per row: the code in ``index`` of the stat's text (numbers named by ``numbers`` where given)."""
    out = np.zeros(rows.size, dtype=np.int32)
    if not column.any or not rows.size:
        return out
    at = np.minimum(np.searchsorted(column.index, rows), column.index.size - 1)
    has = np.flatnonzero(column.index[at] == rows)
    if not has.size:
        return out
    codes, nums = column.codes[at[has]].astype(np.int64), column.nums[at[has]]
    items = raw.strings.items
    text = codes >= 0  # a string's code; else a number (its value in nums)
    for part, values in ((np.flatnonzero(text), codes), (np.flatnonzero(~text), nums)):
        if not part.size:
            continue
        distinct, inverse = np.unique(values[part], return_inverse=True)
        lut = np.zeros(distinct.size, dtype=np.int32)
        for i, v in enumerate(distinct.tolist()):  # one step per distinct value, not per event
            shown = items[v] if values is codes else (numbers or {}).get(v, str(v))
            lut[i] = index.setdefault(shown, len(index))
        out[has[part]] = lut[inverse.ravel()]
    return out


def memory_events(raw: RawSpace, stats: Mapping[str, StatColumn], prefix: str = "") -> MemoryEvents:
    """The allocator events of ``raw`` (read with :data:`MEMORY_STATS` and ``tf_op``; ``prefix``: the
    task's name before every device), and each device plane's ``memory_size``."""
    memory = {}
    for name, numbers in zip(raw.planes.names, raw.planes.numbers):
        size = numbers.get("memory_size")
        if isinstance(size, int | float) and np.isfinite(size) and 0 < size <= MAX_BYTES:  # else unknown
            memory[prefix + name] = int(size)
    k = raw.n_kept
    index = raw.strings._index
    codes = [index[n] for n in (ALLOCATION, DEALLOCATION) if n in index]
    empty = empty_stat(raw.n_events, raw.strings)
    stats = {name: stats.get(name, empty) for name in (*MEMORY_STATS, "tf_op")}
    if not codes:
        return MemoryEvents(device_memory=memory)
    rows = np.flatnonzero(np.isin(raw.name[:k], codes) & (raw.planes.kinds[raw.event_plane[:k]] == HOST))
    rows = rows[np.isin(rows, stats["allocator_name"].index)]  # an event without its allocator: not one
    if not rows.size:
        return MemoryEvents(device_memory=memory)
    order = np.argsort(raw.start_ps[rows], kind="stable")
    rows = rows[order]
    texts: dict[str, int] = {"": 0}
    allocator = _texts(stats["allocator_name"], rows, raw, texts)
    host = next((n for n, kind in zip(raw.planes.names, raw.planes.kinds.tolist()) if kind == HOST),
                HOST_THREADS)
    names = list(texts)
    device_of = np.array([texts.setdefault(allocator_device(a, prefix, host), len(texts)) if a else 0
                          for a in names], dtype=np.int32)
    shape = _texts(stats["tensor_shape"], rows, raw, texts)
    for other in ("tensor_shapes", "shape"):
        missing = shape == 0
        shape[missing] = _texts(stats[other], rows, raw, texts)[missing]
    tf_op = _texts(stats["tf_op"], rows, raw, texts)
    region = _texts(stats["region_type"], rows, raw, texts)
    dtype = _texts(stats["data_type"], rows, raw, texts, _DTYPES)
    return MemoryEvents(
        texts=tuple(texts),
        start_ps=raw.start_ps[rows],
        allocator=allocator,
        device=device_of[allocator],
        allocation=raw.name[rows] == index.get(ALLOCATION, -1),
        in_use=_in_use(_bytes(stats["bytes_allocated"], rows), _bytes(stats["bytes_reserved"], rows)),
        available=_bytes(stats["bytes_available"], rows, -1),
        peak_stat=np.maximum(_bytes(stats["peak_bytes_in_use"], rows), 0),
        fragmentation=_reals(stats["fragmentation"], rows),
        requested=np.maximum(_bytes(stats["requested_bytes"], rows), 0),
        nbytes=np.maximum(_bytes(stats["allocation_bytes"], rows), 0),
        address=_values(stats["addr"], rows),
        tf_op=tf_op,
        region=region,
        dtype=dtype,
        shape=shape,
        device_memory=memory,
    )


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
