"""Batches decoded ahead on worker threads, taken in order.

numpy lets go of the GIL inside its loops, so two threads walking and decoding different
batches of lines run on two cores for most of their time.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Most decoding threads by default.  On the 2-core machines this was measured on, two threads
#: decode a batch ~1.45x as fast as one and a third only adds contention; more threads on more
#: cores were not measured (the GIL-held Python between numpy's loops bounds what they can add).
MAX_THREADS = 2


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def decode_threads(asked: int | None = None) -> int:
    """Threads to decode with: ``asked``, else the cores this process may use, at most :data:`MAX_THREADS`."""
    if asked is not None:
        return max(1, int(asked))
    return max(1, min(MAX_THREADS, available_cores()))


def in_order(
    fn: Callable[[T], R], items: Iterable[T], threads: int, stop: threading.Event | None = None
) -> Iterator[R]:
    """``fn(item)`` of each item, yielded in order; with ``threads`` > 1 computed on that many worker
    threads, at most ``threads`` results ahead of the one being used (bounded memory).  An
    exception in ``fn`` is raised here.  When the caller stops early (an error, Ctrl-C), what is
    not started is dropped, ``stop`` is set -- an ``fn`` that checks it now and then ends
    early -- and what is running is waited for: no thread outlives the call."""
    if threads <= 1:
        yield from map(fn, items)
        return
    todo = iter(items)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="decode") as pool:
        pending: deque[Future[R]] = deque()
        try:
            for item in todo:
                pending.append(pool.submit(fn, item))
                if len(pending) >= threads:
                    break
            while pending:
                result = pending.popleft().result()
                nxt = next(todo, _END)
                if nxt is not _END:
                    pending.append(pool.submit(fn, nxt))
                yield result
                del result
        finally:
            if stop is not None:
                stop.set()
            for f in pending:
                f.cancel()


_END = object()


class Stopped(Exception):
    """Raised by work that saw its ``stop`` event set: nobody waits for its result any more."""
