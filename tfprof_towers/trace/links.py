"""Per link (src, dst, kind): bytes, count, seconds and achieved GB/s.

Device copies (``h2d``, ``d2h``, ``d2d``, ``p2p``) are measured on the GPU planes.
On logical-CPU runs the cross-device edges are ``_Send`` ops on the host: their
count comes from the trace, their bytes from the run's partition graphs
(``edge_bytes``: rendezvous edge name -> bytes), and their time cannot be
measured -- such rows say ``measured = False`` and carry no seconds or GB/s.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..categories import COPY_CATEGORIES
from .load import Trace

LINK_COLUMNS = {
    "src": "object",
    "dst": "object",
    "kind": "object",
    "bytes": "Int64",
    "count": "int64",
    "seconds": "float64",
    "gbps": "float64",
    "measured": "bool",
}
SEND_TYPES = ("_Send", "_HostSend")


def empty_links() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in LINK_COLUMNS.items()})


def link_table(
    trace: Trace, kind: str | None = None, edge_bytes: Mapping[str, int] | None = None
) -> pd.DataFrame:
    """Copy links from the device planes, plus send/recv links for logical-CPU runs."""
    ev = trace.events
    inside = ev[ev["step"] >= 0]
    parts = [copy_links(inside)]
    has_device_planes = ev["plane"].astype(str).str.startswith("/device:").any()
    if kind == "logical-cpu" or (kind is None and not has_device_planes):
        parts.append(send_links(inside, edge_bytes))
    parts = [p for p in parts if len(p)]
    if not parts:
        return empty_links()
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["kind", "src", "dst"], kind="stable").reset_index(drop=True).astype(LINK_COLUMNS)


def copy_links(events: pd.DataFrame) -> pd.DataFrame:
    copies = events[events["category"].isin(COPY_CATEGORIES)]
    if not len(copies):
        return empty_links()
    g = copies.groupby(["src_device", "dst_device", "category"], observed=True, sort=True)
    out = g.agg(bytes=("bytes", "sum"), count=("dur_ps", "size"), dur_ps=("dur_ps", "sum")).reset_index()
    seconds = out["dur_ps"].to_numpy(dtype=np.float64) / 1e12
    with np.errstate(divide="ignore", invalid="ignore"):
        gbps = np.where(seconds > 0, out["bytes"].to_numpy(dtype=np.float64) / seconds / 1e9, np.nan)
    return pd.DataFrame(
        {
            "src": out["src_device"].astype(str),
            "dst": out["dst_device"].astype(str),
            "kind": out["category"].astype(str),
            "bytes": out["bytes"].astype("Int64"),
            "count": out["count"].astype("int64"),
            "seconds": seconds,
            "gbps": gbps,
            "measured": True,
        }
    )


def send_links(events: pd.DataFrame, edge_bytes: Mapping[str, int] | None) -> pd.DataFrame:
    """``_Send`` events grouped by (src, dst): counts measured, bytes from ``edge_bytes``, time not."""
    sends = events[
        events["op_type"].isin(SEND_TYPES) & (events["src_device"] != "") & (events["dst_device"] != "")
    ]
    if not len(sends):
        return empty_links()
    if edge_bytes is not None:
        # a categorical maps once per distinct edge, not per event
        per_edge = sends["edge"].map(lambda e: int(edge_bytes.get(e, 0)))
        sends = sends.assign(link_bytes=np.asarray(per_edge, dtype=np.int64))
    else:
        sends = sends.assign(link_bytes=0)
    g = sends.groupby(["src_device", "dst_device"], observed=True, sort=True)
    out = g.agg(bytes=("link_bytes", "sum"), count=("dur_ps", "size")).reset_index()
    return pd.DataFrame(
        {
            "src": out["src_device"].astype(str),
            "dst": out["dst_device"].astype(str),
            "kind": "send_recv",
            "bytes": out["bytes"].astype("Int64")
            if edge_bytes is not None
            else pd.array([pd.NA] * len(out), "Int64"),
            "count": out["count"].astype("int64"),
            "seconds": np.nan,
            "gbps": np.nan,
            "measured": False,
        }
    )
