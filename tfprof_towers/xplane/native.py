"""The optional C kernel of the reader (:mod:`._wirec`) and the switch between it and numpy.

The kernel walks the wire format one message at a time in C: the fields of every line
(:func:`.layout.read_lines`) and every event's header, kept stats and their values
(:func:`.events.decode_event_ranges` with ``values=True``); it also reads the texts of
TensorFlow's ``memcpy_details`` stat (for ``trace/copies.py``).  It returns exactly what the
numpy code returns -- the same arrays, in the same order, and :class:`~.wire.Malformed` for
the same input -- and lets go of the GIL while it works, so batches decode on two cores.

It is built at install time where a C compiler is found (``setup.py``); without it, or with
``TFPROF_TOWERS_NATIVE=0`` in the environment, the numpy code runs: it is the oracle the
kernel's tests compare against.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import numpy as np

from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.wire import Buffer, Malformed

#: ``TFPROF_TOWERS_NATIVE=0`` makes the reader use the numpy decoders even where the kernel is built.
ENV_SWITCH = "TFPROF_TOWERS_NATIVE"


def _load() -> ModuleType | None:
    """The kernel's module, or None where it is not built or the environment switches it off."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None
    try:  # by name: an extension module, not a source file the import graph knows
        return importlib.import_module("tfprof_towers.xplane._wirec")
    except ImportError:
        return None


#: The kernel, or None (not built, or switched off): the decoders look here on every call.
kernel: ModuleType | None = _load()


@contextmanager
def numpy_decoders() -> Iterator[None]:
    """Within: the numpy decoders, even where the kernel is built (what ``TFPROF_TOWERS_NATIVE=0`` does
    for a whole process); for a benchmark comparing the two in one process."""
    global kernel
    saved, kernel = kernel, None
    try:
        yield
    finally:
        kernel = saved


def _int64(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous int64 array (no copy when it is one)."""
    return np.ascontiguousarray(a, dtype=np.int64)


def walk_lines(
    buf: Buffer, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """The fields of the XLine messages at ``buf[start:end]``: (each event's payload start and end,
    events per line, the other fields as (line, tag, value, payload start or -1)); raises
    :class:`~.wire.Malformed`."""
    start, end = _int64(start), _int64(end)
    counts = np.empty(start.size, dtype=np.int64)
    try:
        got = kernel.walk_lines(buf.u8, buf.size, start, end, counts)
    except kernel.Error as exc:
        raise Malformed(str(exc)) from None
    ev_start, ev_end, owner, tag, value, payload = (np.frombuffer(a, dtype=np.int64) for a in got)
    return ev_start, ev_end, counts, (owner, tag, value.view(np.uint64), payload)


#: The kept stats' columns the kernel returns, with their dtypes (see :class:`.events.Events`).
STAT_DTYPES = (np.int64, np.int64, np.int64, np.int64, np.int8, np.int8, np.uint64, np.int64, np.int64)


def decode_events(
    buf: Buffer,
    start: np.ndarray,
    end: np.ndarray,
    header: list[np.ndarray],
    group: np.ndarray | None,
    table: np.ndarray | None,
    first: int,
) -> list[np.ndarray]:
    """The events at ``buf[start:end]`` (the call's events ``first ..``): writes their metadata_id,
    offset_ps and duration_ps into ``header`` and returns their kept stats' columns (owner, start,
    end, metadata_id, label, kind, num, str_start, str_len), in the numpy decoder's order; raises
    :class:`~.wire.Malformed`."""
    width = 0
    if group is not None:
        group = _int64(group)
        table = np.ascontiguousarray(table, dtype=np.int8)
        width = table.shape[1]
    try:
        got = kernel.decode_events(
            buf.u8, buf.size, _int64(start), _int64(end), *header, group, table, width, first
        )
    except kernel.Error as exc:
        raise Malformed(str(exc)) from None
    return [np.frombuffer(a, dtype=t) for a, t in zip(got, STAT_DTYPES)]


def parse_details(
    text: Ragged, want_dest: np.ndarray | None, want_kinds: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``memcpy_details`` texts parsed as :func:`tfprof_towers.trace.copies.parse_details` parses them:
    (size, dest, memory kind of the source, of the destination; 0 host, 1 device, -1 other); None where
    the rows overlap in ``text.data`` (that parse then runs: it gives each byte to one row)."""
    starts = _int64(text.starts)
    ends = starts + text.lengths
    if starts.size > 1:
        order = np.lexsort((ends, starts)) if (starts[1:] < starts[:-1]).any() else slice(None)
        if (starts[order][1:] < ends[order][:-1]).any():
            return None
    n = starts.size
    size, dest = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    src, dst = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int8)
    wanted = [None if w is None else np.ascontiguousarray(w, dtype=np.bool_).view(np.uint8)
              for w in (want_dest, want_kinds)]
    kernel.parse_details(np.ascontiguousarray(text.data), starts, ends, *wanted, size, dest, src, dst)
    return size, dest, src, dst
