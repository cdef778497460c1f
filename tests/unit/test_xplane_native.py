"""The C kernel of the reader against the numpy decoders, its oracle: the same arrays, element for
element and in the same order, on real and synthetic traces, and the same verdict -- equal results or
:class:`~tfprof_towers.xplane.wire.Malformed` from both -- on random, mutated and truncated input."""

from __future__ import annotations

import random
from dataclasses import fields, is_dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from trace_kit import two_gpu_trace
from wire_kit import field

from tfprof_towers.testing.synth import copy_heavy_trace, pod_host_trace, tpu_trace
from tfprof_towers.trace.load import AS_BYTES, READ_STATS
from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane import events as xev
from tfprof_towers.xplane import layout, native, read_xspace, wire
from tfprof_towers.xplane.strings import Strings

KERNEL = pytest.importorskip(
    "tfprof_towers.xplane._wirec",
    reason="the C kernel is not built here (make install, or python setup.py build_ext --inplace)",
)
FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"


def both(monkeypatch: pytest.MonkeyPatch, fn):
    """``fn()`` with the kernel, then with numpy: (result or None, exception or None) for each."""
    out = []
    for kernel in (KERNEL, None):
        monkeypatch.setattr(native, "kernel", kernel)
        try:
            out.append((fn(), None))
        except (wire.Malformed, TraceError) as exc:
            out.append((None, exc))
    monkeypatch.setattr(native, "kernel", KERNEL)
    return out


def assert_same(a, b, path: str = "raw") -> None:
    """Deep equality of what the reader returns: arrays by dtype, shape and every element."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), path
        assert (a.dtype, a.shape) == (b.dtype, b.shape), path
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), path
    elif isinstance(a, Strings):
        assert a.items == b.items, path
    elif is_dataclass(a):
        assert type(a) is type(b), path
        for f in fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif hasattr(a, "__dict__"):
        assert_same(vars(a), vars(b), path)
    else:
        assert a == b or (a != a and b != b), (path, a, b)


def assert_same_read(monkeypatch: pytest.MonkeyPatch, source, threads: int = 1) -> None:
    (c, ce), (p, pe) = both(monkeypatch, lambda: read_xspace(source, READ_STATS, as_bytes=AS_BYTES,
                                                             threads=threads))
    assert (ce is None) == (pe is None), (ce, pe)
    if ce is None:
        assert_same(c, p)


REAL = ["gpu_multi_worker_8xV100", "jax_rocm_mi300x_gemm", "jax_rocm_gfx950_fused_attn"]


@pytest.mark.parametrize("name", [f"{n}.xplane.pb" for n in REAL])
def test_real_traces_read_the_same(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"the shared fixture is absent ({path}); it ships beside the repo in CI")
    assert_same_read(monkeypatch, path)


@pytest.mark.parametrize("threads", [1, 2])
def test_synthetic_traces_read_the_same(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    traces = [
        two_gpu_trace(),
        copy_heavy_trace(n_events=6000, gpus=2, steps=3, groups=True),
        pod_host_trace(0, n_events=3000),
        tpu_trace(chips=2, steps=2),
    ]
    for b in traces:
        assert_same_read(monkeypatch, b.to_bytes(), threads)


def test_the_stats_come_in_the_numpy_decoders_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round by round (an event's first stats, then its second ones...), then what follows the run of
    stats field by field: not event by event."""
    def stat(md: int, v: int) -> bytes:
        return field(4, 2, field(1, 0, md) + field(3, 0, v))

    chunks = [
        field(1, 0, 1) + stat(1, 10) + stat(2, 11),
        field(1, 0, 2) + stat(1, 20),
        field(1, 0, 3) + stat(1, 30) + field(9, 0, 0) + stat(2, 31),  # a field ends the run
        field(1, 0, 4) + stat(1, 40) + stat(2, 41) + stat(3, 42),
    ]
    lengths = np.array([len(c) for c in chunks])
    buf, end = wire.Buffer.of(b"".join(chunks)), np.cumsum(lengths)
    (c, _), (p, _) = both(monkeypatch, lambda: xev.decode_event_ranges(buf, end - lengths, end, values=True))
    assert c.stat_owner.tolist() == [0, 1, 2, 3, 0, 3, 3, 2]
    assert c.stat_values.num.tolist() == [10, 20, 30, 40, 11, 41, 42, 31]
    assert_same(c, p)


@pytest.mark.parametrize("chunk", [b"\x08", b"\x22\x05\x08", b"\x22\x01\x08", b"\x0b", b"\x22\x80",
                                   b"\x22\x02\x08\x80", b"\x08" + b"\xff" * 10 + b"\x01", b"\x12\x01"])
def test_corrupt_events_raise_malformed(chunk: bytes) -> None:
    buf = wire.Buffer.of(chunk)
    with pytest.raises(wire.Malformed):
        xev.decode_event_ranges(buf, np.array([0]), np.array([len(chunk)]), values=True)


def test_the_switch_turns_the_kernel_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.ENV_SWITCH, "0")
    assert native._load() is None
    monkeypatch.setenv(native.ENV_SWITCH, "1")
    assert native._load() is KERNEL
    monkeypatch.setattr(native, "kernel", KERNEL)
    with native.numpy_decoders():
        assert native.kernel is None
    assert native.kernel is KERNEL


# --- fuzz: random events and lines, some mutated or truncated


def _varint_value(r: random.Random) -> int:
    return r.choice([0, 1, 127, 128, 300, 2**21, 2**35, 2**56 - 1, 2**63, 2**64 - 1, r.getrandbits(64)])


def _stat(r: random.Random) -> bytes:
    values = [
        lambda: field(2, 1, r.getrandbits(64)),
        lambda: field(3, 0, _varint_value(r)),
        lambda: field(4, 0, _varint_value(r)),
        lambda: field(5, 2, r.randbytes(r.randint(0, 20))),
        lambda: field(6, 2, r.randbytes(r.randint(0, 140))),
        lambda: field(7, 0, _varint_value(r)),
        lambda: field(5, 0, 3),  # a value field of the wrong wire type: an unknown field
        lambda: field(9, 0, 5),
    ]
    parts = [field(1, 0, r.choice([0, 1, 2, 3, 7, 127, 128, 200, 2**40]))] if r.random() < 0.85 else []
    parts += [r.choice(values)() for _ in range(r.choice([0, 1, 1, 2]))]
    if r.random() < 0.15:
        r.shuffle(parts)
    return b"".join(parts)


def _event(r: random.Random) -> bytes:
    head = [field(n, 0, _varint_value(r)) for n in (1, 2, 3) if r.random() < 0.8]
    parts = head + [field(4, 2, _stat(r)) for _ in range(r.choice([0, 1, 2, 3, 5]))]
    if r.random() < 0.25:  # fields writers do not write there: num_occurrences, unknown ones, long tags
        odd = [field(5, 0, 7), field(2, 0, 9), field(1, 0, 4), field(15, 2, b"xx"), field(6, 1, 3),
               field(8, 5, 1), b"\xa2\x00", b"\x88\x00\x05"]
        parts.insert(r.randint(len(head), len(parts)), r.choice(odd))
    if r.random() < 0.1:
        r.shuffle(parts)
    return b"".join(parts)


def _mutate(r: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(r.choice([1, 1, 2, 3])):
        if not out:
            break
        i, op = r.randrange(len(out)), r.random()
        if op < 0.5:
            out[i] = r.choice([0, 0x80, 0xFF, 0x22, 0x08, 0x02, 0x7F, r.getrandbits(8)])
        elif op < 0.7:
            del out[i]
        elif op < 0.85:
            out.insert(i, r.getrandbits(8))
        else:
            del out[i:]
    return bytes(out)


def _ranges(chunks: list[bytes]) -> tuple[wire.Buffer, np.ndarray, np.ndarray]:
    lengths = np.array([len(c) for c in chunks], dtype=np.int64)
    end = np.cumsum(lengths)
    return wire.Buffer.of(b"".join(chunks)), end - lengths, end


def _filter(r: random.Random, n: int) -> xev.StatFilter | None:
    if r.random() < 0.3:
        return None
    groups, width = r.randint(1, 3), r.choice([1, 4, 130, 256])
    table = np.full((groups, width), -1, dtype=np.int8)
    for _ in range(r.randint(0, 6)):
        table[r.randrange(groups), r.randrange(width)] = r.randint(0, 125)
    return xev.StatFilter(np.array([r.randrange(groups) for _ in range(n)], dtype=np.int64), table)


def test_fuzz_events(monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(1)
    verdicts = set()
    for _ in range(300):
        chunks = [_mutate(r, _event(r)) if r.random() < 0.2 else _event(r) for _ in range(r.randint(0, 10))]
        buf, start, end = _ranges(chunks)
        keep = _filter(r, len(chunks))
        monkeypatch.setattr(xev, "BLOCK", r.choice([1, 3, 1 << 16]))
        decode = partial(xev.decode_event_ranges, buf, start, end, keep, values=True)
        (c, ce), (p, pe) = both(monkeypatch, decode)
        assert (ce is None) == (pe is None), (chunks, ce, pe)
        verdicts.add(ce is None)
        if ce is None:
            assert_same(c, p)
    assert verdicts == {True, False}  # both kinds of input were met


def test_fuzz_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    r = random.Random(2)
    verdicts = set()
    for _ in range(150):
        lines = []
        for _ in range(r.randint(0, 4)):
            parts = [field(4, 2, _event(r)) for _ in range(r.randint(0, 30))]
            for f in (field(1, 0, 3), field(2, 2, b"name"), field(3, 0, _varint_value(r)), field(11, 2, b"d"),
                      field(9, 0, 3), field(4, 0, 1), field(2**29, 0, 1)):
                if r.random() < 0.3:
                    parts.insert(r.randint(0, len(parts)), f)
            line = b"".join(parts)
            lines.append(_mutate(r, line) if r.random() < 0.4 else line)
        buf, start, end = _ranges(lines)
        plane = np.zeros(len(lines), dtype=np.int64)
        (c, ce), (p, pe) = both(monkeypatch, partial(layout.read_lines, buf, plane, start, end))
        assert (ce is None) == (pe is None), (lines, ce, pe)
        verdicts.add(ce is None)
        if ce is None:
            assert_same(c, p)
    assert verdicts == {True, False}


def test_fuzz_whole_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    data = two_gpu_trace().to_bytes()
    r = random.Random(3)
    for _ in range(100):
        assert_same_read(monkeypatch, _mutate(r, data))


# --- memcpy_details texts


def _detail_text(r: random.Random) -> bytes:
    keys = ["size", "dest", "kind_src", "kind_dst", "async", "Size", "xsize", "kind_srcx", "_src", ""]
    values = ["0", "7", "12345678", "123456789", "9" * 19, "1" * 20, str(2**62), str(2**20 - 1), str(2**20),
              "-3", "4x", "device", "DEVICE", "pinned", "Pageable", "pageablex", "host", "managed", "array",
              "", ":", "::5"]
    seps = [" ", "  ", "\t", "\n", "\v", "\f", "\r", "_", ""]
    tokens = [f"{r.choice(keys)}:{r.choice(values)}" if r.random() < 0.8 else r.choice(values)
              for _ in range(r.randint(0, 6))]
    return "".join(t + r.choice(seps) for t in tokens).encode()


def test_memcpy_details_parse_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfprof_towers.trace.copies import parse_details
    from tfprof_towers.xplane.ragged import Ragged

    monkeypatch.setattr(native, "kernel", KERNEL)  # also under TFPROF_TOWERS_NATIVE=0
    r = random.Random(4)
    for _ in range(120):
        texts = [_detail_text(r) for _ in range(r.randint(1, 12))]
        packed = Ragged.of(texts)
        padded = np.concatenate([packed.data, np.zeros(wire.PAD, np.uint8)])
        order = np.array(r.sample(range(len(texts)), len(texts)))
        assert native.parse_details(packed, None, None) is not None  # the kernel parses these
        want = [None if r.random() < 0.5 else np.array([r.random() < 0.5 for _ in texts]) for _ in range(2)]
        for text in (packed, Ragged.gather(padded, packed.starts, packed.lengths).take(order),
                     packed.take(np.r_[order, order])):  # rows given twice: overlapping rows
            w = [None if x is None else x[: text.rows] if x.size >= text.rows else np.resize(x, text.rows)
                 for x in want]
            (c, ce), (p, pe) = both(monkeypatch, partial(parse_details, text, *w))
            assert ce is None and pe is None
            assert_same(c, p)
