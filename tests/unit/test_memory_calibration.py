"""The memory estimate calibrated on a run's measured peaks (``analysis/memory_calibration.py``): per
device measured / estimated at the run's size, applied to the target's estimate of the device in the
same role, the verdict re-judged on it and labelled, the uncalibrated figures kept; records built here."""

from __future__ import annotations

from tfprof_towers.analysis.memory_calibration import (
    DeviceCalibration,
    calibrated_fit,
    calibrations,
    target_device,
)
from tfprof_towers.analysis.pipeline import with_calibration
from tfprof_towers.rundir.projection_doc import ProjectionSummary
from tfprof_towers.rundir.records import RunConfig, Topology
from tfprof_towers.rundir.summary import MAY_NOT_FIT_WHY, MemoryPeak, Summary, SummaryEntry
from tfprof_towers.variants.config import get_preset

HOST, CPU1, CPU2 = "/device:CPU:0", "/device:CPU:1", "/device:CPU:2"
GPU0, GPU1 = "/device:GPU:0", "/device:GPU:1"
GIB = 1 << 30
LABEL = "calibrated on the measured peak at the cpu preset"
HW = "2x-test"


def measured(peak: int, estimated: int) -> MemoryPeak:
    return MemoryPeak(peak, "measured", 0, None, None, estimated, label="measured at the cpu preset")


def test_the_factor_and_its_product() -> None:
    c = DeviceCalibration(CPU1, GPU0, measured_bytes=5_000_000, estimated_bytes=4_000_000)
    assert c.factor == 1.25
    assert c.apply(4 * GIB) == 5 * GIB
    assert c.apply(3) == 4  # 3.75 B rounded up


def test_devices_in_the_same_role() -> None:
    targets = [GPU1, HOST, GPU0]
    assert target_device(HOST, HOST, (CPU1, CPU2), targets) == HOST
    assert target_device(CPU1, HOST, (CPU1, CPU2), targets) == GPU0
    assert target_device(CPU2, HOST, (CPU1, CPU2), targets) == GPU1
    assert target_device(CPU2, HOST, (CPU1, CPU2), [GPU0]) is None  # the target has one accelerator
    assert target_device("(ops not placed)", HOST, (CPU1, CPU2), targets) is None


def test_only_measured_logical_devices_with_an_estimate_calibrate() -> None:
    rows = {CPU1: measured(5_000_000, 4_000_000), CPU2: measured(3_000_000, None),  # no estimate beside it
            HOST: MemoryPeak(9, "measured", 0, None, None, 10),  # a real allocator's (no label)
            GPU1: MemoryPeak(7, "estimated", 0, GIB, True)}
    cal = calibrations(rows, HOST, (CPU1, CPU2), [GPU0, GPU1, HOST])
    assert cal == {GPU0: DeviceCalibration(CPU1, GPU0, 5_000_000, 4_000_000)}


def test_a_verdict_that_flips_on_the_calibrated_peak() -> None:
    """GPU 0: 4.5 GiB estimated, x1.25 measured at the run's size: 5.625 GiB, over the 5.4 GiB usable of
    6 GiB (10% headroom).  GPU 1 has no calibration and keeps its estimate."""
    rows = {GPU0: {"peak_bytes": 9 * GIB // 2, "capacity_bytes": 6 * GIB, "fits": True},
            GPU1: {"peak_bytes": 2 * GIB, "capacity_bytes": 6 * GIB, "fits": True}}
    fit = {"fits": True, "verdict": "fits: peak 4.50 GiB of 6 GiB (5.40 GiB usable) on GPU:0",
           "device": GPU0, "peak_bytes": 9 * GIB // 2, "capacity_bytes": 6 * GIB, "why": ""}
    cal = {GPU0: DeviceCalibration(CPU1, GPU0, 5_000_000, 4_000_000)}
    out, verdict = calibrated_fit(rows, fit, cal, 0.1, LABEL)
    assert out[GPU0]["calibrated_peak_bytes"] == 45 * GIB // 8
    assert out[GPU0]["peak_bytes"] == 9 * GIB // 2  # the uncalibrated estimate, kept
    g0 = out[GPU0]
    # the walk's 4.5 GiB fits, the run's own order scaled does not: may not fit, never "does not fit"
    assert (g0["fits"], g0["may_not_fit"], g0["uncalibrated_fits"]) == (True, True, True)
    assert (g0["peak_low_bytes"], g0["peak_high_bytes"]) == (9 * GIB // 2, 45 * GIB // 8)
    assert (g0["calibration"], g0["calibrated_on"]) == (1.25, CPU1)
    assert out[GPU1] == rows[GPU1]
    assert verdict["fits"] is True and verdict["may_not_fit"] is True and verdict["device"] == GPU0
    assert verdict["peak_bytes"] == 45 * GIB // 8
    assert verdict["verdict"] == ("may not fit: peak 4.50 GiB to 5.62 GiB on GPU:0 of 6 GiB (5.40 GiB "
                                  f"usable): fits {MAY_NOT_FIT_WHY} ({LABEL}: x1.25 of the estimate, "
                                  "4.50 GiB uncalibrated)")
    assert verdict["calibrated"] == LABEL and verdict["uncalibrated"] == fit
    # 5.5 GiB estimated is over the 5.4 usable already: with the calibration on top it does not fit
    over = {GPU0: {**rows[GPU0], "peak_bytes": 11 * GIB // 2, "fits": False}}
    _rows, worse = calibrated_fit(over, {**fit, "fits": False}, cal, 0.1, LABEL)
    assert (worse["fits"], worse["may_not_fit"]) == (False, False)
    assert worse["verdict"].startswith("does not fit: 6.88 GiB on GPU:0 of 6 GiB (5.40 GiB usable)")
    # nothing to calibrate: unchanged
    assert calibrated_fit(rows, fit, {}, 0.1, LABEL) == (rows, fit)


def test_the_summary_verdicts_use_the_calibration() -> None:
    """A CPU run measured single on CPU:1 at 0.8 of its estimate there: the target's GPU 0 row, 6 GiB
    estimated (over 5.4 usable), is calibrated to 4.8 GiB and fits; the recommender reads that verdict."""
    projection = {"label": "projected", "hardware": HW, "memory": {"headroom": 0.1}, "variants": [
        {"name": "single",
         "memory": {GPU0: {"peak_bytes": 6 * GIB, "capacity_bytes": 6 * GIB, "fits": False}},
         "memory_fit": {"fits": False, "verdict": "does not fit", "device": GPU0, "peak_bytes": 6 * GIB,
                        "capacity_bytes": 6 * GIB, "why": "big tensors"}}]}
    memory = {CPU1: measured(8_000_000, 10_000_000),
              GPU0: MemoryPeak(6 * GIB, "estimated", 0, 6 * GIB, False)}
    summary = Summary("run", variants=(SummaryEntry("single", status="ok", memory=memory),),
                      topology=Topology("logical-cpu", HOST, (CPU1,)),
                      config=RunConfig(preset=get_preset("cpu")),
                      projection=ProjectionSummary.from_json(projection))
    out = with_calibration(summary)
    fit = out.projection.variants[0].memory_fit
    assert fit["fits"] is True and fit["peak_bytes"] == 6 * GIB * 4 // 5 + 1  # rounded up
    assert fit["calibrated"] == LABEL and fit["uncalibrated"]["fits"] is False
    row = out.entry("single").memory[GPU0]
    assert (row.peak_bytes, row.calibrated_peak_bytes, row.fits, row.calibration) == (
        6 * GIB, 6 * GIB * 4 // 5 + 1, True, LABEL)
    # the range spans the calibrated peak (its low end) and the estimate (no range given: its high end)
    assert (row.estimate_low_bytes, row.estimate_high_bytes, row.may_not_fit) == (
        6 * GIB * 4 // 5 + 1, 6 * GIB, True)
    assert Summary.from_json(out.to_json()).entry("single").memory == out.entry("single").memory
    # the report: the verdict's own peak in the chart, labelled
    from tfprof_towers.render.memory_charts import memory_view

    view = memory_view(Summary.from_json(out.to_json()))
    assert view is not None and view["rows"][0]["fits"] is True
    svg = str(view["rows"][0]["svg"])
    assert "4.80 GiB" in svg and "6 GiB (estimated)" not in svg
    # a GPU run (nothing measured on logical devices): unchanged
    gpu = Summary("run", variants=(SummaryEntry("single", status="ok", memory={GPU0: memory[GPU0]}),),
                  topology=Topology("gpu", HOST, (GPU0,)), projection=ProjectionSummary.from_json(projection))
    assert with_calibration(gpu) == gpu


def test_the_terminal_cell_says_the_peak_is_calibrated() -> None:
    from tfprof_towers.commands.console import memory_cell

    rows = {GPU0: {"peak_bytes": 4 * GIB, "capacity_bytes": 6 * GIB, "fits": True}}
    fit = {"fits": True, "verdict": "fits", "device": GPU0, "peak_bytes": 4 * GIB, "capacity_bytes": 6 * GIB}
    _rows, calibrated = calibrated_fit(rows, fit, {GPU0: DeviceCalibration(CPU1, GPU0, 5, 4)}, 0.1, LABEL)
    assert memory_cell(calibrated) == f"5 GiB GPU:0 ({LABEL}; estimate 4 GiB)"
    assert memory_cell(fit) == "4 GiB GPU:0"
