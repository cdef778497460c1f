"""A per-device calibration of the memory estimate on what the run measured, applied to the verdicts at
the target's size.

Where a run measured a device's peak (logical devices on this CPU, the host's BFC allocator) and the
projection estimated the same graph at the run's own size on the same device, ``measured / estimated``
is that device's calibration.  The target's device in the same role (the host for the host, the run's
k-th accelerator for the target's k-th) gets its estimate multiplied by it, and its verdict judged on
the product against the same capacity less headroom.  The uncalibrated estimate stays beside it.
No TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.summary import MemoryPeak, fit_verdict, judged, verdict_device
from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane, short_device
from tfprof_towers.vocab.fmt import fmt_gib


def calibration_label(preset: str) -> str:
    """How a calibrated figure is labelled, everywhere it is shown."""
    return f"calibrated on the measured peak at the {preset} preset"


@dataclass(frozen=True)
class DeviceCalibration:
    """One device's calibration: the run's device, its measured and estimated peaks at the run's size,
    and the target's device it applies to."""

    run_device: str
    target_device: str
    measured_bytes: int
    estimated_bytes: int

    @property
    def factor(self) -> float:
        """measured / estimated at the run's size."""
        return self.measured_bytes / self.estimated_bytes

    def apply(self, nbytes: int) -> int:
        """The calibrated figure of an estimate at the target's size (rounded up to a byte)."""
        return math.ceil(nbytes * self.measured_bytes / self.estimated_bytes)


def target_device(run_device: str, run_host: str | None, run_accelerators: Sequence[str],
                  targets: Sequence[str]) -> str | None:
    """The target's device in ``run_device``'s role: the host for the run's host, the k-th accelerator
    (by device order) for the run's k-th; None when the target has none in that role."""
    accelerators = sorted((d for d in targets if is_accelerator_plane(d)), key=device_sort_key)
    hosts = sorted((d for d in targets if not is_accelerator_plane(d)), key=device_sort_key)
    if run_device == run_host:
        return hosts[0] if hosts else None
    if run_device in run_accelerators:
        k = list(run_accelerators).index(run_device)
        return accelerators[k] if k < len(accelerators) else None
    return None


def calibrations(measured: Mapping[str, MemoryPeak], run_host: str | None, run_accelerators: Sequence[str],
                 targets: Sequence[str]) -> dict[str, DeviceCalibration]:
    """Per target device, its calibration: from each measured logical device (``label`` set) with an
    estimate at the run's size beside it."""
    out = {}
    for dev, m in measured.items():
        if m.basis != "measured" or m.label is None or not m.estimated_peak_bytes or not m.peak_bytes:
            continue
        target = target_device(dev, run_host, run_accelerators, targets)
        if target is not None:
            out[target] = DeviceCalibration(dev, target, int(m.peak_bytes), int(m.estimated_peak_bytes))
    return out


def calibrated_fit(rows: Mapping[str, Mapping[str, Any]], fit: Mapping[str, Any],
                   cal: Mapping[str, DeviceCalibration], headroom: float, label: str
                   ) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """A projected variant's rows (``memory``: per target device ``peak_bytes``, ``capacity_bytes``,
    ``fits``) and verdict (``memory_fit``) with the calibration applied: each calibrated row gains
    ``calibrated_peak_bytes``, ``calibration`` (the factor) and ``uncalibrated_fits``, its ``fits``
    judged on the calibrated peak; the verdict is re-derived from them, labelled, the uncalibrated one
    kept under ``uncalibrated``.  Unchanged where no device of the variant has a calibration."""
    if not any(d in cal for d in rows):
        return {d: dict(r) for d, r in rows.items()}, dict(fit)
    out: dict[str, dict[str, Any]] = {}
    for dev, r in rows.items():
        row = dict(r)
        c = cal.get(dev)
        cap = r.get("capacity_bytes")
        if c is not None:
            peak = c.apply(int(r["peak_bytes"]))
            # the range spans the executor's orders and the run's own order, scaled: "does not fit" only
            # when both the walk's least and the calibrated peak are over
            low = min(peak, int(r.get("peak_low_bytes", r["peak_bytes"])))
            high = max(peak, int(r.get("peak_high_bytes", r["peak_bytes"])))
            fits, may_not = judged(low, high, int(cap) if cap else None, headroom)
            row.update(calibrated_peak_bytes=peak, calibration=round(c.factor, 4), calibrated_on=c.run_device,
                       uncalibrated_fits=r.get("fits"), fits=fits, may_not_fit=may_not, peak_low_bytes=low,
                       peak_high_bytes=high)
        out[dev] = row
    return out, {**_verdict(out, fit, cal, headroom, label), "uncalibrated": dict(fit)}


def _verdict(rows: Mapping[str, Mapping[str, Any]], fit: Mapping[str, Any],
             cal: Mapping[str, DeviceCalibration], headroom: float, label: str) -> dict[str, Any]:
    """The verdict over calibrated rows, in :func:`.projection.memory_fit.fit_of`'s words plus the label."""
    checked = {d: r for d, r in rows.items() if r.get("capacity_bytes")}
    if not checked:
        return {**fit, "calibrated": label}

    def peak(r: Mapping[str, Any]) -> int:
        return int(r.get("calibrated_peak_bytes", r["peak_bytes"]))

    def high(r: Mapping[str, Any]) -> int:
        return int(r.get("peak_high_bytes", peak(r)))

    dev = verdict_device(checked, peak, high)
    r = checked[dev]
    cap = int(r["capacity_bytes"])
    over, maybe = r.get("fits") is False, bool(r.get("may_not_fit"))
    note = ""
    if dev in cal:
        note = (f" ({label}: x{cal[dev].factor:.2f} of the estimate, "
                f"{fmt_gib(int(r['peak_bytes']))} uncalibrated)")
    verdict = fit_verdict(r, peak(r), high(r), short_device(dev), headroom) + note
    why = fit.get("why", "") if (over or maybe) and fit.get("device") == dev else ""
    return {"fits": not over, "verdict": verdict, "device": dev, "peak_bytes": peak(r), "capacity_bytes": cap,
            "why": why, "may_not_fit": bool(maybe) and not over, "peak_high_bytes": high(r),
            "calibrated": label}
