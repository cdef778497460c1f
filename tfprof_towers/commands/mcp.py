"""`tfprof-towers mcp`: the tool's answers for an agent, as an MCP server over stdio."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from tfprof_towers.cli import add_command

    add_command(sub, "mcp", run)


def run(args: argparse.Namespace) -> int:
    """Serve the tool to an AI agent: an MCP server over stdio (docs/agents.md).

    Tools: run_summary (a run directory's ranking, recommendation, findings and memory
    verdicts), analyze (any trace: where each device's time goes, findings), diff, project,
    sql (DuckDB over the frames), hardware, and profile_command (the `profile` command to run:
    a profile takes minutes and runs TensorFlow, so the server never starts one).  Each tool
    returns the JSON document the command's --json prints; bad input is a tool error carrying
    the command's one-line message, and the server keeps answering.  Paths are read, never
    written (no --html, no export, no projection.json).  Add it to a client as the command
    `tfprof-towers mcp`.  Never imports TensorFlow.
    """
    from tfprof_towers.commands.mcp_stdio import serve

    serve(_build_server)
    return 0


def _build_server():
    """The SDK's server with the tools (imports the SDK: run in a thread while ``initialize`` is
    answered)."""
    try:
        from tfprof_towers.commands.mcp_server import build_server
    except ImportError as exc:  # the SDK is a dependency; a broken install still gets one line
        from tfprof_towers.vocab.errors import TowersError

        raise TowersError(f"mcp needs the official MCP Python SDK (pip install 'mcp>=2.3,<3'): "
                          f"{exc}") from None
    return build_server()
