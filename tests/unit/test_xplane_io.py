"""The reader's input and output shapes: a mapped file (padding, pages let go), big blocks from the
heap, batches and blocks, sparse stat columns, stats read as bytes or through a parser, and the
vectorised memcpy parse against the plain-Python one."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memcpy_kit import check_parse_details, detail_rows
from trace_kit import US, Ref, TraceBuilder, memcpy_details, two_gpu_trace

from tfprof_towers.trace.load import load_trace, trace_from_bytes
from tfprof_towers.xplane import NUMBER, read_xspace
from tfprof_towers.xplane import decode as xdecode
from tfprof_towers.xplane.ragged import Ragged
from tfprof_towers.xplane.wire import PAD, Buffer


def sized(b: TraceBuilder, size_mod_page: int) -> bytes:
    """The trace's bytes with an unknown XSpace field (number 15) appended so that the size is
    ``size_mod_page`` modulo the page size."""
    data = b.to_bytes()
    page = mmap.PAGESIZE
    for filler in range(page * 2):
        field = bytes([15 << 3 | 2]) + _varint(filler) + b"x" * filler
        if (len(data) + len(field)) % page == size_mod_page:
            return data + field
    raise AssertionError("no filler fits")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not out[-1] & 0x80:
            return bytes(out)


@pytest.mark.parametrize("tail", [0, 1, mmap.PAGESIZE - PAD, mmap.PAGESIZE - PAD + 1, mmap.PAGESIZE - 1])
def test_mapped_or_read_the_same(tmp_path: Path, tail: int) -> None:
    data = sized(two_gpu_trace(), tail)
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(data)
    mapped = Buffer.map(path)
    assert (mapped is None) == (tail == 0 or mmap.PAGESIZE - tail < PAD)
    if mapped is not None:
        buf, _ = mapped
        assert buf.u8[: buf.size].tobytes() == data and not buf.u8[buf.size :].any()
        assert buf.u8.size >= buf.size + PAD
    a, b = load_trace(path), trace_from_bytes(data)
    assert a.events.equals(b.events) and a.steps.equals(b.steps)


def test_released_pages_read_again(tmp_path: Path) -> None:
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(sized(two_gpu_trace(), 100))
    buf, _ = Buffer.map(path)
    before = buf.u8[: buf.size].tobytes()
    buf.release(0, buf.size)
    assert buf.u8[: buf.size].tobytes() == before


def many_lines() -> TraceBuilder:
    """Three lines, a derived one between them, stats on some events (a metadata-level one too)."""
    b = TraceBuilder()
    gpu = b.plane("/device:GPU:0")
    gpu.event_metadata_id("k_meta", {"tf_op": Ref("from/metadata:Op")})
    for line in range(3):
        s = gpu.line(f"Stream #{line}")
        for i in range(40):
            stats = {"correlation_id": line * 100 + i} if i % 3 else {"tf_op": f"op{i % 5}:MatMul"}
            s.event("k_meta" if i % 7 == 0 else f"k{i % 4}", (line * 1000 + i) * US, US, stats)
        if line == 1:
            gpu.line("TensorFlow Ops").event("derived:Op", 0, US, {"tf_op": "never read"})
    return b


@pytest.mark.parametrize(("batch_bytes", "block"), [(1 << 24, 1 << 18), (1, 7), (300, 16)])
def test_batches_and_blocks_change_nothing(
    monkeypatch: pytest.MonkeyPatch, batch_bytes: int, block: int
) -> None:
    data = many_lines().to_bytes()
    want = read_xspace(data, ("tf_op", "correlation_id"))
    monkeypatch.setattr(xdecode, "BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(xdecode, "DECODE_BLOCK", block)
    got = read_xspace(data, ("tf_op", "correlation_id"))
    for column in ("event_line", "name", "start_ps", "dur_ps"):
        assert getattr(got, column).tolist() == getattr(want, column).tolist()
    for stat in ("tf_op", "correlation_id"):
        assert got.stats[stat].code.tolist() == want.stats[stat].code.tolist()
        assert got.stats[stat].num.tolist() == want.stats[stat].num.tolist()
    assert got.n_kept == 120 and got.n_events == 121


def test_sparse_stat_columns() -> None:
    raw = read_xspace(many_lines().to_bytes(), ("tf_op", "correlation_id"))
    corr, op = raw.stats["correlation_id"], raw.stats["tf_op"]
    assert corr.index.tolist() == [i for i in range(120) if i % 40 % 3]  # only events that have it
    assert corr.nums.tolist() == [(i // 40) * 100 + i % 40 for i in corr.index.tolist()]
    assert (corr.codes == NUMBER).all() and corr.codes.strides == (0,)  # one value, no memory
    texts = [raw.strings.items[c] for c in op.code[op.present].tolist()]
    # event 0 has its own value over its metadata's; event 7 only its metadata's
    assert texts[:4] == ["op0:MatMul", "op3:MatMul", "op1:MatMul", "from/metadata:Op"]
    assert op.code[120] == -1  # the derived line's stats are never read


def test_stats_as_bytes_and_through_a_parser() -> None:
    b = TraceBuilder()
    s = b.plane("/device:GPU:0").line("Stream #1")
    texts = [memcpy_details(7 + i, i % 3, "pinned", "device") for i in range(5)]
    for i, t in enumerate(texts):
        s.event("MemcpyH2D", i * US, US, {"memcpy_details": Ref(t) if i == 2 else t})
    data = b.to_bytes()
    raw = read_xspace(data, ("memcpy_details",), as_bytes=("memcpy_details",))
    col = raw.stats["memcpy_details"]
    assert col.text.texts() == texts and col.parsed is None
    lengths = {}

    def parser(text: Ragged, names) -> dict[str, np.ndarray]:
        lengths[len(lengths)] = text.lengths.tolist()
        assert names is None  # a ref among the values: the texts came through the general path
        return {"length": text.lengths.copy()}

    raw = read_xspace(data, ("memcpy_details",), as_bytes={"memcpy_details": parser})
    parsed = raw.stats["memcpy_details"]
    assert parsed.text is None and parsed.parsed["length"].tolist() == [len(t) for t in texts]
    assert lengths == {0: [len(t) for t in texts]}


def test_a_parser_is_given_the_events_names() -> None:
    b = TraceBuilder()
    s = b.plane("/device:GPU:0").line("Stream #1")
    for i, name in enumerate(["MemcpyH2D", "MemcpyOther", "MemcpyP2P"]):
        s.event(name, i * US, US, {"memcpy_details": memcpy_details(10 + i, 1)})
    seen = []

    def parser(text: Ragged, names) -> dict[str, np.ndarray]:
        seen.append([names.strings.items[c] for c in names.codes])
        return {"rows": np.arange(text.rows)}

    read_xspace(b.to_bytes(), ("memcpy_details",), as_bytes={"memcpy_details": parser})
    assert seen == [["MemcpyH2D", "MemcpyOther", "MemcpyP2P"]]


# --- memcpy_details: the numpy parse against the plain-Python one

@settings(max_examples=50, deadline=None)  # 200 in tests/e2e/test_trace_copies_e2e.py
@given(detail_rows, st.randoms())
def test_parse_details_matches_the_python_parse(rows: list[str], rnd) -> None:
    check_parse_details(rows, rnd)


def test_repeated_texts_are_parsed_once_each() -> None:
    """Texts that repeat (a sample shows it) are grouped first: the parser sees each distinct one once."""
    b = TraceBuilder()
    s = b.plane("/device:GPU:0").line("Stream #1")
    texts = [memcpy_details(1000 + i % 3, 0, "pinned", "device") for i in range(5000)]
    for i, t in enumerate(texts):
        s.event("MemcpyH2D", i * US, US, {"memcpy_details": t})
    seen: list[int] = []

    def parser(text: Ragged, names) -> dict[str, np.ndarray]:
        seen.append(text.rows)
        assert names is None  # grouped texts: parsed fully
        return {"text_length": text.lengths.copy(), "first_byte": text.data[text.starts]}

    raw = read_xspace(b.to_bytes(), ("memcpy_details",), as_bytes={"memcpy_details": parser})
    col = raw.stats["memcpy_details"]
    assert seen == [3]
    assert col.parsed["text_length"].tolist() == [len(t) for t in texts]
    assert (col.parsed["first_byte"] == ord("k")).all() and col.index.tolist() == list(range(5000))


_HEAP_PROBE = r'''
import sys
import numpy as np
from tfprof_towers.xplane.glibc_heap import prefer_heap

def heap() -> int:
    size = 0
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            lo, hi = line.split()[0].split("-")
            size += int(hi, 16) - int(lo, 16)
    return size

if sys.argv[1] == "prefer":
    assert prefer_heap()
before = heap()
a = np.ones(64 << 17)  # 64 MiB: past glibc's largest mmap threshold
print(heap() - before >= 32 << 20)  # most of it from the heap
'''


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps (Linux)")
def test_prefer_heap_takes_big_blocks_from_the_heap() -> None:
    import subprocess
    import sys

    from tfprof_towers.xplane.glibc_heap import _libc

    if _libc() is None:
        pytest.skip("not glibc")
    def grew(how: str) -> str:
        probe = [sys.executable, "-c", _HEAP_PROBE, how]
        return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()

    assert {how: grew(how) for how in ("default", "prefer")} == {"default": "False", "prefer": "True"}
