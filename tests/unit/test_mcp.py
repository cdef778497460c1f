"""The MCP server's tools, through the SDK's in-process client: each returns the document its command's
``--json`` prints (text and structured content), a bad argument is a tool error carrying the command's
one line and the server goes on answering, and no path is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from report_kit import make_run_dir
from trace_kit import two_gpu_trace

from tfprof_towers.cli import main
from tfprof_towers.commands.mcp_server import TOOLS, build_server, knows_option

NAMES = {"run_summary", "analyze", "sql", "diff", "project", "hardware", "profile_command"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("run") / "run")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_gpu_trace().write(tmp_path_factory.mktemp("trace") / "host.xplane.pb")


def calls(*requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each request's result, in order, from one server over one in-process client session."""

    async def go() -> list[Any]:
        async with Client(build_server()) as client:
            return [await client.call_tool(name, args) for name, args in requests]

    return anyio.run(go)


def cli_json(capsys, *argv: str) -> Any:
    main([*argv, "--json"])
    return json.loads(capsys.readouterr().out)


def ok(result) -> Any:
    assert not result.is_error, result.content[0].text
    text = result.content[0].text
    doc = json.loads(text)
    want = doc if isinstance(doc, dict) else {"result": doc}
    assert result.structured_content == want
    return doc


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_the_tools_and_what_they_say() -> None:
    async def go():
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    tools = {t.name: t for t in anyio.run(go)}
    assert set(tools) == NAMES == {fn.__name__ for fn in TOOLS}
    assert "call this first for a trace" in tools["analyze"].description
    assert "call this first for a run directory" in tools["run_summary"].description
    assert "never starts one" in tools["profile_command"].description
    for t in tools.values():
        assert t.annotations.read_only_hint and not t.annotations.destructive_hint, t.name
    assert tools["sql"].input_schema["required"] == ["paths", "query"]
    assert set(tools["project"].input_schema["properties"]) == {
        "hardware", "run_dir", "variants", "preset", "batch", "keras_model"}


def test_analyze_is_analyze_json(trace_file: Path, capsys) -> None:
    (res,) = calls(("analyze", {"path": str(trace_file)}))
    assert ok(res) == cli_json(capsys, "analyze", str(trace_file))


def test_sql_and_run_summary_on_a_run(run_dir: Path, capsys) -> None:
    before = files_of(run_dir)
    query = "SELECT variant, rank, median_s FROM variants ORDER BY rank NULLS LAST"
    sql, summary = calls(("sql", {"paths": [str(run_dir)], "query": query}),
                         ("run_summary", {"run_dir": str(run_dir)}))
    assert ok(sql) == cli_json(capsys, "sql", str(run_dir), query)
    doc = ok(summary)
    assert [r["variant"] for r in doc["ranking"]] == ["single", "towers_bug", "broken"]
    assert doc["ranking"][0]["median_step_s"] == 0.01 and doc["ranking"][2]["error"]
    assert doc["recommendation"]["variant"] == "single" and doc["recommendation"]["reason"]
    assert {f["rule"] for f in doc["findings"]} >= {"host_compute"}
    assert files_of(run_dir) == before  # no summary.json written: the analysis stayed in memory


def test_run_summary_reads_summary_json(run_dir: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "run"
    shutil.copytree(run_dir, root)
    assert main(["report", str(root)]) in (0, 4)
    summary = json.loads((root / "summary.json").read_text())
    (res,) = calls(("run_summary", {"run_dir": str(root)}))
    doc = ok(res)
    assert [r["variant"] for r in doc["ranking"]][:2] == summary["ranking"][:2]
    assert doc["recommendation"] == summary["recommendation"]
    assert doc["findings"] == summary["findings"]


def test_diff_and_hardware_are_their_commands(trace_file: Path, capsys) -> None:
    diff, listing, one = calls(("diff", {"base": str(trace_file), "new": str(trace_file)}),
                               ("hardware", {}), ("hardware", {"name": "2x-gtx1060-pcie3"}))
    assert ok(diff) == cli_json(capsys, "diff", str(trace_file), str(trace_file))
    assert ok(listing) == cli_json(capsys, "hardware")
    assert ok(one) == cli_json(capsys, "hardware", "2x-gtx1060-pcie3")


def test_errors_are_tool_errors_and_the_server_goes_on(run_dir: Path, trace_file: Path,
                                                       tmp_path: Path) -> None:
    missing = tmp_path / "nothing.xplane.pb"
    results = calls(
        ("sql", {"paths": [str(run_dir)], "query": "selec 1"}),
        ("analyze", {"path": str(missing)}),
        ("run_summary", {"run_dir": str(trace_file)}),
        ("diff", {"base": str(trace_file), "new": str(trace_file), "fail_if_slower": -1}),
        ("hardware", {"name": "no-such-machine"}),
        ("profile_command", {"preset": "huge"}),
        ("sql", {"paths": [str(run_dir)], "query": "COPY (SELECT 1) TO '/tmp/x.csv'"}),
        ("sql", {"paths": [str(run_dir)], "query": "SELECT * FROM range(5001)"}),
        ("sql", {"paths": [str(run_dir)], "query": "SELECT count(*) AS n FROM steps"}),
    )
    *errors, last = results
    lines = [r.content[0].text for r in errors]
    assert all(r.is_error for r in errors), lines
    assert all("\n" not in line and "Traceback" not in line for line in lines)
    assert lines[0].startswith("tfprof-towers: error: Parser Error")
    assert str(missing) in lines[1]
    assert lines[2].startswith("tfprof-towers: error:") and "not a run directory" in lines[2]
    assert lines[3].startswith("tfprof-towers diff: error: argument --fail-if-slower")
    assert "no-such-machine" in lines[4]
    assert "huge" in lines[5]
    assert "Permission Error" in lines[6]
    assert "5,001 rows, more than the 5,000" in lines[7]
    assert ok(last)["rows"] == [{"n": 12}]


def test_project_says_when_it_has_no_keras_model(run_dir: Path) -> None:
    if knows_option("project", "--keras-model"):
        pytest.skip("this build's project takes --keras-model")
    (res,) = calls(("project", {"hardware": "2x-gtx1060-pcie3", "keras_model": "model.py"}))
    assert res.is_error and "no --keras-model" in res.content[0].text


def test_project_refuses_a_bad_argument_before_anything_runs() -> None:
    bad_batch, bad_preset = calls(("project", {"hardware": "2x-gtx1060-pcie3", "batch": 0}),
                                  ("project", {"hardware": "2x-gtx1060-pcie3", "preset": "huge"}))
    assert bad_batch.is_error and "--batch" in bad_batch.content[0].text
    assert bad_preset.is_error and "--preset" in bad_preset.content[0].text


def test_profile_command_returns_the_command(tmp_path: Path) -> None:
    out = tmp_path / "my run"
    (res,) = calls(("profile_command", {"variants": ["single", "replicated"], "preset": "tiny",
                                        "out": str(out)}))
    doc = ok(res)
    assert doc["command"] == f"tfprof-towers profile --preset tiny --variants single,replicated --out '{out}'"
    assert "run_summary" in doc["then"] and not out.exists()


def test_the_server_starts_without_the_heavy_libraries() -> None:
    import subprocess
    import sys

    code = ("import sys; from tfprof_towers.cli import build_parser; build_parser('mcp'); "
            "from tfprof_towers.commands.mcp_server import build_server; build_server(); "
            "print(*(m in sys.modules for m in ('pandas', 'duckdb', 'pyarrow', 'tensorflow')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split() == ["False"] * 4
