"""Write a profile's frames: one Parquet file (pyarrow) or CSV file per frame; read the Parquet back.

Parquet keeps each column's dtype; pandas' own metadata keeps a Categorical's values and whether it
is ordered, but an empty frame has no values to keep its categories with, so every file also holds
each categorical column's categories (schema metadata ``tfprof_towers.categories``), which
:func:`read_parquet` puts back: ``read_parquet(DIR)`` returns the frames exactly as written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tfprof_towers.vocab.errors import TowersError

if TYPE_CHECKING:
    import pandas as pd

FORMATS = ("parquet", "csv")
META_KEY = b"tfprof_towers.categories"


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TowersError("Parquet needs pyarrow (pip install pyarrow); or use --csv") from None
    return pa, pq


def write_frames(frames: Mapping[str, pd.DataFrame], folder: Path, fmt: str) -> list[Path]:
    """``folder/<frame>.<fmt>`` for each frame; the paths written."""
    if fmt not in FORMATS:
        raise ValueError(fmt)
    if fmt == "parquet":
        _pyarrow()
    if folder.exists() and not folder.is_dir():
        raise TowersError(f"{folder}: exists and is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, df in frames.items():
        path = folder / f"{name}.{fmt}"
        if fmt == "parquet":
            write_parquet(df, path)
        else:
            df.to_csv(path, index=False)
        out.append(path)
    return out


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    import pandas as pd

    pa, pq = _pyarrow()
    table = pa.Table.from_pandas(df, preserve_index=False)
    cats = {c: [str(x) for x in df[c].cat.categories] for c in df.columns
            if isinstance(df[c].dtype, pd.CategoricalDtype)}
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps(cats).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


def read_parquet(path: Path | str) -> pd.DataFrame:
    """One frame written by :func:`write_parquet`, with its categories (and their order) back."""
    import pandas as pd

    _, pq = _pyarrow()
    table = pq.read_table(path)
    df = table.to_pandas()
    cats = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
    for col, values in cats.items():  # every categorical of a profile's frames is ordered
        df[col] = df[col].astype(object).astype(pd.CategoricalDtype(values, ordered=True))
    return df


def read_frames(folder: Path | str) -> dict[str, pd.DataFrame]:
    """Every ``<frame>.parquet`` of ``folder`` (as ``Profile.to_parquet`` wrote them)."""
    return {p.name[: -len(".parquet")]: read_parquet(p) for p in sorted(Path(folder).glob("*.parquet"))}
