"""Write a profile's frames: one Parquet file (pyarrow) or CSV file per frame; read the Parquet back.

Parquet keeps each column's dtype; pandas' own metadata keeps a Categorical's values and whether it
is ordered, but an empty frame has no values to keep its categories with, so every file also holds
each categorical column's categories (schema metadata ``tfprof_towers.categories``), which
:func:`read_parquet` puts back: ``read_parquet(DIR)`` returns the frames exactly as written.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tfprof_towers.rundir.outputs import output_folder, output_path, write_output
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


def check_frames_out(folder: Path, names: Sequence[str], fmt: str, inputs: Sequence[Path | str] = (),
                     make: bool = True) -> dict[str, Path]:
    """``folder/<frame>.<fmt>`` for each of ``names``, after refusing what must not be written (the
    folder, then each file: :func:`~tfprof_towers.rundir.outputs.output_path`; a link there is replaced,
    never followed); ``make``: make the folder.  ``export`` calls it before anything is read."""
    if fmt not in FORMATS:
        raise ValueError(fmt)
    if fmt == "parquet":
        _pyarrow()
    what = f"--{fmt}"
    output_folder(folder, inputs, what, make=make)
    paths = {name: folder / f"{name}.{fmt}" for name in names}
    for path in paths.values():
        output_path(path, inputs, what, follow_links=False)
    return paths


def write_frames(frames: Mapping[str, pd.DataFrame], folder: Path, fmt: str,
                 inputs: Sequence[Path | str] = ()) -> list[Path]:
    """``folder/<frame>.<fmt>`` for each frame; the paths written.  Every file goes through
    :func:`~tfprof_towers.rundir.outputs.write_output` (``inputs``: paths it must not overwrite), so a
    failure is one line naming the user's path and the cause; a link at one of these names, inside the
    folder the user named, is replaced, not written through."""
    what = f"--{fmt}"
    paths = check_frames_out(folder, list(frames), fmt, inputs)  # refuse before anything is written
    for name, df in frames.items():
        data = parquet_bytes(df) if fmt == "parquet" else df.to_csv(index=False)
        write_output(paths[name], data, inputs, what, follow_links=False)
    return list(paths.values())


def parquet_bytes(df: pd.DataFrame) -> bytes:
    """One frame as a Parquet file's bytes, with its categories (module docstring)."""
    import pandas as pd

    pa, pq = _pyarrow()
    table = pa.Table.from_pandas(df, preserve_index=False)
    cats = {c: [str(x) for x in df[c].cat.categories] for c in df.columns
            if isinstance(df[c].dtype, pd.CategoricalDtype)}
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps(cats).encode()
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(meta), sink)
    return sink.getvalue().to_pybytes()


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    write_output(path, parquet_bytes(df), what="parquet")


def read_parquet(path: Path | str) -> pd.DataFrame:
    """One frame written by :func:`write_parquet`, with its categories (and their order) back."""
    import pandas as pd

    _, pq = _pyarrow()
    try:  # opened here first: the cause in words, not pyarrow's "Failed to open local file ... errno 13"
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block the open forever
            raise TowersError(f"{path}: not a regular file")
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TowersError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise TowersError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0][:200]})") from None
    df = table.to_pandas()
    cats = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
    for col, values in cats.items():  # every categorical of a profile's frames is ordered
        df[col] = df[col].astype(object).astype(pd.CategoricalDtype(values, ordered=True))
    return df


def read_frames(folder: Path | str) -> dict[str, pd.DataFrame]:
    """Every ``<frame>.parquet`` of ``folder`` (as ``Profile.to_parquet`` wrote them)."""
    return {p.name[: -len(".parquet")]: read_parquet(p) for p in sorted(Path(folder).glob("*.parquet"))}
