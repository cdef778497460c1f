"""`tfprof-towers mcp` started by the MCP SDK's stdio client, as an agent's editor starts it: the tools
listed, analyze on the real 8-GPU trace equal to `analyze --json`, sql and run_summary on a real tiny
run, project reading the run without writing it and without TensorFlow in the server, and a bad query
and a missing path as tool errors while the server goes on answering."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import InitializeResult

from tfprof_towers import __version__

REPO = Path(__file__).resolve().parents[2]
TOOL = (sys.executable, "-m", "tfprof_towers")


def server() -> StdioServerParameters:
    """The installed `tfprof-towers` script where there is one, else this interpreter's module; this
    checkout's package either way."""
    script = shutil.which("tfprof-towers", path=str(REPO / ".venv" / "bin"))
    command, args = (script, ["mcp"]) if script else (sys.executable, ["-m", "tfprof_towers", "mcp"])
    return StdioServerParameters(command=command, args=args, cwd=str(REPO),
                                 env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"})


def children_mapping(pattern: str) -> list[int]:
    """This process's children whose memory maps a file whose path holds ``pattern``."""
    me, found = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and pattern in (stat.parent / "maps").read_text():
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def session(requests: list[tuple[str, dict[str, Any]]]) -> tuple[set[str], list[Any], list[int]]:
    """The tools listed, each request's result in order, and the server's processes with TensorFlow
    mapped (looked at after the last request, before the server is closed)."""

    async def go():
        async with stdio_client(server()) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            results = [await s.call_tool(name, args) for name, args in requests]
            return names, results, children_mapping("tensorflow")

    return anyio.run(go)


def doc_of(result) -> Any:
    assert not result.is_error, result.content[0].text
    doc = json.loads(result.content[0].text)
    assert result.structured_content == doc
    return doc


def test_an_agent_session(fixture_8gpu: Path, tiny_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, symlinks=True)
    before = files_of(run)
    want = json.loads(subprocess.run([*TOOL, "analyze", str(fixture_8gpu), "--json"], capture_output=True,
                                     text=True, check=True, cwd=REPO, timeout=300).stdout)
    query = "SELECT variant, median_s FROM variants WHERE rank IS NOT NULL ORDER BY rank"
    names, results, with_tf = session([
        ("analyze", {"path": str(fixture_8gpu)}),
        ("sql", {"paths": [str(run)], "query": "SELEC variant FROM variants"}),
        ("run_summary", {"run_dir": str(tmp_path / "missing")}),
        ("sql", {"paths": [str(run)], "query": query}),
        ("run_summary", {"run_dir": str(run)}),
        ("project", {"hardware": "2x-gtx1060-pcie3", "run_dir": str(run), "preset": "tiny"}),
    ])
    assert names >= {"analyze", "diff", "project", "sql", "run_summary", "hardware"}
    analyze, bad_sql, missing, sql, summary, project = results

    got = doc_of(analyze)
    assert got["step_time_avg_s"] == want["step_time_avg_s"] and got["step_time_s"] == want["step_time_s"]
    assert got == want

    assert bad_sql.is_error and "Parser Error" in bad_sql.content[0].text
    assert missing.is_error and str(tmp_path / "missing") in missing.content[0].text

    recorded = json.loads((run / "summary.json").read_text())
    medians = {v["name"]: v["step_time_s"]["median"] for v in recorded["variants"]}
    rows = doc_of(sql)["rows"]
    assert [r["variant"] for r in rows] == list(recorded["ranking"][: len(rows)])
    assert all(r["median_s"] == medians[r["variant"]] for r in rows)

    digest = doc_of(summary)
    assert digest["recommendation"] == recorded["recommendation"]
    assert [r["variant"] for r in digest["ranking"]][: len(recorded["ranking"])] == recorded["ranking"]
    assert digest["findings"] == recorded["findings"]

    projected = doc_of(project)
    assert projected["ranking"] and projected["label"] == "projected"
    assert files_of(run) == before  # read, never written: no projection.json, no report re-rendered
    assert with_tf == []  # the graphs were built in a child; the server never imported TensorFlow


@pytest.mark.parametrize("requested, negotiated", [("2025-06-18", "2025-06-18"),
                                                   ("2099-01-01", "2025-11-25")])
def test_a_raw_initialize_over_stdio(requested: str, negotiated: str) -> None:
    """The server's process, written to as a client writes (initialize, initialized and tools/list in one
    go; its input closed once both are answered): one answer per request, the first an InitializeResult
    the SDK's client accepts, with the version negotiated; nothing else on stdout, nothing on stderr."""
    params = server()
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": requested, "capabilities": {"roots": {"listChanged": True}},
                       "clientInfo": {"name": "raw-client", "version": "0.1"}}}
    rest = [{"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "two", "method": "tools/list"}]
    proc = subprocess.Popen([params.command, *params.args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, env={**os.environ, **params.env})
    guard = threading.Timer(300, proc.kill)  # a server that never answers fails the test, not hangs it
    guard.start()
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in [init, *rest]).encode())
        proc.stdin.flush()
        first, second = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
        proc.stdin.close()
        more, err = proc.stdout.read(), proc.stderr.read()
        assert (proc.wait(), more, err) == (0, b"", b"")
    finally:
        guard.cancel()
    assert first["jsonrpc"] == "2.0" and first["id"] == 1 and set(first) == {"jsonrpc", "id", "result"}
    result = InitializeResult.model_validate(first["result"])
    assert result.protocol_version == negotiated
    assert (result.server_info.name, result.server_info.version) == ("tfprof-towers", __version__)
    assert result.capabilities.tools is not None and "run_summary first" in result.instructions
    assert second["id"] == "two" and {t["name"] for t in second["result"]["tools"]} >= {"run_summary", "sql"}
