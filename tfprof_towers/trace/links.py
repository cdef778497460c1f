"""Per link (src, dst, kind): bytes, count, seconds and achieved GB/s.

Device copies (``h2d``, ``d2h``, ``d2d``, ``p2p``) are measured on the GPU planes.
On logical-CPU runs the cross-device edges are ``_Send`` ops on the host: their
count comes from the trace, their bytes from the run's partition graphs
(``edge_bytes``: rendezvous edge name -> bytes), and their time cannot be
measured -- such rows say ``measured = False`` and carry no seconds or GB/s.
A send/recv edge between two tasks (devices of different ``/job:…/task:…``) is a link of
kind ``network``, listed whatever the run's kind: its ``_Send`` events are counted, or its
``_Recv`` events where no trace holds the sends; its time is not measured either (the ops'
durations are not the transfer's).  Grouped with numpy over the event columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.trace.attribute import exact_sums
from tfprof_towers.trace.columns import EventColumns
from tfprof_towers.trace.load import Trace
from tfprof_towers.vocab.categories import COPY_CATEGORIES, EVENT_CATEGORIES
from tfprof_towers.vocab.device_names import crosses_tasks
from tfprof_towers.xplane import DEVICE, dense_unique, distinct

if TYPE_CHECKING:
    import pandas as pd

LINK_COLUMNS = {
    "src": "object", "dst": "object", "kind": "object", "bytes": "Int64", "count": "int64",
    "seconds": "float64", "gbps": "float64", "measured": "bool",
}
SEND_TYPES = ("_Send", "_HostSend")
RECV_TYPES = ("_Recv", "_HostRecv")
IS_COPY = np.array([c in COPY_CATEGORIES for c in EVENT_CATEGORIES], dtype=bool)


@dataclass(frozen=True)
class Link:
    """One link: ``bytes`` None when not known; ``seconds``/``gbps`` None when not measured."""

    src: str
    dst: str
    kind: str
    bytes: int | None
    count: int
    seconds: float | None
    gbps: float | None
    measured: bool


def empty_links() -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in LINK_COLUMNS.items()})


def links_frame(links: list[Link]) -> pd.DataFrame:
    import pandas as pd

    if not links:
        return empty_links()
    return pd.DataFrame({
        "src": [x.src for x in links],
        "dst": [x.dst for x in links],
        "kind": [x.kind for x in links],
        "bytes": pd.array([x.bytes for x in links], dtype="Int64"),
        "count": [x.count for x in links],
        "seconds": [math.nan if x.seconds is None else x.seconds for x in links],
        "gbps": [math.nan if x.gbps is None else x.gbps for x in links],
        "measured": [x.measured for x in links],
    }).astype(LINK_COLUMNS)


def link_table(
    trace: Trace, kind: str | None = None, edge_bytes: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """:func:`links` as a DataFrame (:data:`LINK_COLUMNS`)."""
    return links_frame(links(trace, kind, edge_bytes))


def links(trace: Trace, kind: str | None = None, edge_bytes: Mapping[str, int] | None = None) -> list[Link]:
    """Copy links from the device planes, send/recv links for logical-CPU runs, network links always;
    sorted by kind, src, dst."""
    return join_links([link_parts(trace, edge_bytes)], kind)


#: A link's figures before joining hosts: (src, dst, kind) -> [bytes (None: not known), count, dur_ps].
Sums = dict[tuple[str, str, str], list]


@dataclass(frozen=True)
class LinkParts:
    """One host's links, kept apart where joining hosts needs them apart: its copies, its sends across
    tasks, its receives across tasks (counted only for pairs no host holds sends for), its sends within
    a task (listed for logical-CPU runs), and whether it has device planes."""

    copies: Sums
    sends: Sums
    recvs: Sums
    local: Sums
    has_device_planes: bool


def link_parts(trace: Trace, edge_bytes: Mapping[str, int] | None = None) -> LinkParts:
    """:class:`LinkParts` of one trace (one host, or hosts merged)."""
    c = trace.columns
    inside = c.step >= 0
    sends, recvs, local = _send_events(c, inside)
    return LinkParts(copy_sums(c, inside), send_sums(c, sends, edge_bytes, "network"),
                     send_sums(c, recvs, edge_bytes, "network"), send_sums(c, local, edge_bytes, "send_recv"),
                     bool((c.line_kind == DEVICE).any()))


def _add(into: Sums, more: Sums) -> None:
    for key, (b, n, d) in more.items():
        if key in into:
            ob, on, od = into[key]
            into[key] = [None if ob is None or b is None else ob + b, on + n, od + d]
        else:
            into[key] = [b, n, d]


def join_links(parts: Sequence[LinkParts], kind: str | None = None) -> list[Link]:
    """The hosts' links as one trace's: copies summed; a pair across tasks counted by its sends where
    some host holds them, else by its receives; sends within a task listed where the run's ``kind`` is
    logical-CPU (or, unknown, where no host has device planes).  Sorted by kind, src, dst."""
    copies: Sums = {}
    sends: Sums = {}
    recvs: Sums = {}
    local: Sums = {}
    for p in parts:
        _add(copies, p.copies)
        _add(sends, p.sends)
        _add(recvs, p.recvs)
        _add(local, p.local)
    network = dict(sends)
    network.update({k: v for k, v in recvs.items() if k not in sends})
    if not (kind == "logical-cpu" or (kind is None and not any(p.has_device_planes for p in parts))):
        local = {}
    out = []
    for (src, dst, k), (b, n, d) in copies.items():
        seconds = int(d) / 1e12
        out.append(Link(src, dst, k, int(b), int(n), seconds, int(b) / seconds / 1e9 if seconds > 0 else None,
                        True))
    for group in (network, local):
        out += [Link(src, dst, k, None if b is None else int(b), int(n), None, None, False)
                for (src, dst, k), (b, n, _) in group.items()]
    return sorted(out, key=lambda x: (x.kind, x.src, x.dst))


def _groups(*keys: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Rows grouped by equal keys (small non-negative ints): (group of each row, each group's keys)."""
    combined = np.zeros(keys[0].size, dtype=np.int64)
    for k in keys:
        combined = combined * (int(k.max()) + 1 if k.size else 1) + k
    uniq, inv = dense_unique(combined)  # np.unique's, without a sort where the keys are few
    first = np.zeros(uniq.size, dtype=np.int64)
    first[inv[::-1]] = np.arange(inv.size - 1, -1, -1)
    return inv, [k[first] for k in keys]


def copy_sums(c: EventColumns, inside: np.ndarray) -> Sums:
    """Copies in the steps by (src, dst, category): bytes, count, duration."""
    copies = np.flatnonzero(IS_COPY.take(c.category) & inside)
    if not copies.size:
        return {}
    group, (src, dst, cat) = _groups(c.src[copies], c.dst[copies], c.category[copies].astype(np.int64))
    n = src.size
    nbytes = exact_sums(group, c.bytes[copies], n)
    count = np.bincount(group, minlength=n)
    dur = exact_sums(group, c.dur_ps[copies], n)
    items = c.strings.items
    return {(items[src[i]], items[dst[i]], EVENT_CATEGORIES[cat[i]]):
            [int(nbytes[i]), int(count[i]), int(dur[i])] for i in range(n)}


def _send_events(c: EventColumns, inside: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Events of send/recv edges with both ends known: (sends across tasks, receives across tasks of
    pairs this trace holds no sends for, sends within one task)."""
    items = c.strings.items
    send_codes = [c.code_of(t) for t in SEND_TYPES]
    recv_codes = [c.code_of(t) for t in RECV_TYPES]
    known = inside & (c.src > 0) & (c.dst > 0)
    is_send = known & np.isin(c.op_type, [x for x in send_codes if x >= 0])
    is_recv = known & np.isin(c.op_type, [x for x in recv_codes if x >= 0])
    ends = np.flatnonzero(is_send | is_recv)
    pairs = np.unique(np.stack([c.src[ends], c.dst[ends]]), axis=1) if ends.size else np.zeros((2, 0))
    crossing = {
        (int(a), int(b)) for a, b in pairs.T.tolist() if crosses_tasks(items[a], items[b])
    }
    none = np.zeros(0, np.int64)
    if not crossing:
        return none, none, np.flatnonzero(is_send)
    key = c.src.astype(np.int64) << 32 | c.dst.astype(np.int64)
    cross_keys = np.array([a << 32 | b for a, b in crossing], dtype=np.int64)
    across = np.isin(key, cross_keys)
    with_sends = distinct(key[is_send & across])
    return (np.flatnonzero(is_send & across), np.flatnonzero(is_recv & across & ~np.isin(key, with_sends)),
            np.flatnonzero(is_send & ~across))


def send_sums(
    c: EventColumns, rows: np.ndarray, edge_bytes: Mapping[str, int] | None, kind: str = "send_recv"
) -> Sums:
    """Send/recv events grouped by (src, dst): counts measured, bytes from ``edge_bytes`` (None without
    it), time not measured (0)."""
    if not rows.size:
        return {}
    group, (src, dst) = _groups(c.src[rows], c.dst[rows])
    n = src.size
    items = c.strings.items
    nbytes: list[int | None] = [None] * n
    if edge_bytes is not None:
        uniq, inv = np.unique(c.edge[rows], return_inverse=True)
        per_edge = np.array([int(edge_bytes.get(items[e], 0)) for e in uniq.tolist()], dtype=np.int64)
        nbytes = exact_sums(group, per_edge[inv.ravel()], n).tolist()
    count = np.bincount(group, minlength=n)
    return {(items[src[i]], items[dst[i]], kind): [nbytes[i], int(count[i]), 0] for i in range(n)}
