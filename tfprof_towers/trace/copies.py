"""Device copies: bytes, direction and endpoints, from TensorFlow's ``memcpy_details`` stat.

``memcpy_details`` reads ``kind_src:<k> kind_dst:<k> size:<bytes> dest:<dev> async:<0|1>``
(older: ``size:<bytes> dest:<dev> async:<0|1>``).  The texts are nearly all distinct (every
copy has its own size), so they are never made into Python strings: :func:`parse_details`
reads every one at once with numpy over their bytes, or in C where the reader's kernel is built
(:mod:`tfprof_towers.xplane.native`: the same parse, tested against this one; tests/reference_kit.py
has the same parse of one text in plain Python, the tests' oracle).  A
``MemcpyOther`` takes the direction its memory kinds say, else device-to-device; a
device-to-device copy whose ``dest`` is another device of the plane's type is a peer
(P2P) copy to that device.  Host-to-device copies come from, and device-to-host copies
go to, the host threads' plane (:data:`~tfprof_towers.vocab.device_names.HOST_THREADS`).
"""

from __future__ import annotations

import re

import numpy as np

from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.names import device_name_category
from tfprof_towers.vocab.categories import COPY_CATEGORIES, EVENT_CATEGORIES
from tfprof_towers.vocab.device_names import HOST_THREADS
from tfprof_towers.xplane import Ragged, RawSpace, RowNames, StatColumn, dense_unique, native

_DEVICE_INDEX = re.compile(r"^(/device:[A-Za-z_]+:)(\d+)$")


def _index_of(plane_name: str) -> int:
    m = _DEVICE_INDEX.match(plane_name)
    return int(m.group(2)) if m else -1


def _peer_name(plane_name: str, dest: int) -> str:
    m = _DEVICE_INDEX.match(plane_name)
    return f"{m.group(1)}{dest}" if m else f"/device:GPU:{dest}"


_SPACE = np.zeros(256, dtype=bool)
_SPACE[[ord(c) for c in " \t\n\r\f\v"]] = True
#: memory kinds -> 0 host memory, 1 device memory; compared as 8-byte words
_MEMORY_KINDS = {b"device": 1, b"array": 1, b"pageable": 0, b"pinned": 0, b"host": 0, b"managed": 0}
_MAX_DIGITS = 19
_LOWER = np.uint64(0x2020202020202020)
_FRONT = 8


def _word(text: bytes) -> np.uint64:
    return np.frombuffer(text.ljust(8, b"\0"), dtype="<u8")[0]


_KIND_WORDS = {(len(w), _word(w)): k for w, k in _MEMORY_KINDS.items()}


class _Text:
    """A Ragged's bytes ready for token search: rows sorted by start, the colons found once."""

    def __init__(self, text: Ragged) -> None:
        starts, lengths = text.starts, text.lengths
        # by start, and of rows starting together (empty ones) the longest last: the one a colon is in
        unsorted = (np.diff(starts) < 0).any() or ((np.diff(starts) == 0) & (np.diff(lengths) < 0)).any()
        order = np.lexsort((lengths, starts)) if unsorted else None
        self.order = order
        self.starts = starts if order is None else starts[order]
        self.ends = self.starts + (lengths if order is None else lengths[order])
        # room for word loads on both sides (a gathered Ragged has it; else copy, shifted by _FRONT)
        front = 0
        if not self.starts.size or self.starts[0] < _FRONT or text.data.size - self.ends.max() < 24:
            front = _FRONT
        self.data = text.data
        if front:
            self.data = np.concatenate([np.zeros(front, np.uint8), text.data, np.zeros(24, dtype=np.uint8)])
            self.starts = self.starts + front
            self.ends = self.ends + front
        self.u64 = np.ndarray((self.data.size - 7,), dtype="<u8", buffer=self.data, strides=(1,))
        self.colon = np.flatnonzero(self.data == ord(":"))
        self.before = self.u64[self.colon - 8]  # the eight bytes before each colon

    def rows_of(self, sorted_rows: np.ndarray) -> np.ndarray:
        """Row numbers in the caller's order."""
        return sorted_rows if self.order is None else self.order[sorted_rows]


_KEYS = (b"size", b"dest", b"kind_src", b"kind_dst")


def _fields(
    t: _Text, keys: tuple[bytes, ...] = _KEYS
) -> dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per key of ``keys`` (of :data:`_KEYS`), where the last ``key:value`` token of each row has
    its value: (rows, value start, row end).  A token is whitespace-separated; its key is the text
    before its first ``:``, its value (not empty) the rest.  Every colon is matched against every
    key at once (the eight bytes before it)."""
    last4 = (t.before >> np.uint64(32)).astype(np.uint32)  # the four bytes before each colon
    which = np.full(t.colon.size, -1, dtype=np.int8)
    for i, key in enumerate(_KEYS):
        if key in keys:
            which[last4 == np.uint32(_word(key[-4:]))] = i
    sel = np.flatnonzero(which >= 0)
    colon, which = t.colon[sel], which[sel]
    long = np.flatnonzero(which >= 2)  # kind_src / kind_dst: all eight bytes must match
    if long.size:
        full = np.array([_word(k) for k in _KEYS], dtype=np.uint64)
        which[long[t.before[sel[long]] != full[which[long]]]] = -1
    size = np.array([len(k) for k in _KEYS] + [0], dtype=np.int64)[which]
    at = colon - size  # where the key starts: a row's start, or after whitespace
    row = np.searchsorted(t.starts, colon, side="right") - 1
    r = np.maximum(row, 0)
    ok = (row >= 0) & (colon + 1 < t.ends[r]) & (at >= t.starts[r])  # a value follows the colon
    ok &= ~_SPACE[t.data[colon + 1]]
    ok &= (at == t.starts[r]) | _SPACE[t.data[np.maximum(at - 1, 0)]]
    out = {}
    for i, key in enumerate(_KEYS):
        if key not in keys:
            continue
        k = np.flatnonzero(ok & (which == i))
        rk = row[k]
        last = np.r_[rk[1:] != rk[:-1], True] if rk.size else rk.astype(bool)
        out[key] = (rk[last], colon[k][last] + 1, t.ends[rk[last]])
    return out


_ONES = np.uint64(0x0101010101010101)
_HIGH_NIBBLES = np.uint64(0xF0F0F0F0F0F0F0F0)
_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_ZEROS = np.uint64(0x3030303030303030)


def _digit_run(word: np.ndarray) -> np.ndarray:
    """How many of each word's bytes, from the lowest, are ASCII digits (0..8), eight bytes at once:
    a byte is a digit when its high nibble is 3 and its low one at most 9."""
    high = ((word & _HIGH_NIBBLES) ^ _ZEROS) >> np.uint64(4)  # non-zero nibble: not 0x3_
    low = ((word & _LOW_NIBBLES) + _ONES * np.uint64(6)) >> np.uint64(4)  # 1: low nibble over 9
    bad = (high | low) & _LOW_NIBBLES  # a non-zero byte: not a digit
    bad = (bad + _ONES * np.uint64(0x7F)) & (_ONES * np.uint64(0x80))  # its top bit
    lowest = bad & (~bad + np.uint64(1))
    run = np.bitwise_count(lowest - np.uint64(1)).astype(np.int64) >> 3
    run[bad == 0] = 8
    return run


def _parse_digits(word: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The number written by each word's first ``length`` (1..8) bytes of digits: the digits moved
    to the top bytes, then pairs, quads and octets combined by multiply-and-shift."""
    bits = np.minimum(length, 7).astype(np.uint64) * np.uint64(8)
    keep = np.where(length >= 8, ~np.uint64(0), (np.uint64(1) << bits) - np.uint64(1))
    v = (word & keep) - (_ZEROS & keep)
    v <<= ((8 - length) * 8).astype(np.uint64)
    v = (v * np.uint64(10) + (v >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    v = (v * np.uint64(100) + (v >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    return (v * np.uint64(10000) + (v >> np.uint64(32))) & np.uint64(0xFFFFFFFF)


def _integers(t: _Text, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal integer that is each whole value ``[start, end of its token)``: (value, valid).

    Values of up to eight digits are read from one 8-byte load each (:func:`_digit_run`,
    :func:`_parse_digits`); longer ones digit by digit."""
    word = t.u64[start]
    length = np.minimum(_digit_run(word), end - start)
    value = _parse_digits(word, np.maximum(length, 1))
    after = t.data[np.minimum(start + length, t.data.size - 1)]
    valid = (length > 0) & ((length == end - start) | _SPACE[after])
    more = (after >= ord("0")) & (after <= ord("9")) & (length < end - start)
    long = np.flatnonzero((length == 8) & more)
    if long.size:
        value[long], valid[long] = _long_integers(t, start[long], end[long])
    return value, valid


def _long_integers(t: _Text, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_integers` digit by digit (values of eight digits or more: rare)."""
    value = np.zeros(start.size, dtype=np.uint64)
    valid = np.zeros(start.size, dtype=bool)
    live = np.arange(start.size)
    for j in range(_MAX_DIGITS + 1):
        pos = start[live] + j
        at_end = pos >= end[live]
        b = t.data[np.minimum(pos, t.data.size - 1)]
        is_digit = ~at_end & (b >= ord("0")) & (b <= ord("9"))
        stop = ~is_digit
        valid[live[stop]] = (j > 0) & (at_end[stop] | _SPACE[b[stop]])
        live = live[is_digit]
        if not live.size:
            break
        value[live] = value[live] * np.uint64(10) + (b[is_digit] - ord("0")).astype(np.uint64)
    valid[live] = False  # more than nineteen digits
    return value, valid


def _memory_kind(t: _Text, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per value: 0 host memory, 1 device memory, -1 other (case-insensitive, the whole token):
    each kind's word compared with the value's first eight bytes, lower-cased, at once."""
    out = np.full(start.size, -1, dtype=np.int8)
    length = end - start
    word = t.u64[start] | _LOWER  # letters lower-cased (no other byte can become one)
    for (size, w), kind in _KIND_WORDS.items():
        mask = ~np.uint64(0) if size == 8 else (np.uint64(1) << np.uint64(8 * size)) - np.uint64(1)
        ok = ((word & mask) == w) & (length >= size)
        ok &= (length == size) | _SPACE[t.data[start + size]]
        out[ok] = kind
    return out


def parse_details(
    text: Ragged, dest_for: np.ndarray | None = None, kinds_for: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``parse_memcpy_details`` (tests/reference_kit.py) of every row at once, with numpy over the bytes:
    (size, dest, category code of the memory kinds or -1).  ``dest_for`` / ``kinds_for``
    (bool per row): the rows whose ``dest`` / memory kinds are wanted (default: all)."""
    if native.kernel is not None:  # the same parse in C, where the reader's kernel is built
        got = native.parse_details(text, dest_for, kinds_for)
        if got is not None:
            return got[0], got[1], _category(got[2], got[3])
    n = text.rows
    t = _Text(text)
    want_dest = dest_for is None or bool(dest_for.any())
    want_kinds = kinds_for is None or bool(kinds_for.any())
    keys = (b"size",) + ((b"dest",) if want_dest else ()) + ((b"kind_src", b"kind_dst") if want_kinds else ())
    found = _fields(t, keys)
    size = np.zeros(n, dtype=np.int64)
    dest = np.full(n, -1, dtype=np.int64)
    for key, out, limit, wanted in ((b"size", size, 1 << 62, None), (b"dest", dest, 1 << 20, dest_for)):
        if key not in found:
            continue
        row, start, end = _subset(t, found[key], wanted)
        value, valid = _integers(t, start, end)
        valid &= value < np.uint64(limit)
        out[t.rows_of(row[valid])] = value[valid].astype(np.int64)
    kinds = []
    for key in (b"kind_src", b"kind_dst"):
        k = np.full(n, -1, dtype=np.int8)
        if key in found:
            row, start, end = _subset(t, found[key], kinds_for)
            k[t.rows_of(row)] = _memory_kind(t, start, end)
        kinds.append(k)
    return size, dest, _category(*kinds)


def _category(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The copy category of each (source, destination) memory kind pair (0 host, 1 device), or -1."""
    cat = np.full(src.size, -1, dtype=np.int8)
    cat[(src == 0) & (dst == 1)] = CAT["h2d"]
    cat[(src == 1) & (dst == 0)] = CAT["d2h"]
    cat[(src == 1) & (dst == 1)] = CAT["d2d"]
    return cat


def details_columns(text: Ragged, names: RowNames | None = None) -> dict[str, np.ndarray]:
    """:func:`parse_details` as the reader's parser of ``memcpy_details`` (one batch of texts at a
    time).  Given the events' names, a copy whose name says its direction (``MemcpyH2D``,
    ``MemcpyD2H``, ``Memset``) needs only its size: the destination is read where a peer copy
    may hide, the memory kinds only for ``MemcpyOther``."""
    dest_for = kinds_for = None
    if names is not None:
        used, at = dense_unique(names.codes)
        kind = np.array([device_name_category(names.strings.items[c]) for c in used.tolist()], dtype=object)
        dest_for = np.isin(kind, ["d2d", "p2p", "other_copy", "compute", "collective"])[at]
        kinds_for = (kind == "other_copy")[at]
    size, dest, kinds = parse_details(text, dest_for, kinds_for)
    return {"size": size, "dest": dest.astype(np.int32), "kinds": kinds}


def _subset(t: _Text, found: tuple[np.ndarray, ...], wanted: np.ndarray | None) -> tuple[np.ndarray, ...]:
    if wanted is None:
        return found
    keep = wanted[t.rows_of(found[0])]
    return tuple(a[keep] for a in found)


def classify_copies(
    raw: RawSpace, device_plane: np.ndarray, category: np.ndarray, details: StatColumn, nbytes: np.ndarray,
    src: np.ndarray, dst: np.ndarray, prefix: str = "",
) -> None:
    """Bytes, kind and endpoints of device copies (in place; arrays over the first ``n_kept`` events),
    from ``memcpy_details`` (read as bytes) parsed with numpy (:func:`parse_details`); device-plane
    ``MemcpyOther`` events (category -1) become copies of the kind their memory kinds say, else
    device-to-device.  ``prefix``: a task's name before every device name."""
    strings = raw.strings
    plane_names = [prefix + p for p in raw.planes.names]
    is_copy_cat = np.zeros(len(EVENT_CATEGORIES) + 1, dtype=bool)  # indexed by category + 1
    is_copy_cat[[CAT[c] + 1 for c in COPY_CATEGORIES] + [0]] = True
    idx = np.flatnonzero(device_plane & is_copy_cat.take(category + 1))  # take: narrow index
    if not idx.size:
        return
    plane = raw.event_plane[idx]
    cat = category[idx]
    dest = np.full(idx.size, -1, dtype=np.int64)
    if details.any:
        if np.array_equal(details.index, idx):  # the usual case: every copy has its details, nothing else
            at = has = np.arange(idx.size)
        else:
            at = np.minimum(np.searchsorted(details.index, idx), details.index.size - 1)
            has = np.flatnonzero(details.index[at] == idx)
        c = cat[has]
        if details.parsed is not None:  # parsed by the reader, batch by batch
            p = details.parsed
            size, dest_of, kinds = p["size"][at[has]], p["dest"][at[has]], p["kinds"][at[has]]
        else:
            text = details.text if details.text is not None else Ragged.of(
                [t.encode() for t in _texts(details, strings)]
            )
            dest_for = (c == CAT["d2d"]) | (c == CAT["p2p"]) | (c == -1)  # where a peer copy may hide
            size, dest_of, kinds = parse_details(text.take(at[has]), dest_for, c == -1)
        nbytes[idx[has]] = size
        dest[has] = dest_of
        fix = (cat[has] == -1) & (kinds >= 0)  # MemcpyOther: the memory kinds say which way
        cat[has[fix]] = kinds[fix]
    cat[cat == -1] = CAT["d2d"]
    # device index of each plane, and the same device type's name for a destination index
    plane_index = np.array([_index_of(p) for p in raw.planes.names], dtype=np.int64)
    own = plane_index.take(plane)
    peer = (cat == CAT["d2d"]) & (dest >= 0) & (dest != own)
    cat[peer] = CAT["p2p"]
    category[idx] = cat
    plane_code = strings.codes(plane_names).take(plane)
    host_code = strings.code(prefix + HOST_THREADS)
    src[idx] = np.where(cat == CAT["h2d"], host_code, plane_code)
    dst[idx] = np.where(cat == CAT["d2h"], host_code, plane_code)
    p2p = np.flatnonzero(cat == CAT["p2p"])
    dst[idx[p2p[dest[p2p] < 0]]] = 0  # a peer copy without details: destination unknown
    p2p = p2p[dest[p2p] >= 0]
    if p2p.size:
        width = int(dest[p2p].max()) + 1
        uniq, inv = dense_unique(plane[p2p] * width + dest[p2p])
        planes = raw.planes.names
        names = [prefix + _peer_name(planes[int(u) // width], int(u) % width) for u in uniq.tolist()]
        dst[idx[p2p]] = strings.codes(names)[inv]


def _texts(column: StatColumn, strings) -> list[str]:
    """A stat's values as texts (a column read as codes, not as bytes)."""
    codes = column.code[column.index]
    return [strings.items[c] if c >= 0 else "" for c in codes.tolist()]
