"""How soon `tfprof-towers mcp` answers an MCP client: spawn to ``initialize``'s result, then ``tools/list``.

Each repeat starts a fresh server with the SDK's stdio client, as an editor does, and times (``perf_counter``
in this process) the spawn until ``initialize`` returns and the ``tools/list`` round trip after it, and the
CPU time of the server's whole life (start, ``initialize``, ``tools/list``, exit: ``RUSAGE_CHILDREN``),
which a shared, loaded machine changes far less than the wall time.  Beside them, for scale, fresh
interpreters that do nothing (``python -c pass``) and that only import the SDK's server (``import
mcp.server.mcpserver``): what the server itself adds is the difference.  One warm-up each, then
``--repeats`` (default 5) interleaved; medians printed.

    python -m benchmarks.bench_mcp [--repeats N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


async def _server_once() -> tuple[float, float]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "tfprof_towers", "mcp"], cwd=str(REPO),
                                   env={"PYTHONPATH": str(REPO)})
    t0 = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        t1 = time.perf_counter()
        await session.list_tools()
        t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def _process(code: str) -> tuple[float, float]:
    """Wall and CPU seconds of a fresh interpreter running ``code``."""
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    return time.perf_counter() - t0, _children_cpu() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    figures: dict[str, list[float]] = {k: [] for k in (
        "spawn -> initialize (wall)", "tools/list (wall)", "the server's whole life (CPU)",
        "python -c pass (wall)", "python -c pass (CPU)", "import mcp.server.mcpserver (wall)",
        "import mcp.server.mcpserver (CPU)")}
    for i in range(args.repeats + 1):
        c0 = _children_cpu()
        init_s, list_s = anyio.run(_server_once)
        server_cpu = _children_cpu() - c0
        bare, bare_cpu = _process("pass")
        sdk, sdk_cpu = _process("import mcp.server.mcpserver")
        if i:  # the first round warms the page cache
            for name, x in zip(figures, (init_s, list_s, server_cpu, bare, bare_cpu, sdk, sdk_cpu)):
                figures[name].append(x)
    for name, xs in figures.items():
        print(f"{name:38s} median {statistics.median(xs) * 1e3:8.1f} ms  "
              f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f}; {len(xs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
