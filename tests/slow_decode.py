"""An independent, slow decode of XSpace traces: protobuf's own parser and plain Python, event by event.

Shares nothing with the package but the schema (the wire format and every vectorised step
are reimplemented here the obvious way), so that tests can check the fast reader, the
classification of copies and the wall sweep against it on small traces.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from dataclasses import dataclass, field

from tfprof_towers.xplane.schema import XSpace

DERIVED_NAMES = {
    "Steps", "TensorFlow Ops", "TensorFlow Name Scope", "XLA Ops", "XLA Modules", "Launch Stats",
    "Source code", "XLA TraceMe", "Framework Ops", "Framework Name Scope", "SparseCore Ops",
}
DERIVED_ID = -559038737


@dataclass
class SlowEvent:
    plane: str
    line: str
    name: str
    start_ps: int
    dur_ps: int
    stats: dict[str, object] = field(default_factory=dict)


def _value(stat, stat_names: dict[int, str]):
    kind = stat.WhichOneof("value")
    if kind is None:
        return None
    if kind == "ref_value":
        return stat_names.get(stat.ref_value, "")
    if kind == "bytes_value":
        return stat.bytes_value.decode("utf-8", "replace")
    return getattr(stat, kind)


def slow_events(data: bytes) -> list[SlowEvent]:
    """Every event of a line that is not derived, in file order, with all its stats (the event's
    own, else its metadata's)."""
    space = XSpace.FromString(data)
    stamps = [ln.timestamp_ns for p in space.planes for ln in p.lines]
    origin = min(stamps) if stamps else 0
    out = []
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            if line.name in DERIVED_NAMES or abs(line.id - DERIVED_ID) < 64:
                continue
            line_name = line.name or line.display_name or str(line.id)
            for ev in line.events:
                md = plane.event_metadata.get(ev.metadata_id)
                stats = {}
                if md is not None:
                    for st in md.stats:
                        stats[names.get(st.metadata_id, "")] = _value(st, names)
                for st in ev.stats:
                    stats[names.get(st.metadata_id, "")] = _value(st, names)
                start = (line.timestamp_ns - origin) * 1000 + ev.offset_ps
                name = md.name if md else ""
                out.append(SlowEvent(plane.name, line_name, name, start, ev.duration_ps, stats))
    return out


_COPIES = {"memcpyh2d": "h2d", "memcpyd2h": "d2h", "memcpyd2d": "d2d", "memcpyp2p": "p2p"}


def copy_size(details: object) -> int:
    m = re.search(r"(?:^|\s)size:(\d+)", str(details or ""))
    return int(m.group(1)) if m else 0


def device_kind(name: str) -> str:
    """Category of a GPU-plane event by its name alone (no MemcpyOther, no collectives)."""
    low = name.lower()
    if low in _COPIES:
        return _COPIES[low]
    if low.startswith("memset"):
        return "memset"
    return "compute"


def gpu_totals(events: list[SlowEvent]) -> dict[tuple[str, str], list[int]]:
    """(plane, kind) -> [count, summed duration ps, bytes] over the GPU planes."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in events:
        if not e.plane.startswith("/device:GPU:"):
            continue
        acc = out[(e.plane, device_kind(e.name))]
        acc[0] += 1
        acc[1] += e.dur_ps
        acc[2] += copy_size(e.stats.get("memcpy_details")) if e.name.lower().startswith("memcpy") else 0
    return dict(out)


def exclusive_times(intervals: list[tuple[int, int, int]], lo: int, hi: int) -> dict[int, int]:
    """rank -> time inside [lo, hi) during which it is the lowest active rank; -1 -> idle.
    ``intervals``: (rank, start, end).  Elementary segments between all boundaries, one by one."""
    cuts = sorted({lo, hi} | {min(max(t, lo), hi) for _, s, e in intervals for t in (s, e)})
    out: dict[int, int] = defaultdict(int)
    for a, b in itertools.pairwise(cuts):
        active = [r for r, s, e in intervals if s <= a and e >= b and e > s]
        out[min(active) if active else -1] += b - a
    return dict(out)
