"""Traces without steps (no step markers, no ``Steps`` line, no TPU module runs): the accelerators' busy
regions are the steps (trace/steps.py: ``busy_regions``), and the host's time outside them is said to be
outside any accelerator work -- not a launch or input problem."""

from __future__ import annotations

from trace_kit import US, TraceBuilder

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.trace.analysis import analyze_trace
from tfprof_towers.trace.load import trace_from_bytes

MS = 1000 * US  # picoseconds (trace_kit's US is a microsecond in ps)


def two_bursts(pause_us: int = 9_410) -> TraceBuilder:
    """A host that runs Python at 0 and at 50 ms, and a GPU with two bursts of ten 50 us kernels 10 us
    apart, at 10 ms and ``pause_us`` after the first ends (10.59 ms): each burst 590 us long."""
    b = TraceBuilder()
    py = b.plane("/host:CPU").line("python3")
    py.event("PythonRefManager::CollectGarbage", 0, 1 * MS)
    py.event("PythonRefManager::CollectGarbage", 50 * MS, 1 * MS)
    s = b.plane("/device:GPU:0").line("Stream #1(Kernel)")
    second = 10 * MS + 590 * US + pause_us * US
    for t0 in (10 * MS, second):
        for i in range(10):
            s.event("gemm.kd", t0 + i * 60 * US, 50 * US)
    return b


def test_busy_regions_are_the_steps_and_the_rest_is_outside() -> None:
    a = analyze_trace(trace_from_bytes(two_bursts().to_bytes()))
    doc = a.to_doc()
    assert doc["window"] == "busy-regions" and doc["step_numbers"] == [0, 1]
    assert a.trace.steps.values.tolist() == [[0, 10 * MS, 10 * MS + 590 * US],
                                             [1, 20 * MS, 20 * MS + 590 * US]]
    assert [round(s * 1e6, 6) for s in doc["step_time_s"]] == [590, 590]
    gpu = doc["devices"]["/device:GPU:0"]
    assert round(gpu["wall"]["compute"] * 1e6, 6) == 1000 and round(gpu["wall"]["idle"] * 1e6, 6) == 180
    # of the trace's 51 ms, 1.18 ms lie in the two regions: 49.82 ms outside any accelerator work
    note = next(n for n in doc["notes"] if "busy region" in n)
    assert "2 busy regions" in note
    assert "0.04982 s of the trace's 0.051 s is outside any accelerator work" in note
    ev = evaluate_trace(a)
    assert "host_bound" not in {f.rule for f in ev.findings}  # the 49.8 ms are not called host wait


def test_a_short_pause_does_not_split_a_region() -> None:
    """A pause under 1 ms (here 900 us, 90x the median 10 us pause) keeps one region."""
    t = trace_from_bytes(two_bursts(pause_us=900).to_bytes())
    assert t.window == "busy-regions" and len(t.steps) == 1
    assert t.steps.values.tolist() == [[0, 10 * MS, 10 * MS + (590 + 900 + 590) * US]]


def runs_of(program: str, starts_us: list[int], burst_at_us: list[int],
            extra_us: int | None = None) -> TraceBuilder:
    """A JAX-like host that runs ``program`` at ``starts_us`` (each run 20 us on the host), a GPU burst of
    ten 50 us kernels 10 us apart at each of ``burst_at_us``, and with ``extra_us`` a lone 400 us kernel
    there (work no run covers)."""
    b = TraceBuilder()
    py = b.plane("/host:CPU").line("python3")
    py.event("PythonRefManager::CollectGarbage", 0, 1 * MS)
    for t in starts_us:
        py.event(program, t * US, 20 * US)
        py.event("PjitFunction(step)", t * US - 5 * US, 30 * US)
    s = b.plane("/device:GPU:0").line("Stream #1(Kernel)")
    for t0 in burst_at_us:
        for i in range(10):
            s.event("gemm.kd", (t0 + i * 60) * US, 50 * US)
    if extra_us is not None:
        s.event("copy.kd", extra_us * US, 400 * US)
    return b


def test_the_hosts_program_runs_are_the_steps() -> None:
    """Three runs of ``jit_step`` at 2, 2.7 and 3.4 ms, each followed 30 us later by its GPU burst (590 us):
    one busy region (pauses of 110 us), three steps from run to run, the last to the region's end."""
    b = runs_of("jit_step:XLA GPU module", [2000, 2700, 3400], [2030, 2730, 3430])
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    doc = a.to_doc()
    assert doc["window"] == "program-runs" and doc["step_numbers"] == [0, 1, 2]
    assert a.trace.steps.values.tolist() == [[0, 2000 * US, 2700 * US], [1, 2700 * US, 3400 * US],
                                             [2, 3400 * US, 4020 * US]]
    gpu = doc["devices"]["/device:GPU:0"]
    assert round(gpu["wall"]["compute"] * 1e6, 6) == 1500 and round(gpu["wall"]["idle"] * 1e6, 6) == 520
    note = next(n for n in doc["notes"] if "runs of" in n)
    assert "the 3 runs of `jit_step:XLA GPU module`" in note


def test_runs_that_miss_the_work_leave_the_busy_regions() -> None:
    """A 400 us kernel at 1.2 ms, before the first run: the runs hold 1,500 of 1,900 us of GPU time (79%,
    under 95%), so the busy regions stay the steps; and a program that ran once is no step either."""
    b = runs_of("jit_step:XLA GPU module", [2000, 2700, 3400], [2030, 2730, 3430], extra_us=1200)
    assert trace_from_bytes(b.to_bytes()).window == "busy-regions"
    once = runs_of("jit_step:XLA GPU module", [2000], [2030])
    assert trace_from_bytes(once.to_bytes()).window == "busy-regions"


def test_a_run_window_stops_at_the_end_of_its_busy_region() -> None:
    """Runs at 2 ms and 2.7 ms, then one at 20 ms after a long pause: the second run's window ends with its
    region (3.32 ms), not at the third run; the third ends with its own region."""
    b = runs_of("jit_step:XLA GPU module", [2000, 2700, 20000], [2030, 2730, 20030])
    t = trace_from_bytes(b.to_bytes())
    assert t.window == "program-runs"
    assert t.steps.values.tolist() == [[0, 2000 * US, 2700 * US], [1, 2700 * US, 3320 * US],
                                       [2, 20000 * US, 20620 * US]]
