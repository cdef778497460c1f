"""The MCP server's tools, through the SDK's in-process client: each returns the document its command's
``--json`` prints (text and structured content), a bad argument is a tool error carrying the command's
one line and the server goes on answering, and no path is written."""

from __future__ import annotations

import functools
import io
import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from report_kit import make_run_dir
from trace_kit import two_gpu_trace

from tfprof_towers.cli import main
from tfprof_towers.commands import mcp_stdio

NAMES = {"run_summary", "analyze", "sql", "diff", "project", "hardware", "profile_command"}


def build_server() -> Any:
    """The package's MCP server; the SDK is imported here, on first use, not while tests are collected."""
    from tfprof_towers.commands.mcp_server import build_server as build

    return build()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("run") / "run")


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_gpu_trace().write(tmp_path_factory.mktemp("trace") / "host.xplane.pb")


def calls(*requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each request's result, in order, from one server over one in-process client session."""

    from mcp import Client

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
    from mcp import Client

    from tfprof_towers.commands.mcp_server import TOOLS

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


def test_project_passes_the_keras_model_to_the_command(tmp_path: Path) -> None:
    """``keras_model`` goes through ``project``'s own parser and checks: a file that is not there is the
    command's one line, as a tool error, before any graph is built."""
    missing = tmp_path / "model.py"
    (res,) = calls(("project", {"hardware": "2x-gtx1060-pcie3", "keras_model": str(missing)}))
    assert res.is_error and res.content[0].text == (
        f"tfprof-towers: error: keras model file {missing}: not found")


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

    # one fresh interpreter, two moments: after importing what answers initialize, then after building
    # the server (the parser and the server import what they need; the first line is printed before)
    code = ("import sys; import tfprof_towers.commands.mcp_stdio; "
            "print(*(m in sys.modules for m in ('mcp', 'pydantic', 'anyio'))); "
            "from tfprof_towers.cli import build_parser; build_parser('mcp'); "
            "from tfprof_towers.commands.mcp_server import build_server; build_server(); "
            "print(*(m in sys.modules for m in ('pandas', 'duckdb', 'pyarrow', 'tensorflow')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    early, built = out.stdout.splitlines()
    assert early.split() == ["False"] * 3  # what answers initialize waits for none of the SDK
    assert built.split() == ["False"] * 4


# --------------------------------------------------------------------------------------------------
# Start-up: `initialize` answered before the SDK is loaded (commands/mcp_stdio.py), checked against the
# SDK's own answer over its own stdio transport.

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18",
                   "capabilities": {"roots": {"listChanged": True}, "sampling": {"context": {}, "tools": {}},
                                    "elicitation": {"form": {}, "url": {}}, "experimental": {"x": {"y": 1}},
                                    "somethingNew": 3},
                   "clientInfo": {"name": "editor", "version": "1.2", "title": "Editör"}}}


@functools.cache
def _sdk_server() -> Any:
    """The SDK's low-level server behind :func:`build_server` (built once: each run is a new session)."""
    return build_server()._lowlevel_server


def sdk_lines(*lines: str) -> list[str]:
    """What the SDK's server writes to stdout for these client lines, through its own stdio transport."""
    from mcp.server.stdio import stdio_server

    class In:
        def __init__(self) -> None:
            self.lines = list(lines)

        def readline(self) -> str:
            return self.lines.pop(0) if self.lines else ""

    class Out:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def write(self, text: str) -> int:
            self.lines.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    out = Out()

    async def go() -> None:
        server = _sdk_server()
        async with stdio_server(stdin=anyio.wrap_file(In()), stdout=anyio.wrap_file(out)) as (r, w):
            await server.run(r, w, server.create_initialization_options())

    anyio.run(go)
    return out.lines


def line(message: Any) -> str:
    return json.dumps(message) + "\n"


def with_(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """:data:`INIT` with the field at ``path`` set to ``value`` (deleted for ``...``)."""
    m = json.loads(json.dumps(INIT))
    *parents, last = path
    d = m
    for k in parents:
        d = d[k]
    if value is ...:
        del d[last]
    else:
        d[last] = value
    return m


def test_the_versions_known_are_the_sdks() -> None:
    from mcp.types import version

    assert mcp_stdio.HANDSHAKE_PROTOCOL_VERSIONS == version.HANDSHAKE_PROTOCOL_VERSIONS
    assert mcp_stdio.LATEST_HANDSHAKE_VERSION == version.LATEST_HANDSHAKE_VERSION


@pytest.mark.parametrize("requested", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28",
                                       "1999-01-01", ""])
@pytest.mark.parametrize("ident", [0, 7, 2**53 + 1, "abc", "ü-1"])
def test_the_early_answer_is_the_sdks_own_line(requested: str, ident: int | str) -> None:
    request = line({**with_(("params", "protocolVersion"), requested), "id": ident})
    answered = mcp_stdio.initialize_response(request)
    assert answered is not None and answered[0] == ident
    assert [answered[1]] == sdk_lines(request)  # byte for byte, for every version the SDK knows or not
    assert json.loads(answered[1])["result"]["protocolVersion"] == (
        requested if requested in mcp_stdio.HANDSHAKE_PROTOCOL_VERSIONS else "2025-11-25")


def _mutations() -> list[dict[str, Any]]:
    """:data:`INIT` with each of its fields deleted or replaced by a value of each JSON type."""
    paths: list[tuple[str, ...]] = []

    def walk(d: dict[str, Any], at: tuple[str, ...]) -> None:
        for k, v in d.items():
            paths.append((*at, k))
            if isinstance(v, dict):
                walk(v, (*at, k))

    walk(INIT, ())
    values = [..., None, 0, 1.5, "s", True, [], {}, {"k": True}]
    return [with_(p, v) for p in paths for v in values]


def test_the_early_answer_is_given_only_where_the_sdk_gives_the_same() -> None:
    """Every field of a request broken in every way: wherever this module answers, the SDK's answer is
    byte for byte the same; where the SDK refuses (an error or no answer), this module leaves it be."""
    refused = answered = 0
    for m in [*_mutations(), {**INIT, "params": {**INIT["params"], "_meta": {"progressToken": 1}}},
              {**INIT, "id": 1.0}, {**INIT, "extra": 1}]:
        request = line(m)
        sdk = sdk_lines(request)
        sdk_ok = len(sdk) == 1 and "result" in json.loads(sdk[0])
        mine = mcp_stdio.initialize_response(request)
        if mine is not None:
            answered += 1
            assert sdk == [mine[1]], m
        refused += not sdk_ok
    assert refused > 30 and answered > 30  # both kinds are exercised
    assert mcp_stdio.initialize_response("not json\n") is None
    assert mcp_stdio.initialize_response('{"jsonrpc": "2.0", "id": NaN, "method": "initialize"}') is None


def _pipes(load) -> tuple[Any, queue.Queue[bytes], threading.Thread, Any]:
    """:func:`mcp_stdio.relay` serving over two pipes in a thread: (the client's end of its input, the
    lines it writes as they come and b"" at the end, the thread, the server's end of its output)."""
    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    wire_in = io.TextIOWrapper(open(c2s_r, "rb"), encoding="utf-8", errors="replace")  # noqa: SIM115
    wire_out = open(s2c_w, "wb")  # noqa: SIM115
    t = threading.Thread(target=mcp_stdio.relay, args=(wire_in, wire_out, load), daemon=True)
    t.start()
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        with open(s2c_r, "rb") as f:
            for x in f:
                lines.put(x)
        lines.put(b"")

    threading.Thread(target=read, daemon=True).start()
    return open(c2s_w, "wb", buffering=0), lines, t, wire_out


def _next(lines: queue.Queue[bytes]) -> bytes:
    """The server's next line (b"" at its end); fails, rather than hangs, when none comes."""
    try:
        return lines.get(timeout=120)
    except queue.Empty:
        pytest.fail("no line from the server")


def test_initialize_is_answered_before_the_sdk_is_loaded_then_the_sdk_serves() -> None:
    loaded = threading.Event()

    def load():
        loaded.wait(120)  # the SDK's server is built only once the answer has been read
        return build_server()

    to_server, lines, t, server_out = _pipes(load)
    to_server.write(line(INIT).encode())
    assert _next(lines).decode() == sdk_lines(line(INIT))[0]
    loaded.set()
    for m in ({"jsonrpc": "2.0", "method": "notifications/initialized"},
              {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
              {"jsonrpc": "2.0", "id": 3, "method": "ping"}):
        to_server.write(line(m).encode())
    tools = json.loads(_next(lines))
    assert tools["id"] == 2 and {x["name"] for x in tools["result"]["tools"]} == NAMES
    assert json.loads(_next(lines)) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    to_server.close()  # the client leaves: the server returns
    t.join(120)
    assert not t.is_alive()
    server_out.close()
    assert _next(lines) == b""  # the SDK's own answer to initialize was not sent a second time


def test_a_first_message_other_than_initialize_goes_to_the_sdk() -> None:
    to_server, lines, t, server_out = _pipes(build_server)
    first = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
    to_server.write((line(first) + line(INIT)).encode())
    to_server.close()
    t.join(120)
    server_out.close()
    got = [x.decode() for x in iter(lambda: _next(lines), b"")]
    assert got == sdk_lines(line(first), line(INIT)) and len(got) == 2


def test_the_sdks_answer_to_the_replayed_initialize_is_dropped_or_refused(capsys) -> None:
    ident, sent = mcp_stdio.initialize_response(line(INIT))
    out = io.BytesIO()
    wire = mcp_stdio._Wire(out, (ident, sent))
    other = '{"jsonrpc":"2.0","id":2,"result":{}}\n'
    for text in (other, sent, sent):  # only the first copy of the answer is dropped
        wire.write(text)
    assert out.getvalue().decode() == other + sent
    differs = sent.replace('"listChanged":false', '"listChanged":true', 1)
    mcp_stdio._Wire(out := io.BytesIO(), (ident, sent)).write(differs)
    assert out.getvalue() == b"" and "differs" in capsys.readouterr().err
    refused = '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid request parameters"}}\n'
    with pytest.raises(mcp_stdio.HandshakeMismatch, match="refused the client's initialize request"):
        mcp_stdio._Wire(io.BytesIO(), (ident, sent)).write(refused)
    string_id = '{"jsonrpc":"2.0","id":"1","result":{}}\n'  # another request's answer: id "1" is not 1
    mcp_stdio._Wire(out := io.BytesIO(), (ident, sent)).write(string_id)
    assert out.getvalue().decode() == string_id


def test_a_task_groups_error_is_raised_as_itself() -> None:
    try:
        from builtins import BaseExceptionGroup, ExceptionGroup  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10: anyio's backport
        from exceptiongroup import BaseExceptionGroup, ExceptionGroup

    group = BaseExceptionGroup("x", [ValueError("v"), BaseExceptionGroup("y", [KeyboardInterrupt()])])
    assert isinstance(mcp_stdio._leaf(group), KeyboardInterrupt)
    pipe = ExceptionGroup("x", [ValueError(), BrokenPipeError()])
    assert isinstance(mcp_stdio._leaf(pipe), BrokenPipeError)
    err = OSError(5, "x")
    assert mcp_stdio._leaf(err) is err


def test_an_early_answer_the_sdk_refuses_ends_the_server(monkeypatch) -> None:
    """Were the early answer given to a request the SDK refuses, the server stops with the SDK's reason,
    without waiting for the client to close its input."""
    bad = with_(("params", "clientInfo"), ...)
    monkeypatch.setattr(mcp_stdio, "initialize_response",
                        lambda text: (1, sdk_lines(line(INIT))[0]) if text == line(bad) else None)
    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    raised: list[BaseException] = []

    def run() -> None:
        # the input is left open: the server's reader thread is still blocked on it
        wire_in = io.TextIOWrapper(open(c2s_r, "rb"), encoding="utf-8")  # noqa: SIM115
        with open(s2c_w, "wb") as wire_out:
            try:
                mcp_stdio.relay(wire_in, wire_out, build_server)
            except BaseException as exc:
                raised.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    with open(c2s_w, "wb", buffering=0) as to_server:
        to_server.write(line(bad).encode())
        t.join(120)  # the client's input is still open
        assert not t.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], mcp_stdio.HandshakeMismatch)
    assert "refused the client's initialize request (Invalid request parameters)" in str(raised[0])
    with open(s2c_r, "rb") as from_server:
        assert json.loads(from_server.readline())["id"] == 1 and from_server.read() == b""
