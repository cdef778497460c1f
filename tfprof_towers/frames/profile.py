"""``load(path)``: a trace, a logdir, a run directory or one variant's directory, as tidy frames.

* a trace file (``*.xplane.pb``) or a TensorBoard logdir (every host of its run): one "variant",
  named after the file (``host``) or the folder, analysed host by host
  (:func:`~tfprof_towers.trace.executors.analyze_pod`: in this process, a local process pool or a Dask
  cluster, ``dask=``): ``steps``, ``wall``, ``total``, ``idle`` and ``links`` are the hosts' results
  with a ``host`` column; ``events`` and ``memory`` (one row per event: at pod size, what does not
  fit) come from every host's events merged (:func:`~tfprof_towers.trace.analysis.analyze_xplane`),
  read only when one of them is first asked for;
* a run directory: every variant, analysed exactly as ``report`` analyses them
  (:func:`tfprof_towers.session.report.analyze_run`: the node -> device join, the topology kind,
  the edge bytes and the host -> task map from each record; then audits and advice); its frames
  come from each variant's merged events;
* ``RUN_DIR/variants/NAME``: that variant of its run (the run is analysed as a whole, so its
  speedup, rank and findings are the run's).

:class:`Profile` is frozen; each frame (:data:`~.schema.FRAMES`) is a property made on first use.
No TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.frames.names import FRAMES
from tfprof_towers.rundir.paths import RunDir, is_run_dir
from tfprof_towers.vocab.errors import TowersError

if TYPE_CHECKING:  # pandas is imported when a frame is first asked for: load() itself never needs it
    import pandas as pd

    from tfprof_towers.frames.sql import Source
    from tfprof_towers.rundir.records import VariantRecord
    from tfprof_towers.trace.analysis import Analysis
    from tfprof_towers.trace.pod import HostFailure, PodAnalysis

#: What a profile was loaded from.
TRACE, RUN, VARIANT = "trace", "run", "variant"


@dataclass(frozen=True, eq=False)
class Part:
    """One variant: its trace analysis (None: no trace, or it could not be analysed), its record and
    its ``summary.json`` entry (run directories); or, for a trace or logdir, its hosts' results
    (``pod``) and how to build the merged analysis of every host's events (``merged``, called once,
    when the ``events`` or ``memory`` frame is first asked for)."""

    name: str
    analysis: Analysis | None = None
    record: VariantRecord | None = None
    entry: Mapping[str, Any] | None = None
    pod: PodAnalysis | None = None
    merged: Callable[[], Analysis] | None = field(default=None, repr=False)

    @cached_property
    def full(self) -> Analysis | None:
        """The analysis with every event: ``analysis``, else the merged one (built here, once)."""
        if self.analysis is not None or self.merged is None:
            return self.analysis
        return self.merged()


@dataclass(frozen=True, eq=False)
class Profile:
    """What :func:`load` read: the variants' analyses and, for runs, the summary ``report`` computes."""

    source: str
    kind: str  # TRACE | RUN | VARIANT
    parts: tuple[Part, ...]
    summary: Mapping[str, Any] | None = None  # summary.json's document, as report computes it
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def failed_hosts(self) -> tuple[HostFailure, ...]:
        """The hosts of a trace or logdir that could not be read (each its name, file and one-line
        reason), left out of every frame; empty when every host was read, and for a run directory."""
        return tuple(f for p in self.parts if p.pod is not None for f in p.pod.failures)

    @property
    def variant_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts)

    def part(self, name: str) -> Part:
        for p in self.parts:
            if p.name == name:
                return p
        raise KeyError(name)

    @cached_property
    def variant_dtype(self) -> pd.CategoricalDtype:
        import pandas as pd

        return pd.CategoricalDtype(list(self.variant_names), ordered=True)

    @cached_property
    def device_dtype(self) -> pd.CategoricalDtype:
        """Every device any frame names, host threads first."""
        from tfprof_towers.frames.schema import device_dtype

        names: set[str] = set()
        for p in self.parts:
            if p.pod is not None:
                names.update(_pod_devices(p.pod))
            if p.analysis is not None:
                b = p.analysis.breakdown
                names.update(b.devices)
                names.update(r.src for r in p.analysis.link_rows)
                names.update(r.dst for r in p.analysis.link_rows)
                names.update(_trace_devices(p.analysis))
            if p.record is not None:
                names.update(str(n.get("device")) for n in (p.record.placement or {}).get("nodes") or ()
                             if n.get("device"))
        return device_dtype(names)

    def _event_device_dtype(self) -> pd.CategoricalDtype:
        """:attr:`device_dtype`, and the devices of the merged events of pod parts (the same dtype where
        the hosts' results named them all)."""
        from tfprof_towers.frames.schema import device_dtype

        extra: set[str] = set()
        for p in self.parts:
            if p.pod is not None and p.full is not None:
                extra.update(_trace_devices(p.full))
        known = self.device_dtype
        missing = extra - set(known.categories)
        return device_dtype([*known.categories, *missing]) if missing else known

    def _concat(self, frame: str, per_part: Callable[[Part], pd.DataFrame | None],
                devices: pd.CategoricalDtype | None = None) -> pd.DataFrame:
        """The variants' frames one after the other, with the profile's dtypes (``devices``: the device
        columns', default :attr:`device_dtype`)."""
        import pandas as pd

        from tfprof_towers.frames.schema import (
            COLUMNS,
            DEVICE_COLUMNS,
            as_dtype,
            empty,
            is_open,
            ordered,
            repeat,
        )

        devices = self.device_dtype if devices is None else devices
        pieces = []
        for i, p in enumerate(self.parts):
            df = per_part(p)
            if df is None or not len(df):
                continue
            df = df.copy(deep=False)
            for col in DEVICE_COLUMNS:
                if col in df.columns and is_open(COLUMNS[frame].get(col)):
                    df[col] = as_dtype(df[col], devices)
            df.insert(0, "variant", repeat(i, len(df), self.variant_dtype))
            pieces.append(df)
        if not pieces:
            return empty(frame, self.variant_dtype)
        out = pd.concat(pieces, ignore_index=True) if len(pieces) > 1 else pieces[0].reset_index(drop=True)
        for col, t in COLUMNS[frame].items():  # the other categoricals: one ordered dtype across variants
            if is_open(t) and col not in DEVICE_COLUMNS and col != "variant":
                out[col] = as_dtype(out[col], ordered(_categories(pieces, col)))
        return out[list(COLUMNS[frame])]

    def _trace_frame(self, frame: str, build: str) -> pd.DataFrame:
        """A frame of a few rows per device and step: a pod part's from its hosts' results."""
        from tfprof_towers.frames import tables

        fn = getattr(tables, build)

        def one(p: Part) -> pd.DataFrame | None:
            src = p.pod if p.pod is not None else p.analysis
            return None if src is None else fn(src)

        return self._concat(frame, one)

    def _event_frame(self, frame: str, build: str) -> pd.DataFrame:
        """A frame of one row per event: from every event (pod parts: merged now, once)."""
        from tfprof_towers.frames import tables

        fn = getattr(tables, build)
        per_part = {id(p): p.full for p in self.parts}  # merged first: their devices name the dtype
        return self._concat(frame, lambda p: None if per_part[id(p)] is None else fn(per_part[id(p)]),
                            self._event_device_dtype())

    @cached_property
    def events(self) -> pd.DataFrame:
        """variant, task, device, line, category, name, op_type, node, step, start_s, dur_s, bytes, src,
        dst: one row per event.  For a trace or logdir, every host's events are read and merged when
        this frame (or ``memory``) is first asked for: at pod size, the one frame that does not fit."""
        return self._event_frame("events", "events")

    @cached_property
    def steps(self) -> pd.DataFrame:
        """variant, host, device, step, start_s, end_s: the windows each device's time is attributed in."""
        return self._trace_frame("steps", "steps")

    @cached_property
    def wall(self) -> pd.DataFrame:
        """variant, host, device, step, category, seconds: the exclusive breakdown (sums to the step)."""
        return self._trace_frame("wall", "wall")

    @cached_property
    def total(self) -> pd.DataFrame:
        """variant, host, device, step, category, count, seconds, bytes: events counted in full."""
        return self._trace_frame("total", "total")

    @cached_property
    def idle(self) -> pd.DataFrame:
        """variant, host, device, step, kind (host_wait, kernel_wait, other), seconds: accelerators only."""
        return self._trace_frame("idle", "idle")

    @cached_property
    def links(self) -> pd.DataFrame:
        """variant, host, src, dst, kind, steps, count, bytes, seconds, gbps, measured: over all ``steps``."""
        return self._trace_frame("links", "links")

    @cached_property
    def memory(self) -> pd.DataFrame:
        """variant, device, allocator, step, start_s, activity, bytes_in_use, bytes_available,
        requested_bytes, allocation_bytes, op, region_type, data_type, tensor_shape: one row per
        allocator event (none for a trace without them)."""
        return self._event_frame("memory", "memory")

    @cached_property
    def findings(self) -> pd.DataFrame:
        """variant, rule, severity, message, suggestion (run directories: the report's findings)."""
        from tfprof_towers.frames import tables
        from tfprof_towers.frames.schema import empty

        if self.summary is None:  # a trace alone has no findings document
            return empty("findings", self.variant_dtype)
        return self._concat("findings", lambda p: tables.findings(self.summary, p.name))

    @cached_property
    def variants(self) -> pd.DataFrame:
        """Run directories: status, step time (median, p10, p90, min, max, timed steps), speedup, rank."""
        from tfprof_towers.frames import tables

        rec = ((self.summary or {}).get("recommendation") or {}).get("variant")
        return self._concat("variants",
                            lambda p: None if p.entry is None else tables.variant_row(p.entry, rec))

    @cached_property
    def step_times(self) -> pd.DataFrame:
        """variant, phase (timed | profiled), index, seconds: every measured step's duration."""
        from tfprof_towers.frames import tables

        return self._concat("step_times", lambda p: tables.step_times(p.record))

    @cached_property
    def losses(self) -> pd.DataFrame:
        """variant, step, loss: the first training steps' losses."""
        from tfprof_towers.frames import tables

        return self._concat("losses", lambda p: None if p.entry is None else tables.losses(p.entry))

    @cached_property
    def placement(self) -> pd.DataFrame:
        """variant, node, op_type, kernel, fused, device, requested, flops, source_file, source_line,
        sources."""
        from tfprof_towers.frames import tables

        return self._concat("placement", lambda p: tables.placement(p.record))

    def frames(self, names: Sequence[str] | None = None) -> dict[str, pd.DataFrame]:
        """Every frame, or those ``names`` (each of :data:`~.names.FRAMES`: a ``ValueError`` names an
        unknown one): at pod size, leave out ``events`` (and ``memory``), the frames of every event."""
        if names is None:
            return {name: getattr(self, name) for name in FRAMES}
        unknown = [n for n in names if n not in FRAMES]
        if unknown:
            raise ValueError(f"no frame named {', '.join(unknown)} (the frames: {', '.join(FRAMES)})")
        return {name: getattr(self, name) for name in FRAMES if name in names}

    def sql(self, query: str) -> pd.DataFrame:
        """DuckDB SQL over the frames, one view per frame, each built only when the query names it
        (:mod:`tfprof_towers.frames.sql`); read-only.  Raises
        :class:`~tfprof_towers.vocab.errors.QueryError` with DuckDB's message for a query it refuses."""
        from tfprof_towers.frames.sql import Source, query_sources

        return query_sources([Source(trace_label(Path(self.source)), self)], query)

    def to_parquet(self, folder: Path | str, frames: Sequence[str] | None = None) -> list[Path]:
        """One ``<frame>.parquet`` per frame (``frames``: those only) in ``folder`` (made if needed), with
        pyarrow."""
        from tfprof_towers.frames.export import write_frames

        return write_frames(self.frames(frames), _out_folder(folder), "parquet", inputs=(self.source,))

    def to_csv(self, folder: Path | str, frames: Sequence[str] | None = None) -> list[Path]:
        """One ``<frame>.csv`` per frame (``frames``: those only) in ``folder`` (dtypes are not kept: use
        Parquet for that)."""
        from tfprof_towers.frames.export import write_frames

        return write_frames(self.frames(frames), _out_folder(folder), "csv", inputs=(self.source,))

    def __repr__(self) -> str:
        return f"<Profile {self.kind} {self.source!r}: {', '.join(self.variant_names)}>"


def _out_folder(folder: Path | str) -> Path:
    """``folder`` as a path; an empty name (``Path("")`` is the current directory) refused."""
    if not str(folder).strip():
        raise TowersError(f"{str(folder)!r}: an empty name; give a folder to write the frames into")
    return Path(folder)


def _categories(frames: Sequence[pd.DataFrame], col: str) -> list[str]:
    """The categories (or values) of column ``col`` across ``frames``, first-seen order."""
    import pandas as pd

    out: dict[str, None] = {}
    for df in frames:
        s = df[col]
        vals = s.cat.categories if isinstance(s.dtype, pd.CategoricalDtype) else pd.unique(s.astype(str))
        out.update(dict.fromkeys(str(x) for x in vals))
    return list(out)


def _pod_devices(pod: PodAnalysis) -> set[str]:
    """The device names the hosts' results carry (breakdowns, links, allocators)."""
    names = {d for r in pod.results for d in r.breakdown.devices}
    names.update(m.device for m in pod.memory)
    names.update(x for r in pod.link_rows for x in (r.src, r.dst))
    return names - {""}


def _trace_devices(a: Analysis) -> set[str]:
    """The device names the trace's events carry (device, copy source and destination)."""
    c = a.trace.columns
    codes = np.unique(np.concatenate([np.unique(c.device), np.unique(c.src), np.unique(c.dst)]))
    m = a.trace.memory
    held = {m.texts[k] for k in np.unique(m.device).tolist()}  # allocators' devices, kernels or not
    return ({c.text(int(k)) for k in codes.tolist()} | held) - {""}


# ------------------------------------------------------------------------------------------
# load


def load(path: Path | str, run: str | None = None, dask: Any = None,
         progress: Callable[..., None] | None = None) -> Profile:
    """A trace file, a logdir (all hosts), a run directory (all variants) or ``RUN/variants/NAME``.

    ``run``: which profile run of a logdir (``--run``; without it the newest, and ``notes`` say so),
    or which variant of a run directory; refused for a single trace file or one variant's directory.
    ``dask``: for a trace or logdir, where its hosts are analysed -- a Dask scheduler's address
    (``tcp://host:8786``) or a ``distributed.Client`` (None: a local process pool); ignored for a run
    directory (``report``'s analysis).  ``progress``: called as each host is done (hosts done, hosts in
    all, its name, its :class:`~tfprof_towers.trace.pod.HostFailure` or None), as ``analyze`` shows it.

    Raises :class:`~tfprof_towers.TraceError` (a path that is missing, a symbolic link loop, a FIFO
    or a device, no profile in a folder, a trace that cannot be read) and its base class
    :class:`~tfprof_towers.TowersError` (anything else that cannot be loaded: a run directory that
    cannot be used, an unknown variant); both carry one line (``str(exc)``) and an ``exit_code``.
    """
    from tfprof_towers.trace.locate import check_path

    p = _load_path(path)
    check_path(p)  # one line for a missing path, a link loop, a FIFO or a device: before any resolve()
    if p.is_dir() and is_run_dir(p):
        return load_run(p, only=run)
    q = p.resolve()  # "." inside a variant's directory is that variant
    if q.is_dir() and q.parent.name == "variants" and is_run_dir(q.parent.parent):
        if run is not None:
            raise TowersError(f"--run {run}: does not apply to one variant's directory ({p})")
        return load_run(q.parent.parent, only=q.name)
    return load_trace(p, run, dask, progress)


def _load_path(path: Any) -> Path:
    """``load``'s path, refusing what names no profile: not a path (a number, None, bytes), an empty
    name (``Path("")`` is the current directory) or the filesystem's root (a walk of every file)."""
    if isinstance(path, os.PathLike) and not isinstance(path, Path):
        path = os.fspath(path)  # another path type; bytes are refused below
    if not isinstance(path, str | Path):
        raise TowersError(f"load: the path must be a str or pathlib.Path, not {type(path).__name__} "
                          f"({path!r:.60})")
    if not str(path).strip():
        raise TowersError("load: an empty path (it would be the current directory); give the trace, logdir "
                          "or run directory")
    p = Path(path)
    try:
        root = p.resolve()
    except (OSError, RuntimeError):  # a link loop: check_path says so next
        return p
    if root == root.parent:  # "/", "//", "../../.." from near the top
        raise TowersError(f"load: {p} is the filesystem's root; give the trace, logdir or run directory")
    return p


def trace_label(path: Path) -> str:
    name = path.name
    for suffix in (".xplane.pb", ".pb"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name or str(path)


def run_labels(paths: Sequence[Path | str]) -> list[str]:
    """Each path's label in a query over several (:func:`sql`'s ``run`` column): its name (a trace's
    without ``.xplane.pb``); where two share a name, the path as given; the same path again gets
    ``#2``, ``#3``."""
    names = [trace_label(Path(p)) for p in paths]
    out = [n if names.count(n) == 1 else str(p) for n, p in zip(names, paths)]
    seen: dict[str, int] = {}
    for i, label in enumerate(out):
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            out[i] = f"{label}#{seen[label]}"
    return out


def sql(paths: Path | str | Sequence[Path | str], query: str, run: str | None = None,
        dask: Any = None) -> pd.DataFrame:
    """DuckDB SQL ``query`` over the frames of ``paths`` (:mod:`tfprof_towers.frames.sql`): one path, or
    several, each row then naming its ``run`` (:func:`run_labels`); ``run`` and ``dask`` as for
    :func:`load`, for every path.  Raises :class:`~tfprof_towers.vocab.errors.QueryError` (DuckDB's
    message, one line) for a query DuckDB refuses, and ``load``'s errors for a path it cannot read."""
    from tfprof_towers.frames.sql import query_sources

    return query_sources(sources(paths, run, dask), query)


def sources(paths: Path | str | Sequence[Path | str], run: str | None = None, dask: Any = None,
            progress: Callable[..., None] | None = None) -> list[Source]:
    """Each path loaded (:func:`load`), under its label (:func:`run_labels`): what :func:`sql` queries."""
    from tfprof_towers.frames.sql import Source

    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not items:
        raise TowersError("sql: give at least one path")
    profiles = [load(p, run=run, dask=dask, progress=progress) for p in items]
    return [Source(label, p) for label, p in zip(run_labels(items), profiles)]


def load_trace(path: Path, run: str | None = None, dask: Any = None,
               progress: Callable[..., None] | None = None) -> Profile:
    """A trace file or a logdir, analysed host by host (``dask``, ``progress``: :func:`load`); the merged
    analysis of every event is left for the ``events`` and ``memory`` frames to build."""
    from tfprof_towers.trace.executors import analyze_pod
    from tfprof_towers.xplane.glibc_heap import prefer_heap

    prefer_heap()
    pod = analyze_pod(path, run, executor=dask, progress=progress)
    skip = tuple(f.name for f in pod.failures)  # the merged events leave out the hosts that failed
    part = Part(trace_label(path), pod=pod, merged=partial(merged_analysis, path, run, skip))
    return Profile(str(path), TRACE, (part,), None, pod.trace_notes)


def merged_analysis(path: Path, run: str | None = None, skip: tuple[str, ...] = ()) -> Analysis:
    """Every host of ``path``'s events in one analysis (the ``events`` and ``memory`` frames'), but the
    hosts named in ``skip``."""
    from tfprof_towers.trace.analysis import analyze_trace
    from tfprof_towers.trace.hosts import load_hosts
    from tfprof_towers.xplane.glibc_heap import prefer_heap

    prefer_heap()
    return analyze_trace(load_hosts(path, run, skip=skip))


def load_run(root: Path, only: str | None = None) -> Profile:
    """The run as ``report`` computes it; ``only``: one variant of it."""
    from tfprof_towers.rundir.records import load_records, load_run_or_skip
    from tfprof_towers.session.report import analyze_run

    rd = RunDir(root)
    summary, analyses = analyze_run(rd)
    run, _ = load_run_or_skip(rd)
    records = load_records(rd, run)
    doc = summary.to_json()
    entries = {e["name"]: e for e in doc["variants"]}
    names: Sequence[str] = list(entries)
    if only is not None:
        if only not in entries:
            raise TowersError(f"variant {only}: not in the run {root} (it has: {', '.join(names) or 'none'})")
        names = [only]
    parts = tuple(Part(n, t.merged_analysis() if (t := analyses.get(n)) else None, records.get(n), entries[n])
                  for n in names)
    src = str(root if only is None else rd.variant_dir(only))
    return Profile(src, RUN if only is None else VARIANT, parts, doc, tuple(doc.get("problems") or ()))


def per_step(frame: pd.DataFrame, by: Sequence[str], value: str = "seconds") -> pd.DataFrame:
    """``value`` summed over ``by`` and divided by each variant's number of steps (the figures
    ``analyze --per-step`` and the report print)."""
    n = frame.groupby("variant", observed=True)["step"].nunique()
    out = frame.groupby(["variant", *by], observed=True)[value].sum().reset_index()
    out[value] = out[value] / out["variant"].map(n).astype(np.float64)
    return out
