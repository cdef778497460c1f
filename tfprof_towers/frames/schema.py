"""The conventions every frame of :mod:`tfprof_towers.frames` follows, in one place.

* times are ``seconds`` (float64): picoseconds of the trace divided by 1e12;
* ``variant``, ``host``, ``task``, ``device`` and ``category`` are ordered Categoricals: variants in
  the run's order, hosts (trace file names, ``h0.xplane.pb`` -> ``h0``) in the trace's order, devices
  in :func:`~tfprof_towers.vocab.device_names.device_sort_key` order (host threads first), categories
  in :mod:`tfprof_towers.vocab.categories`' order (``idle`` last);
* one row per observation.

:data:`COLUMNS` names each frame's columns and dtypes (``"category:<kind>"``: the ordered
Categorical of that kind); :func:`empty` makes a frame with them and no rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tfprof_towers.frames.names import FRAMES
from tfprof_towers.trace.idle import IDLE_KINDS
from tfprof_towers.vocab.categories import EVENT_CATEGORIES, IDLE
from tfprof_towers.vocab.device_names import device_sort_key

PS = 1e12
#: Every category a frame can name, in categories.py's order; ``idle`` (the wall breakdown's) last.
CATEGORIES: tuple[str, ...] = (*EVENT_CATEGORIES, IDLE.key)

CATEGORY = pd.CategoricalDtype(list(CATEGORIES), ordered=True)
IDLE_KIND = pd.CategoricalDtype(list(IDLE_KINDS), ordered=True)
#: Text columns: pandas' own string dtype where it is the default (pandas 3, what Parquet reads back),
#: else object.
TEXT: Any = pd.StringDtype(na_value=np.nan) if int(pd.__version__.split(".")[0]) >= 3 else object

#: frame -> {column: dtype}; "variant", "host", "task", "device", "src", "dst": ordered Categoricals whose
#: categories depend on the data (the variants loaded, the hosts and devices seen).
COLUMNS: dict[str, dict[str, Any]] = {
    "events": {"variant": "category", "task": "category", "device": "category", "line": "category",
               "category": CATEGORY, "name": "category", "op_type": "category", "node": "category",
               "step": "int64", "start_s": "float64", "dur_s": "float64", "bytes": "int64",
               "src": "category", "dst": "category"},
    "steps": {"variant": "category", "host": "category", "device": "category", "step": "int64",
              "start_s": "float64", "end_s": "float64"},
    "wall": {"variant": "category", "host": "category", "device": "category", "step": "int64",
             "category": CATEGORY, "seconds": "float64"},
    "total": {"variant": "category", "host": "category", "device": "category", "step": "int64",
              "category": CATEGORY, "count": "int64", "seconds": "float64", "bytes": "int64"},
    "idle": {"variant": "category", "host": "category", "device": "category", "step": "int64",
             "kind": IDLE_KIND, "seconds": "float64"},
    "links": {"variant": "category", "host": "category", "src": "category", "dst": "category",
              "kind": "category", "steps": "int64", "count": "int64", "bytes": "Int64", "seconds": "float64",
              "gbps": "float64", "measured": "bool"},
    "findings": {"variant": "category", "rule": TEXT, "severity": TEXT, "message": TEXT,
                 "suggestion": TEXT},
    "variants": {"variant": "category", "status": TEXT, "family": TEXT, "source": TEXT,
                 "error": TEXT, "median_s": "float64", "p10_s": "float64", "p90_s": "float64",
                 "min_s": "float64", "max_s": "float64", "timed_steps": "int64",
                 "profiled_median_s": "float64", "speedup": "float64", "scaling_efficiency": "float64",
                 "rank": "Int64", "recommended": "bool", "grad_norm": "float64", "trace_error": TEXT},
    "step_times": {"variant": "category", "phase": TEXT, "index": "int64", "seconds": "float64"},
    "losses": {"variant": "category", "step": "int64", "loss": "float64"},
    "placement": {"variant": "category", "node": TEXT, "op_type": TEXT, "kernel": TEXT, "fused": TEXT,
                  "device": "category", "requested": TEXT, "flops": "int64", "source_file": TEXT,
                  "source_line": "Int64", "sources": TEXT},
    "memory": {"variant": "category", "device": "category", "allocator": "category", "step": "int64",
               "start_s": "float64", "activity": "category", "bytes_in_use": "int64",
               "bytes_available": "int64", "requested_bytes": "int64", "allocation_bytes": "int64",
               "op": "category", "region_type": "category", "data_type": "category",
               "tensor_shape": "category"},
}
assert tuple(COLUMNS) == FRAMES, "frames/names.py lists the frames of COLUMNS, in its order"
#: Columns holding device names (one ordered dtype per profile).
DEVICE_COLUMNS = ("device", "src", "dst")


def is_open(t: Any) -> bool:
    """A column whose ordered categories come from the data (``"category"`` in :data:`COLUMNS`)."""
    return isinstance(t, str) and t == "category"


def ordered(values: Iterable[str], key=None) -> pd.CategoricalDtype:
    """An ordered dtype of the distinct ``values`` (sorted by ``key``; first-seen order without)."""
    seen = list(dict.fromkeys(str(v) for v in values))
    return pd.CategoricalDtype(sorted(seen, key=key) if key else seen, ordered=True)


def device_dtype(names: Iterable[str]) -> pd.CategoricalDtype:
    return ordered(names, device_sort_key)


def as_dtype(column: pd.Series | np.ndarray | Sequence[Any], dtype: pd.CategoricalDtype) -> pd.Categorical:
    """``column`` recoded to ``dtype`` (a Categorical's codes are remapped, vectorised)."""
    if isinstance(column, pd.Series) and isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.set_categories(dtype.categories, ordered=True).array
    if isinstance(column, pd.Categorical):
        return column.set_categories(dtype.categories, ordered=True)
    return pd.Categorical(np.asarray(column, dtype=object), dtype=dtype)


def repeat(code: int, n: int, dtype: pd.CategoricalDtype) -> pd.Categorical:
    """``n`` times the category ``code`` of ``dtype``."""
    return pd.Categorical.from_codes(np.full(n, code, dtype=np.int32), dtype=dtype)


def empty(frame: str, variants: pd.CategoricalDtype | None = None) -> pd.DataFrame:
    """The frame with its columns and dtypes and no rows."""
    cols = {}
    for c, t in COLUMNS[frame].items():
        if c == "variant" and variants is not None:
            t = variants
        elif is_open(t):
            t = pd.CategoricalDtype([], ordered=True)
        cols[c] = pd.Series(dtype=t)
    return pd.DataFrame(cols)
