"""Batches decoded ahead on worker threads, taken in order.

numpy lets go of the GIL inside its loops, so two threads walking and decoding different
batches of lines run on two cores for most of their time.
"""

from __future__ import annotations

import os
import threading
import time
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
#: A sample of the other processes' load shorter than this says nothing (``/proc/stat`` counts in
#: hundredths of a second); longer than ``_STALE_S`` it says what the machine did long ago.
_MIN_WINDOW_S = 0.05
_STALE_S = 10.0


def available_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _machine_busy_s() -> float | None:
    """Seconds every CPU of the machine spent busy since boot, from ``/proc/stat`` (None: not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields) - idle) / tick


def _mark() -> tuple[float, float, float | None]:
    return time.monotonic(), time.process_time(), _machine_busy_s()


_since = _mark()


def others_busy() -> float | None:
    """How many cores other processes kept busy since the last sample (this module's import, the first
    time): the machine's busy time less this process's own CPU time, over the wall time between --
    what is running now, taken on the way, without waiting.  None where it cannot tell (not Linux, a
    window too short or too old); a window too short is not used up."""
    global _since
    now = _mark()
    wall = now[0] - _since[0]
    if wall < _MIN_WINDOW_S or now[2] is None or _since[2] is None:
        return None
    before, _since = _since, now
    if wall > _STALE_S:
        return None
    return max(0.0, (now[2] - before[2]) - (now[1] - before[1])) / wall


def threads_for(cores: int, others: float | None) -> int:
    """Threads worth running on ``cores`` cores while other processes keep ``others`` of them busy
    (None: unknown): at most :data:`MAX_THREADS`, and one where no second core is free (a thread on a
    busy core only slows both down: measured, two threads decode ~1.5x slower than one at a load
    average of 5 on 2 cores)."""
    threads = min(MAX_THREADS, cores)
    if others is not None:
        threads = min(threads, int(cores - others + 0.5))
    return max(1, threads)


def decode_threads(asked: int | None = None) -> int:
    """Threads to decode (and break a trace down) with: ``asked``, else :func:`threads_for` the cores this
    process may use and what other processes keep busy now (:func:`others_busy`)."""
    if asked is not None:
        return max(1, int(asked))
    return threads_for(available_cores(), others_busy())


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
