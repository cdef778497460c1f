"""The allocators' events of a trace, read into numpy columns (:class:`MemoryEvents`, ``Trace.memory``).

TensorFlow's BFC allocators write a ``MemoryAllocation`` or ``MemoryDeallocation`` event on the
host plane for every allocation and free.  Each carries the allocator's state *after* it
(``allocator_name``; ``bytes_allocated``, ``bytes_reserved``, ``bytes_available``,
``peak_bytes_in_use``, ``fragmentation``) and the block (``requested_bytes``,
``allocation_bytes``, ``addr``, ``tf_op``, ``region_type``, ``data_type``, ``tensor_shape`` --
older writers: ``shape``).  :func:`memory_events` reads them into :class:`MemoryEvents`
(numpy columns, in time order); :mod:`tfprof_towers.trace.memory_peaks` sums each allocator up
and :mod:`tfprof_towers.trace.placed_memory` splits the host allocators' events by logical device.

A figure that cannot be true -- a byte stat that is negative, not a finite number, a string, above
:data:`MAX_BYTES`, or in use whose sum overflows -- is :data:`BAD` here, never read as 0, so that
the readers can leave it out or show it as unknown.

An allocator is named as the device it serves: ``GPU_6_bfc`` -> ``/device:GPU:6``,
``gpu_host_bfc`` / ``xla_gpu_host_bfc`` / ``mklcpu`` -> the host plane (``/host:CPU``), anything else by
its own name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.trace.steps import StepTable, assign_steps
from tfprof_towers.vocab.device_names import HOST_THREADS
from tfprof_towers.xplane import HOST, RawSpace, StatColumn, distinct
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
#: No device's memory comes near this (1 PiB): a byte figure above it cannot be true.
MAX_BYTES = 1 << 50
#: ``MemoryEvents.in_use``/``available`` of an event whose figure cannot be true (``available`` -1: none).
BAD = -2

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
            used = distinct(codes)
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
    rows = np.flatnonzero(np.isin(raw.name[:k], codes) & (raw.planes.kinds.take(raw.event_plane[:k]) == HOST))
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
