"""``load(path)``: a trace, a logdir, a run directory or one variant's directory, as tidy frames.

* a trace file (``*.xplane.pb``) or a TensorBoard logdir (every host of its run): one "variant",
  named after the file (``host``) or the folder;
* a run directory: every variant, analysed exactly as ``report`` analyses them
  (:func:`tfprof_towers.session.report.analyse_run`: the node -> device join, the topology kind,
  the edge bytes and the host -> task map from each record; then audits and advice);
* ``RUN_DIR/variants/NAME``: that variant of its run (the run is analysed as a whole, so its
  speedup, rank and findings are the run's).

:class:`Profile` is frozen; each frame (:data:`~.schema.FRAMES`) is a property made on first use.
No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.frames.names import FRAMES
from tfprof_towers.rundir.paths import RunDir, is_run_dir
from tfprof_towers.vocab.errors import TowersError

if TYPE_CHECKING:  # pandas is imported when a frame is first asked for: load() itself never needs it
    import pandas as pd

    from tfprof_towers.rundir.records import VariantRecord
    from tfprof_towers.trace.analysis import Analysis

#: What a profile was loaded from.
TRACE, RUN, VARIANT = "trace", "run", "variant"


@dataclass(frozen=True, eq=False)
class Part:
    """One variant: its trace analysis (None: no trace, or it could not be analysed), its record and
    its ``summary.json`` entry (run directories)."""

    name: str
    analysis: Analysis | None = None
    record: VariantRecord | None = None
    entry: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False)
class Profile:
    """What :func:`load` read: the variants' analyses and, for runs, the summary ``report`` computes."""

    source: str
    kind: str  # TRACE | RUN | VARIANT
    parts: tuple[Part, ...]
    summary: Mapping[str, Any] | None = None  # summary.json's document, as report computes it
    notes: tuple[str, ...] = field(default_factory=tuple)

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

    def _concat(self, frame: str, per_part: Callable[[Part], pd.DataFrame | None]) -> pd.DataFrame:
        """The variants' frames one after the other, with the profile's dtypes."""
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

        pieces = []
        for i, p in enumerate(self.parts):
            df = per_part(p)
            if df is None or not len(df):
                continue
            df = df.copy(deep=False)
            for col in DEVICE_COLUMNS:
                if col in df.columns and is_open(COLUMNS[frame].get(col)):
                    df[col] = as_dtype(df[col], self.device_dtype)
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
        from tfprof_towers.frames import tables

        fn = getattr(tables, build)
        return self._concat(frame, lambda p: None if p.analysis is None else fn(p.analysis))

    @cached_property
    def events(self) -> pd.DataFrame:
        """variant, task, device, line, category, name, op_type, node, step, start_s, dur_s, bytes, src,
        dst: one row per event."""
        return self._trace_frame("events", "events")

    @cached_property
    def steps(self) -> pd.DataFrame:
        """variant, device, step, start_s, end_s: the windows each device's time is attributed in."""
        return self._trace_frame("steps", "steps")

    @cached_property
    def wall(self) -> pd.DataFrame:
        """variant, device, step, category, seconds: the exclusive breakdown (sums to the step)."""
        return self._trace_frame("wall", "wall")

    @cached_property
    def total(self) -> pd.DataFrame:
        """variant, device, step, category, count, seconds, bytes: events counted in full."""
        return self._trace_frame("total", "total")

    @cached_property
    def idle(self) -> pd.DataFrame:
        """variant, device, step, kind (host_wait, kernel_wait, other), seconds: accelerators only."""
        return self._trace_frame("idle", "idle")

    @cached_property
    def links(self) -> pd.DataFrame:
        """variant, src, dst, kind, steps, count, bytes, seconds, gbps, measured: over all ``steps``."""
        return self._trace_frame("links", "links")

    @cached_property
    def memory(self) -> pd.DataFrame:
        """variant, device, allocator, step, start_s, activity, bytes_in_use, bytes_available,
        requested_bytes, allocation_bytes, op, region_type, data_type, tensor_shape: one row per
        allocator event (none for a trace without them)."""
        return self._trace_frame("memory", "memory")

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

    def frames(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name) for name in FRAMES}

    def to_parquet(self, folder: Path | str) -> list[Path]:
        """One ``<frame>.parquet`` per frame in ``folder`` (made if needed), with pyarrow."""
        from tfprof_towers.frames.export import write_frames

        return write_frames(self.frames(), Path(folder), "parquet", inputs=(self.source,))

    def to_csv(self, folder: Path | str) -> list[Path]:
        """One ``<frame>.csv`` per frame in ``folder`` (dtypes are not kept: use Parquet for that)."""
        from tfprof_towers.frames.export import write_frames

        return write_frames(self.frames(), Path(folder), "csv", inputs=(self.source,))

    def __repr__(self) -> str:
        return f"<Profile {self.kind} {self.source!r}: {', '.join(self.variant_names)}>"


def _categories(frames: Sequence[pd.DataFrame], col: str) -> list[str]:
    """The categories (or values) of column ``col`` across ``frames``, first-seen order."""
    import pandas as pd

    out: dict[str, None] = {}
    for df in frames:
        s = df[col]
        vals = s.cat.categories if isinstance(s.dtype, pd.CategoricalDtype) else pd.unique(s.astype(str))
        out.update(dict.fromkeys(str(x) for x in vals))
    return list(out)


def _trace_devices(a: Analysis) -> set[str]:
    """The device names the trace's events carry (device, copy source and destination)."""
    c = a.trace.columns
    codes = np.unique(np.concatenate([np.unique(c.device), np.unique(c.src), np.unique(c.dst)]))
    m = a.trace.memory
    held = {m.texts[k] for k in np.unique(m.device).tolist()}  # allocators' devices, kernels or not
    return ({c.text(int(k)) for k in codes.tolist()} | held) - {""}


# ------------------------------------------------------------------------------------------
# load


def load(path: Path | str, run: str | None = None) -> Profile:
    """A trace file, a logdir (all hosts), a run directory (all variants) or ``RUN/variants/NAME``.

    ``run``: which profile run of a logdir (``--run``; without it the newest, and ``notes`` say so),
    or which variant of a run directory; refused for a single trace file or one variant's directory.

    Raises :class:`~tfprof_towers.TraceError` (a path that is missing, a symbolic link loop, a FIFO
    or a device, no profile in a folder, a trace that cannot be read) and its base class
    :class:`~tfprof_towers.TowersError` (anything else that cannot be loaded: a run directory that
    cannot be used, an unknown variant); both carry one line (``str(exc)``) and an ``exit_code``.
    """
    from tfprof_towers.trace.locate import check_path

    p = Path(path)
    check_path(p)  # one line for a missing path, a link loop, a FIFO or a device: before any resolve()
    if p.is_dir() and is_run_dir(p):
        return load_run(p, only=run)
    q = p.resolve()  # "." inside a variant's directory is that variant
    if q.is_dir() and q.parent.name == "variants" and is_run_dir(q.parent.parent):
        if run is not None:
            raise TowersError(f"--run {run}: does not apply to one variant's directory ({p})")
        return load_run(q.parent.parent, only=q.name)
    return load_trace(p, run)


def trace_label(path: Path) -> str:
    name = path.name
    for suffix in (".xplane.pb", ".pb"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name or str(path)


def load_trace(path: Path, run: str | None = None) -> Profile:
    from tfprof_towers.trace.analysis import analyze_xplane
    from tfprof_towers.xplane.memory import prefer_heap

    prefer_heap()
    analysis = analyze_xplane(path, run=run)
    return Profile(str(path), TRACE, (Part(trace_label(path), analysis),), None, analysis.trace.notes)


def load_run(root: Path, only: str | None = None) -> Profile:
    """The run as ``report`` computes it; ``only``: one variant of it."""
    from tfprof_towers.rundir.records import load_records, load_run_or_skip
    from tfprof_towers.session.report import analyse_run

    rd = RunDir(root)
    summary, analyses = analyse_run(rd)
    run, _ = load_run_or_skip(rd)
    records = load_records(rd, run)
    doc = summary.to_json()
    entries = {e["name"]: e for e in doc["variants"]}
    names: Sequence[str] = list(entries)
    if only is not None:
        if only not in entries:
            raise TowersError(f"variant {only}: not in the run {root} (it has: {', '.join(names) or 'none'})")
        names = [only]
    parts = tuple(
        Part(n, getattr(analyses.get(n), "analysis", None), records.get(n), entries[n]) for n in names
    )
    src = str(root if only is None else rd.variant_dir(only))
    return Profile(src, RUN if only is None else VARIANT, parts, doc, tuple(doc.get("problems") or ()))


def per_step(frame: pd.DataFrame, by: Sequence[str], value: str = "seconds") -> pd.DataFrame:
    """``value`` summed over ``by`` and divided by each variant's number of steps (the figures
    ``analyze --per-step`` and the report print)."""
    n = frame.groupby("variant", observed=True)["step"].nunique()
    out = frame.groupby(["variant", *by], observed=True)[value].sum().reset_index()
    out[value] = out[value] / out["variant"].map(n).astype(np.float64)
    return out
