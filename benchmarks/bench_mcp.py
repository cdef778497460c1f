"""How soon `tfprof-towers mcp` answers an MCP client: spawn to ``initialize``'s result, then ``tools/list``.

Each repeat starts a fresh server with the SDK's stdio client, as an editor does, and times (``perf_counter``
in this process) the spawn until ``initialize`` returns; the ``tools/list`` round trip after it (the server
answers ``initialize`` while the SDK is still being imported, so this one waits for the rest of that
import); the spawn until ``tools/list`` returns (the server ready for tools); and the CPU time of the
server's whole life (start, ``initialize``, ``tools/list``, exit: ``RUSAGE_CHILDREN``), which a shared,
loaded machine changes far less than the wall time.  Beside them, for scale, fresh interpreters that do
nothing (``python -c pass``) and that only import the SDK's server (``import mcp.server.mcpserver``).  One
warm-up each, then ``--repeats`` (default 5) interleaved; medians printed.  Run it on a quiet machine: on
a loaded one the wall times mostly measure the load.

    python -m benchmarks.bench_mcp [--repeats N] [--repo CHECKOUT]

``--repo`` measures another checkout's server (its package on ``PYTHONPATH``), to compare two versions.
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


async def _server_once(repo: Path) -> tuple[float, float]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "tfprof_towers", "mcp"], cwd=str(repo),
                                   env={"PYTHONPATH": str(repo)})
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
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose server is measured")
    args = parser.parse_args(argv)
    figures: dict[str, list[float]] = {k: [] for k in (
        "spawn -> initialize (wall)", "tools/list (wall)", "spawn -> tools/list answered (wall)",
        "the server's whole life (CPU)",
        "python -c pass (wall)", "python -c pass (CPU)", "import mcp.server.mcpserver (wall)",
        "import mcp.server.mcpserver (CPU)")}
    for i in range(args.repeats + 1):
        c0 = _children_cpu()
        init_s, list_s = anyio.run(_server_once, args.repo.resolve())
        server_cpu = _children_cpu() - c0
        bare, bare_cpu = _process("pass")
        sdk, sdk_cpu = _process("import mcp.server.mcpserver")
        if i:  # the first round warms the page cache
            for name, x in zip(figures, (init_s, list_s, init_s + list_s, server_cpu, bare, bare_cpu, sdk,
                                         sdk_cpu)):
                figures[name].append(x)
    for name, xs in figures.items():
        print(f"{name:38s} median {statistics.median(xs) * 1e3:8.1f} ms  "
              f"(min {min(xs) * 1e3:.1f}, max {max(xs) * 1e3:.1f}; {len(xs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
