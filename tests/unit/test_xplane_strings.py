"""Grouping equal byte strings in a buffer (the reader's string table) without decoding each."""

from __future__ import annotations

import numpy as np

from tfprof_towers.xplane.strings import _groups, distinct_strings
from tfprof_towers.xplane.wire import Buffer


def table(words: list[bytes]) -> tuple[Buffer, np.ndarray, np.ndarray]:
    """The words back to back in one buffer (the last one ends at the buffer's end)."""
    starts = np.cumsum([0] + [len(w) for w in words[:-1]]).astype(np.int64)
    return Buffer.of(b"".join(words)), starts, np.array([len(w) for w in words], dtype=np.int64)


def test_equal_strings_share_a_code_whatever_their_length_and_place() -> None:
    long = b"/job:worker/replica:0/task:1/device:GPU:0 MemcpyH2D"  # several words, not a multiple of 8
    words = [b"a", long, b"", b"ab\0", b"ab", long, b"a", b"x" * 8, b"x" * 8 + b"\0", long[:-1], long]
    codes, texts = distinct_strings(*table(words))
    assert texts == ["a", long.decode(), "", "ab\0", "ab", "x" * 8, "x" * 8 + "\0", long[:-1].decode()]
    assert codes.tolist() == [0, 1, 2, 3, 4, 1, 0, 5, 6, 7, 1]  # trailing zero bytes are not dropped


def test_groups_are_numbered_in_order_of_first_occurrence() -> None:
    keys = np.array([7, 3, 7, 9, 3, 3, 1], dtype=np.uint64)
    codes, first = _groups(keys)
    assert codes.tolist() == [0, 1, 0, 2, 1, 1, 3] and first.tolist() == [0, 1, 3, 6]
    rng = np.random.default_rng(0)
    many = rng.integers(0, 50, 10_000).astype(np.uint64)
    codes, first = _groups(many)
    assert (many[first[codes]] == many).all() and (np.diff(first) > 0).all()
    assert len(set(many.tolist())) == first.size


def test_distinct_is_np_unique_for_integers_and_bools() -> None:
    """distinct gives np.unique's array (values and dtype) on the integer and boolean arrays it takes."""
    from tfprof_towers.xplane import distinct

    cases = [
        np.array([], dtype=np.int64),
        np.array([7], dtype=np.int32),
        np.array([3, -1, 3, 2**62, -1, 0], dtype=np.int64),
        np.array([5, 5, 5], dtype=np.uint8),
        np.array([True, False, True]),
        np.array([[4, 1], [1, 9]], dtype=np.int16),
    ]
    for a in cases:
        got, want = distinct(a), np.unique(a)
        assert got.dtype == want.dtype
        assert got.tolist() == want.tolist()
    assert distinct(np.array([2, 1, 2], dtype=np.int64)).tolist() == [1, 2]
    assert distinct(np.array([1.0, np.nan, np.nan])).size == 2  # floats go to np.unique (NaNs collapse)
