"""Device memory from the allocators' events (``trace/allocator_events.py``): exact numbers on traces built in
code, the reader's double stats and plane stats, the multi-host join, and XProf's ``memory_profile``
as the oracle (within 1%; on these traces the figures are equal).

XProf's definitions, read from its source (``xprof/convert/xplane_to_memory_profile.cc``), are the
ones ``trace/allocator_events.py`` follows: in use = ``bytes_allocated + bytes_reserved`` at an event; the
peak is the largest over every event of the host plane (not only the step windows: ``analyze``
adds the peak within the analysed windows as a figure of its own); the capacity is in use +
``bytes_available`` at the peak; the fragmentation is the peak event's stat.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from trace_kit import US, TraceBuilder

from tfprof_towers.testing.synth import Alloc, allocator_events
from tfprof_towers.trace.allocator_events import MEMORY_COLUMNS, allocator_device
from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.classify import AS_BYTES
from tfprof_towers.trace.hosts import join_hosts
from tfprof_towers.trace.load import READ_STATS, trace_from_bytes, trace_from_raw
from tfprof_towers.trace.memory_peaks import BEFORE_TRACE, NO_EVENTS_NOTE, device_memory, timeline
from tfprof_towers.xplane import read_xspace

GB = 1_000_000_000
MIB = 1 << 20
LIMIT = 6 * GB
HELD = 1_000_000
GPU_MEMORY = 8 * (1 << 30)

#: GPU 0's allocator: (time us, bytes, address, op, free); in use after each event in the comment
GPU0 = [
    Alloc(100 * US, 2_000_000, 0x10, "a/mm"),  # 3_000_000
    Alloc(200 * US, 500_000, 0x20, "b/add"),  # 3_500_000
    Alloc(300 * US, 2_000_000, 0x10, free=True),  # 1_500_000
    Alloc(400 * US, 1_000_000, 0x30, "a/mm"),  # 2_500_000
    Alloc(1100 * US, 3_000_000, 0x10, "c/big"),  # 5_500_000: the peak within the steps
    Alloc(1200 * US, 3_000_000, 0x10, free=True),  # 2_500_000
    Alloc(2500 * US, 4_000_000, 0x40, "d/late"),  # 6_500_000: the peak of the trace, after the steps
]


def memory_trace(kernel_on_gpu1: bool = False) -> TraceBuilder:
    """Two steps by markers, [0, 1000) and [1000, 2000) us; GPU 0 runs a kernel and allocates
    (:data:`GPU0`, 1 MB held before the trace, a 6 GB limit, fragmentation 0.25); GPU 1 holds
    300 MiB and allocates 256 B; the host's pinned allocator allocates 4096 B with no limit known."""
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    py = host.line("python")
    py.event("train", 0, 1000 * US, {"step_num": 0, "_r": 1})
    py.event("train", 1000 * US, 1000 * US, {"step_num": 1, "_r": 1})
    alloc = host.line("tf_Compute/1")
    allocator_events(alloc, "GPU_0_bfc", GPU0, held=HELD, limit=LIMIT, fragmentation=0.25)
    allocator_events(host.line("tf_Compute/2"), "GPU_1_bfc", [Alloc(150 * US, 256, 0x99, "x")],
                     held=300 * MIB, limit=LIMIT)
    allocator_events(host.line("tf_Compute/3"), "gpu_host_bfc", [Alloc(50 * US, 4096, 0x5, "y")])
    g0 = b.plane("/device:GPU:0").stats({"memory_size": GPU_MEMORY})
    g0.line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 100 * US, {"tf_op": "a/mm:MatMul"})
    g1 = b.plane("/device:GPU:1").stats({"memory_size": GPU_MEMORY})
    if kernel_on_gpu1:
        g1.line("Stream #2(Compute)").event("volta_sgemm", 10 * US, 100 * US, {"tf_op": "z:MatMul"})
    return b


@pytest.fixture(scope="module")
def analysis():
    return analyze_trace(trace_from_bytes(memory_trace().to_bytes()))


def test_peaks_capacity_and_live_ops_exactly(analysis) -> None:
    by = {d.device: d for d in analysis.memory}
    assert list(by) == ["/host:CPU", "/device:GPU:0", "/device:GPU:1"]
    g0 = by["/device:GPU:0"]
    assert g0.allocator == "GPU_0_bfc"
    assert g0.peak_bytes == 6_500_000 and g0.peak_time_s == pytest.approx(2500e-6)
    assert g0.peak_in_steps_bytes == 5_500_000 and g0.peak_in_steps_time_s == pytest.approx(1100e-6)
    assert g0.capacity_bytes == LIMIT  # in use + available at the peak: the allocator's limit
    assert g0.device_memory_bytes == GPU_MEMORY
    assert g0.fragmentation == 0.25  # a double stat, read exactly
    assert g0.lifetime_peak_bytes == 6_500_000
    # live at the peak: b/add 0.5 MB, a/mm 1 MB (0x30; 0x10 was freed), d/late 4 MB; 1 MB held before
    assert [(o.op, o.bytes, o.count) for o in g0.top_ops] == [
        ("d/late", 4_000_000, 1), ("a/mm", 1_000_000, 1), ("b/add", 500_000, 1)]
    assert g0.before_trace_bytes == HELD
    assert g0.events == 7
    g1 = by["/device:GPU:1"]
    assert g1.peak_bytes == 300 * MIB + 256 and g1.before_trace_bytes == 300 * MIB
    host = by["/host:CPU"]
    assert host.capacity_bytes is None and host.device_memory_bytes is None  # nothing tells the limit
    assert host.fragmentation is None


def test_json_document(analysis) -> None:
    doc = json.loads(json.dumps(analysis.to_doc()))["memory"]
    g0 = doc["devices"]["/device:GPU:0"]
    assert {k: g0[k] for k in ("allocator", "peak_bytes", "capacity_bytes", "fragmentation")} == {
        "allocator": "GPU_0_bfc", "peak_bytes": 6_500_000, "capacity_bytes": LIMIT, "fragmentation": 0.25}
    assert g0["top_ops"][0] == {"op": "d/late", "bytes": 4_000_000, "count": 1}
    assert "allocated before the trace" not in json.dumps(g0["top_ops"])  # held bytes are their own figure
    assert BEFORE_TRACE.startswith("(")
    assert doc["note"] != NO_EVENTS_NOTE


def test_trace_without_allocator_events_has_no_devices_and_never_zeros() -> None:
    b = TraceBuilder()
    b.plane("/host:CPU").line("python").event("train", 0, 10 * US, {"step_num": 0, "_r": 1})
    b.plane("/device:GPU:0").stats({"memory_size": GPU_MEMORY}).line("Stream #1(Compute)").event(
        "k", 0, 5 * US)
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    assert a.memory == ()
    assert a.to_doc()["memory"] == {"devices": {}, "note": NO_EVENTS_NOTE}
    assert a.trace.memory.device_memory == {"/device:GPU:0": GPU_MEMORY}  # known, but no peak to show
    frame = a.trace.memory.frame(a.trace.step_table)
    assert len(frame) == 0 and list(frame.columns) == list(MEMORY_COLUMNS)


def test_memory_frame_columns_and_steps(analysis) -> None:
    t = analysis.trace
    f = t.memory.frame(t.step_table, t.device_steps)
    assert list(f.columns) == list(MEMORY_COLUMNS)
    assert {c: str(f[c].dtype) for c in f.columns} == MEMORY_COLUMNS
    g0 = f[f.device == "/device:GPU:0"]
    assert g0.bytes_in_use.tolist() == [3_000_000, 3_500_000, 1_500_000, 2_500_000, 5_500_000, 2_500_000,
                                        6_500_000]
    assert g0.step.tolist() == [0, 0, 0, 0, 1, 1, -1]
    assert g0.activity.tolist().count("deallocation") == 2
    assert g0.tf_op.tolist()[:2] == ["a/mm", "b/add"]
    assert set(f.data_type) == {"float"}  # TensorFlow's DataType enum 1, named
    assert f.start_ps.is_monotonic_increasing


def test_timeline_keeps_every_event_or_the_largest_of_each_stretch(analysis) -> None:
    ev = analysis.trace.memory
    t, b = timeline(ev, "/device:GPU:0")
    assert b.tolist()[-1] == 6_500_000 and t.size == 7
    t2, b2 = timeline(ev, "/device:GPU:0", points=3)
    assert b2.tolist() == [3_500_000, 2_500_000, 6_500_000]  # the largest of events 0-1, 2-3 and 4-6
    assert t2.tolist() == pytest.approx([200e-6, 400e-6, 2500e-6])
    assert timeline(ev, "/device:GPU:9")[0].size == 0


@pytest.mark.parametrize(("allocator", "device"), [
    ("GPU_0_bfc", "/device:GPU:0"), ("GPU_12_bfc", "/device:GPU:12"), ("gpu_host_bfc", "/host:CPU"),
    ("cpu", "/host:CPU"), ("cuda_host_bfc", "/host:CPU"), ("xla_gpu_host_bfc", "/host:CPU"),
    ("mklcpu", "/host:CPU"), ("mystery_pool", "mystery_pool"), ("hostile", "hostile"),
])
def test_allocator_names_its_device(allocator: str, device: str) -> None:
    assert allocator_device(allocator) == device


def test_allocator_device_keeps_the_task_prefix() -> None:
    assert allocator_device("GPU_1_bfc", "/job:worker/task:1") == "/job:worker/task:1/device:GPU:1"
    assert allocator_device("gpu_host_bfc", "/job:worker/task:1") == "/job:worker/task:1/host:CPU"


def test_two_hosts_keep_their_allocators_apart_on_one_clock() -> None:
    """As ``hosts.read_hosts`` reads a cluster: each host with its task's prefix, then joined."""
    raws = [read_xspace(memory_trace().to_bytes(), READ_STATS, as_bytes=AS_BYTES) for _ in range(2)]
    prefixes = ["/job:worker/task:0", "/job:worker/task:1"]
    traces = [trace_from_raw(r, prefix=p, host=i) for i, (r, p) in enumerate(zip(raws, prefixes))]
    traces[1] = replace(traces[1], origin_ns=traces[1].origin_ns + 1000)  # its clock 1 us later
    joined = join_hosts(traces, prefixes, ["h0", "h1"], "both")
    mem = {d.device: d for d in device_memory(joined.memory, joined.step_table, joined.device_steps)}
    assert len(mem) == 6 and joined.memory.n == 2 * traces[0].memory.n == 18
    assert mem["/job:worker/task:0/device:GPU:0"].peak_bytes == 6_500_000
    assert mem["/job:worker/task:0/device:GPU:0"].peak_time_s == pytest.approx(2500e-6)
    assert mem["/job:worker/task:1/device:GPU:0"].peak_time_s == pytest.approx(2501e-6)
    assert mem["/job:worker/task:1/host:CPU"].peak_bytes == 4096
    assert joined.memory.device_memory["/job:worker/task:1/device:GPU:1"] == GPU_MEMORY


def test_reader_keeps_doubles_exact_and_reads_plane_stats() -> None:
    b = TraceBuilder()
    p = b.plane("/host:CPU").stats({"memory_size": 123, "ratio": 0.5, "name": "x"})
    line = p.line("t")
    line.event("e", 0, 1, {"f": 0.75})
    line.event("e", 1, 1, {"f": 3})
    line.event("e", 2, 1)
    raw = read_xspace(b.to_bytes(), ("f",))
    col = raw.stats["f"]
    assert col.values.tolist() == [0.75, 3.0] and col.nums.tolist() == [0, 3]
    assert raw.planes.numbers == ({"memory_size": 123.0, "ratio": 0.5},)
    ints = read_xspace(b.to_bytes(), ("memory_size",)).stats["memory_size"]
    assert ints.reals is None  # no double: no extra column


# ---------------------------------------------------------------- XProf's memory_profile as the oracle


def xprof_memory(xprof, path: Path) -> dict[str, tuple[int, int]]:
    """XProf's memory profile of one trace: per allocator, (peak bytes in use, capacity)."""
    data, _ = xprof.xspace_to_tool_data([str(path)], "memory_profile", {})
    per = json.loads(data)["memoryProfilePerAllocator"]
    return {a: (int(v["profileSummary"]["peakStats"]["peakBytesInUse"]),
                int(v["profileSummary"]["memoryCapacity"])) for a, v in per.items()}


def ours(path: Path) -> dict[str, tuple[int, int | None]]:
    from tfprof_towers.trace.analysis import analyze_xplane

    return {d.allocator: (d.peak_bytes, d.capacity_bytes) for d in analyze_xplane(path).memory}


def within(got: int, want: int, rel: float = 0.01) -> bool:
    return abs(got - want) <= rel * want


def test_xprof_agrees_on_a_trace_built_in_code(xprof, tmp_path_factory) -> None:
    path = memory_trace().write(tmp_path_factory.mktemp("mem_synth") / "host.xplane.pb")
    want = xprof_memory(xprof, path)
    got = ours(path)
    assert set(got) == set(want) == {"GPU_0_bfc", "GPU_1_bfc", "gpu_host_bfc"}
    for a, (peak, capacity) in want.items():
        assert within(got[a][0], peak), (a, got[a], want[a])
        if got[a][1] is not None:
            assert within(got[a][1], capacity), (a, got[a], want[a])
    # where no bytes_available is written, XProf's capacity is the peak itself (available counted 0);
    # ours says it is not known
    assert want["gpu_host_bfc"] == (4096, 4096) and got["gpu_host_bfc"] == (4096, None)


def test_xprof_agrees_on_a_many_event_trace(xprof, tmp_path_factory) -> None:
    """A thousand events of random sizes, frees in random order, on two allocators and two threads."""
    rng = np.random.default_rng(3)
    b = TraceBuilder()
    host = b.plane("/host:CPU")
    for gpu in range(2):
        live: list[tuple[int, int]] = []
        events, addr = [], 1
        for i in range(500):
            if live and rng.random() < 0.45:
                a, n = live.pop(int(rng.integers(len(live))))
                events.append(Alloc((i + 1) * US, n, a, free=True))
            else:
                n = int(rng.integers(1, 50)) * 256 * 1024
                events.append(Alloc((i + 1) * US, n, addr, f"op{int(rng.integers(8))}"))
                live.append((addr, n))
                addr += 1
        allocator_events(host.line(f"tf_Compute/{gpu}"), f"GPU_{gpu}_bfc", events, held=gpu * 7 * MIB,
                         limit=2 * GB)
        b.plane(f"/device:GPU:{gpu}").stats({"memory_size": GPU_MEMORY})
    path = b.write(tmp_path_factory.mktemp("mem_many") / "host.xplane.pb")
    want, got = xprof_memory(xprof, path), ours(path)
    assert set(got) == set(want) == {"GPU_0_bfc", "GPU_1_bfc"}
    for a in want:
        assert within(got[a][0], want[a][0]) and within(got[a][1], want[a][1]), (a, got[a], want[a])


def test_xprof_agrees_on_the_8gpu_fixture(xprof, fixture_8gpu, tmp_path_factory) -> None:
    own = tmp_path_factory.mktemp("mem_8gpu") / fixture_8gpu.name
    own.write_bytes(fixture_8gpu.read_bytes())
    want, got = xprof_memory(xprof, own), ours(own)
    assert set(got) == set(want) == {"GPU_1_bfc", "GPU_4_bfc", "GPU_6_bfc", "gpu_host_bfc"}
    for a in want:
        assert within(got[a][0], want[a][0]) and within(got[a][1], want[a][1]), (a, got[a], want[a])
    # the figures of docs/memory.md's 8-GPU example
    assert got["GPU_6_bfc"] == (6_210_111_488, 15_477_102_400)
    assert got["GPU_4_bfc"][0] == 6_208_853_760 and got["GPU_1_bfc"][0] == 4_013_344_768


def test_fixture_gpu1_holds_4gb_and_runs_nothing(fixture_8gpu) -> None:
    from tfprof_towers.trace.analysis import analyze_xplane

    a = analyze_xplane(fixture_8gpu)
    by = {d.device: d for d in a.memory}
    assert "/device:GPU:1" in a.idle_accelerators
    g1 = by["/device:GPU:1"]
    assert g1.peak_bytes == 4_013_344_768 and g1.device_memory_bytes == 16_945_512_448
    assert g1.peak_in_steps_bytes is None  # its 19 events all fall outside the analysed windows
    assert by["/device:GPU:6"].fragmentation == pytest.approx(0.000961762)


# ---------------------------------------------------------------- analyze: text, --json, --html


def test_analyze_prints_memory_table_json_and_html(tmp_path: Path, capsys) -> None:
    from tfprof_towers.cli import main

    path = memory_trace().write(tmp_path / "t" / "host.xplane.pb")
    assert main(["analyze", str(path)]) == 0
    text = capsys.readouterr().out
    block = text[text.index("memory per device"):]
    row = next(line for line in block.splitlines() if line.startswith("/device:GPU:0"))
    assert row.split()[:6] == ["/device:GPU:0", "GPU_0_bfc", "6.50", "MB", "5.50", "MB"]
    assert "0.1%" in row and "0.2500" in row and "d/late (4.00 MB)" in row
    assert main(["analyze", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["memory"]["devices"]["/device:GPU:1"]["peak_bytes"] == 300 * MIB + 256
    out = tmp_path / "page.html"
    assert main(["analyze", str(path), "--html", str(out), "--json"]) == 0
    html = out.read_text()
    section = html[html.index('<section id="memory">'):html.index('<section id="links">')]
    assert section.count('<svg class="memory-timeline"') == 3
    assert 'class="capacity"' in section and "6.50 MB" in section


def test_analyze_without_allocator_events_says_so(tmp_path: Path, capsys) -> None:
    from trace_kit import two_gpu_trace

    from tfprof_towers.cli import main

    path = two_gpu_trace().write(tmp_path / "host.xplane.pb")
    out = tmp_path / "page.html"
    assert main(["analyze", str(path), "--html", str(out)]) == 0
    text = capsys.readouterr().out
    head = "memory per device (the allocators' events; peak = most bytes in use):"
    assert f"{head}\n{NO_EVENTS_NOTE}\n" in text
    html = out.read_text()
    assert "memory-timeline" not in html and NO_EVENTS_NOTE in html


def test_memory_names_from_a_trace_are_escaped_in_the_page(tmp_path: Path) -> None:
    from tfprof_towers.cli import main

    b = TraceBuilder()
    line = b.plane("/host:CPU").line("t")
    allocator_events(line, "<b>pool</b>", [Alloc(US, 1024, 1, "<script>alert(1)</script>")], limit=4096)
    path = b.write(tmp_path / "host.xplane.pb")
    out = tmp_path / "page.html"
    assert main(["analyze", str(path), "--html", str(out), "--json"]) == 0
    html = out.read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>pool</b>" not in html and "&lt;b&gt;pool&lt;/b&gt;" in html


# ---------------------------------------------------------------- load() and export


def test_load_gives_the_memory_frame_and_export_writes_it(tmp_path: Path) -> None:
    import tfprof_towers
    from tfprof_towers.frames.export import read_frames
    from tfprof_towers.frames.schema import COLUMNS

    path = memory_trace().write(tmp_path / "t" / "host.xplane.pb")
    prof = tfprof_towers.load(path)
    m = prof.memory
    assert list(m.columns) == list(COLUMNS["memory"])
    g0 = m[m.device == "/device:GPU:0"]
    assert g0.bytes_in_use.tolist()[-1] == 6_500_000 and g0.start_s.tolist()[-1] == pytest.approx(2500e-6)
    assert g0.step.tolist() == [0, 0, 0, 0, 1, 1, -1]
    assert int(m.groupby("device", observed=True).bytes_in_use.max()["/device:GPU:1"]) == 300 * MIB + 256
    assert "/device:GPU:1" in list(prof.device_dtype.categories)  # held memory, no kernel: still a device
    written = prof.to_parquet(tmp_path / "out")
    assert "memory.parquet" in {p.name for p in written}
    back = read_frames(tmp_path / "out")["memory"]
    assert back.bytes_in_use.tolist() == m.bytes_in_use.tolist()
    assert back.op.astype(str).tolist() == m.op.astype(str).tolist()


def test_diff_compares_the_peaks(tmp_path: Path, capsys) -> None:
    from tfprof_towers.cli import main

    base = memory_trace().write(tmp_path / "a" / "host.xplane.pb")
    b = memory_trace()  # the same, with GPU 0 allocating 1 MB more at the end
    allocator_events(b.plane("/host:CPU").line("later"), "GPU_0_bfc",
                     [Alloc(2600 * US, 1_000_000, 0x50, "e")], held=6_500_000, limit=LIMIT)
    new = b.write(tmp_path / "b" / "host.xplane.pb")
    assert main(["diff", str(base), str(new), "--json"]) == 0
    rows = {r["device"]: r for r in json.loads(capsys.readouterr().out)["pairs"][0]["memory"]}
    assert rows["/device:GPU:0"] == {"device": "/device:GPU:0", "base_peak_bytes": 6_500_000,
                                     "new_peak_bytes": 7_500_000, "change": 1_000_000,
                                     "change_pct": pytest.approx(100 / 6.5)}
    assert rows["/device:GPU:1"]["change"] == 0
    assert main(["diff", str(base), str(new)]) == 0
    text = capsys.readouterr().out
    assert "peak memory per device" in text
    assert next(ln for ln in text.splitlines() if ln.strip().startswith("/device:GPU:0")).split()[-2:] == [
        "MB", "(+15.4%)"]
    page = tmp_path / "diff.html"
    assert main(["diff", str(base), str(new), "--html", str(page)]) == 0
    html = page.read_text()
    table = html[html.index("<h3>Peak memory per device</h3>"):]
    table = table[:table.index("</table>")]
    assert "<td>/device:GPU:0</td><td class=\"num\">6.50 MB</td><td class=\"num\">7.50 MB</td>" in table
    assert "+1.00 MB (+15.4%)" in table


@pytest.mark.parametrize("name", ["jax_rocm_mi300x_gemm", "jax_rocm_gfx950_fused_attn"])
def test_xprof_agrees_on_the_jax_rocm_fixtures(xprof, tmp_path_factory, name: str) -> None:
    """JAX (XLA's BFC allocators) on AMD GPUs writes the same events: the same figures as XProf's."""
    src = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / f"{name}.xplane.pb"
    if not src.is_file():
        pytest.skip(f"the shared fixture {src.name} is absent; it ships beside the repo in CI")
    own = tmp_path_factory.mktemp(name) / src.name
    own.write_bytes(src.read_bytes())
    want, got = xprof_memory(xprof, own), ours(own)
    assert set(got) == set(want) and "GPU_0_bfc" in got
    for a in want:
        assert within(got[a][0], want[a][0]) and within(got[a][1], want[a][1]), (a, got[a], want[a])
    assert got["GPU_0_bfc"] == {"jax_rocm_mi300x_gemm": (482_345_216, 154_606_239_744),
                                "jax_rocm_gfx950_fused_attn": (663_228_416, 299_944_250_900)}[name]
