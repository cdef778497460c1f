"""Give freed memory back to the system between the phases of a big decode.

A decode frees thousands of temporaries of a few megabytes, interleaved with the columns it
keeps; the C allocator keeps such freed blocks inside its heap, so the process's resident
memory stays at its high-water mark although the memory is free.  :func:`release_free_memory`
asks glibc to return every free page (``malloc_trim(0)``); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_free_memory() -> None:
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
