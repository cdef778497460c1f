"""`tfprof-towers sql` and ``load(...).sql``: DuckDB over the frames equals the frames of ``load()`` exactly
(a trace, a logdir of several hosts, a run directory, two runs told apart by ``run``); views built
only when named; bad SQL and every way of writing or reading files refused, on one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest
from report_kit import make_run_dir
from trace_kit import US, TraceBuilder, two_gpu_trace

import tfprof_towers as tt
from tfprof_towers.cli import main
from tfprof_towers.frames.names import FRAMES
from tfprof_towers.frames.profile import sources
from tfprof_towers.frames.sql import VIEWS, arrow_table, query_sources, tables_named
from tfprof_towers.testing.synth import Alloc, allocator_events, copy_heavy_trace
from tfprof_towers.vocab.errors import EXIT_INPUT, QueryError

HOSTS = ("h0", "h1", "h2")


def memory_trace() -> TraceBuilder:
    """Two steps by markers; GPU 0 runs a kernel and its allocator allocates, frees and allocates."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    py.event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    py.event("train", 1000 * US, 1000 * US, {"step_num": 1, "_r": 1})
    allocator_events(host.line("tf_Compute/1"), "GPU_0_bfc",
                     [Alloc(100 * US, 2_000_000, 0x10, "a/mm"), Alloc(300 * US, 2_000_000, 0x10, free=True),
                      Alloc(1100 * US, 3_000_000, 0x20, "c/big")], held=1_000, limit=6_000_000_000)
    g0 = b.plane("/device:GPU:0")
    g0.line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 100 * US, {"tf_op": "a/mm:MatMul"})
    return b


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_gpu_trace().write(tmp_path_factory.mktemp("trace") / "host.xplane.pb")


@pytest.fixture(scope="module")
def logdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pod")
    for h, name in enumerate(HOSTS):
        b = copy_heavy_trace(3000, gpus=2, steps=4, seed=h)
        b.space.hostnames[:] = [name]
        b.write(root / "plugins" / "profile" / "r" / f"{name}.xplane.pb")
    return root


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("run") / "run_a")


@pytest.fixture(scope="module")
def run_b(tmp_path_factory: pytest.TempPathFactory, run_dir: Path) -> Path:
    """A second run: the first with its failed variant gone (other variants, other rows)."""
    root = tmp_path_factory.mktemp("run") / "run_b"
    shutil.copytree(run_dir, root)
    shutil.rmtree(root / "variants" / "broken")
    run = json.loads((root / "run.json").read_text())
    run["config"]["variants"] = [v for v in run["config"]["variants"] if v["name"] != "broken"]
    (root / "run.json").write_text(json.dumps(run))
    return root


def assert_every_view_is_its_frame(profile) -> None:
    for name in FRAMES:
        got = profile.sql(f"SELECT * FROM {name}")
        pdt.assert_frame_equal(got, getattr(profile, name), check_exact=True, obj=name)


def test_a_trace(trace_file: Path) -> None:
    p = tt.load(trace_file)
    assert len(p.events) and len(p.links)  # rows to compare, not only dtypes
    assert_every_view_is_its_frame(p)


def test_a_trace_with_allocator_events(tmp_path: Path) -> None:
    p = tt.load(memory_trace().write(tmp_path / "m.xplane.pb"))
    assert len(p.memory) == 3
    assert_every_view_is_its_frame(p)


def test_a_logdir_of_several_hosts(logdir: Path) -> None:
    p = tt.load(logdir, dask="serial")
    assert set(p.steps["host"].astype(str)) == set(HOSTS)
    assert_every_view_is_its_frame(p)


def test_a_run_directory(run_dir: Path) -> None:
    p = tt.load(run_dir)
    assert len(p.placement) and len(p.findings) and len(p.variants) == 3
    assert_every_view_is_its_frame(p)


def test_two_runs_are_told_apart_by_run(run_dir: Path, run_b: Path) -> None:
    """Every frame of two runs queried together is each run's own frame, its rows named by ``run``.

    ``tt.sql`` is ``query_sources`` over ``sources``: the runs are loaded once and every frame queried
    over them (``tt.sql`` itself runs the last query)."""
    a, b = tt.load(run_dir), tt.load(run_b)
    loaded = sources([run_dir, run_b])
    for name in FRAMES:
        both = query_sources(loaded, f"SELECT * FROM {name}")
        assert list(both.columns) == ["run", *getattr(a, name).columns], name
        assert list(both["run"].dtype.categories) == ["run_a", "run_b"] and both["run"].dtype.ordered
        for label, p in (("run_a", a), ("run_b", b)):
            want = getattr(p, name)
            mine = both[both["run"] == label].drop(columns="run").reset_index(drop=True)
            for col in want.columns:  # the union's categories, back to this run's own
                if isinstance(want[col].dtype, pd.CategoricalDtype):
                    assert set(want[col].cat.categories) <= set(mine[col].cat.categories), (name, col)
                    mine[col] = mine[col].cat.set_categories(want[col].cat.categories)
            pdt.assert_frame_equal(mine, want, check_exact=True, obj=f"{label}.{name}")
    runs = tt.sql([run_dir, run_b], "SELECT run, kind, source FROM runs")
    assert runs["run"].astype(str).tolist() == ["run_a", "run_b"]
    assert runs["source"].tolist() == [str(run_dir), str(run_b)] and set(runs["kind"]) == {"run"}


def test_a_query_across_runs(run_dir: Path, run_b: Path) -> None:
    got = tt.sql([run_dir, run_b], "SELECT run, count(*) AS n, sum(seconds) AS s FROM wall "
                                   "GROUP BY run ORDER BY run")
    for label, path in (("run_a", run_dir), ("run_b", run_b)):
        w = tt.load(path).wall
        row = got[got["run"] == label].iloc[0]
        assert row["n"] == len(w)
        assert row["s"] == pytest.approx(w["seconds"].sum(), rel=1e-12)


def test_labels_of_paths_that_share_a_name(tmp_path: Path) -> None:
    from tfprof_towers.frames.profile import run_labels

    assert run_labels(["a/x.xplane.pb", "b/y"]) == ["x", "y"]
    assert run_labels(["a/x", "b/x"]) == ["a/x", "b/x"]
    assert run_labels(["a/x", "a/x"]) == ["a/x", "a/x#2"]


def test_a_view_is_built_only_when_the_query_names_it(trace_file: Path) -> None:
    p = tt.load(trace_file)
    (part,) = p.parts
    p.sql("SELECT device, sum(seconds) AS s FROM wall GROUP BY device")
    assert "wall" in p.__dict__
    assert "events" not in p.__dict__ and "memory" not in p.__dict__ and "full" not in part.__dict__
    got = p.sql("WITH w AS (SELECT * FROM steps) SELECT count(*) AS n FROM w "
                "WHERE device IN (SELECT device FROM events)")
    assert "events" in p.__dict__ and got["n"].iloc[0] > 0


def test_the_views_a_query_names() -> None:
    import duckdb

    con = duckdb.connect()
    both = tables_named(con, "SELECT * FROM steps JOIN wall USING (variant, device, step)")
    assert both == {"steps", "wall"}
    assert tables_named(con, "WITH e AS (SELECT 1) SELECT * FROM e, (SELECT * FROM \"Events\")") >= {"events"}
    assert "events" not in tables_named(con, "SELECT count(*) AS events FROM wall")
    assert tables_named(con, "PIVOT wall ON category USING sum(seconds)") == {"wall"}  # not a SELECT: words
    assert set(VIEWS) == {*FRAMES, "runs"}


def test_numbers_reach_duckdb_without_a_copy(trace_file: Path) -> None:
    wall = tt.load(trace_file).wall
    table = arrow_table(wall)
    seconds = table.column("seconds").chunks[0].buffers()[1].address
    assert seconds == wall["seconds"].to_numpy().__array_interface__["data"][0]


def test_aggregates_keep_the_frames_dtypes(run_dir: Path) -> None:
    p = tt.load(run_dir)
    got = p.sql("SELECT variant, device, category, sum(seconds) AS seconds FROM wall GROUP BY ALL "
                "ORDER BY seconds DESC")
    assert got["variant"].dtype == p.wall["variant"].dtype and got["device"].dtype == p.wall["device"].dtype
    assert got["category"].dtype == p.wall["category"].dtype and got["seconds"].dtype == np.float64
    top = p.wall.groupby(["variant", "device", "category"], observed=True)["seconds"].sum().max()
    assert got["seconds"].iloc[0] == pytest.approx(top, rel=1e-12)
    flops = p.sql("SELECT variant, sum(flops) AS flops, avg(flops) AS mean FROM placement GROUP BY variant "
                  "ORDER BY variant")  # DuckDB's sum of BIGINT is a HUGEINT: back to the frame's int64
    want = p.placement.groupby("variant", observed=True)["flops"].sum()
    assert flops["flops"].dtype == np.int64 and flops["mean"].dtype == np.float64
    assert dict(zip(flops["variant"].astype(str), flops["flops"])) == {str(k): v for k, v in want.items()}


BAD = {
    "selec 1": "Parser Error",
    "SELECT * FROM nope": "Table with name nope does not exist",
    "SELECT nope FROM steps": "Binder Error",
    "": "returns no rows",
    "-- only a comment": "returns no rows",
}


@pytest.mark.parametrize("query", BAD)
def test_bad_sql_is_duckdbs_message_on_one_line(run_dir: Path, query: str, capsys) -> None:
    with pytest.raises(QueryError) as exc:
        tt.load(run_dir).sql(query)
    assert BAD[query] in str(exc.value) and "\n" not in str(exc.value)
    assert main(["sql", str(run_dir), query]) == EXIT_INPUT
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.count("\n") == 1 and BAD[query] in out.err and "Traceback" not in out.err


def test_a_query_cannot_write_or_read_files(run_dir: Path, tmp_path: Path) -> None:
    p = tt.load(run_dir)
    target = tmp_path / "out.csv"
    refused = {
        f"COPY (SELECT * FROM steps) TO '{target}'": "Permission Error",
        f"COPY steps TO '{target}' (FORMAT parquet)": "Permission Error",
        f"ATTACH '{tmp_path / 'x.db'}' AS x": "Permission Error",
        f"EXPORT DATABASE '{tmp_path / 'dump'}'": "Permission Error",
        "INSTALL httpfs": "Permission Error",
        "LOAD httpfs": "Permission Error",
        "SELECT * FROM read_csv('/etc/passwd')": "Permission Error",
        f"SELECT * FROM '{run_dir / 'run.json'}'": "Permission Error",
        "SELECT * FROM glob('/etc/*')": "Permission Error",
        "SET enable_external_access = true": "locked",
        "RESET lock_configuration": "locked",
    }
    for query, why in refused.items():
        with pytest.raises(QueryError, match=why):
            p.sql(query)
    assert list(tmp_path.iterdir()) == []


def test_create_table_lives_in_the_querys_own_memory(run_dir: Path) -> None:
    p = tt.load(run_dir)
    got = p.sql("CREATE TABLE t AS SELECT * FROM steps; SELECT count(*) AS n FROM t")
    assert got["n"].iloc[0] == len(p.steps)
    with pytest.raises(QueryError, match="Table with name t does not exist"):
        p.sql("SELECT * FROM t")


def test_json_is_strict_and_csv_and_table(run_dir: Path, capsys) -> None:
    query = "SELECT variant, median_s, rank, recommended FROM variants ORDER BY rank NULLS LAST"
    assert main(["sql", str(run_dir), query, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert doc["columns"] == ["variant", "median_s", "rank", "recommended"]
    assert doc["rows"] == [
        {"variant": "single", "median_s": 0.01, "rank": 1, "recommended": True},
        {"variant": "towers_bug", "median_s": 0.05, "rank": 2, "recommended": False},
        {"variant": "broken", "median_s": None, "rank": None, "recommended": False},
    ]
    assert main(["sql", str(run_dir), query, "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "variant,median_s,rank,recommended" and lines[1] == "single,0.01,1,True"
    assert main(["sql", str(run_dir), query]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == doc["columns"] and "towers_bug" in text


def test_the_command_needs_a_path_and_a_query(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sql", "SELECT 1"])
    assert exc.value.code == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "required: QUERY" in err
    assert main(["sql", str(tmp_path / "missing"), "SELECT 1"]) == EXIT_INPUT
    assert "missing" in capsys.readouterr().err


def test_duckdb_is_imported_only_for_sql() -> None:
    import subprocess
    import sys

    code = ("import sys, tfprof_towers, tfprof_towers.frames, tfprof_towers.cli; "
            "tfprof_towers.cli.build_parser(); print('duckdb' in sys.modules, 'mcp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["False", "False"]


def test_a_host_that_cannot_be_read_is_named(logdir: Path, tmp_path: Path, capsys) -> None:
    from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS

    root = tmp_path / "pod"
    shutil.copytree(logdir, root)
    (root / "plugins" / "profile" / "r" / "h9.xplane.pb").write_bytes(b"not a trace")
    query = "SELECT DISTINCT host FROM steps ORDER BY host"
    assert main(["sql", str(root), query, "--csv"]) == EXIT_SOME_HOSTS
    out = capsys.readouterr()
    assert out.out.splitlines() == ["host", *HOSTS]  # the others' rows still printed
    assert "1 host(s) could not be read (pod/h9)" in out.err and "Traceback" not in out.err
