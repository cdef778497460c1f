"""Ragged byte columns: one byte string per row, stored back to back in one numpy array."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ragged:
    """One byte string per row: row i is ``data[starts[i]:starts[i] + lengths[i]]``.

    Without ``at``, the rows lie back to back (``starts`` is the running sum of the lengths);
    with it, anywhere (:meth:`gather` pads rows to whole words, :meth:`take` shares ``data``).
    """

    data: np.ndarray  # uint8
    lengths: np.ndarray  # int64
    at: np.ndarray | None = None  # int64 row starts, when the rows are not back to back

    @property
    def rows(self) -> int:
        return int(self.lengths.size)

    @property
    def starts(self) -> np.ndarray:
        """Where each row starts in ``data``."""
        return self.at if self.at is not None else np.cumsum(self.lengths) - self.lengths

    def packed(self) -> Ragged:
        """The same rows back to back."""
        if self.at is None:
            return self
        return Ragged._copy(self.data, self.starts, self.lengths)

    @classmethod
    def repeat(cls, value: bytes, rows: int) -> Ragged:
        one = np.frombuffer(value, dtype=np.uint8)
        return cls(np.tile(one, rows), np.full(rows, one.size, dtype=np.int64))

    @classmethod
    def of(cls, values: Sequence[bytes]) -> Ragged:
        return cls(
            np.frombuffer(b"".join(values), dtype=np.uint8).copy(),
            np.fromiter(map(len, values), dtype=np.int64, count=len(values)),
        )

    @classmethod
    def _copy(cls, u8: np.ndarray, start: np.ndarray, length: np.ndarray) -> Ragged:
        length = np.asarray(length, dtype=np.int64)
        total = int(length.sum())
        if not total:
            return cls(np.zeros(0, dtype=np.uint8), length)
        at = np.repeat(np.asarray(start, dtype=np.int64) - (np.cumsum(length) - length), length)
        at += np.arange(total)
        return cls(u8[at], length)

    @classmethod
    def gather(cls, u8: np.ndarray, start: np.ndarray, length: np.ndarray, pad: int = 8) -> Ragged:
        """The rows ``u8[start[i]:start[i] + length[i]]``, copied by whole 8-byte words (``u8`` must
        hold ``pad`` readable bytes past every row; each row is padded with spaces to a whole
        number of words: one load per word, not per byte).  The copy has a word of zeros before
        the first row and three after the last, so that readers may load words around any row."""
        start = np.asarray(start, dtype=np.int64)
        length = np.asarray(length, dtype=np.int64)
        if not length.size or pad < 8:
            return cls._copy(u8, start, length)
        words = (length + 7) >> 3
        first = np.cumsum(words) - words  # each row's first word in the output
        total = int(words.sum())
        src = np.repeat(start - first * 8, words)
        src += np.arange(total, dtype=np.int64) * 8
        u64 = np.ndarray((u8.size - 7,), dtype="<u8", buffer=u8, strides=(u8.strides[0],))
        out = np.zeros(total + 4, dtype=np.uint64)
        out[1 : total + 1] = u64[src]
        first += 1
        tail = length & 7  # the last word of a row keeps this many bytes (0: all eight)
        last = first + words - 1
        short = np.flatnonzero((tail > 0) & (words > 0))
        if short.size:
            keep = (np.uint64(1) << (tail[short].astype(np.uint64) * np.uint64(8))) - np.uint64(1)
            out[last[short]] = (out[last[short]] & keep) | (np.uint64(0x2020202020202020) & ~keep)
        return cls(out.view(np.uint8), length, first * 8)

    def take(self, rows: np.ndarray) -> Ragged:
        """The rows ``rows`` (sharing ``data``)."""
        return Ragged(self.data, self.lengths[rows], self.starts[rows])

    def where(self, present: np.ndarray) -> Ragged:
        """Rows where ``present``, empty elsewhere (back to back)."""
        packed = self.packed()
        keep = np.repeat(present, packed.lengths)
        return Ragged(packed.data[keep], np.where(present, packed.lengths, 0))

    def row(self, i: int) -> bytes:
        s = int(self.starts[i])
        return self.data[s : s + int(self.lengths[i])].tobytes()

    def texts(self) -> list[str]:
        """Every row as UTF-8 text (invalid bytes replaced)."""
        blob = self.data.tobytes()
        starts = self.starts.tolist()
        return [blob[a : a + n].decode("utf-8", "replace") for a, n in zip(starts, self.lengths.tolist())]

    @classmethod
    def concatenate(cls, parts: Sequence[Ragged]) -> Ragged:
        if not parts:
            return cls(np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64))
        if all(p.at is None for p in parts):
            return cls(np.concatenate([p.data for p in parts]), np.concatenate([p.lengths for p in parts]))
        base = np.cumsum([0] + [p.data.size for p in parts[:-1]])
        return cls(
            np.concatenate([p.data for p in parts]),
            np.concatenate([p.lengths for p in parts]),
            np.concatenate([p.starts + b for p, b in zip(parts, base.tolist())]),
        )


def concat_rows(*parts: Ragged) -> Ragged:
    """Row i of the result is row i of every part, one after the other."""
    rows = parts[0].rows
    lengths = np.zeros(rows, dtype=np.int64)
    for p in parts:
        lengths += p.lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    at = np.cumsum(lengths) - lengths  # where each row starts in ``out``
    parts = tuple(p.packed() for p in parts)
    for p in parts:
        if p.data.size:
            out[np.repeat(at - p.starts, p.lengths) + np.arange(p.data.size)] = p.data
        at += p.lengths
    return Ragged(out, lengths)
