"""The events of a trace as numpy columns, and the pandas frame made from them on demand.

:class:`EventColumns` is what the analysis reads: one entry per event (lines that are not
derived), strings as codes into one :class:`~tfprof_towers.xplane.Strings` table, narrow
dtypes, and per line its name, plane and host.  Nothing here is per event in Python.
:func:`events_frame` builds the ``Trace.events`` DataFrame (categoricals holding only the
strings used) for callers that want pandas; ``analyze`` never does.  :func:`merge` joins
the columns of several hosts' traces into one table of strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.trace.codes import category_dtype
from tfprof_towers.xplane import Strings, categorical, used_codes

if TYPE_CHECKING:
    import pandas as pd

_EVENT_COLUMNS: dict[str, object] = {
    "plane": "category", "device": "category", "line": "category", "name": "category", "op_type": "category",
    "tf_op": "category", "start_ps": "int64", "dur_ps": "int64", "category": "category_codes",
    "bytes": "int64", "src_device": "category", "dst_device": "category", "edge": "category", "step": "int64",
}


def __getattr__(name: str) -> Any:
    if name == "EVENT_COLUMNS":  # the event frame's dtypes (made on first use: pandas)
        return {c: (category_dtype() if t == "category_codes" else t) for c, t in _EVENT_COLUMNS.items()}
    raise AttributeError(name)


@dataclass(frozen=True, eq=False)
class EventColumns:
    """One entry per event; ``*`` codes index :attr:`strings`."""

    strings: Strings
    line_name: np.ndarray  # int32 per line: code of its name
    line_plane: np.ndarray  # int32 per line: code of its plane's name (with the host's task prefix)
    line_host: np.ndarray  # int16 per line: which host (file) it comes from
    line_kind: np.ndarray  # int8 per line: its plane's kind (tfprof_towers.xplane HOST / DEVICE / OTHER)
    line: np.ndarray  # int32 per event: index into the line arrays
    name: np.ndarray  # int32 code
    device: np.ndarray  # int32 code: the device the event's time belongs to
    category: np.ndarray  # int8: index in EVENT_CATEGORIES
    tf_op: np.ndarray  # int32 code
    op_type: np.ndarray  # int32 code
    bytes: np.ndarray  # int64
    src: np.ndarray  # int32 code ("" none)
    dst: np.ndarray  # int32 code
    edge: np.ndarray  # int32 code
    start_ps: np.ndarray  # int64, picoseconds after the trace's origin
    dur_ps: np.ndarray  # int64
    step: np.ndarray  # int32: the step whose window holds the start, -1 when none
    corr_index: np.ndarray  # int64: the events with a correlation_id, ascending
    corr: np.ndarray  # int64: their correlation_id

    @property
    def n(self) -> int:
        return int(self.start_ps.size)

    @property
    def plane(self) -> np.ndarray:
        """int32 per event: code of its plane's name."""
        return self.line_plane[self.line]

    @property
    def host(self) -> np.ndarray:
        """int16 per event: its host."""
        return self.line_host[self.line]

    def text(self, code: int) -> str:
        return self.strings.items[code]

    def code_of(self, text: str) -> int:
        """The code of ``text``, -1 when no event can have it (no code given)."""
        return self.strings._index.get(text, -1)


def empty_frame() -> pd.DataFrame:
    import pandas as pd

    dtypes = {c: (category_dtype() if t == "category_codes" else t) for c, t in _EVENT_COLUMNS.items()}
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in dtypes.items()})


def events_frame(c: EventColumns) -> pd.DataFrame:
    """The ``Trace.events`` DataFrame (see :mod:`.load`)."""
    import pandas as pd

    if not c.n:
        return empty_frame()
    s = c.strings
    line_cat = categorical(c.line_name, s)  # per line; then per event by its line
    plane_cat = categorical(c.line_plane, s)
    return pd.DataFrame({
        "plane": _per_event(plane_cat, c.line),
        "device": categorical(c.device, s),
        "line": _per_event(line_cat, c.line),
        "name": categorical(c.name, s),
        "op_type": categorical(c.op_type, s),
        "tf_op": categorical(c.tf_op, s),
        "start_ps": c.start_ps,
        "dur_ps": c.dur_ps,
        "category": pd.Categorical.from_codes(c.category, dtype=category_dtype(), validate=False),
        "bytes": c.bytes,
        "src_device": categorical(c.src, s),
        "dst_device": categorical(c.dst, s),
        "edge": categorical(c.edge, s),
        "step": c.step.astype(np.int64),
    }, copy=False)


def _per_event(per_line: pd.Categorical, line: np.ndarray) -> pd.Categorical:
    """A per-line categorical spread to the events, holding only the categories of lines with events."""
    import pandas as pd

    used = used_codes(per_line.codes[line].astype(np.int64))
    remap = np.full(len(per_line.categories), -1, dtype=np.int32)
    remap[used] = np.arange(used.size, dtype=np.int32)
    codes = remap[per_line.codes[line]]
    cats = [per_line.categories[u] for u in used.tolist()]
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats), validate=False)


def merge(parts: Sequence[EventColumns]) -> EventColumns:
    """The columns of several traces (hosts) as one: their strings recoded into one table, lines
    and events one host after the other (each part keeps its ``line_host``: read each host with
    its own number)."""
    if len(parts) == 1:
        return parts[0]
    strings = Strings()
    luts = [strings.codes(p.strings.items).astype(np.int32) for p in parts]
    line_base = np.cumsum([0] + [p.line_name.size for p in parts])
    offsets = np.cumsum([0] + [p.n for p in parts])
    coded = ("line_name", "line_plane", "name", "device", "tf_op", "op_type", "src", "dst", "edge")
    kept = ("line_kind", "category", "bytes", "start_ps", "dur_ps", "step")
    return EventColumns(
        strings=strings,
        **{f: np.concatenate([lut[getattr(p, f)] for p, lut in zip(parts, luts)]) for f in coded},
        **{f: np.concatenate([getattr(p, f) for p in parts]) for f in kept},
        line_host=np.concatenate([p.line_host for p in parts]).astype(np.int16, copy=False),
        line=np.concatenate([p.line + ln for p, ln in zip(parts, line_base[:-1].tolist())]).astype(
            np.int32, copy=False),
        corr_index=np.concatenate([p.corr_index + o for p, o in zip(parts, offsets[:-1])]),
        corr=np.concatenate([p.corr for p in parts]),
    )
