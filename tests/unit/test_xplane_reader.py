"""The XSpace reader alone: a trace that is not TensorFlow's, read into exact raw columns.

This is what a JAX or PyTorch trace source gets before bringing its own classifier:
no category, no device join, no step window -- planes, lines, names, times and the
stats asked for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfprof_towers.testing.build import Ref, TraceBuilder
from tfprof_towers.vocab.errors import TraceError
from tfprof_towers.xplane import DEVICE, HOST, OTHER, categorical, read_xspace

US = 1_000_000  # picoseconds in a microsecond
ASKED = ("step", "hlo_op", "hlo_module", "flops", "bytes_accessed", "payload", "never_written")


def jax_like_trace() -> TraceBuilder:
    """A host thread with step events (one stat on the event metadata), a device stream named
    only by its display name, a derived line, and a plane that is neither host nor device."""
    b = TraceBuilder(hostname="worker-0")
    host = b.plane("/host:CPU")
    dev = b.plane("/device:GPU:0")
    env = b.plane("Task Environment")
    host.event_metadata_id("jit_step", {"hlo_module": Ref("jit_step")})  # on the metadata, not the event
    py = host.line("python3", line_id=1, timestamp_ns=1_000)  # the earliest line: the origin
    py.event("jit_step", 1_000_000, 50 * US, {"step": 7})
    py.event("jit_step", 1_000_000 + 60 * US, 40 * US, {"step": 8, "hlo_module": "override"})
    py.event("PjitFunction(f)", 1_000_000 + 100 * US, 3 * US, {"flops": 2.5, "correlation_id": 99})
    stream = dev.line("", line_id=5, timestamp_ns=2_000)
    stream.proto.display_name = "Stream #1"
    stream.event("fusion.1", 2_000_000 + 10 * US, 5 * US, {"hlo_op": Ref("fusion.1"), "bytes_accessed": 4096})
    stream.event("copy.2", 2_000_000 + 20 * US, 1 * US, {"hlo_op": "copy.2", "payload": b"\x00\x01"})
    derived = dev.line("XLA Ops", timestamp_ns=2_000)  # repeats the stream: its stats are never read
    derived.event("fusion.1", 2_000_000 + 10 * US, 5 * US, {"hlo_op": Ref("fusion.1"), "step": 3})
    env.line("", line_id=42, timestamp_ns=5_000).event("env", 5_000_000, 0, {"step": 1})
    return b


@pytest.fixture(scope="module")
def raw():
    return read_xspace(jax_like_trace().to_bytes(), ASKED, label="jax-like")


def text(raw, codes: np.ndarray) -> list[str | None]:
    return [raw.strings.items[c] if c >= 0 else None for c in codes.tolist()]


def test_plane_and_line_tables(raw) -> None:
    assert raw.source == "jax-like" and raw.hostnames == ("worker-0",)
    assert raw.planes.names == ("/host:CPU", "/device:GPU:0", "Task Environment")
    assert raw.planes.kinds.tolist() == [HOST, DEVICE, OTHER]
    assert raw.lines.names == ("python3", "Stream #1", "XLA Ops", "42")
    assert raw.lines.plane.tolist() == [0, 1, 1, 2]
    assert raw.lines.derived.tolist() == [False, False, True, False]
    assert raw.lines.event_count.tolist() == [3, 2, 1, 1]
    assert raw.lines.timestamp_ps.tolist() == [0, 1_000_000, 1_000_000, 4_000_000]
    assert raw.origin_ns == 1_000


def test_event_columns(raw) -> None:
    # the derived line's event comes last: the first n_kept are the others, in file order
    assert raw.n_kept == 6 and raw.n_events == 7
    assert raw.event_line.tolist() == [0, 0, 0, 1, 1, 3, 2]
    assert raw.event_plane.tolist() == [0, 0, 0, 1, 1, 2, 1]
    names = ["jit_step", "jit_step", "PjitFunction(f)", "fusion.1", "copy.2", "env", "fusion.1"]
    assert text(raw, raw.name) == names
    tpu = 1 * US  # the device line starts 1 us after the origin
    starts = [0, 60 * US, 100 * US, tpu + 10 * US, tpu + 20 * US, 4 * US, tpu + 10 * US]
    assert raw.start_ps.tolist() == starts
    assert raw.dur_ps.tolist() == [50 * US, 40 * US, 3 * US, 5 * US, 1 * US, 0, 5 * US]
    assert raw.start_ps.dtype == np.int64 and raw.name.dtype == np.int64


def test_stats_asked_for(raw) -> None:
    assert tuple(raw.stats) == ASKED  # correlation_id was not asked for: never decoded
    step = raw.stats["step"]
    assert step.present.tolist() == [True, True, False, False, False, True, False]  # not the derived line's
    assert step.num.tolist() == [7, 8, 0, 0, 0, 1, 0]
    assert text(raw, step.code) == ["7", "8", None, None, None, "1", None]
    hlo_op = raw.stats["hlo_op"]
    assert text(raw, hlo_op.code) == [None, None, None, "fusion.1", "copy.2", None, None]  # ref and inline
    # a ref's integer value is the stat-metadata id it points at (the device plane's second stat name)
    assert hlo_op.num.tolist() == [0, 0, 0, 2, 0, 0, 0]
    # from the event metadata where the event has none of its own; an event's own value wins
    assert text(raw, raw.stats["hlo_module"].code) == ["jit_step", "override", None, None, None, None, None]
    flops = raw.stats["flops"]  # a double: its integer part, and no string code
    assert flops.present.tolist() == [False, False, True, False, False, False, False]
    assert flops.num.tolist() == [0, 0, 2, 0, 0, 0, 0]
    assert flops.code.tolist() == [-1] * 7
    assert raw.stats["bytes_accessed"].num.tolist() == [0, 0, 0, 4096, 0, 0, 0]
    assert text(raw, raw.stats["payload"].code) == [None, None, None, None, "\x00\x01", None, None]
    never = raw.stats["never_written"]
    assert not never.any and not never.present.any() and (never.code == -1).all()


def test_codes_to_categoricals(raw) -> None:
    names = categorical(raw.name[: raw.n_kept], raw.strings)
    assert list(names.categories) == ["jit_step", "PjitFunction(f)", "fusion.1", "copy.2", "env"]
    assert names.codes.tolist() == [0, 0, 1, 2, 3, 4]


def test_from_a_file_equals_from_bytes(tmp_path: Path) -> None:
    path = jax_like_trace().write(tmp_path / "w.xplane.pb")
    a, b = read_xspace(path, ASKED), read_xspace(path.read_bytes(), ASKED)
    assert a.source == str(path) and b.source == "<bytes>"
    for column in ("event_line", "event_plane", "name", "start_ps", "dur_ps"):
        assert getattr(a, column).tolist() == getattr(b, column).tolist(), column
    assert all(a.stats[s].code.tolist() == b.stats[s].code.tolist() for s in ASKED)


def test_no_stats_asked_for() -> None:
    raw = read_xspace(jax_like_trace().to_bytes())
    assert dict(raw.stats) == {} and raw.n_events == 7


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty file"),
        (b"\x83\xaf\x70\xd1\x0d\x88\x4a\x3f rest", "riegeli"),
        (b"this is not a protobuf at all\n", "not a readable XSpace"),
        (b"\x12\x03abc", "no profiler planes"),
    ],
)
def test_broken_input_is_one_trace_error(data: bytes, message: str) -> None:
    with pytest.raises(TraceError, match=message) as info:
        read_xspace(data, ASKED, label="broken")
    assert str(info.value).startswith("broken: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        read_xspace(tmp_path / "nope.xplane.pb")


def test_the_reader_knows_no_tensorflow() -> None:
    """Importing and using the reader loads neither TensorFlow nor the TensorFlow trace package."""
    code = (
        "import sys; from tfprof_towers.testing.build import TraceBuilder; "
        "from tfprof_towers.xplane import read_xspace; "
        "b = TraceBuilder(); b.plane('/host:CPU').line('t').event('e', 0, 1); read_xspace(b.to_bytes()); "
        "bad = [m for m in sys.modules if m == 'tensorflow' or m.startswith('tfprof_towers.trace')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_tpu_chips_xla_ops_line_is_its_own_record_and_its_plane_stats_are_read() -> None:
    """On a TPU chip's plane the ``XLA Ops`` line is the ops the chip ran (XProf's op line there), not a
    copy of other lines: kept, with its stats; ``XLA Modules``, ``Async XLA Ops`` and ``Steps`` stay
    derived.  On a GPU plane ``XLA Ops`` stays derived.  Plane-level stats come back by name."""
    b = TraceBuilder()
    tpu = b.plane("/device:TPU:0").stats({"device_vendor": "Google", "core_count": 1})
    tpu.line("XLA Modules").event("jit_step", 0, 10 * US)
    tpu.line("XLA Ops").event("fusion.1", 0, 4 * US, {"step": 2})
    tpu.line("Async XLA Ops").event("all-reduce-start", 0, 9 * US)
    tpu.line("Steps").event("0", 0, 10 * US)
    gpu = b.plane("/device:GPU:0")
    gpu.line("Stream #1").event("k", 0, 1 * US)
    gpu.line("XLA Ops").event("k", 0, 1 * US)
    raw = read_xspace(b.to_bytes(), ("step",))
    derived = dict(zip([(raw.planes.names[p], n) for p, n in zip(raw.lines.plane.tolist(), raw.lines.names)],
                       raw.lines.derived.tolist()))
    assert derived == {("/device:TPU:0", "XLA Modules"): True, ("/device:TPU:0", "XLA Ops"): False,
                       ("/device:TPU:0", "Async XLA Ops"): True, ("/device:TPU:0", "Steps"): True,
                       ("/device:GPU:0", "Stream #1"): False, ("/device:GPU:0", "XLA Ops"): True}
    assert raw.n_kept == 2
    assert raw.stats["step"].index.tolist() == [0] and raw.stats["step"].nums.tolist() == [2]
    assert raw.planes.stats[0] == {"device_vendor": "Google", "core_count": 1}
    assert raw.planes.stats[1] == {}


def test_double_stats_without_an_int64_are_0_in_the_int_column_and_exact_in_the_float_one() -> None:
    """A NaN, an infinity or a huge double (a Keras trace's stats hold some) is not cast by numpy's
    undefined (and warning) cast: the int column says 0, the float column keeps the value."""
    import warnings

    import numpy as np

    from tfprof_towers.xplane.columns import as_int64

    values = np.array([2.5, -3.9, float("nan"), float("inf"), -float("inf"), 1e300, 2.0**62])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = as_int64(values)
    assert got.tolist() == [2, -3, 0, 0, 0, 0, 2**62]
