"""The fast tier's own fixture: a shorter sample of how busy the machine is.

``trace.hosts.idle_cores`` (how many processes decode a multi-host logdir when no test says how many)
samples ``/proc/stat`` over ``busy_cores``' 0.1 s; the unit tests load such logdirs some sixty times,
so they slept about 6 s for a number that changes no result (every worker count gives the same
answer, which tests/unit/test_trace_hosts.py and test_pod.py check with the counts given).  Here the
sample is 0.05 s: the same code, the same choice on a machine whose load holds still for that long
(a shorter sample, a few ``/proc/stat`` ticks, chose extra decoding processes by chance and cost CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest

SAMPLE_S = 0.05


@pytest.fixture(scope="session", autouse=True)
def short_busy_sample() -> Iterator[None]:
    from tfprof_towers.trace import hosts

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hosts, "busy_cores", functools.partial(hosts.busy_cores, interval_s=SAMPLE_S))
        yield
