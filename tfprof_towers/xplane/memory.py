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
from functools import cache

#: Free heap bytes worth handing back.
WORTH_IT = 128 << 20
#: ``mallopt`` parameter: the most blocks ever mapped at once (glibc's ``M_MMAP_MAX``).
_M_MMAP_MAX = -4


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
