"""Build XSpace traces in code: for tests (exact expected numbers) and benchmarks.

    b = TraceBuilder()
    gpu = b.plane("/device:GPU:0")
    s = gpu.line("Stream #13(Compute)", timestamp_ns=1_000)
    s.event("sgemm_kernel", start_ps=1_000_000, dur_ps=500_000, stats={"hlo_op": Ref("dot.1")})
    b.write(path)

Times are absolute picoseconds; the builder turns them into the line's
``timestamp_ns`` plus each event's ``offset_ps``.  A stat value is an ``int``
(int64), ``float`` (double), ``str`` (inline string), ``bytes`` or :class:`Ref`
(a string stored as a ``ref_value`` to a stat-metadata entry, as profilers do).
Stats given to :meth:`PlaneBuilder.event_metadata_id` sit on the event metadata
instead of each event.  :meth:`PlaneBuilder.bulk_line` writes a whole line of many
events at once, as bytes (:mod:`.encode`), for traces of millions of events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tfprof_towers.testing.encode import BulkStat, encode_events, length_delimited, line_header
from tfprof_towers.xplane.schema import XSpace
from tfprof_towers.xplane.tables import DERIVED_LINE_ID

#: Ids the profiler gives derived lines, counting down from 0xDEADBEEF negated.
DERIVED_LINE_IDS = {
    name: DERIVED_LINE_ID + i
    for i, name in enumerate(("Steps", "XLA Modules", "XLA Ops", "TensorFlow Name Scope", "TensorFlow Ops",
                              "Source code", "Launch Stats"))
}


@dataclass(frozen=True)
class Ref:
    """A string stat value stored by reference (``ref_value``)."""

    value: str


StatValue = int | float | str | bytes | Ref


class PlaneBuilder:
    def __init__(self, plane) -> None:
        self._plane = plane
        self._event_ids: dict[str, int] = {}
        self._stat_ids: dict[str, int] = {}
        self.raw_lines: list[bytes] = []  # serialized XLine messages of bulk_line

    @property
    def proto(self):
        return self._plane

    def event_metadata_id(self, name: str, stats: Mapping[str, StatValue] | None = None) -> int:
        if name not in self._event_ids:
            mid = len(self._event_ids) + 1
            self._event_ids[name] = mid
            md = self._plane.event_metadata[mid]
            md.id, md.name = mid, name
            self._fill_stats(md.stats, stats or {})
        return self._event_ids[name]

    def stat_metadata_id(self, name: str) -> int:
        if name not in self._stat_ids:
            sid = len(self._stat_ids) + 1
            self._stat_ids[name] = sid
            md = self._plane.stat_metadata[sid]
            md.id, md.name = sid, name
        return self._stat_ids[name]

    def _fill_stats(self, container, stats: Mapping[str, StatValue]) -> None:
        for key, value in stats.items():
            st = container.add(metadata_id=self.stat_metadata_id(key))
            if isinstance(value, Ref):
                st.ref_value = self.stat_metadata_id(value.value)
            elif isinstance(value, bool | int):
                st.int64_value = int(value)
            elif isinstance(value, float):
                st.double_value = value
            elif isinstance(value, str):
                st.str_value = value
            elif isinstance(value, bytes):
                st.bytes_value = value
            else:
                raise TypeError(f"stat {key!r}: unsupported value {value!r}")

    def stats(self, stats: Mapping[str, StatValue]) -> PlaneBuilder:
        """Plane-level stats (e.g. ``core_count``)."""
        self._fill_stats(self._plane.stats, stats)
        return self

    def line(self, name: str, line_id: int | None = None, timestamp_ns: int = 0) -> LineBuilder:
        if line_id is None:
            line_id = DERIVED_LINE_IDS.get(name, len(self._plane.lines) + 1)
        line = self._plane.lines.add(id=line_id, name=name, timestamp_ns=timestamp_ns)
        return LineBuilder(self, line)

    def bulk_line(
        self, name: str, line_id: int, timestamp_ns: int, names: Sequence[str], name_index: np.ndarray,
        start_ps: np.ndarray, dur_ps: np.ndarray, stats: Mapping[str, BulkStat] | None = None,
        relative: bool = False,
    ) -> PlaneBuilder:
        """A line of many events, encoded at once: event i is named ``names[name_index[i]]``, starts
        at ``start_ps[i]`` (absolute; ``relative``: after the line's ``timestamp_ns``, so an epoch
        timestamp needs no int64 picoseconds) and lasts ``dur_ps[i]``; ``stats`` in the order given."""
        md = np.array([self.event_metadata_id(nm) for nm in names], dtype=np.int64)
        encoded = []
        for key, stat in (stats or {}).items():
            sid, refs = self.stat_metadata_id(key), None
            if stat.kind == "ref":
                refs = np.array([self.stat_metadata_id(t) for t in stat.texts], dtype=np.int64)
            encoded.append((sid, stat, refs))
        offsets = np.asarray(start_ps, dtype=np.int64) - (0 if relative else timestamp_ns * 1000)
        events = encode_events(md[np.asarray(name_index)], offsets, np.asarray(dur_ps), encoded)
        self.raw_lines.append(line_header(line_id, name, timestamp_ns) + events)
        return self


class LineBuilder:
    def __init__(self, plane: PlaneBuilder, line) -> None:
        self._plane = plane
        self._line = line

    @property
    def proto(self):
        return self._line

    def event(
        self, name: str, start_ps: int, dur_ps: int, stats: Mapping[str, StatValue] | None = None,
    ) -> LineBuilder:
        ev = self._line.events.add(metadata_id=self._plane.event_metadata_id(name),
                                   offset_ps=start_ps - self._line.timestamp_ns * 1000, duration_ps=dur_ps)
        self._plane._fill_stats(ev.stats, stats or {})
        return self


class TraceBuilder:
    """An XSpace under construction."""

    def __init__(self, hostname: str = "testhost") -> None:
        self.space = XSpace()
        self.space.hostnames.append(hostname)
        self._planes: list[PlaneBuilder] = []

    def plane(self, name: str, plane_id: int | None = None) -> PlaneBuilder:
        plane = self.space.planes.add(id=len(self.space.planes) if plane_id is None else plane_id, name=name)
        self._planes.append(PlaneBuilder(plane))
        return self._planes[-1]

    def to_bytes(self) -> bytes:
        if not any(p.raw_lines for p in self._planes):
            return self.space.SerializeToString()
        # planes one by one, each followed by its bulk lines (XPlane field 3), then the rest
        parts = []
        for p in self._planes:
            plane = p.proto.SerializeToString() + b"".join(length_delimited(3, ln) for ln in p.raw_lines)
            parts.append(length_delimited(1, plane))
        rest = XSpace()
        rest.CopyFrom(self.space)
        del rest.planes[:]
        parts.append(rest.SerializeToString())
        return b"".join(parts)

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.to_bytes())
        return path

    def write_logdir(self, logdir: Path, run: str = "2024_01_01_00_00_00", host: str = "testhost") -> Path:
        """Write as TensorBoard does: ``logdir/plugins/profile/<run>/<host>.xplane.pb``."""
        return self.write(Path(logdir) / "plugins" / "profile" / run / f"{host}.xplane.pb")

