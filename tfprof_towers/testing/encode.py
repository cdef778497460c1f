"""Encode many events at once: the wire format written with numpy, for big synthetic traces.

:class:`~.build.TraceBuilder` makes one protobuf object per event: right for a test's
dozen events, far too slow and too big for the millions a benchmark needs.
:func:`encode_events` writes a whole line's events as bytes with whole-array operations:
every field is a *ragged* column (one byte string per event, :class:`Ragged`), and an
event is its columns concatenated row by row (:func:`concat_rows`).  The bytes are the
ones protobuf writes for the same messages (fields in number order, minimal varints).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tfprof_towers.xplane.ragged import Ragged, concat_rows


def varints(values: np.ndarray) -> Ragged:
    """Each value as a protobuf varint (int64s as their two's complement: 10 bytes when negative)."""
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    groups = np.ones(v.size, dtype=np.int64)
    for k in range(1, 10):
        groups += v >= np.uint64(1) << np.uint64(7 * k)
    shifts = np.arange(10, dtype=np.uint64) * np.uint64(7)
    byte = ((v[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    col = np.arange(10)[None, :]
    byte |= np.where(col < groups[:, None] - 1, 0x80, 0).astype(np.uint8)
    return Ragged(byte[col < groups[:, None]], groups)


def decimal(values: np.ndarray) -> Ragged:
    """Each non-negative integer written in decimal ASCII."""
    v = np.asarray(values).astype(np.int64)
    digits = np.ones(v.size, dtype=np.int64)
    for k in range(1, 19):
        digits += v >= 10**k
    width = int(digits.max()) if v.size else 1
    power = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    table = ((v[:, None] // power[None, :]) % 10 + ord("0")).astype(np.uint8)
    keep = np.arange(width)[None, :] >= width - digits[:, None]
    return Ragged(table[keep], digits)


def _tag(number: int, wire: int, rows: int) -> Ragged:
    return Ragged.repeat(bytes(varints(np.array([(number << 3) | wire])).data), rows)


def varint_field(number: int, values: np.ndarray, present: np.ndarray | None = None) -> Ragged:
    out = concat_rows(_tag(number, 0, len(values)), varints(values))
    return out if present is None else out.where(present)


def bytes_field(number: int, payload: Ragged, present: np.ndarray | None = None) -> Ragged:
    out = concat_rows(_tag(number, 2, payload.rows), varints(payload.lengths), payload)
    return out if present is None else out.where(present)


@dataclass(frozen=True)
class BulkStat:
    """One stat for many events: ``kind`` ``"int"`` (int64 ``values``), ``"ref"`` (``values`` index
    :attr:`texts`, stored as ref_values to stat-metadata entries) or ``"str"`` (``values`` a
    :class:`Ragged` of UTF-8 texts, stored inline); ``present`` says which events have it."""

    kind: str
    values: np.ndarray | Ragged
    texts: tuple[str, ...] = ()
    present: np.ndarray | None = None


def encode_events(
    metadata_id: np.ndarray, offset_ps: np.ndarray, duration_ps: np.ndarray,
    stats: Sequence[tuple[int, BulkStat, np.ndarray | None]] = (),
) -> bytes:
    """Serialized ``events`` fields (XLine field 4) of many XEvents, in order.

    ``stats``: (stat metadata id, the stat, for ``"ref"`` stats the stat-metadata id of each of
    its texts); the stats are written in the order given.
    """
    n = len(metadata_id)
    fields = [varint_field(1, metadata_id), varint_field(2, offset_ps), varint_field(3, duration_ps)]
    for md_id, stat, ref_ids in stats:
        if stat.kind == "int":
            value = varint_field(4, np.asarray(stat.values))
        elif stat.kind == "ref":
            assert ref_ids is not None
            value = varint_field(7, ref_ids[np.asarray(stat.values)])
        elif stat.kind == "str":
            assert isinstance(stat.values, Ragged)
            value = bytes_field(5, stat.values)
        else:
            raise ValueError(f"unknown stat kind {stat.kind!r}")
        body = concat_rows(varint_field(1, np.full(n, md_id)), value)
        fields.append(bytes_field(4, body, stat.present))
    return bytes_field(4, concat_rows(*fields)).data.tobytes()


def line_header(line_id: int, name: str, timestamp_ns: int) -> bytes:
    """An XLine's fields other than its events, as protobuf writes them."""
    name_b = name.encode()
    parts = [varint_field(1, np.array([line_id]))]
    if name_b:
        parts.append(bytes_field(2, Ragged.of([name_b])))
    if timestamp_ns:
        parts.append(varint_field(3, np.array([timestamp_ns])))
    return concat_rows(*parts).data.tobytes()


def length_delimited(number: int, payload: bytes) -> bytes:
    """One length-delimited field."""
    return bytes_field(number, Ragged.of([payload])).data.tobytes()
