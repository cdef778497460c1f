"""Step windows that belong to each device, without XProf: per-device windows, the step
time (the longest of the owners' windows), the note where owners did not step together, the
accelerators that ran no kernel, and the cases that stay as they were (one shared window)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from trace_kit import US, TraceBuilder, apart_trace, logical_cpu_trace, two_gpu_trace

from tfprof_towers.commands.analyze import print_tables
from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes
from tfprof_towers.trace.steps import StepSources, apart, step_times, windows


def analysis(b: TraceBuilder):
    return analyze_trace(trace_from_bytes(b.to_bytes(), "t"))


def table(*rows: tuple[int, int, int]):
    step, start, end = zip(*rows) if rows else ((), (), ())
    return windows(np.array(step), np.array(start), np.array(end))


def test_step_time_is_the_longest_owner_window_and_apart_finds_the_gaps() -> None:
    a = table((0, 0, 10), (1, 10, 20))
    b = table((0, 5, 17), (1, 40, 45))  # step 0 overlaps a's, step 1 starts 20 after a's ended
    c = table((1, 50, 51))  # no step 0
    joined = windows(np.r_[a.step, b.step, c.step], np.r_[a.start_ps, b.start_ps, c.start_ps],
                     np.r_[a.end_ps, b.end_ps, c.end_ps])
    src = StepSources(("A", "B", "C"), (a, b, c), {})
    assert joined.step.tolist() == [0, 1]
    assert step_times(joined, src).tolist() == [12, 10]
    got = [(x.step, x.first, x.second, x.gap_ps) for x in apart(joined, src)]
    assert got == [(1, "A", "B", 20), (1, "B", "C", 5)]
    assert apart(joined, StepSources(("A",), (a,), {})) == []


def test_gpus_apart_are_each_broken_down_in_their_own_windows() -> None:
    a = analysis(apart_trace())
    trace = a.trace
    assert trace.window == "steps-line"
    assert sorted(trace.device_steps) == ["/device:GPU:0", "/device:GPU:1"]
    doc = a.to_doc()
    assert doc["step_numbers"] == [0, 1]
    assert doc["step_time_s"] == pytest.approx([450e-6, 450e-6], abs=1e-15)
    assert doc["step_time_avg_s"] == pytest.approx(450e-6, abs=1e-15)
    g0, g1 = doc["devices"]["/device:GPU:0"], doc["devices"]["/device:GPU:1"]
    assert (g0["window_s"], g1["window_s"]) == pytest.approx((800e-6, 900e-6), abs=1e-15)
    assert g0["wall"] == pytest.approx({"compute": 300e-6, "collective": 0.0, "p2p": 0.0, "d2d": 0.0,
                                        "h2d": 0.0, "d2h": 0.0, "memset": 0.0, "idle": 500e-6}, abs=1e-15)
    assert g1["wall"]["compute"] == pytest.approx(500e-6, abs=1e-15)
    # every kernel launched 5 us before it started, after the device's previous work ended: host wait
    assert sum(g1["idle_split"].values()) == pytest.approx(g1["wall"]["idle"], abs=1e-15)
    # per step: GPU 1's events belong to its own windows, not to the trace's (which GPU 0 opens)
    wall = a.breakdown.wall
    busy = wall[(wall["device"] == "/device:GPU:1") & (wall["category"] == "compute")]
    assert busy.set_index("step")["dur_ps"].to_dict() == {0: 250 * US, 1: 250 * US}
    ev = trace.events
    gpu1 = ev[ev["device"].astype(str) == "/device:GPU:1"]
    assert gpu1["step"].tolist() == [0, 0, 1, 1]
    assert [n for n in doc["notes"] if "did not step together" in n] == [
        "/device:GPU:0 and /device:GPU:1 ran 2 steps (0, 1) 4.6 to 4.7 ms apart (from the end of one's "
        "step window to the start of the other's): they did not step together (for example separate "
        "processes merged into one file); each is broken down within its own windows, and a step "
        "lasts as long as the longest of them"
    ]


def test_one_shared_window_stays_as_it_was() -> None:
    """Host markers: every device in the host's windows, the step time is the window, no note."""
    a = analysis(two_gpu_trace())
    doc = a.to_doc()
    assert a.trace.device_steps == {}
    assert doc["step_time_s"] == pytest.approx([500e-6, 500e-6], abs=1e-15)
    assert [d["window_s"] for d in doc["devices"].values()] == pytest.approx([1000e-6] * 3, abs=1e-15)
    assert not [n for n in doc["notes"] if "did not step together" in n]
    assert doc["idle_accelerators"] == []
    cpu = analysis(logical_cpu_trace()).to_doc()
    assert cpu["step_time_s"] == pytest.approx([1000e-6, 1000e-6], abs=1e-15)
    assert cpu["idle_accelerators"] == []


def test_hosts_each_in_their_own_markers(tmp_path) -> None:
    """Two hosts (one file each) whose markers are 500 us apart: each host's devices in its own
    windows, the step as long as the longest host's, and a note naming the two tasks."""
    t0 = 1_700_000_000_000_000_000
    for task, delay in ((0, 0), (1, 500)):
        b = TraceBuilder(hostname=f"h{task}")
        ts = t0 + delay * 1000
        py = b.plane("/host:CPU").line("python", timestamp_ns=ts)
        for step in range(2):
            marker = {"step_num": step, "_r": 1}
            py.event("train", ts * 1000 + step * 100 * US, (100 + 10 * task) * US, marker)
        b.plane("/device:GPU:0").line("Stream #1(Compute)", timestamp_ns=ts).event(
            "volta_sgemm", ts * 1000 + 10 * US, 30 * US
        )
        b.write_logdir(tmp_path, run="r", host=f"h{task}")
    from tfprof_towers.trace.analysis import analyze_xplane

    doc = analyze_xplane(tmp_path, tasks={"h0": "/job:worker/task:0", "h1": "/job:worker/task:1"}).to_doc()
    # host 1's markers last 110 us; its step 0 is trimmed where its step 1 starts (100 us)
    assert doc["step_time_s"] == pytest.approx([100e-6, 110e-6], abs=1e-15)
    windows_s = {d: v["window_s"] for d, v in doc["devices"].items()}
    assert windows_s == pytest.approx(
        {"/job:worker/task:0/device:GPU:0": 200e-6, "/job:worker/task:1/device:GPU:0": 210e-6}, abs=1e-15
    )
    assert doc["devices"]["/job:worker/task:1/device:GPU:0"]["wall"]["compute"] == pytest.approx(30e-6)
    assert [n[:79] for n in doc["notes"] if "did not step together" in n] == [
        "/job:worker/task:0 and /job:worker/task:1 ran 2 steps (0, 1) 0.4 ms apart (from"
    ]
    assert any("hosts whose clocks disagree" in n for n in doc["notes"])


def idle_gpus_trace() -> TraceBuilder:
    """GPU 0 runs a kernel; GPU 1 only a copy; GPU 2 is a plane without lines; GPU 3's kernel lies
    outside the step window."""
    b = TraceBuilder()
    b.plane("/host:CPU").line("python").event("train", 0, 100 * US, {"step_num": 0, "_r": 1})
    b.plane("/device:GPU:0").line("Stream #1(Compute)").event("volta_sgemm", 10 * US, 20 * US)
    b.plane("/device:GPU:1").line("Stream #2(MemcpyH2D)").event("MemcpyH2D", 10 * US, 20 * US)
    b.plane("/device:GPU:2")
    b.plane("/device:GPU:3").line("Stream #3(Compute)").event("volta_sgemm", 200 * US, 20 * US)
    return b


def test_accelerators_that_ran_no_kernel() -> None:
    a = analysis(idle_gpus_trace())
    assert a.idle_accelerators == ("/device:GPU:1", "/device:GPU:2", "/device:GPU:3")
    doc = a.to_doc()
    assert doc["idle_accelerators"] == ["/device:GPU:1", "/device:GPU:2", "/device:GPU:3"]
    out = io.StringIO()
    print_tables(doc, out)
    text = out.getvalue()
    assert "step time: 100.0 us on average" in text
    assert (
        "note: 3 accelerator(s) ran no kernel in the analysed window: /device:GPU:1, /device:GPU:2, "
        "/device:GPU:3" in text
    )


def test_analyze_prints_the_note_on_gpus_apart() -> None:
    out = io.StringIO()
    print_tables(analysis(apart_trace()).to_doc(), out)
    text = out.getvalue()
    assert "step time: 450.0 us on average; a step lasts as long as the longest" in text
    assert "note: /device:GPU:0 and /device:GPU:1 ran 2 steps (0, 1) 4.6 to 4.7 ms apart" in text
