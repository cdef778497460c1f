"""Batches decoded on worker threads: the same columns and the same string codes, code for code, as
one thread; provisional string codes; the ordered map behind it (order, errors, early stops)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from trace_kit import US, Ref, TraceBuilder, memcpy_details

from tfprof_towers.trace.load import load_trace, trace_from_bytes
from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane import NUMBER, Strings, read_xspace
from tfprof_towers.xplane import decode as xdecode
from tfprof_towers.xplane.parallel import Stopped, decode_threads, in_order
from tfprof_towers.xplane.strings import PROVISIONAL, PendingStrings

STATS = ("tf_op", "correlation_id", "kernel_details", "memcpy_details")


def many_batches() -> TraceBuilder:
    """Twelve lines on three planes, whose string stats first appear in different lines (so in
    different batches), refs among them, a derived line, and per-event times far apart."""
    b = TraceBuilder()
    planes = [b.plane(f"/device:GPU:{g}") for g in range(3)]
    planes[0].event_metadata_id("k_meta", {"tf_op": Ref("from/metadata:Op")})
    for line in range(12):
        plane = planes[line % 3]
        s = plane.line(f"Stream #{line}", line_id=line + 1, timestamp_ns=1_000_000 * (12 - line))
        for i in range(30):
            stats = {"correlation_id": line * 100 + i, "tf_op": f"op{(line * 7 + i) % 23}:MatMul"}
            if i == 7:
                del stats["tf_op"]  # on plane 0: its metadata's value
            if i % 4 == 0:
                stats["kernel_details"] = Ref(f"grid:{(line + i) % 9}")
            if i % 5 == 0:
                stats["memcpy_details"] = memcpy_details(64 * (i + 1), line % 3, "pinned", "device")
            s.event("k_meta" if i % 7 == 0 else f"k{(line + i) % 6}", i * US, US, stats)
        if line == 5:
            derived = plane.line("TensorFlow Ops", timestamp_ns=5_000_000)
            derived.event("derived:Op", 0, US, {"tf_op": "never read"})
    return b


def _same(a, b) -> None:
    assert a.strings.items == b.strings.items
    for column in ("event_line", "event_plane", "name", "start_ps", "dur_ps"):
        assert np.array_equal(getattr(a, column), getattr(b, column)), column
    assert a.n_kept == b.n_kept and a.lines.names == b.lines.names and a.origin_ns == b.origin_ns
    for stat in STATS:
        x, y = a.stats[stat], b.stats[stat]
        assert x.index.tolist() == y.index.tolist(), stat
        assert np.array_equal(x.codes, y.codes) and np.array_equal(x.nums, y.nums), stat
        assert (x.text is None) == (y.text is None)
        if x.text is not None:
            assert x.text.texts() == y.text.texts()


@pytest.mark.parametrize("batch_bytes", [1, 700, 1 << 24])
@pytest.mark.parametrize("threads", [2, 3, 8])
def test_threads_change_nothing(monkeypatch: pytest.MonkeyPatch, batch_bytes: int, threads: int) -> None:
    data = many_batches().to_bytes()
    monkeypatch.setattr(xdecode, "BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(xdecode, "DECODE_BLOCK", 16)
    one = read_xspace(data, STATS, as_bytes=("memcpy_details",), threads=1)
    for _ in range(3):  # the threads' timing differs from run to run; the answer may not
        _same(read_xspace(data, STATS, as_bytes=("memcpy_details",), threads=threads), one)
    assert one.n_kept == 360 and one.n_events == 361
    assert one.origin_ns == 1_000_000  # the last line's: batches count from their own first
    ops = one.stats["tf_op"]
    texts = [one.strings.items[c] for c in ops.code[ops.present].tolist()]
    # line 0: event 0's own value wins over its metadata's; event 7 has only its metadata's
    assert texts[:9] == [f"op{i}:MatMul" for i in range(7)] + ["from/metadata:Op", "op8:MatMul"]


def test_a_loaded_trace_is_the_same_on_one_thread_or_two(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "t.xplane.pb"
    path.write_bytes(many_batches().to_bytes())
    monkeypatch.setattr(xdecode, "BATCH_BYTES", 500)
    from tfprof_towers.trace import load

    traces = []
    for threads in (1, 2):
        monkeypatch.setattr(load, "read_xspace", _with_threads(load.read_xspace, threads))
        traces.append(load_trace(path))
    assert traces[0].events.equals(traces[1].events) and traces[0].steps.equals(traces[1].steps)


def _with_threads(read, threads: int):
    def call(*args, **kwargs):
        kwargs["threads"] = threads
        return read(*args, **kwargs)

    return call


def decoding_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("decode")]


def test_a_broken_batch_on_a_worker_thread_is_one_trace_error(monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(many_batches().to_bytes())
    at = data.rfind(b"Stream #11")
    data[at + 40 : at + 48] = b"\xff" * 8  # inside the last line's events: a later batch
    monkeypatch.setattr(xdecode, "BATCH_BYTES", 1)
    with pytest.raises(TraceError, match=r"^<bytes>: corrupted trace"):
        trace_from_bytes(bytes(data))
    assert not decoding_threads()  # the decoding threads are gone


def test_pending_strings_keep_known_codes_and_settle_new_ones_in_order() -> None:
    table = Strings()
    known = table.codes(["a", "b"]).tolist()
    first, second = PendingStrings(table, len(table.items)), PendingStrings(table, len(table.items))
    assert first.codes(["b", "x", "y", "x"]).tolist() == [known[1], PROVISIONAL, PROVISIONAL + 1, PROVISIONAL]
    assert second.codes(["y", "z", "a"]).tolist() == [PROVISIONAL, PROVISIONAL + 1, known[0]]
    codes = np.array([-1, NUMBER, PROVISIONAL + 1, known[1], PROVISIONAL], dtype=np.int32)
    settled = first.settle(codes)
    assert settled.tolist() == [-1, NUMBER, 4, known[1], 3] and settled.dtype == np.int32
    assert codes.tolist()[2] == PROVISIONAL + 1  # a new array: the batch's own is left alone
    assert second.settle(np.array([PROVISIONAL, PROVISIONAL + 1, known[0]])).tolist() == [4, 5, known[0]]
    assert table.items == ["", "a", "b", "x", "y", "z"]
    untouched = np.array([known[0], -1])
    assert PendingStrings(table, len(table.items)).settle(untouched) is untouched


def test_in_order_keeps_the_order_of_the_items() -> None:
    def slow_first(i: int) -> int:
        time.sleep(0.05 if i == 0 else 0)
        return i * i

    assert list(in_order(slow_first, range(9), threads=3)) == [i * i for i in range(9)]
    assert list(in_order(slow_first, range(9), threads=1)) == [i * i for i in range(9)]
    assert list(in_order(slow_first, [], threads=2)) == []


def test_in_order_raises_at_the_failing_item_and_leaves_no_thread() -> None:
    def fail_at_3(i: int) -> int:
        if i == 3:
            raise ValueError("item 3")
        return i

    got = []
    with pytest.raises(ValueError, match="item 3"):
        for x in in_order(fail_at_3, range(100), threads=2):
            got.append(x)
    assert got == [0, 1, 2]
    assert not decoding_threads()


def test_in_order_stopped_early_starts_no_more_than_it_keeps_ahead_and_stops_the_rest() -> None:
    started, stop = [], threading.Event()
    running, release = threading.Event(), threading.Event()

    def record(i: int) -> int:
        started.append(i)
        if i == 3:  # still running when the caller gives up: it sees the stop and ends early
            running.set()
            release.wait(5)
            assert stop.is_set()
            raise Stopped
        return i

    gen = in_order(record, range(1000), threads=2, stop=stop)
    assert [next(gen), next(gen)] == [0, 1]
    assert running.wait(5)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    gen.close()  # returns once item 3, still running, has ended
    assert stop.is_set() and sorted(started) == [0, 1, 2, 3] and release.is_set()
    assert not decoding_threads()
    timer.join()


def test_batches_are_a_multiple_of_the_threads_and_about_equal() -> None:
    start = np.arange(0, 100, 10)
    end = start + 10
    halves = xdecode.batches(start, end, 1000, threads=2)
    assert [b.tolist() for b in halves] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert [b.tolist() for b in xdecode.batches(start, end, 30)] == [[0, 1, 2], [3, 4], [5, 6, 7], [8, 9]]
    assert [b.size for b in xdecode.batches(start, end, 25, threads=3)] == [2, 2, 1, 2, 2, 1]
    assert [b.tolist() for b in xdecode.batches(start, end, 1)] == [[i] for i in range(10)]
    assert xdecode.batches(start[:0], end[:0], threads=2) == []
    assert [b.tolist() for b in xdecode.batches(start[:1], end[:1], 1, threads=4)] == [[0]]


def test_decode_threads() -> None:
    assert decode_threads(1) == 1 and decode_threads(0) == 1 and decode_threads(5) == 5
    assert 1 <= decode_threads() <= 2


def test_a_second_thread_only_where_a_second_core_is_free() -> None:
    from tfprof_towers.xplane.parallel import threads_for

    assert threads_for(2, None) == 2 and threads_for(2, 0.0) == 2 and threads_for(2, 0.4) == 2
    assert threads_for(2, 0.6) == 1 and threads_for(2, 5.0) == 1  # another job holds a core, or both
    assert threads_for(1, 0.0) == 1 and threads_for(16, 3.0) == 2


def test_other_processes_load_is_the_machine_s_busy_time_less_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    """Samples (wall, this process's CPU, the machine's busy seconds): between them the machine was busy
    1.5 s in 1 s of wall time, 0.5 s of it ours: others kept one core busy; a window too short is kept
    for the next call, one too old says nothing."""
    from tfprof_towers.xplane import parallel

    samples = iter([(10.02, 5.01, 100.3), (11.0, 5.5, 101.5), (25.0, 6.0, 110.0)])
    monkeypatch.setattr(parallel, "_since", (10.0, 5.0, 100.0))
    monkeypatch.setattr(parallel, "_mark", lambda: next(samples))
    assert parallel.others_busy() is None  # 20 ms: too short, the window stays open
    assert parallel.others_busy() == pytest.approx(1.0)
    assert parallel.others_busy() is None  # 14 s since the last sample: stale
    assert parallel._since == (25.0, 6.0, 110.0)


def test_an_error_while_joining_a_batch_ends_the_decoding_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error on the joining side (where a Ctrl-C usually lands) ends the decoding threads before it
    reaches the caller."""
    data = many_batches().to_bytes()
    monkeypatch.setattr(xdecode, "BATCH_BYTES", 1)

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(xdecode, "_take_batch", fail)
    with pytest.raises(KeyboardInterrupt) as raised:
        read_xspace(data, STATS, threads=2)
    assert not decoding_threads() and raised.traceback  # while the error and its traceback are still held
