"""TPU-shaped traces built in code (testing/synth.py: ``tpu_trace``): every chip's compute from its ``XLA
Ops`` line counted once (each op by its self time, the innermost op owning each instant; the ``Async XLA
Ops``/``XLA Modules`` lines never added), ops that started before the window clipped to it, steps from
the ``Steps`` line or else the main module's runs, planes of kinds not read said so and never called idle;
against XProf's overview page where it gives a figure.

What XProf gives for such a trace (read from ``xprof/convert/xplane_to_step_events.cc``: on a TPU plane the
step markers are the ``Steps`` line's events with ``group_id``, the ops the ``XLA Ops`` line's events, nested
ops counted by self time; the ``Async XLA Ops`` line is skipped): the step time per step, and the device duty
cycle, busy op time over the time from the first program run's start to the last one's end on each chip, with
the rest as ``idle_time_high_confidence_ps`` (summed over the chips).  Its per-step TensorCore compute
(``tcComputeTimeMs``) stays 0 on a trace built in code (it needs the chips' core details, which a real TPU
runtime writes), so busy time is checked against the duty cycle and the idle time instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from trace_kit import TraceBuilder

from tfprof_towers.advice.trace_rules import evaluate_trace
from tfprof_towers.testing.synth import tpu_trace
from tfprof_towers.trace.analysis import analyze_trace, analyze_xplane
from tfprof_towers.trace.load import trace_from_bytes

US = 1e-6
CHIPS = [f"/device:TPU:{n}" for n in range(4)]


def doc_of(b: TraceBuilder) -> dict:
    return analyze_trace(trace_from_bytes(b.to_bytes())).to_doc()


def us(x: float) -> float:
    return round(x / US, 6)


def test_every_chip_counted_once_from_its_xla_ops_line() -> None:
    doc = doc_of(tpu_trace(chips=4, steps=3))
    assert doc["window"] == "steps-line" and doc["steps"] == 3 and doc["idle_accelerators"] == []
    assert [us(s) for s in doc["step_time_s"]] == [1000, 1000, 1000]
    assert doc["producer"]["framework"] == "jax" and doc["producer"]["vendor"] == "google-tpu"
    for chip in CHIPS:
        d = doc["devices"][chip]
        # every op once, by its self time: fusion.1 200 + while.2 30 (400 less its body's 370) + convolution.3
        # 200 + fusion.4 170 (compute), all-reduce.5 100 (collective), per step
        assert {k: (t["count"], us(t["seconds"])) for k, t in d["total"].items() if t["count"]} == {
            "compute": (12, 1800), "collective": (3, 300)}
        assert us(d["wall"]["compute"]) == 1800 and us(d["wall"]["collective"]) == 300
        assert us(d["wall"]["idle"]) == 900 and us(d["window_s"]) == 3000
        busy = sum(v for k, v in d["wall"].items() if k != "idle")
        assert us(busy) == 2100  # never 3,210 (the nested ops' sum) nor 5,910 (with modules and async ops)


def test_without_a_steps_line_the_main_modules_runs_are_the_steps() -> None:
    doc = doc_of(tpu_trace(chips=2, steps=3, steps_line=False))
    assert doc["window"] == "modules" and doc["step_numbers"] == [0, 1, 2]
    assert [us(s) for s in doc["step_time_s"]] == [900, 900, 900]  # each run of jit_train_step(1)
    for chip in CHIPS[:2]:
        d = doc["devices"][chip]
        assert us(d["window_s"]) == 2700 and us(d["wall"]["idle"]) == 600
        assert us(d["wall"]["compute"] + d["wall"]["collective"]) == 2100


def test_planes_not_read_are_said_and_never_idle_and_an_idle_chip_is_named() -> None:
    b = tpu_trace(chips=4, steps=2, idle_chips=(3,), sparse_core=True)
    odd = b.plane("/device:TPU:5")  # a chip's plane without an XLA Ops line
    odd.line("XLA Modules", line_id=1).event("jit_f(2)", 0, 10_000_000)
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    doc = a.to_doc()
    assert doc["unread_planes"] == {
        "/device:TPU:0 SparseCore 0": "a plane of a kind this tool does not read yet (2 events)",
        "/device:TPU:5": "a TPU plane with no event on an `XLA Ops` line (1 events on other lines)"}
    assert doc["idle_accelerators"] == ["/device:TPU:3"]
    assert sum("left out of the findings (it is not idle)" in n for n in doc["notes"]) == 2
    ev = evaluate_trace(a)
    named = {d for f in ev.findings for d in f.devices}
    assert "/device:TPU:5" not in named and "/device:TPU:0 SparseCore 0" not in named
    idle = next(f for f in ev.findings if f.rule == "idle_accelerators")
    assert idle.devices == ("/device:TPU:3",) and "1 of the 4 accelerators" in idle.message
    assert "TPU_VISIBLE_CHIPS" in idle.suggestion and "CUDA" not in idle.suggestion
    assert "jax.devices()" in idle.suggestion
    precision = next(r for r in ev.rules if r.rule == "precision")
    assert not precision.evaluated and "bfloat16 natively" in precision.why_not


# ------------------------------------------------------------------ against XProf


def overview(xprof, path: Path) -> list[dict]:
    data, _ = xprof.xspace_to_tool_data([str(path)], "overview_page", {})
    return json.loads(data)


def test_tpu_step_time_and_duty_cycle_agree_with_xprof(xprof, tmp_path_factory) -> None:
    path = tpu_trace(chips=4, steps=3).write(tmp_path_factory.mktemp("tpu_steps") / "host.xplane.pb")
    page = overview(xprof, path)
    ids = [c["id"] for c in page[1]["cols"]]
    rows = {int(r["c"][0]["v"]): dict(zip(ids, (c.get("v") for c in r["c"]))) for r in page[1]["rows"]}
    a = analyze_xplane(path)
    doc = a.to_doc()
    assert sorted(rows) == doc["step_numbers"] == [0, 1, 2]
    for step, ours in zip(doc["step_numbers"], doc["step_time_s"]):
        theirs = float(rows[step]["tcIdleTimeMs"]) + float(rows[step]["tcComputeTimeMs"])  # their step
        assert ours * 1e3 == pytest.approx(theirs, rel=0.02)
    average = float(page[1]["p"]["steptime_ms_average"])
    assert average == pytest.approx(np.mean(doc["step_time_s"]) * 1e3, rel=0.02)
    # busy time: XProf's duty cycle is the chips' op time over the span of their program runs
    busy = sum(v for chip in CHIPS for k, v in doc["devices"][chip]["wall"].items() if k != "idle")
    span = len(CHIPS) * 2_900 * US  # per chip: the first run's start (10 us) to the last one's end (2,910)
    duty = float(page[0]["p"]["device_duty_cycle_percent"].rstrip("%")) / 100
    assert busy / span == pytest.approx(duty, abs=0.001)  # XProf prints 72.4%: 2,100 of 2,900 us
    idle_ps = float(page[0]["p"]["idle_time_high_confidence_ps"])
    assert idle_ps == pytest.approx((span - busy) * 1e12, rel=0.02)


def test_without_a_steps_line_xprof_gives_no_step(xprof, tmp_path_factory) -> None:
    """XProf's TPU steps come from a ``Steps`` line only: without it, its overview has no step, and ours are
    the program's runs (said in ``window``)."""
    folder = tmp_path_factory.mktemp("tpu_modules")  # XProf caches per folder
    path = tpu_trace(chips=2, steps=3, steps_line=False).write(folder / "host.xplane.pb")
    page = overview(xprof, path)
    assert page[1]["rows"] == [] and float(page[1]["p"]["steptime_ms_average"]) == 0
    assert analyze_xplane(path).to_doc()["window"] == "modules"


def test_a_chip_counts_only_its_xla_ops_line_whatever_the_ids_and_names_say() -> None:
    """Lines named only by ``display_name``, ids far from the derived ones, and a counters line: the chip's
    time is still its ``XLA Ops`` line alone, each op once."""
    b = TraceBuilder()
    chip = b.plane("/device:TPU:0")
    ops = chip.line("", line_id=7)
    ops.proto.display_name = "XLA Ops"
    modules = chip.line("", line_id=8)
    modules.proto.display_name = "XLA Modules"
    counters = chip.line("_counters_", line_id=9)
    for k in range(2):
        t0 = k * 1_000_000_000
        modules.event("jit_step(3)", t0, 900_000_000)
        ops.event("fusion.1", t0 + 100_000_000, 300_000_000)
        ops.event("fusion.2", t0 + 150_000_000, 100_000_000)  # inside fusion.1
        counters.event("hbm_bytes", t0, 1_000_000_000)
    doc = doc_of(b)
    assert doc["window"] == "modules" and doc["steps"] == 2
    d = doc["devices"]["/device:TPU:0"]
    assert {k: (t["count"], us(t["seconds"])) for k, t in d["total"].items() if t["count"]} == {
        "compute": (4, 600)}  # each op once, by its self time: fusion.1 200 + fusion.2 100, per step
    assert us(d["wall"]["compute"]) == 600 and us(d["wall"]["idle"]) == 1200


# ------------------------------------------------------------------ an on-device loop, events from the past


def with_outer_op(b: TraceBuilder, chips: list[int], name: str, start_ps: int, dur_ps: int) -> TraceBuilder:
    """``b`` with one more op on each of ``chips``' ``XLA Ops`` lines (ops of a line may nest)."""
    for plane in b._planes:
        if any(plane.proto.name == f"/device:TPU:{n}" for n in chips):
            line = next(ln for ln in plane.proto.lines if ln.name == "XLA Ops")
            line.events.add(metadata_id=plane.event_metadata_id(name),
                            offset_ps=start_ps - line.timestamp_ns * 1000, duration_ps=dur_ps)
    return b


@pytest.mark.parametrize("start_us", [0, -5])
def test_an_on_device_training_loop_is_busy_and_keeps_its_collectives(start_us: int) -> None:
    """An outer ``while`` at or before the step window holding every step's ops: both chips busy the whole
    window, their all-reduces still collective time, no chip idle and no idle finding."""
    b = with_outer_op(tpu_trace(chips=2, steps=3), [0, 1], "while.99", start_us * 1_000_000, 3_100_000_000)
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    doc = a.to_doc()
    assert doc["window"] == "steps-line" and doc["idle_accelerators"] == []
    for n in (0, 1):
        d = doc["devices"][f"/device:TPU:{n}"]
        # the loop (until 3,095 us or later) covers the chip's window: its self time is what the steps'
        # ops leave, compute; the all-reduces inside it stay collective
        assert us(d["wall"]["collective"]) == 300 and us(d["wall"]["compute"]) == 2700
        assert us(d["wall"]["idle"]) == 0 and us(d["window_s"]) == 3000
        assert d["total"]["collective"]["count"] == 3 and us(d["total"]["collective"]["seconds"]) == 300
    assert "idle_accelerators" not in {f.rule for f in evaluate_trace(a).findings}


def test_an_event_from_far_in_the_past_is_clipped_to_the_window() -> None:
    """One ``XLA Ops`` event at -1e12 ps lasting 2**62 ps on chip 0: chip 0 is busy for its window only (not
    for 2**62 ps), its collectives still counted, and it is not idle."""
    b = with_outer_op(tpu_trace(chips=2, steps=3), [0], "fusion.far", -10**12, 2**62)
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    doc = a.to_doc()
    assert doc["idle_accelerators"] == []
    chip0, chip1 = doc["devices"]["/device:TPU:0"], doc["devices"]["/device:TPU:1"]
    assert us(chip0["window_s"]) == 3000 and us(chip0["wall"]["idle"]) == 0
    assert us(chip0["wall"]["compute"]) == 2700 and us(chip0["wall"]["collective"]) == 300
    assert us(chip1["wall"]["compute"]) == 1800 and us(chip1["wall"]["collective"]) == 300
    assert "idle_accelerators" not in {f.rule for f in evaluate_trace(a).findings}


def test_a_gpu_kernel_that_started_before_the_window_is_not_idle() -> None:
    """The same on a GPU: a kernel running from before the first window through both is that GPU's work."""
    from trace_kit import US as TUS
    from trace_kit import two_gpu_trace

    b = two_gpu_trace()
    b.plane("/device:GPU:2").line("Stream #1(Compute)").event("volta_sgemm", -100 * TUS, 1100 * TUS)
    a = analyze_trace(trace_from_bytes(b.to_bytes()))
    doc = a.to_doc()
    assert "/device:GPU:2" not in doc["idle_accelerators"]
    assert us(doc["devices"]["/device:GPU:2"]["wall"]["compute"]) == 1000


def test_nested_ops_self_pieces_cover_each_instant_once() -> None:
    from tfprof_towers.trace.nesting import self_pieces, self_times

    # an outer loop [0, 1000) holding fusion [20, 220), while [250, 650) (holding conv [260, 460) and
    # fusion [470, 640)) and an all-reduce [700, 800); a twin of the all-reduce nests in it
    start = np.array([20, 250, 260, 470, 700, 0, 700])
    end = np.array([220, 650, 460, 640, 800, 1000, 800])
    p = self_pieces(start, end)
    assert self_times(7, p).tolist() == [200, 30, 200, 170, 0, 300, 100]
    order = np.argsort(p.start)
    s, e = p.start[order], p.end[order]
    assert s[0] == 0 and e[-1] == 1000 and (s[1:] == e[:-1]).all()  # disjoint, no gap: each instant once
