"""The stdio side of `tfprof-towers mcp`: it answers ``initialize`` while the MCP SDK is still being
imported, then hands the connection to the SDK's server.

Importing the SDK takes over a second of CPU (pydantic builds the protocol's types), longer than a
client gives a server to answer ``initialize``.  So :func:`serve` imports the SDK and builds the server
in a thread while the main thread reads the client's first message with plain :mod:`json`.  When that
message is an ``initialize`` request this module can vouch for, it answers at once with the very line
the SDK would write (:func:`initialize_response`; its constants are below, and tests/unit/test_mcp.py
checks them against the SDK's own answer for each protocol version).  Once the SDK is loaded, its
server runs over the SDK's own stdio transport (``stdio_server`` with explicit streams): the first
message is replayed to it, so its session holds the client's real parameters, and its answer to that
one request is dropped after checking it against the line already sent (an error there ends the
server with one line on stderr).  Any other first message goes to the SDK like the rest, untouched.

Only protocol goes to stdout: from the start, fd 0 reads the null device and fd 1 writes to stderr
(as the SDK's transport arranges), and the wire is served from private duplicates of them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, BinaryIO, TextIO

from tfprof_towers import __version__
from tfprof_towers.vocab.errors import TowersError

#: The server's name in ``initialize``'s ``serverInfo``.
SERVER_NAME = "tfprof-towers"
#: What the server tells the agent in ``initialize`` (the SDK server's ``instructions``).
INSTRUCTIONS = (
    "tfprof-towers answers why a multi-GPU TensorFlow job is slower than it should be, from profiles "
    "already on disk. For a run directory written by `tfprof-towers profile` (it holds run.json), call "
    "run_summary first: the ranked placements, the recommendation and its reason, the findings. For a "
    "trace (*.xplane.pb) or a TensorBoard logdir, call analyze first: where each device's time goes, the "
    "links, memory and findings. Then: sql for any other figure (DuckDB over the same frames), diff to "
    "compare two runs or traces, project for hardware that is not at hand, hardware for its profiles. "
    "The server never runs a profile (it takes minutes and runs TensorFlow): profile_command returns the "
    "command for the user to run, whose run directory you then pass to run_summary."
)
#: The protocol versions the SDK negotiates through ``initialize`` (``mcp.types.version``'s
#: ``HANDSHAKE_PROTOCOL_VERSIONS``): a client's version among them is answered with itself, any other
#: with the newest.
HANDSHAKE_PROTOCOL_VERSIONS: tuple[str, ...] = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]
#: What the SDK's server declares it can do (derived by the SDK from the handlers it registers).
CAPABILITIES: dict[str, dict[str, bool]] = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}

_IMPLEMENTATION_TEXT = ("title", "description", "websiteUrl")
#: ``ClientCapabilities``' fields that map names to objects, and those with fields of their own.
_CAPABILITY_MAPS = ("experimental", "extensions")
_CAPABILITY_FIELDS: dict[str, dict[str, type]] = {
    "roots": {"listChanged": bool},
    "sampling": {"context": dict, "tools": dict},
    "elicitation": {"form": dict, "url": dict},
}


class HandshakeMismatch(TowersError):
    """The SDK refused the ``initialize`` request this server had already answered."""


# --------------------------------------------------------------------------------------------------
# The answer to ``initialize``


def initialize_response(line: str) -> tuple[int | str, str] | None:
    """The request id and the SDK's exact answer line when ``line`` is an ``initialize`` request whose
    shape this module can vouch for the SDK accepts; None for anything else (the SDK answers that)."""
    try:
        message = json.loads(line, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if not _plain_initialize(message):
        return None
    requested = message["params"]["protocolVersion"]
    negotiated = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
    result = {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": negotiated,
        "serverInfo": {"name": SERVER_NAME, "version": __version__},
    }
    reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    return message["id"], json.dumps(reply, separators=(",", ":"), ensure_ascii=False) + "\n"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _plain_initialize(m: Any) -> bool:
    """Whether ``m`` is an ``initialize`` request of the plain shape every client sends (anything
    unusual, such as ``_meta`` or icons, is left to the SDK to judge)."""
    if not (isinstance(m, dict) and set(m) <= {"jsonrpc", "id", "method", "params"}):
        return False
    ident, params = m.get("id"), m.get("params")
    if not (m.get("jsonrpc") == "2.0" and m.get("method") == "initialize" and isinstance(params, dict)):
        return False
    if not (type(ident) is str or (type(ident) is int and -(2**63) <= ident < 2**63)):
        return False
    if not set(params) <= {"protocolVersion", "capabilities", "clientInfo"}:
        return False
    info, caps = params.get("clientInfo"), params.get("capabilities")
    return (isinstance(params.get("protocolVersion"), str) and isinstance(info, dict)
            and isinstance(caps, dict) and _plain_implementation(info) and _plain_capabilities(caps))


def _plain_implementation(info: dict[str, Any]) -> bool:
    return (set(info) <= {"name", "version", *_IMPLEMENTATION_TEXT} and isinstance(info.get("name"), str)
            and isinstance(info.get("version"), str)
            and all(isinstance(info[k], str) for k in _IMPLEMENTATION_TEXT if k in info))


def _plain_capabilities(caps: dict[str, Any]) -> bool:
    """Known capabilities of the types the SDK's ``ClientCapabilities`` takes (``tasks``, or a null,
    is left to the SDK; it ignores unknown ones)."""
    for key, value in caps.items():
        if key in _CAPABILITY_MAPS:
            if not (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())):
                return False
        elif key in _CAPABILITY_FIELDS:
            fields = _CAPABILITY_FIELDS[key]
            if not (isinstance(value, dict) and set(value) <= set(fields)
                    and all(isinstance(v, fields[k]) for k, v in value.items())):
                return False
        elif key == "tasks":
            return False
    return True


# --------------------------------------------------------------------------------------------------
# The relay between the wire and the SDK's transport


class _Lines:
    """The client's lines for the SDK's transport: the first one again, then the rest as a daemon
    thread reads them (so that an exit never waits on a read of the client's input)."""

    _EOF = ""

    def __init__(self, first: str, rest: TextIO) -> None:
        self._queue: queue.Queue[str] = queue.Queue(maxsize=64)
        self._queue.put(first)
        self._rest = rest
        threading.Thread(target=self._read, name="mcp-stdin", daemon=True).start()

    def _read(self) -> None:
        try:
            while line := self._rest.readline():
                self._queue.put(line)
        except (OSError, ValueError):
            pass
        self._queue.put(self._EOF)

    def close(self) -> None:
        """Wake a reader waiting for a line: it reads the end."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(self._EOF)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        import anyio

        while line := await anyio.to_thread.run_sync(self._queue.get, abandon_on_cancel=True):
            yield line


class _Wire:
    """The SDK's output, written to the client, less the SDK's answer to a request answered already."""

    def __init__(self, out: BinaryIO, answered: tuple[int | str, str] | None) -> None:
        self._out = out
        self._pending = answered

    def write(self, text: str) -> int:
        if self._pending is not None and self._is_the_answer(text):
            return len(text)
        self._out.write(text.encode("utf-8"))
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def _is_the_answer(self, text: str) -> bool:
        assert self._pending is not None
        ident, sent = self._pending
        if text == sent:
            self._pending = None
            return True
        with contextlib.suppress(ValueError):
            reply = json.loads(text)
            if isinstance(reply, dict) and "id" in reply and type(reply["id"]) is type(ident) \
                    and reply["id"] == ident:
                self._pending = None
                if "error" in reply:
                    error = reply["error"].get("message") if isinstance(reply["error"], dict) else None
                    raise HandshakeMismatch(f"the MCP SDK refused the client's initialize request "
                                            f"({error or reply['error']}), which had been answered "
                                            "before the SDK was loaded")
                _say("tfprof-towers: warning: the MCP SDK's answer to initialize differs from the one "
                     "sent before it was loaded (the session goes on)")
                return True
        return False


async def _serve_sdk(server: Any, lines: _Lines, wire: _Wire) -> None:
    """Run the SDK's server (an ``MCPServer``) over its stdio transport on these streams, as its
    ``run_stdio_async`` does over the process's own."""
    import anyio
    from mcp.server.stdio import stdio_server

    async with stdio_server(stdin=lines, stdout=anyio.wrap_file(wire)) as (read, write):  # type: ignore[arg-type]
        lowlevel = server._lowlevel_server  # what MCPServer.run_stdio_async runs
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def relay(wire_in: TextIO, wire_out: BinaryIO, load: Callable[[], Any]) -> None:
    """Serve one client over ``wire_in`` / ``wire_out``: ``load()`` (the SDK's server, built) runs in a
    thread while the first message is read and, when it is a plain ``initialize``, answered."""
    loader = _Loader(load)
    first = wire_in.readline()
    if not first:
        return
    answered = initialize_response(first)
    if answered is not None:
        wire_out.write(answered[1].encode("utf-8"))
        wire_out.flush()
    server = loader.result()
    import anyio

    lines = _Lines(first, wire_in)
    try:
        anyio.run(_serve_sdk, server, lines, _Wire(wire_out, answered))
    except BaseException as exc:  # anyio's task groups wrap what a task raised: raise it as itself
        raise _leaf(exc) from None
    finally:
        lines.close()


class _Loader:
    """``load()`` run in a daemon thread; :meth:`result` waits for its value or raises its error."""

    def __init__(self, load: Callable[[], Any]) -> None:
        self._load = load
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mcp-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._load()
        except BaseException as exc:  # handed to the main thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def _leaf(exc: BaseException) -> BaseException:
    """The exception a task group's ``exc`` stands for: an interrupt first, then this package's
    errors, then a broken pipe, else the first one inside."""
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        inner = getattr(e, "exceptions", None)
        if isinstance(inner, tuple | list) and type(e).__name__.endswith("ExceptionGroup"):
            for x in inner:
                walk(x)
        else:
            leaves.append(e)

    walk(exc)
    for kind in (KeyboardInterrupt, TowersError, BrokenPipeError, OSError):
        for e in leaves:
            if isinstance(e, kind):
                return e
    return leaves[0] if leaves else exc


def serve(load: Callable[[], Any]) -> None:
    """Serve over the process's stdio until the client closes it; ``load()`` imports the SDK and
    returns its server, built (module docstring)."""
    wire_in_fd, wire_out_fd = _claim(0, os.O_RDONLY), _claim(1, None)
    # Never closed: a daemon thread may still be blocked reading the wire when this returns.
    wire_in = io.TextIOWrapper(open(wire_in_fd, "rb", closefd=False),  # noqa: SIM115
                               encoding="utf-8", errors="replace")
    wire_out = open(wire_out_fd, "wb", closefd=False)  # noqa: SIM115
    try:
        relay(wire_in, wire_out, load)
    finally:
        with contextlib.suppress(OSError, ValueError):  # stray buffered prints go to stderr, not the wire
            sys.stdout.flush()
        with contextlib.suppress(OSError):
            wire_out.flush()


def _claim(fd: int, devnull_mode: int | None) -> int:
    """A private duplicate of ``fd`` (the wire); ``fd`` itself then reads the null device (stdin) or
    writes to stderr (stdout)."""
    import fcntl

    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    diversion = os.open(os.devnull, devnull_mode) if devnull_mode is not None else os.dup(2)
    os.dup2(diversion, fd)
    os.close(diversion)
    return private


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)
