"""How an accelerator's idle time splits: host wait, kernel wait, other (Holistic Trace Analysis's idea).

Holistic Trace Analysis (HTA, ``get_idle_time_breakdown``) classifies each gap between
consecutive kernels of a CUDA stream by the kernel that ends it:

* **host wait** -- that kernel's launch (the host-side runtime call, joined to the kernel
  by its ``correlation_id``) started after the previous kernel had ended: the CPU did not
  issue work in time;
* **kernel wait** -- not host wait, and the gap is shorter than a threshold
  (:data:`KERNEL_WAIT_PS`): the overhead between back-to-back kernels;
* **other** -- anything else (waiting on an event, a dependency, a kernel without a
  known launch).

Here the split must add up to the device's ``wall`` idle time, which counts only instants
when *no* stream of the device is busy; so the gaps are those of the device -- the
intervals between the union of all its streams' events -- and each is classified, HTA's
way, by the event that ends it (the next work on the stream that resumes first) and the
moment the device's previous work ended.  On a single stream this is HTA's rule exactly.
A gap before a device's first event is host wait when that event's launch is known (the
device had nothing to run until the host issued it), else other; the gap after its last
event is other.  Gaps are measured on the device's whole timeline and then cut to the
step windows, so each window's parts sum to its idle time exactly.

Hosts join their own launches: in a multi-host trace, correlation ids are matched within
each host (each process numbers its own).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.xplane import HOST

if TYPE_CHECKING:
    from tfprof_towers.trace.load import Trace
    from tfprof_towers.trace.steps import DeviceEvents, StepTable

IDLE_KINDS = ("host_wait", "kernel_wait", "other")
#: Gaps shorter than this between a kernel and the next one launched in time are kernel wait.
#: HTA's default is 30 ns on its nanosecond clock; launch overhead between back-to-back kernels
#: on current GPUs is a few microseconds, so 5 us here.
KERNEL_WAIT_PS = 5_000_000
_FAR = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class Launches:
    """The host events with a ``correlation_id`` (the launches), by (host, correlation id): sorted keys,
    and of each key the earliest launch's start and end (of two as early, the first in the trace)."""

    keys: np.ndarray  # int64: host << 48 | correlation id
    start: np.ndarray  # int64
    end: np.ndarray  # int64

    @staticmethod
    def of(trace: Trace) -> Launches:
        """The trace's launches (made once per trace: attribution and the rules' facts share them)."""
        got = _LAUNCHES.get(trace)
        if got is None:
            got = _LAUNCHES[trace] = Launches._of(trace)
        return got

    @staticmethod
    def _of(trace: Trace) -> Launches:
        c = trace.columns
        if not c.corr_index.size:
            z = np.zeros(0, np.int64)
            return Launches(z, z, z)
        key, rows = _host_keys(trace)
        start = c.start_ps[rows]
        end = c.dur_ps[rows]
        end += start
        del rows
        same = key[1:] == key[:-1] if key.size > 1 else np.zeros(0, dtype=bool)
        if same.any() and not (start[1:][same] >= start[:-1][same]).all():
            order = np.lexsort((start, key))  # an id launched twice, later first: by key, then start
            key, start, end = key[order], start[order], end[order]
        if not same.any():  # every id launched once: each launch is its key's first
            return Launches(key, start, end)
        first = np.flatnonzero(np.r_[True, ~same])
        return Launches(key[first], start[first], end[first])

    def starts(self, trace: Trace, rows: np.ndarray) -> np.ndarray:
        """Per event ``rows`` (of the trace's columns): the start of its launch, -1 when unknown."""
        return self.found(trace, rows)[0]

    def found(self, trace: Trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per event ``rows`` (of the trace's columns): the start and end of its launch, -1 when unknown."""
        c = trace.columns
        start = np.full(rows.size, -1, dtype=np.int64)
        end = np.full(rows.size, -1, dtype=np.int64)
        if not self.keys.size or not rows.size:
            return start, end
        at = np.minimum(np.searchsorted(c.corr_index, rows), c.corr_index.size - 1)  # its correlation id's
        has = np.flatnonzero(c.corr_index[at] == rows)
        k = c.corr[at[has]] & ((1 << 48) - 1)
        if c.line_host.size and c.line_host.max() > 0:  # several hosts: each joins its own launches
            k |= c.line_host.take(c.line[rows[has]]).astype(np.int64) << 48
        pos = np.minimum(np.searchsorted(self.keys, k), self.keys.size - 1)
        hit = self.keys[pos] == k
        start[has[hit]] = self.start[pos[hit]]
        end[has[hit]] = self.end[pos[hit]]
        return start, end


def _host_keys(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The host events with a correlation id: their keys (host << 48 | id), sorted (ties in the trace's
    order), and their rows; one column at a time, each let go when used up (a big trace's launches are
    millions)."""
    c = trace.columns
    at = np.flatnonzero(c.line_kind.take(c.line[c.corr_index]) == HOST)  # into corr_index
    key = c.corr[at]
    key &= (1 << 48) - 1
    if c.line_host.size and c.line_host.max() > 0:  # several hosts: each numbers its own
        key |= c.line_host.take(c.line[c.corr_index[at]]).astype(np.int64) << 48
    if key.size > 1 and not (key[1:] >= key[:-1]).all():
        order = np.argsort(key, kind="stable")  # one key: a far cheaper sort than by (key, start)
        key = key[order]
        at = at[order]
        del order
    return key, c.corr_index[at]


#: Each live trace's launches, made on first use.
_LAUNCHES: weakref.WeakKeyDictionary[Trace, Launches] = weakref.WeakKeyDictionary()


def idle_split(
    trace: Trace, ev: DeviceEvents, steps: StepTable, kernel_wait_ps: int = KERNEL_WAIT_PS,
    launches: Launches | None = None,
) -> np.ndarray:
    """One accelerator's idle picoseconds per window and kind (module doc)."""
    out = np.zeros((len(steps), len(IDLE_KINDS)), dtype=np.int64)
    if not len(steps):
        return out
    ws, we = steps.start_ps, steps.end_ps
    a, b, kind = _gaps(trace, ev, kernel_wait_ps, launches or Launches.of(trace))
    return in_windows(np.maximum(a, ws[0]), np.minimum(b, we[-1]), kind, ws, we)


def in_windows(a: np.ndarray, b: np.ndarray, kind: np.ndarray, ws: np.ndarray, we: np.ndarray) -> np.ndarray:
    """Per window ``[ws, we)`` and kind (:data:`IDLE_KINDS`): the time of the gaps ``[a, b)`` (in order,
    apart) inside it -- each kind's gap time before an instant (whole gaps by a running sum, and the
    part of the one under way), at the window's end less at its start.  Exact integers."""
    length = np.maximum(b - a, 0)
    n_kind = len(IDLE_KINDS)
    before = np.zeros((n_kind, a.size + 1), dtype=np.int64)  # [kind, gaps ended]: their time
    for k in range(n_kind):
        np.cumsum(np.where(kind == k, length, 0), out=before[k, 1:])
    t = np.concatenate([ws, we])
    i = np.searchsorted(b, t, side="right")  # the gaps ended by each instant
    under = np.minimum(i, a.size - 1)  # the gap under way (none past the last)
    part = np.where(i < a.size, np.maximum(t - a[under], 0), 0)
    upto = before[:, i] + np.where(kind[under] == np.arange(n_kind)[:, None], part, 0)
    return (upto[:, ws.size :] - upto[:, : ws.size]).T.copy()


def _gaps(trace: Trace, ev: DeviceEvents, kernel_wait_ps: int, launches: Launches):
    """The device's gaps ``[a, b)`` (-far / +far at its two ends) and each one's kind index."""
    live = np.flatnonzero(ev.end > ev.start)
    if not live.size:
        return np.array([-_FAR]), np.array([_FAR]), np.array([2])
    if live.size == ev.start.size:  # every event lasts: no copies
        s, e = ev.start, ev.end
    else:
        s, e = ev.start[live], ev.end[live]
    if not (s[1:] >= s[:-1]).all():  # a device's events come in order of start (attribute.device_events)
        by_start = np.argsort(s, kind="stable")  # ties need no order: gaps need the reach
        live, s, e = live[by_start], s[by_start], e[by_start]
    reach = np.maximum.accumulate(e)
    before = np.r_[-_FAR, reach[:-1]]
    opens = np.flatnonzero(s > before)  # a gap ends at each of these events' starts
    a = np.r_[before[opens], reach[-1]]
    b = np.r_[s[opens], _FAR]
    launch = launches.starts(trace, ev.rows[live[opens]])
    kind = np.full(a.size, 2, dtype=np.int64)
    gap = a[:-1]
    host_wait = (launch >= 0) & (launch > gap)
    kernel_wait = ~host_wait & (gap > -_FAR) & (b[:-1] - gap < kernel_wait_ps)
    kind[:-1][kernel_wait] = 1
    kind[:-1][host_wait] = 0
    return a, b, kind
