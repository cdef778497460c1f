"""`tfprof-towers sql PATH... "QUERY"`: DuckDB SQL over the frames of traces, logdirs and runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from tfprof_towers.rundir.paths import json_text
from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS
from tfprof_towers.vocab.textcap import visible

if TYPE_CHECKING:
    import pandas as pd

    from tfprof_towers.frames.sql import Source


def register(sub: argparse._SubParsersAction) -> None:
    from tfprof_towers.cli import add_command

    p = add_command(sub, "sql", run)
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="an *.xplane.pb file, a logdir, a run directory or RUN_DIR/variants/NAME; several: "
                        "each view gets a `run` column")
    p.add_argument("query", metavar="QUERY", help="the DuckDB SQL query (read-only)")
    p.add_argument("--run", metavar="NAME", default=None,
                   help="which profile run of each logdir (or variant of each run directory); "
                        "default: the newest")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true",
                     help='print {"columns": [...], "rows": [{...}, ...]} (strict JSON: NaN is null)')
    fmt.add_argument("--csv", action="store_true", help="print CSV")


def run(args: argparse.Namespace) -> int:
    """Run a DuckDB SQL query over the frames of one or more traces, logdirs or run directories.

    Every frame of `tfprof_towers.load(PATH)` is a view with its columns: events, steps, wall,
    total, idle, links, findings, variants, step_times, losses, placement, memory (docs/notebook.md);
    `runs` lists the paths.  With several paths every view starts with a `run` column (the path's
    name) holding every path's rows.  A view is built only when the query names it: a query that
    does not name events never reads every event.  Prints a table, or --json / --csv.

    The query is read-only: it runs in an in-memory database with DuckDB's external access off and
    its configuration locked, so it cannot read or write files, attach databases or load extensions.
    Bad SQL is DuckDB's message on one line and exit code 2.  Never imports TensorFlow.

    Example: tfprof-towers sql reports/latest "SELECT variant, median_s FROM variants ORDER BY rank"
    """
    from tfprof_towers.commands.progress import HostProgress, err

    with HostProgress() as progress:  # names each host of a logdir that cannot be read, as analyze does
        df, sources = result(args, progress)
    for s in sources:  # which run of a logdir was taken; stdout keeps only the result
        for note in s.profile.notes:
            err(f"note: {s.label}: {note}")
    if args.json:
        sys.stdout.write(json_text(result_doc(df)) + "\n")
    elif args.csv:
        sys.stdout.write(df.to_csv(index=False))
    else:
        sys.stdout.write(visible(table_text(df)) + "\n")
    failed = [f"{s.label}/{f.name}" for s in sources for p in s.profile.parts if p.pod is not None
              for f in p.pod.failures]
    if failed:
        err(f"error: {len(failed)} host(s) could not be read ({', '.join(failed)}): the result above leaves "
            "them out")
        return EXIT_SOME_HOSTS
    return 0


def result(args: argparse.Namespace, progress: Any = None) -> tuple[pd.DataFrame, list[Source]]:
    """The query's result over the frames of the paths, and the paths' profiles under their labels."""
    from tfprof_towers.frames.profile import sources
    from tfprof_towers.frames.sql import query_sources

    loaded = sources(args.paths, run=args.run, progress=progress)
    return query_sources(loaded, args.query), loaded


def document(args: argparse.Namespace) -> dict[str, Any]:
    """What ``sql --json`` prints: :func:`result_doc` of the query's result."""
    return result_doc(result(args)[0])


def result_doc(df: pd.DataFrame) -> dict[str, Any]:
    """``{"columns": [...], "rows": [{column: value}, ...]}``: numbers as numbers, categoricals as their
    text, a missing value (NaN, NA, None) as None; other values (dates, lists) as DuckDB gives them,
    then as text where JSON has no type for them."""
    columns = [str(c) for c in df.columns]
    values = [_plain(df.iloc[:, i]) for i in range(df.shape[1])]
    return {"columns": columns, "rows": [dict(zip(columns, row)) for row in zip(*values)]}


def _plain(column: pd.Series) -> list[Any]:
    """A column as plain Python values, missing ones None."""
    import pandas as pd

    s = column.astype(object) if isinstance(column.dtype, pd.CategoricalDtype) else column
    out = s.astype(object).where(s.notna(), None).tolist()
    return [_json_value(v) for v in out]


def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item") and not isinstance(v, (bytes, list, dict)):
        return _json_value(v.item())
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    return str(v)


def table_text(df: pd.DataFrame) -> str:
    """The result as an aligned text table (every row), or a line saying it has none."""
    if not len(df.columns):
        return "(no columns)"
    if not len(df):
        return f"{'  '.join(str(c) for c in df.columns)}\n(no rows)"
    return df.to_string(index=False, na_rep="NULL")
