"""DuckDB SQL over the frames of one or more profiles: one view per frame, built when a query names it.

* **Views.** Each frame of :data:`~.names.FRAMES` (``steps``, ``wall``, ``events``, ``placement``, ...)
  is a view with the columns and dtypes of ``load(PATH).<frame>``; with several paths every view
  starts with a ``run`` column (an ordered Categorical of the paths' labels, in the order given) and
  holds every run's rows, its other categoricals' categories the union of the runs'.  ``runs`` is one
  row per path: ``run``, ``kind`` (trace | run | variant) and ``source``.
* **Lazily.** The query is parsed by DuckDB itself (``json_serialize_sql``, no binding) and only the
  views its ``FROM`` clauses name are built: ``events`` (every event of every host) is read only by a
  query that names it.  A statement DuckDB cannot serialise (``PIVOT``, ``DESCRIBE``, ``COPY``) falls
  back to the frame names it holds as words.
* **Without a copy.** A frame goes to DuckDB as a pyarrow table (``Table.from_pandas``: its numeric
  columns share the frame's memory; categoricals become dictionaries of their codes) registered on
  the connection; DuckDB scans Arrow in place.
* **Read-only.** Each query gets its own in-memory database.  Once the views are registered,
  ``enable_external_access`` is set false (no file read or written, no ``ATTACH`` of a file, no
  ``COPY ... TO``, no ``INSTALL``/``LOAD``) and ``lock_configuration`` true (no ``SET``/``RESET``
  undoes it); extensions never autoload, Python objects are not scanned by name.  ``CREATE TABLE``
  still works, in that in-memory database, which is gone when the query ends.
* **Dtypes back.** A result column named as a frame's column gets that column's dtype back (an
  ordered Categorical, nullable ``Int64``, text) when its values fit it, so ``SELECT * FROM steps``
  equals ``load(PATH).steps`` exactly.

DuckDB is imported here only, when a query runs.  No TensorFlow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tfprof_towers.frames.names import FRAMES
from tfprof_towers.vocab.errors import QueryError, TowersError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

#: The views a query can name: every frame, then ``runs``.
VIEWS: tuple[str, ...] = (*FRAMES, "runs")
#: Settings of the connection before anything is registered (no extension is ever loaded, Python
#: variables are not tables).
CONNECT_CONFIG: dict[str, Any] = {
    "autoinstall_known_extensions": False, "autoload_known_extensions": False,
    "allow_community_extensions": False, "allow_unsigned_extensions": False,
    "python_enable_replacements": False,
}
#: Run after the views are registered, before the query: no file system, and no way back.
LOCK_STATEMENTS: tuple[str, ...] = ("SET enable_external_access = false", "SET lock_configuration = true")


class Frames(Protocol):
    """What a query reads of a :class:`~tfprof_towers.frames.profile.Profile`: its frames (attributes
    named as :data:`~.names.FRAMES`), what it was loaded from and its kind."""

    source: str
    kind: str


@dataclass(frozen=True)
class Source:
    """One path's profile under the label its rows carry in the ``run`` column."""

    label: str
    profile: Frames


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError:
        raise TowersError("sql needs duckdb (pip install duckdb)") from None
    return duckdb


def query_sources(sources: Sequence[Source], query: str) -> pd.DataFrame:
    """``query`` over ``sources``' frames (module docstring): a ``run`` column where there are several."""
    duckdb = _duckdb()
    con = duckdb.connect(":memory:", config=CONNECT_CONFIG)
    try:
        named = tables_named(con, query)
        views = {name: view(sources, name) for name in VIEWS if name in named}
        for name, df in views.items():
            con.register(name, arrow_table(df))
        for statement in LOCK_STATEMENTS:
            con.execute(statement)
        try:
            executed = con.execute(query)
            if executed is None or executed.description is None:  # empty text, a comment, a SET
                raise QueryError("the query returns no rows: give a SELECT (or a statement that "
                                 "returns a result)")
            result = executed.df()
        except duckdb.Error as exc:
            message = one_line(exc)
            if "Table with name" in message:
                message += f" (the views: {', '.join(VIEWS)})"
            raise QueryError(message) from None
        return with_dtypes(result, views.values())
    finally:
        con.close()


def one_line(exc: BaseException) -> str:
    """DuckDB's message on one line: its lines joined, the caret lines under the query dropped."""
    lines = [ln.strip() for ln in str(exc).splitlines()]
    return " ".join(ln for ln in lines if ln and set(ln) != {"^"})


def tables_named(con: Any, query: str) -> set[str]:
    """The views ``query`` reads, lower-cased: the base tables of DuckDB's own parse of it (every
    ``FROM`` and ``JOIN``, subqueries and CTEs included); for a statement that is not a ``SELECT``
    (or does not parse), each view's name that occurs in it as a word."""
    try:
        doc = json.loads(con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchall()[0][0])
    except Exception:  # any failure: the conservative word scan below
        doc = {"error": True}
    if not doc.get("error"):
        return {t.lower() for t in _base_tables(doc)}
    words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
    return words & set(VIEWS)


def _base_tables(node: Any) -> Iterable[str]:
    """Every ``BASE_TABLE`` reference's name in a serialised statement."""
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if x.get("type") == "BASE_TABLE" and isinstance(x.get("table_name"), str):
                yield x["table_name"]
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)


def view(sources: Sequence[Source], name: str) -> pd.DataFrame:
    """The view ``name``: the frame of the one source, or every source's with a ``run`` column."""
    import pandas as pd

    from tfprof_towers.frames.schema import TEXT, ordered

    runs = ordered(s.label for s in sources)
    if name == "runs":
        return pd.DataFrame({
            "run": pd.Categorical([s.label for s in sources], dtype=runs),
            "kind": pd.array([s.profile.kind for s in sources], dtype=TEXT),
            "source": pd.array([s.profile.source for s in sources], dtype=TEXT),
        })
    frames = [getattr(s.profile, name) for s in sources]
    if len(frames) == 1:
        return frames[0]
    return with_runs(frames, [s.label for s in sources], runs)


def with_runs(frames: Sequence[pd.DataFrame], names: Sequence[str],
              runs: pd.CategoricalDtype) -> pd.DataFrame:
    """``frames`` (one per run, the same columns) one after the other, a ``run`` column first; each
    categorical column recoded to the union of the runs' categories (devices in device order)."""
    import numpy as np
    import pandas as pd

    from tfprof_towers.frames.schema import DEVICE_COLUMNS, as_dtype, device_dtype, ordered

    first = frames[0]
    dtypes: dict[str, pd.CategoricalDtype] = {}
    for col in first.columns:
        kinds = [f[col].dtype for f in frames]
        if not all(isinstance(t, pd.CategoricalDtype) for t in kinds) or all(t == kinds[0] for t in kinds):
            continue
        cats = [str(c) for t in kinds for c in t.categories]
        dtypes[col] = device_dtype(cats) if col in DEVICE_COLUMNS else ordered(cats)
    pieces = []
    for i, f in enumerate(frames):
        if not len(f) and any(len(g) for g in frames):
            continue
        f = f.copy(deep=False)
        for col, t in dtypes.items():
            f[col] = as_dtype(f[col], t)
        f.insert(0, "run", pd.Categorical.from_codes(np.full(len(f), names.index(names[i]), dtype=np.int32),
                                                     dtype=runs))
        pieces.append(f)
    return pd.concat(pieces, ignore_index=True) if len(pieces) > 1 else pieces[0].reset_index(drop=True)


def arrow_table(df: pd.DataFrame) -> pa.Table:
    """``df`` as a pyarrow table: numeric columns share the frame's buffers, categoricals are
    dictionaries, text is Arrow strings (pandas' own string dtype already is)."""
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False)


def with_dtypes(result: pd.DataFrame, views: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """``result`` with each column named as a column of ``views`` given that column's dtype, where its
    values fit it (the first view's that fits, in :data:`VIEWS` order)."""
    known: dict[str, list[Any]] = {}
    for df in views:
        for col in df.columns:
            known.setdefault(str(col), []).append(df[col].dtype)
    out = result.copy(deep=False)
    for col in out.columns:
        for dtype in known.get(str(col), ()):
            cast = _as(out[col], dtype)
            if cast is not None:
                out[col] = cast
                break
    return out


def _as(column: pd.Series, dtype: Any) -> pd.Series | None:
    """``column`` as ``dtype`` when every value fits it unchanged; None when it does not."""
    import numpy as np
    import pandas as pd
    from pandas.api import types

    if column.dtype == dtype:
        return column
    try:
        if isinstance(dtype, pd.CategoricalDtype):
            if not types.is_string_dtype(column.dtype) or not column.dropna().isin(dtype.categories).all():
                return None
            return pd.Series(pd.Categorical(column.astype(object).where(column.notna(), None), dtype=dtype),
                             index=column.index, name=column.name)
        if types.is_string_dtype(dtype) and types.is_string_dtype(column.dtype):
            return column.astype(dtype)
        if types.is_integer_dtype(dtype) and types.is_float_dtype(column.dtype):  # sum() of BIGINT: HUGEINT
            values = column.dropna().to_numpy()
            if not (np.isfinite(values).all() and (values == np.round(values)).all()
                    and (np.abs(values) < 2**63).all()):
                return None
        if types.is_integer_dtype(dtype) and (types.is_integer_dtype(column.dtype)
                                              or types.is_float_dtype(column.dtype)):
            if column.isna().any() and not isinstance(dtype, pd.api.extensions.ExtensionDtype):
                return None
            return column.astype(dtype)
        if types.is_bool_dtype(dtype) and types.is_bool_dtype(column.dtype):
            return None if column.isna().any() else column.astype(dtype)
    except (TypeError, ValueError):
        return None
    return None
