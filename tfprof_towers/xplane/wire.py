"""Wire-format primitives, vectorised: a padded byte buffer, varints, and fields read in lock-step.

The messages are byte ranges of one buffer (the file); their fields are read in
lock-step: round k reads the k-th field of every message still unfinished, with numpy.
Varints of up to 8 bytes are decoded from one unaligned 64-bit load with bit tricks;
longer ones (negative int64s, rare) take a slower byte-by-byte path.  Every read is
checked against the end of its message, so malformed input raises :class:`Malformed`,
never misreads.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass

import numpy as np

PAD = 16  #: zero bytes after the data, so that 8-byte loads at any position stay inside
_HI = np.uint64(0x8080808080808080)
_LO7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONE = np.uint64(1)
_HI_BYTE0 = np.uint64(0x80)
_HI_2 = np.uint64(0x8080)
_HI_4 = np.uint64(0x80808080)
_LO_BYTE0 = np.uint64(0x7F)
_COMPACT = [
    (np.uint64(0x007F007F007F007F), np.uint64(1), np.uint64(0x3F803F803F803F80)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(2), np.uint64(0x0FFFC0000FFFC000)),
    (np.uint64(0x000000000FFFFFFF), np.uint64(4), np.uint64(0x00FFFFFFF0000000)),
]


class Malformed(Exception):
    """The bytes are not well-formed messages of the expected schema."""


@dataclass(frozen=True)
class Buffer:
    """A byte buffer padded for 8-byte loads at any position."""

    u8: np.ndarray  # uint8, with PAD zero bytes after ``size``
    u64: np.ndarray  # unaligned little-endian uint64 view: u64[i] = bytes i..i+7
    size: int
    mapped: mmap.mmap | None = None  # the file's mapping, when the buffer is one (see ``map``)

    @classmethod
    def map(cls, file) -> tuple[Buffer, memoryview] | None:
        """Map a file instead of reading it: no copy, and pages a decoder is done with can be let go
        (:meth:`release`).  The zero padding is the rest of the file's last page, which the
        system fills with zeros; ``None`` when that page has less than ``PAD`` bytes to spare
        (then read the file instead)."""
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0 or (-size) % mmap.PAGESIZE < PAD:
                return None
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)  # private: nothing is written back
        exported = ctypes.c_char.from_buffer(mm)
        pinned = type("_Mapped", (ctypes.c_uint8 * (size + PAD),), {})
        window = pinned.from_address(ctypes.addressof(exported))
        window.keep = (mm, exported)  # the array's base keeps the mapping alive
        padded = np.frombuffer(window, dtype=np.uint8)
        buf = cls.wrap(padded, size)
        return cls(buf.u8, buf.u64, size, mm), memoryview(padded)

    def release(self, start: int, end: int) -> None:
        """Let go of the pages of ``[start, end)`` (a mapped file's: they are read again if touched)."""
        if self.mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
            return
        page = mmap.PAGESIZE
        lo, hi = (start // page) * page, min(-(-end // page) * page, len(self.mapped))
        if hi > lo:
            self.mapped.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    @classmethod
    def of(cls, data: bytes) -> Buffer:
        return cls.wrap(data + b"\0" * PAD, len(data))

    @classmethod
    def wrap(cls, padded, size: int) -> Buffer:
        """A buffer over ``padded``: ``size`` bytes of data then at least ``PAD`` zero bytes (no copy)."""
        u8 = np.frombuffer(padded, dtype=np.uint8)
        u64 = np.ndarray((u8.size - 7,), dtype="<u8", buffer=u8, strides=(1,))
        return cls(u8, u64, size)

    @classmethod
    def read(cls, file) -> tuple[Buffer, memoryview]:
        """Read a whole file into a padded buffer: the read is the only copy, into memory numpy
        allocates (uninitialised, so the pages are touched once, by the read).  Returns the
        buffer and a memoryview of the same bytes (indexing it gives ints)."""
        with open(file, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            data = np.empty(size + PAD, dtype=np.uint8)
            view = memoryview(data)
            got = 0
            while got < size:
                n = f.readinto(view[got:size])
                if not n:
                    break
                got += n
        data[got:] = 0
        return cls.wrap(data[: got + PAD], got), memoryview(data[: got + PAD])

    def text(self, start: int, length: int) -> str:
        return self.u8[start : start + length].tobytes().decode("utf-8", "replace")


_HI7 = np.uint64(0x0080808080808080)


def _pack_groups(word: np.ndarray, mask: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """Keep ``word``'s bits under ``mask``, drop the continuation bits and pack the 7-bit
    groups together (three shift-and-mask steps).  In place: ``word`` and ``scratch``
    are overwritten; returns ``word``."""
    word &= mask
    word &= _LO7
    for keep, shift, moved in _COMPACT:
        np.right_shift(word, shift, out=scratch)
        scratch &= moved
        word &= keep
        word |= scratch
    return word


def word_varints(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint in the low 7 bytes of each word: (value, length in bytes; 0 when longer).

    Works in place (``word`` is overwritten).  When every varint is short -- one, two or
    up to four bytes -- fewer and narrower operations do.
    """
    cont = word & _HI7  # continuation bits
    if not (cont & _HI_BYTE0).any():  # all one byte
        word &= _LO_BYTE0
        return word, np.ones(word.size, dtype=np.int64)
    if not ((cont & _HI_2) == _HI_2).any():  # all within two bytes
        two = (cont & _HI_BYTE0) != 0
        v = word & np.uint64(0x7F)
        v |= ((word >> np.uint64(1)) & np.uint64(0x3F80)) * two
        return v, two.astype(np.int64) + 1
    if not ((cont & _HI_4) == _HI_4).any():  # all within four bytes: 32-bit arithmetic
        w32 = word.astype(np.uint32)
        term = np.bitwise_not(w32)
        term &= np.uint32(0x80808080)
        low = np.negative(term)
        low &= term
        mask = low << np.uint32(1)
        mask -= np.uint32(1)  # bits up to the terminator (all 32 for a four-byte varint)
        w32 &= mask
        w32 &= np.uint32(0x7F7F7F7F)
        tmp = term
        for keep, shift, moved in _COMPACT[:2]:
            np.right_shift(w32, np.uint32(shift), out=tmp)
            tmp &= np.uint32(moved)
            w32 &= np.uint32(keep)
            w32 |= tmp
        length = np.bitwise_count(mask).astype(np.int64)
        length >>= 3
        return w32.astype(np.uint64), length
    term = np.bitwise_not(word)
    term &= _HI7
    low = np.negative(term)
    low &= term
    length = np.bitwise_count(low - _ONE).astype(np.int64)  # bits below the terminator: 8k + 7
    length += 1
    length >>= 3
    length[low == 0] = 0
    mask = low
    mask <<= _ONE
    mask -= _ONE
    return _pack_groups(word, mask, term), length


def read_varints(buf: Buffer, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One varint at each ``pos`` (< its ``end``); return (values as uint64, positions after).

    Varints of up to 8 bytes are decoded from one unaligned 8-byte load: the lowest
    clear high bit ends the varint, the bits below it are kept, and the 7-bit groups are
    packed together in three shift-and-mask steps.  The arithmetic runs in place: on a
    million values, allocating each temporary would cost as much as computing it.
    """
    word = buf.u64[pos]
    if not (word & _HI_BYTE0).any():  # all one-byte varints
        if (pos >= end).any():
            raise Malformed("varint runs past the end of its message")
        return word & _LO_BYTE0, pos + 1
    term = np.bitwise_not(word)
    term &= _HI  # the high bit of every byte that ends a varint
    mask = np.negative(term)
    mask &= term  # the lowest of them (0 when the varint is longer than 8 bytes)
    long = np.flatnonzero(mask == 0)
    mask <<= _ONE
    mask -= _ONE  # every bit up to it
    v = _pack_groups(word, mask, term)
    after = np.bitwise_count(mask).astype(np.int64)
    after >>= 3
    after += pos
    if long.size:
        v[long], after[long] = _read_long_varints(buf, pos[long])
    if (after > end).any():
        raise Malformed("varint runs past the end of its message")
    return v, after


def soft_varints(buf: Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A varint at each ``pos`` (any length): (value, position after, ok); never raises."""
    value = np.zeros(pos.size, dtype=np.uint64)
    after = pos.copy()
    todo = np.arange(pos.size)
    for i in range(10):
        p = np.minimum(pos[todo] + i, buf.u8.size - 1)
        b = buf.u8[p]
        value[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * i)
        done = b < 0x80
        after[todo[done]] = p[done] + 1
        todo = todo[~done]
        if not todo.size:
            break
    ok = np.ones(pos.size, dtype=bool)
    ok[todo] = False
    return value, after, ok


def _read_long_varints(buf: Buffer, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    value, after, ok = soft_varints(buf, pos)
    if not ok.all():
        raise Malformed("varint longer than 10 bytes")
    return value, after


@dataclass(frozen=True)
class Fields:
    """Fields of many messages: one entry per field, in (owner, wire order)."""

    owner: np.ndarray  # int64 index of the message
    number: np.ndarray  # int64 field number
    wire: np.ndarray  # int64 wire type
    value: np.ndarray  # uint64: varint value, fixed64/32 bits, or payload length
    start: np.ndarray  # int64: payload start (length-delimited), else -1


def iter_rounds(buf: Buffer, start: np.ndarray, end: np.ndarray):
    """Yield the fields of the messages at ``buf[start:end]``, one lock-step round at a time.

    Round k holds the k-th field of every message that has one, as
    ``(message index, number, wire, value, payload start or -1)``.
    """
    active = np.flatnonzero(start < end)
    pos = start[active].astype(np.int64)
    e = end[active]
    while active.size:
        number, wire, value, payload, nxt = _read_round(buf, pos, e)
        yield active, number, wire, value, payload
        keep = nxt < e
        if keep.all():
            pos = nxt
        else:
            active, pos, e = active[keep], nxt[keep], e[keep]


def read_fields(buf: Buffer, start: np.ndarray, end: np.ndarray) -> Fields:
    """All fields of the messages at ``buf[start:end]``: the rounds of :func:`iter_rounds`
    concatenated, so one message's fields appear in wire order (what "last one wins" needs),
    though not next to each other."""
    rounds = list(iter_rounds(buf, start, end))
    if not rounds:
        z = np.zeros(0, dtype=np.int64)
        return Fields(z, z, z, np.zeros(0, dtype=np.uint64), z)
    return Fields(*(np.concatenate(c) for c in zip(*rounds)))


def _read_round(buf: Buffer, pos: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, ...]:
    """One field at each ``pos``: (number, wire, value, payload start or -1, next position)."""
    tag8 = buf.u8[pos]
    t0 = int(tag8[0])
    if t0 & 7 == 2 and 8 <= t0 < 0x80 and (tag8 == t0).all():  # 8: field numbers start at 1
        # every message has the same length-delimited field here (a run of stats)
        after = pos + 1
        b = buf.u8[after]
        if b.max() < 0x80:
            nxt = after + 1 + b
            if (nxt > e).any():
                raise Malformed("field runs past the end of its message")
            shape = pos.shape
            number = np.broadcast_to(np.int64(t0 >> 3), shape)
            wire = np.broadcast_to(np.int64(2), shape)
            return number, wire, b.astype(np.uint64), after + 1, nxt
    if tag8.max() < 0x80:  # one-byte tags: field numbers 1..15, the common case
        tag = tag8.astype(np.int64)
        after = pos + 1
    else:
        t, after = read_varints(buf, pos, e)
        tag = t.astype(np.int64)
    number, wire = tag >> 3, tag & 7
    if number.min() == 0 or ((wire == 3) | (wire == 4) | (wire > 5)).any():
        raise Malformed("bad field tag")
    is_len = wire == 2
    if (is_len | (wire == 0)).all():
        b = buf.u8[after]
        if b.max() < 0x80:  # every value or length is one byte
            value = b.astype(np.uint64)
            nxt = after + 1
        else:
            value, nxt = read_varints(buf, after, e)
    else:
        value = np.zeros(pos.size, dtype=np.uint64)
        nxt = after.copy()
        var = np.flatnonzero(is_len | (wire == 0))
        if var.size:
            value[var], nxt[var] = read_varints(buf, after[var], e[var])
        for wtype, width in ((1, 8), (5, 4)):
            fx = np.flatnonzero(wire == wtype)
            if fx.size:
                raw = buf.u64[after[fx]]
                value[fx] = raw if width == 8 else raw & np.uint64(0xFFFFFFFF)
                nxt[fx] = after[fx] + width
    if is_len.any():
        if (value[is_len] > np.uint64(buf.size)).any():
            raise Malformed("length out of range")
        payload = np.where(is_len, nxt, -1)
        nxt = nxt + np.where(is_len, value, np.uint64(0)).astype(np.int64)
    else:
        payload = np.full(pos.size, -1, dtype=np.int64)
    if (nxt > e).any():
        raise Malformed("field runs past the end of its message")
    return number, wire, value, payload, nxt


def scatter_last(n: int, owner: np.ndarray, values: np.ndarray, fill, dtype) -> np.ndarray:
    """``values`` placed at ``owner`` in an array of ``n``; the last field of a message wins."""
    out = np.full(n, fill, dtype=dtype)
    out[owner] = values.astype(dtype, copy=False)  # numpy assigns in order: last write wins
    return out
