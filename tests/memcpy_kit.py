"""memcpy_details texts made by hypothesis, and the check of the numpy parse against the plain-Python
one, shared by tests/unit/test_xplane_io.py (a few examples) and tests/e2e/test_trace_copies_e2e.py
(hundreds)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from reference_kit import kinds_category, parse_memcpy_details

from tfprof_towers.trace.codes import CAT
from tfprof_towers.trace.copies import parse_details
from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.wire import PAD

KINDS = ["pinned", "device", "DEVICE", "x", "pageablex", "managed", "host", "array", "PaGeAbLe", ""]
ODD = ["async:1", "size:", "size:12abc", "xsize:5", "size:5:6", ":", "kind_src:pinned\tsize:3", "a:size:4"]
tokens = st.one_of(
    st.builds(lambda n: f"size:{n}", st.integers(0, 10**21)),
    st.builds(lambda n: f"dest:{n}", st.integers(-3, 2**21)),
    st.builds(lambda k: f"kind_src:{k}", st.sampled_from(KINDS)),
    st.builds(lambda k: f"kind_dst:{k}", st.sampled_from(KINDS)),
    st.sampled_from(ODD),
    st.text(alphabet="sizedestkind_rcpn:0123456789 \t", max_size=12),
)


def reference(text: str) -> tuple[int, int, int]:
    p = parse_memcpy_details(text)
    return p.size, p.dest, int(CAT.get(kinds_category(p) or "", -1))


#: Rows of memcpy_details texts: up to 7 tokens each.
detail_rows = st.lists(st.lists(tokens, max_size=7).map(" ".join), min_size=1, max_size=30)


def check_parse_details(rows: list[str], rnd) -> None:
    """``rows`` parsed by the numpy parse back to back, from a word-padded copy and in ``rnd``'s order:
    each row's size, destination and kinds as the plain-Python parse reads them."""
    ragged = Ragged.of([r.encode() for r in rows])
    padded = np.concatenate([ragged.data, np.zeros(PAD, np.uint8)])
    order = list(range(len(rows)))
    rnd.shuffle(order)
    for text, perm in (
        (ragged, range(len(rows))),  # back to back
        (Ragged.gather(padded, ragged.starts, ragged.lengths), range(len(rows))),  # word-padded copy
        (Ragged.gather(padded, ragged.starts, ragged.lengths).take(np.array(order)), order),  # any order
    ):
        size, dest, kinds = parse_details(text)
        got = list(zip(size.tolist(), dest.tolist(), kinds.tolist()))
        assert got == [reference(rows[i]) for i in perm]
