"""Strings as codes: equal byte strings grouped without a Python step per string, and the table of codes.

Every string the reader meets -- event names, string stats, plane and line names --
gets a code in one :class:`Strings` table, so that whatever a classifier parses out of a
string is parsed once per distinct string and broadcast to the events through codes.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.xplane.wire import Buffer

if TYPE_CHECKING:
    import pandas as pd

_ONE = np.uint64(1)
_HASH_M1 = np.uint64(0x9E3779B97F4A7C15)
_HASH_M2 = np.uint64(0xC2B2AE3D27D4EB4F)
#: _BYTE_MASKS[k]: the low k bytes of a word (k = 0..8).
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)
_ROW_WORDS = 1 << 17  # words hashed per block (strings x words per string): a block stays in cache


@cache
def _column_multipliers(width: int, seed: int) -> np.ndarray:
    """Odd 64-bit multipliers, one per word column (the same ones on every call): a splitmix64
    sequence (no need to import ``numpy.random``)."""
    out, x, mask = [], seed * 0x9E3779B97F4A7C15, (1 << 64) - 1
    for _ in range(width):
        x = (x + 0x9E3779B97F4A7C15) & mask
        z = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append((z ^ (z >> 31)) | 1)
    multipliers = np.array(out, dtype=np.uint64)
    multipliers.setflags(write=False)
    return multipliers


def _words(buf: Buffer, start: np.ndarray, length: np.ndarray, width: int) -> np.ndarray:
    """The strings' bytes as ``width`` 8-byte words each, masked to the string (zeros past its end):
    a [width, strings] array, word j of a string being its bytes 8j .. 8j + 7.

    Each string's ``8 * width`` bytes are copied at once, as one row of a 2-D view of the
    buffer (numpy copies a row several times faster than it gathers its words one by one);
    single words, and blocks with a string too near the buffer's end for a whole row, are
    gathered word by word.
    """
    span = 8 * width
    offsets = np.arange(0, span, 8, dtype=np.int64)[:, None]
    last = buf.u8.size - span  # the last row start in bounds
    if width > 1 and start.size and start.max() <= last:
        rows = np.lib.stride_tricks.as_strided(buf.u8, shape=(last + 1, span), strides=(1, 1))
        w = np.ascontiguousarray(rows[start].view(np.uint64).T)
    else:  # words past a string's end are masked out below: load them from its start, in bounds
        w = buf.u64[start + np.where(offsets < length, offsets, 0)]
    full = int(length.min()) >> 3 if length.size else 0  # words inside every string: no mask
    valid = length - offsets[full:]  # bytes of each other word inside its string
    np.clip(valid, 0, 8, out=valid)
    w[full:] &= _BYTE_MASKS[valid]
    return w


def _hash_strings(buf: Buffer, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two independent 64-bit hashes of each byte string.

    Strings are hashed as 2-D blocks, one column per string and one row per 8-byte word
    (:func:`_words`: zeros past the string's end).  Each word is multiplied by its row's
    own odd constant and folded (``x ^ x >> 29``); a string's first hash is the wrapping
    sum of its column and its length times a constant, the second the sum with other
    per-row multipliers -- a handful of whole-array operations per block.
    """
    n = start.size
    h1 = length.astype(np.uint64) * _HASH_M1
    h2 = length.astype(np.uint64) * _HASH_M2
    words = (length + 7) >> 3
    # strings of similar word counts together (widths 1, 2, 4, 8, ...), so padding stays small
    width_class = np.zeros(n, dtype=np.int8)
    for c in range(1, 64):
        over = words > (1 << (c - 1))
        if not over.any():
            break
        width_class[over] = c
    classes = np.flatnonzero(np.bincount(width_class))
    for c in classes.tolist():
        rows = np.flatnonzero(width_class == c) if classes.size > 1 else np.arange(n)
        width = int(words[rows].max())
        if width == 0:
            continue
        m1 = _column_multipliers(width, 1)[:, None]
        m2 = _column_multipliers(width, 2)[:, None]
        step = max(1, _ROW_WORDS // width)
        for lo in range(0, rows.size, step):
            r = rows[lo : lo + step]
            w = _words(buf, start[r], length[r], width)
            w *= m1
            w ^= w >> np.uint64(29)
            h1[r] += w.sum(axis=0, dtype=np.uint64)
            w *= m2
            h2[r] += w.sum(axis=0, dtype=np.uint64)
    return h1, h2


def distinct_rows(buf: Buffer, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group equal byte strings without a Python step per string: (group of each string, in order of
    first occurrence; the first string of each group).

    Strings are grouped by one 64-bit hash of their bytes and length, and a second,
    independent one must agree within every group, else the strings are compared exactly.
    """
    n = start.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    h1, h2 = _hash_strings(buf, start, length)
    codes, first = _groups(h1)
    if not (h2 == h2[first[codes]]).all():  # a 64-bit collision: compare exactly instead
        seen: dict[bytes, int] = {}
        rows = [buf.u8[s : s + ln].tobytes() for s, ln in zip(start.tolist(), length.tolist())]
        codes = np.array([seen.setdefault(r, len(seen)) for r in rows], dtype=np.int64)
        first = np.full(len(seen), -1, dtype=np.int64)
        first[codes[::-1]] = np.arange(n - 1, -1, -1)
    return codes, first


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal keys grouped, groups numbered in order of first occurrence: (group of each key, the
    first index of each group).  ``np.unique(..., return_index=True, return_inverse=True)``,
    without its stable sort (an unstable one, and the first index as each group's minimum)."""
    order = np.argsort(keys)
    ranked = keys[order]
    new = np.empty(keys.size, dtype=bool)
    new[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    heads = np.flatnonzero(new)
    first = np.minimum.reduceat(order, heads)
    by_first = np.argsort(first)
    rank = np.empty(heads.size, dtype=np.int64)
    rank[by_first] = np.arange(heads.size)
    codes = np.empty(keys.size, dtype=np.int64)
    codes[order] = rank[np.cumsum(new) - 1]
    return codes, first[by_first]


def distinct_strings(buf: Buffer, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Group equal byte strings (:func:`distinct_rows`): (codes, distinct texts); only one
    representative per group is decoded."""
    codes, first = distinct_rows(buf, start, length)
    texts = [buf.text(s, ln) for s, ln in zip(start[first].tolist(), length[first].tolist())]
    return codes, texts


class Strings:
    """A growing table of distinct strings; codes index :attr:`items`, and code 0 is ``""``.

    Append-only: a code, once given, never changes, so a classifier may add the strings
    it derives (node names, devices) to the reader's table and compare codes throughout.
    """

    def __init__(self) -> None:
        self.items: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def code(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.items)
            self.items.append(s)
        return i

    def codes(self, strings: list[str]) -> np.ndarray:
        return np.array([self.code(s) for s in strings], dtype=np.int64)


#: Provisional codes (:class:`PendingStrings`) count from here: above any real code.
PROVISIONAL = 1 << 30


class PendingStrings:
    """Codes for one batch decoded on a worker thread, without touching the shared table.

    A string the table held when decoding began (``known`` codes) keeps its code; a new one
    gets a provisional code, ``PROVISIONAL + i`` in order of first use.  :meth:`settle`,
    called for the batches in file order, adds the new strings to the table and rewrites
    the provisional codes: the codes come out exactly as if the batches had been decoded
    one after the other.
    """

    def __init__(self, table: Strings, known: int) -> None:
        self.table = table
        self.known = known
        self.new: list[str] = []
        self._index: dict[str, int] = {}
        self._final: np.ndarray | None = None

    def code(self, s: str) -> int:
        i = self.table._index.get(s)
        if i is not None and i < self.known:
            return i
        j = self._index.get(s)
        if j is None:
            j = self._index[s] = len(self.new)
            self.new.append(s)
        return PROVISIONAL + j

    def codes(self, strings: list[str]) -> np.ndarray:
        return np.array([self.code(s) for s in strings], dtype=np.int64)

    def settle(self, codes: np.ndarray) -> np.ndarray:
        """``codes`` with the provisional ones made final (the first call adds the new strings to
        the table)."""
        if not self.new:
            return codes
        if self._final is None:
            self._final = self.table.codes(self.new).astype(codes.dtype)
        provisional = codes >= PROVISIONAL
        if not provisional.any():
            return codes
        out = codes.copy()
        out[provisional] = self._final[codes[provisional] - PROVISIONAL]
        return out


def dense_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for small non-negative ints, without sorting."""
    if not values.size:
        return values[:0], np.zeros(0, dtype=np.int64)
    if values.min() < 0 or values.max() > 4 * values.size + (1 << 20):
        uniq, inv = np.unique(values, return_inverse=True)
        return uniq, inv.ravel()
    used = np.flatnonzero(np.bincount(values))
    remap = np.zeros(int(values.max()) + 1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    return used, remap[values]


def used_codes(values: np.ndarray) -> np.ndarray:
    """The distinct values of ``values`` (small non-negative ints), ascending."""
    if not values.size:
        return values[:0]
    if values.max() > 4 * values.size + (1 << 20):
        return distinct(values)
    return np.flatnonzero(np.bincount(values))


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer or boolean array, ascending: ``np.unique(values)``.

    Plain ``np.unique`` imports ``numpy.ma`` (about 10 ms) on its first call to ask whether
    the array is masked; a sort and one comparison give the same array without it.
    """
    if values.dtype.kind not in "biu":
        return np.unique(values)
    ordered = np.sort(values, axis=None)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


# ---------------------------------------------------------------------------------------------
# Codes -> pandas Categoricals holding only the strings used


def categorical(codes: np.ndarray, strings: Strings) -> pd.Categorical:
    """Codes into ``strings`` -> a Categorical holding only the categories used (in code order)."""
    used = used_codes(codes)
    remap = np.zeros(int(used[-1]) + 1 if used.size else 1, dtype=np.int32)
    remap[used] = np.arange(used.size, dtype=np.int32)
    return from_codes(remap[codes], [strings.items[u] for u in used.tolist()])


def from_codes(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    import pandas as pd

    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(categories), validate=False)
