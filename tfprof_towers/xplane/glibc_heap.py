"""Give freed memory back to the system between the phases of a big decode.

A decode frees thousands of temporaries of a few megabytes, interleaved with the columns it
keeps; the C allocator keeps such freed blocks inside its heap, so the process's resident
memory stays at its high-water mark although the memory is free.
:func:`release_free_memory` asks glibc to return every free page (``malloc_trim(0)``) when
the heap holds more than :data:`WORTH_IT` free bytes (``mallinfo2``): below that, handing
pages back and faulting them in again costs more than it saves.  Elsewhere it does nothing.

:func:`prefer_heap` (called before a trace is analysed: by ``analyze``, and by the pipeline for
each variant's trace; setting it again changes nothing) has glibc take even
large blocks from its heap instead of mapping fresh memory for each: the columns of a
5M-event trace are tens of megabytes each, past glibc's largest mmap threshold (32 MB), so
every such temporary was new pages, faulted in one by one, and handed back at its free --
the pages of the ones before are reused instead (measured: ``analyze`` of a 5M-event trace
5-10% faster, its peak memory no higher).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

#: Free heap bytes worth handing back.
WORTH_IT = 128 << 20
#: ``mallopt`` parameter: the most blocks ever mapped at once (glibc's ``M_MMAP_MAX``).
_M_MMAP_MAX = -4
#: ``mallopt`` parameters: free bytes at the heap's top before it is trimmed (``M_TRIM_THRESHOLD``);
#: glibc's defaults of both.
_M_TRIM_THRESHOLD = -1
_DEFAULT_MMAP_MAX = 65536
_DEFAULT_TRIM = 128 * 1024


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]


@cache
def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _MallInfo2
    return libc


def release_free_memory() -> bool:
    """Hand the heap's free pages back to the system when it holds more than :data:`WORTH_IT` free
    bytes; True when it did."""
    libc = _libc()
    if libc is None or libc.mallinfo2().fordblks < WORTH_IT:
        return False
    libc.malloc_trim(0)
    return True


def prefer_heap() -> bool:
    """Take large blocks from the heap, not from fresh mappings (module docstring); True when the
    C library took the setting.  It changes the allocator for the whole process: for the command
    that analyses traces, not for a library call to make on its own."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0))


@contextmanager
def heap_for_decode() -> Iterator[None]:
    """Within: :func:`prefer_heap`, and the heap trimmed only past :data:`WORTH_IT` free bytes; after:
    glibc's settings again (its defaults, or the process's ``MALLOC_TRIM_THRESHOLD_``) and the free pages
    handed back.  For a decode in a process that is not ours -- a Dask worker, which sets
    ``MALLOC_TRIM_THRESHOLD_=65536``: every free at the top of the heap then hands pages back, to fault
    them in again at the next allocation (measured: a host's analysis 1.6x slower there)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        yield
        return
    libc.mallopt(_M_MMAP_MAX, 0)
    libc.mallopt(_M_TRIM_THRESHOLD, WORTH_IT)
    try:
        yield
    finally:
        try:
            trim = int(os.environ.get("MALLOC_TRIM_THRESHOLD_", _DEFAULT_TRIM))
        except ValueError:
            trim = _DEFAULT_TRIM
        libc.mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX)
        libc.mallopt(_M_TRIM_THRESHOLD, trim)
        libc.malloc_trim(0)
