"""Read an XSpace (a ``*.xplane.pb`` path, or its bytes) into :class:`~.tables.RawSpace` columns.

The file is mapped (or, where its last page has no room for the zero padding, read:
:class:`~.wire.Buffer`).  Every way the bytes can be broken raises one
:class:`~tfprof_towers.vocab.errors.TraceError` with a one-line message.

A call shares no state with another (its string table is its own), so several files can
be read in parallel, one per worker process; within a call, batches of lines are decoded
on up to two threads (``threads=1``: none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane.columns import MAX_STATS, Parser
from tfprof_towers.xplane.decode import decode_space
from tfprof_towers.xplane.layout import Planes, read_planes
from tfprof_towers.xplane.tables import RawSpace
from tfprof_towers.xplane.wire import Buffer, Malformed

RIEGELI_MAGIC = b"\x83\xaf\x70\xd1\x0d\x88\x4a\x3f"


def read_xspace(
    source: Path | str | bytes,
    stats: Sequence[str] = (),
    label: str | None = None,
    as_bytes: Sequence[str] | Mapping[str, Parser | None] = (),
    threads: int | None = None,
) -> RawSpace:
    """Read a file (``source`` a path) or a serialized XSpace (``source`` bytes).

    ``stats``: the names of the stats to decode (every other stat is skipped unread);
    ``as_bytes``: those of them whose values are kept as raw bytes (:attr:`StatColumn.text`)
    rather than string codes -- for texts a caller parses with numpy, nearly all distinct --
    or, given as a mapping to parsers (:data:`~.columns.Parser`), handed to the parser a
    batch of lines at a time and only its columns kept (:attr:`StatColumn.parsed`);
    ``label``: how messages and :attr:`RawSpace.source` name it (default: the path, or
    ``"<bytes>"``); ``threads``: decoding threads (default: up to two, the cores allowing,
    :func:`~.parallel.decode_threads`).
    """
    if isinstance(source, bytes | bytearray):
        data = bytes(source)
        name = "<bytes>" if label is None else label
        return decode_buffer(Buffer.of(data), data, name, stats, as_bytes, threads)
    path = Path(source)
    try:
        mapped = Buffer.map(path)
        buf, view = mapped if mapped is not None else Buffer.read(path)
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    return decode_buffer(buf, view, str(path) if label is None else label, stats, as_bytes, threads)


def decode_buffer(
    buf: Buffer,
    data: bytes | memoryview,
    source: str,
    stats: Sequence[str] = (),
    as_bytes: Sequence[str] | Mapping[str, Parser | None] = (),
    threads: int | None = None,
) -> RawSpace:
    """:func:`read_xspace` of bytes already in a buffer (``data``: the same bytes, indexable)."""
    names = tuple(dict.fromkeys(stats))
    if len(names) > MAX_STATS:
        raise ValueError(f"at most {MAX_STATS} stats can be read at once, not {len(names)}")
    try:
        return decode_space(buf, read_layout(buf, data, source), source, names, as_bytes, threads)
    except Malformed as exc:
        raise TraceError(f"{source}: corrupted trace ({exc})") from None


def read_layout(buf: Buffer, data: bytes | memoryview, source: str) -> Planes:
    """Walk the space's planes; a :class:`TraceError` when it is not a readable XSpace."""
    if not buf.size:
        raise TraceError(f"{source}: empty file")
    if bytes(data[: len(RIEGELI_MAGIC)]) == RIEGELI_MAGIC:
        raise TraceError(f"{source}: this is the newer .xplane.riegeli form, which is not supported")
    try:
        planes = read_planes(buf, data)
    except Malformed:
        raise TraceError(
            f"{source}: not a readable XSpace trace (the protobuf data is corrupt or truncated)"
        ) from None
    if not planes.planes:
        raise TraceError(f"{source}: no profiler planes in it: not an XSpace trace")
    return planes
