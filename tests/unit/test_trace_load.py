"""Loading: synthetic traces with exact expected columns, locating files, bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from reference_kit import parse_memcpy_details
from trace_kit import US, TraceBuilder, two_gpu_trace

from tfprof_towers.trace.load import load_trace, trace_from_bytes
from tfprof_towers.trace.names import split_tf_op
from tfprof_towers.vocab.categories import EVENT_CATEGORIES as CATEGORIES
from tfprof_towers.vocab.device_names import canonical_device
from tfprof_towers.vocab.errors import TraceError


@pytest.fixture(scope="module")
def trace():
    return trace_from_bytes(two_gpu_trace().to_bytes(), "two-gpu")


def test_frames_have_explicit_dtypes(trace) -> None:
    ev = trace.events
    assert list(ev.columns) == [
        "plane",
        "device",
        "line",
        "name",
        "op_type",
        "tf_op",
        "start_ps",
        "dur_ps",
        "category",
        "bytes",
        "src_device",
        "dst_device",
        "edge",
        "step",
    ]
    for col in (
        "plane",
        "device",
        "line",
        "name",
        "op_type",
        "tf_op",
        "category",
        "src_device",
        "dst_device",
    ):
        assert isinstance(ev[col].dtype, pd.CategoricalDtype), col
    assert list(ev["category"].cat.categories) == list(CATEGORIES)
    for col in ("start_ps", "dur_ps", "bytes", "step"):
        assert ev[col].dtype == np.int64, col
    assert dict(trace.steps.dtypes.astype(str)) == {"step": "int64", "start_ps": "int64", "end_ps": "int64"}


def test_derived_lines_are_left_out(trace) -> None:
    assert not trace.events["line"].isin(["TensorFlow Ops", "Steps", "XLA Ops"]).any()
    assert len(trace.events) == 2 + 2 + 4 + 4 + 2 + 2


def test_every_event_categorised(trace) -> None:
    ev = trace.events
    got = ev.assign(name=ev["name"].astype(str), category=ev["category"].astype(str))
    rows = sorted(zip(got["device"].astype(str), got["name"], got["category"], got["start_ps"] // US))
    assert rows == sorted(
        [
            ("/host:CPU", "train", "marker", 0),
            ("/host:CPU", "train", "marker", 500),
            ("/host:CPU", "x:Identity", "host_compute", 10),
            ("/host:CPU", "MemcpyH2D", "framework", 50),
            ("/device:GPU:0", "volta_sgemm", "compute", 0),
            ("/device:GPU:0", "add_kernel", "compute", 150),
            ("/device:GPU:0", "ncclKernel_AllReduce_RING_LL_Sum_float", "collective", 300),
            ("/device:GPU:0", "volta_sgemm", "compute", 600),
            ("/device:GPU:0", "MemcpyH2D", "h2d", 50),
            ("/device:GPU:0", "MemcpyD2H", "d2h", 260),
            ("/device:GPU:0", "Memset", "memset", 420),
            ("/device:GPU:0", "MemcpyH2D", "h2d", 650),
            ("/device:GPU:0", "MemcpyP2P", "p2p", 120),
            ("/device:GPU:0", "MemcpyD2D", "d2d", 450),
            ("/device:GPU:1", "volta_sgemm", "compute", 100),
            ("/device:GPU:1", "MemcpyOther", "h2d", 0),
        ]
    )


def test_copies_bytes_and_endpoints(trace) -> None:
    ev = trace.events
    copies = ev[ev["bytes"] > 0].sort_values("start_ps")
    got = [(r.device, r.category, r.bytes, r.src_device, r.dst_device) for r in copies.itertuples()]
    assert got == [
        ("/device:GPU:1", "h2d", 256, "/host:CPU", "/device:GPU:1"),
        ("/device:GPU:0", "h2d", 1000, "/host:CPU", "/device:GPU:0"),
        ("/device:GPU:0", "p2p", 4000, "/device:GPU:0", "/device:GPU:1"),
        ("/device:GPU:0", "d2h", 500, "/device:GPU:0", "/host:CPU"),
        ("/device:GPU:0", "d2d", 64, "/device:GPU:0", "/device:GPU:0"),
        ("/device:GPU:0", "h2d", 2000, "/host:CPU", "/device:GPU:0"),
    ]
    host_memcpy = ev[(ev["plane"] == "/host:CPU") & (ev["name"] == "MemcpyH2D")]
    assert host_memcpy["bytes"].tolist() == [0] and host_memcpy["src_device"].tolist() == [""]


def test_tf_op_from_tf_op_or_annotation(trace) -> None:
    ev = trace.events
    kernels = ev[ev["category"].isin(["compute", "collective"])].sort_values(["plane", "start_ps"])
    assert list(zip(kernels["tf_op"], kernels["op_type"])) == [
        ("a/mm", "MatMul"),
        ("b/add", "AddV2"),
        ("ar", "NcclAllReduce"),
        ("a/mm", "MatMul"),
        ("c/mm", "MatMul"),
    ]
    host_op = ev[ev["name"] == "x:Identity"]
    assert (host_op["tf_op"].tolist(), host_op["op_type"].tolist()) == (["x"], ["Identity"])


def test_times_from_line_timestamp_and_offsets(trace) -> None:
    ev = trace.events
    h2d = ev[(ev["name"] == "MemcpyH2D") & (ev["plane"] == "/device:GPU:0")].sort_values("start_ps")
    assert h2d["start_ps"].tolist() == [50 * US, 650 * US]
    assert h2d["dur_ps"].tolist() == [80 * US, 100 * US]


def test_steps_from_markers(trace) -> None:
    assert trace.window == "markers"
    assert trace.steps.values.tolist() == [[0, 0, 500 * US], [1, 500 * US, 1000 * US]]
    ev = trace.events
    assert ev.loc[ev["start_ps"] == 600 * US, "step"].tolist() == [1]
    assert (ev["step"] >= 0).all()


def test_steps_line_when_no_markers() -> None:
    t = trace_from_bytes(two_gpu_trace(markers=False).to_bytes())
    assert t.window == "steps-line"
    assert t.steps.values.tolist() == [[0, 0, 500 * US], [1, 500 * US, 1000 * US]]


def test_busy_regions_when_no_markers_and_no_steps_line() -> None:
    """The GPUs' work never pauses for 1 ms: one busy region, from the first device event's start to the
    last one's end (the whole trace would give the same window here, as no host event lies outside
    the GPUs' work)."""
    t = trace_from_bytes(two_gpu_trace(markers=False, steps_line=False).to_bytes())
    assert t.window == "busy-regions"
    assert t.steps.values.tolist() == [[0, 0, 750 * US]]
    assert any("1 busy region" in n and "0 s of the trace's 0.00075 s is outside" in n for n in t.notes)


def test_whole_trace_when_no_accelerator_did_work() -> None:
    b = TraceBuilder()
    th = b.plane("/host:CPU").line("tf_Compute/1")
    th.event("a:MatMul", 10 * US, 20 * US)
    th.event("b:AddV2", 100 * US, 50 * US)
    b.plane("/device:GPU:0")  # a plane without events
    t = trace_from_bytes(b.to_bytes())
    assert t.window == "whole-trace"
    assert t.steps.values.tolist() == [[0, 10 * US, 150 * US]]
    assert any("whole trace" in n for n in t.notes)


def test_node_devices_join_host_ops() -> None:
    t = trace_from_bytes(
        two_gpu_trace().to_bytes(), node_devices={"x": "/job:localhost/replica:0/task:0/cpu:1"}
    )
    ev = t.events
    assert ev.loc[ev["name"] == "x:Identity", "device"].tolist() == ["/device:CPU:1"]
    assert ev.loc[ev["name"] == "MemcpyH2D", "device"].astype(str).value_counts().to_dict() == {
        "/device:GPU:0": 2,
        "/host:CPU": 1,
    }


def test_parsers() -> None:
    assert parse_memcpy_details("kind_src:pinned kind_dst:device size:4096 dest:1 async:1").size == 4096
    old = parse_memcpy_details("size:12 dest:3 async:0")
    assert (old.size, old.dest, old.kind_src) == (12, 3, "")
    assert split_tf_op("n/_3:_HostRecv#from=RemoteCall,to=Identity_1#::#edge_name=memtype_41#") == (
        "n/_3",
        "_HostRecv",
    )
    assert split_tf_op("outer:While::inner/mm:MatMul") == ("inner/mm", "MatMul")
    assert split_tf_op("MakeTensorFromProto") == ("MakeTensorFromProto", "")
    assert canonical_device("/job:localhost/replica:0/task:0/device:CPU:2") == "/device:CPU:2"
    assert canonical_device("/gpu:1") == "/device:GPU:1"


# --- locating ----------------------------------------------------------------------------------


def test_logdir_with_several_runs_and_hosts(tmp_path: Path) -> None:
    b = two_gpu_trace()
    b.write_logdir(tmp_path, run="2024_01_01_00_00_00", host="a")
    b.write_logdir(tmp_path, run="2024_01_02_00_00_00", host="a")
    b.write_logdir(tmp_path, run="2024_01_02_00_00_00", host="b")
    t = load_trace(tmp_path)
    assert t.source.endswith("2024_01_02_00_00_00/a.xplane.pb")
    assert any("2 runs" in n for n in t.notes) and any("2 hosts" in n for n in t.notes)
    assert load_trace(tmp_path, run="2024_01_01_00_00_00").source.endswith("2024_01_01_00_00_00/a.xplane.pb")
    assert load_trace(tmp_path, run="2024_01_02_00_00_00/b").source.endswith("b.xplane.pb")
    with pytest.raises(TraceError, match="no such run"):
        load_trace(tmp_path, run="nope")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: p / "missing.xplane.pb", "no such file"),
        (lambda p: _write(p / "empty.xplane.pb", b""), "empty file"),
        (lambda p: _write(p / "text.xplane.pb", b"this is not a protobuf at all\n"), "not a readable XSpace"),
        (lambda p: _write(p / "t.xplane.pb", two_gpu_trace().to_bytes()[:-7]), "XSpace|corrupt"),
        (
            lambda p: _write(
                p / "nested" / "plugins" / "profile" / "r" / "h.xplane.riegeli", b"\x83\xaf\x70\xd1"
            ),
            "riegeli",
        ),
        (lambda p: (p / "emptydir").mkdir() or p / "emptydir", "no profile found"),
        (lambda p: _write(p / "planes.xplane.pb", b"\x12\x03abc"), "no profiler planes"),
    ],
)
def test_bad_input_is_one_trace_error(tmp_path: Path, setup, message: str) -> None:
    path = setup(tmp_path)
    if path.name == "h.xplane.riegeli":
        path = tmp_path / "nested"
    with pytest.raises(TraceError, match=message) as info:
        load_trace(path)
    assert "\n" not in str(info.value)


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_loading_never_imports_tensorflow() -> None:
    code = (
        "import tfprof_towers.trace.load, tfprof_towers.trace.analysis, tfprof_towers.commands.analyze, sys; "
        "import tfprof_towers.xplane, tfprof_towers.analysis.run_traces; "
        "assert 'tensorflow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
