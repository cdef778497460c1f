"""TPU-shaped traces built in code (testing/synth.py: ``tpu_trace``): every chip's compute from its ``XLA
Ops`` line counted once (nested ops and the ``Async XLA Ops``/``XLA Modules`` lines never added), steps from
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
        # outermost ops only: fusion.1 200 + while.2 400 (compute), all-reduce.5 100 (collective), per step
        assert {k: (t["count"], us(t["seconds"])) for k, t in d["total"].items() if t["count"]} == {
            "compute": (6, 1800), "collective": (3, 300)}
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
    precision = next(r for r in ev.rules if r["rule"] == "precision")
    assert not precision["evaluated"] and "bfloat16 natively" in precision["why_not"]


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
        "compute": (2, 600)}
    assert us(d["wall"]["compute"]) == 600 and us(d["wall"]["idle"]) == 1200
