"""How soon `tfprof-towers mcp` answers an MCP client: spawn to ``initialize``'s result, then ``tools/list``.

Each repeat starts a fresh server with the SDK's stdio client, as an editor does, and times (``perf_counter``
in this process) the spawn until ``initialize`` returns and the ``tools/list`` round trip after it.  Beside
them, for scale, fresh interpreters that do nothing (``python -c pass``) and that only import the SDK's
server (``import mcp.server.mcpserver``): what the server itself adds is the difference.  One warm-up
each, then ``--repeats`` (default 5) interleaved; medians printed.

    python -m benchmarks.bench_mcp [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]


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


def _process(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    figures: dict[str, list[float]] = {"spawn -> initialize": [], "tools/list": [], "python -c pass": [],
                                       "python -c 'import mcp.server.mcpserver'": []}
    for i in range(args.repeats + 1):
        init_s, list_s = anyio.run(_server_once)
        bare = _process("pass")
        sdk = _process("import mcp.server.mcpserver")
        if i:  # the first round warms the page cache
            figures["spawn -> initialize"].append(init_s)
            figures["tools/list"].append(list_s)
            figures["python -c pass"].append(bare)
            figures["python -c 'import mcp.server.mcpserver'"].append(sdk)
    for name, xs in figures.items():
        print(f"{name:42s} median {statistics.median(xs) * 1e3:8.1f} ms  "
              f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f}; {len(xs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
