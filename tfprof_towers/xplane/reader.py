"""Read an XSpace (a ``*.xplane.pb`` path, or its bytes) into :class:`~.tables.RawSpace` columns.

Before anything is mapped or read, :func:`check_file` opens the path without blocking and
refuses what is not a regular file (a FIFO would block ``open`` forever; a device never ends)
and looks at the leading bytes: an XSpace starts with one of its fields (planes, errors,
warnings, hostnames: a length-delimited tag) whose length fits the file, so a file of zeros or
of anything else is refused at once, whatever its size (a 20 GB sparse file is not read).
The file is then mapped (or, where its last page has no room for the zero padding, read, but
only when it fits in the memory available: :class:`~.wire.Buffer`).  Every way the bytes can
be broken, and running out of memory, raises one
:class:`~tfprof_towers.vocab.errors.TraceError` with a one-line message.

A call shares no state with another (its string table is its own), so several files can
be read in parallel, one per worker process; within a call, batches of lines are decoded
on up to two threads (``threads=1``: none).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane.columns import MAX_STATS, Parser
from tfprof_towers.xplane.decode import decode_space
from tfprof_towers.xplane.layout import Planes, read_planes
from tfprof_towers.xplane.tables import RawSpace
from tfprof_towers.xplane.wire import Buffer, Malformed

RIEGELI_MAGIC = b"\x83\xaf\x70\xd1\x0d\x88\x4a\x3f"
#: The XSpace's own fields (``planes``, ``errors``, ``warnings``, ``hostnames``): all length-delimited.
SPACE_FIELDS = frozenset({1, 2, 3, 4})
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


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
    name = str(path) if label is None else label
    size = check_file(path, name)
    try:
        mapped = Buffer.map(path)
        if mapped is None:
            _fits_in_memory(size, name)
        buf, view = mapped if mapped is not None else Buffer.read(path)
    except MemoryError:
        raise TraceError(f"{name}: out of memory reading it ({size / 1e9:.1f} GB)") from None
    except (OSError, ValueError) as exc:
        raise TraceError(f"{name}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return decode_buffer(buf, view, name, stats, as_bytes, threads)
    except MemoryError:
        raise TraceError(f"{name}: out of memory decoding it ({size / 1e9:.1f} GB file)") from None


#: Top-level fields walked by :func:`check_file` before the rest is left to the reader (a real trace
#: has one per plane and hostname: tens).
MAX_CHECKED_FIELDS = 100_000


def check_file(path: Path, name: str) -> int:
    """The file's size, after refusing what cannot be an XSpace: not a regular file, or top-level
    fields that do not tile the file (see the module docstring).  Opened with ``O_NONBLOCK``, so a
    FIFO is refused, not waited on; the fields are walked with small ``pread`` calls, so a 20 GB
    file of zeros after a plausible first field is refused without being read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TraceError(f"{name}: a symbolic link loop (it leads back to itself)") from None
        if exc.errno == errno.EISDIR:
            raise TraceError(f"{name}: a directory, not a trace file") from None
        raise TraceError(f"{name}: cannot read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        kind = next((what for test, what in _KINDS if test(st.st_mode)), None)
        if kind is not None or not stat.S_ISREG(st.st_mode):
            raise TraceError(f"{name}: {kind or 'not a regular file'}, not a trace file")
        if st.st_size and os.pread(fd, len(RIEGELI_MAGIC), 0) != RIEGELI_MAGIC:
            _check_fields(fd, st.st_size, name)
    except OSError as exc:
        raise TraceError(f"{name}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    return st.st_size


def _varint(head: bytes, p: int) -> tuple[int, int]:
    """A varint of ``head`` at ``p`` and the position after it; -1 when it does not end in ``head``."""
    value = shift = 0
    while p < len(head) and shift < 64:
        b = head[p]
        value |= (b & 0x7F) << shift
        p, shift = p + 1, shift + 7
        if b < 0x80:
            return value, p
    return -1, p


def _check_fields(fd: int, size: int, name: str) -> None:
    """The XSpace's top-level fields must tile the file: the first is one of :data:`SPACE_FIELDS`
    (length-delimited), each a valid tag, none running past the end."""
    pos = count = 0
    while pos < size and count < MAX_CHECKED_FIELDS:
        head = os.pread(fd, 24, pos)
        tag, p = _varint(head, 0)
        number, wire = tag >> 3, tag & 7
        if pos == 0 and (tag < 0 or wire != 2 or number not in SPACE_FIELDS):
            first = head[:4].hex(" ")
            raise TraceError(f"{name}: not a readable XSpace trace (its first bytes, {first}, are not an "
                             f"XSpace field){_size_note(size)}")
        if tag < 0 or number == 0 or wire not in (0, 1, 2, 5):
            raise TraceError(f"{name}: not a readable XSpace trace (no protobuf field at byte {pos}: the "
                             f"data is corrupt or truncated){_size_note(size)}")
        if wire in (0, 2):
            value, q = _varint(head, p)
            end = size + 1 if value < 0 else pos + q + (value if wire == 2 else 0)
        else:
            end = pos + p + (8 if wire == 1 else 4)
        if end > size:
            what = "its first field" if pos == 0 else f"the field at byte {pos}"
            raise TraceError(f"{name}: not a readable XSpace trace ({what} is longer than the file: the "
                             f"protobuf data is corrupt or truncated){_size_note(size)}")
        pos, count = end, count + 1


def _size_note(size: int) -> str:
    return f"; {size / 1e9:.1f} GB, not read" if size >= 1 << 30 else ""


def _available_memory() -> int | None:
    """Bytes the system can still give (``MemAvailable``; the cgroup's limit when lower); None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            text = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if text != "max" and avail is not None:
            avail = min(avail, int(text) - used)
    except (OSError, ValueError):
        pass
    return avail


def _fits_in_memory(size: int, name: str) -> None:
    """A file that cannot be mapped is read whole: refuse one larger than the memory available."""
    avail = _available_memory()
    if avail is not None and size > avail:
        raise TraceError(f"{name}: too large to read ({size / 1e9:.1f} GB; {max(avail, 0) / 1e9:.1f} GB of "
                         "memory available)")


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
