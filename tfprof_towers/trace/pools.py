"""A process pool that Ctrl-C stops at once: :func:`process_pool`.

``with ProcessPoolExecutor() as pool`` waits, when the block is left by an exception (Ctrl-C in a wait
for results), for every job already queued to finish: a 1,000-host map would run on for its whole
length before the command could exit.  :func:`process_pool` leaves a normal block the same way (every
job done), but on any exception cancels what is queued and kills the pool's workers (they hold nothing
the command keeps: their results are discarded) before the exception goes on, so Ctrl-C ends the
command within a fraction of a second and leaves no process behind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # multiprocessing is imported where a pool starts: one host never needs it
    from concurrent.futures import ProcessPoolExecutor

#: How long to wait for a killed worker to be reaped (it dies at once: SIGKILL).
REAP_S = 2.0


@contextlib.contextmanager
def process_pool(workers: int, mp_context: Any, initializer: Callable[[], None] | None = None,
                 ) -> Iterator[ProcessPoolExecutor]:
    """A :class:`ProcessPoolExecutor` of ``workers`` processes: shut down normally when the block ends,
    stopped at once (:func:`stop_pool`) when an exception (``KeyboardInterrupt`` included) leaves it."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp_context, initializer=initializer)
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel ``pool``'s queued jobs and kill its workers now (their work is dropped), then reap them."""
    # the executor keeps its processes in ``_processes`` (pid -> Process); there is no public way to stop
    # a job that has started
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        with contextlib.suppress(Exception):
            p.kill()
    for p in procs:
        with contextlib.suppress(Exception):
            p.join(REAP_S)
