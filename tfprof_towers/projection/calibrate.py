"""Calibrating a projection with a run directory's measurements.

What a run measured on *this* machine, and what it may change in a projection:

* **host per-op overhead and achieved host FLOP rate** — only from a run whose
  accelerators were logical CPU devices (every op ran on the host's cores).  Each
  variant's median step time is fitted as ``t = F / R + N * o`` (``F`` FLOPs and
  ``N`` ops per step from its partition graphs) by least squares over the
  variants.  ``o`` replaces the profile's host ``op_overhead_us``.  ``R``,
  divided by this machine's nominal peak (cores x MHz x FLOPs/cycle read from
  ``/proc/cpuinfo``, only when the run was made on this machine), gives a measured
  host efficiency that replaces the profile's host ``efficiency``.  When compute
  is under half of every variant's step (small presets), or the run's preset is
  not the projected one (matmul efficiency depends on the matrix sizes), ``R`` is
  not used and only ``o`` is calibrated.
* **placement and bytes** — only at the run's own preset (:func:`placement_check`).

Accelerator rates are never calibrated from a run: a logical CPU device says
nothing about a GPU, and for a GPU run the local GPU's peak is unknown.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tfprof_towers.analysis.audit import PLUMBING_OPS
from tfprof_towers.projection.model import GraphWork, Rates
from tfprof_towers.rundir.paths import RunDir
from tfprof_towers.rundir.records import RunDoc, load_record, load_run, variant_names

MIN_COMPUTE_SHARE = 0.5


@dataclass(frozen=True)
class Point:
    """One variant as measured: median step time, FLOPs and executed ops per step."""

    name: str
    step_s: float
    flops: float
    ops: int


@dataclass(frozen=True)
class Fit:
    seconds_per_flop: float | None
    overhead_s: float


@dataclass(frozen=True)
class Calibration:
    host_efficiency: float | None
    host_overhead_s: float | None
    achieved_host_flops: float | None
    local_peak_flops: float | None
    notes: tuple[str, ...]
    points: tuple[Point, ...] = ()

    def apply(self, rates: Rates, host_peak_flops: float) -> Rates:
        """``rates`` with the calibrated host numbers substituted (and named in ``calibrated``)."""
        names = list(rates.calibrated)
        if self.host_efficiency is not None:
            rates = replace(rates, host_flops=host_peak_flops * self.host_efficiency)
            names.append("host_efficiency")
        if self.host_overhead_s is not None:
            rates = replace(rates, host_overhead_s=self.host_overhead_s)
            names.append("host_op_overhead")
        return replace(rates, calibrated=tuple(names))

    def to_json(self) -> dict[str, Any]:
        return {
            "host_efficiency": self.host_efficiency,
            "host_op_overhead_us": None if self.host_overhead_s is None else self.host_overhead_s * 1e6,
            "achieved_host_gflops": _giga(self.achieved_host_flops),
            "local_peak_gflops": _giga(self.local_peak_flops),
            "notes": list(self.notes),
            "measured": [{"variant": p.name, "step_s": p.step_s, "flops": p.flops, "ops": p.ops}
                         for p in self.points],
        }


def _giga(x: float | None) -> float | None:
    return None if x is None else x / 1e9


def points_from_run(run_dir: RunDir) -> list[Point]:
    run = load_run(run_dir)
    out = []
    for name in variant_names(run, run_dir):
        rec = load_record(run_dir, name)
        median = rec.median_step_s
        nodes = (rec.placement or {}).get("nodes") or []
        if not rec.ok or not median or not nodes:
            continue
        flops = float(sum(n.get("flops", 0) for n in nodes))
        ops = sum(1 for n in nodes if n.get("kernel") not in PLUMBING_OPS)
        out.append(Point(name, float(median), flops, ops))
    return out


def fit(points: Sequence[Point]) -> Fit | None:
    """Least squares ``t = a*F + b*N`` (a, b >= 0); ``a`` is dropped when compute is negligible."""
    if not points:
        return None
    sff = sum(p.flops * p.flops for p in points)
    sfn = sum(p.flops * p.ops for p in points)
    snn = sum(p.ops * p.ops for p in points)
    sft = sum(p.flops * p.step_s for p in points)
    snt = sum(p.ops * p.step_s for p in points)
    det = sff * snn - sfn * sfn
    if len(points) >= 2 and det > 1e-12 * max(sff * snn, 1e-300):
        a = (sft * snn - sfn * snt) / det
        b = (sff * snt - sfn * sft) / det
        if a > 0 and b >= 0:
            share = min(a * p.flops / p.step_s for p in points)
            if share >= MIN_COMPUTE_SHARE:
                return Fit(a, b)
    return Fit(None, snt / snn) if snn else None


def local_peak_flops(cpuinfo: str, cores: int) -> float | None:
    """Nominal fp32 peak of this machine: cores x GHz x FLOPs/cycle from the CPU flags."""
    flags = set()
    ghz = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "flags" and not flags:
            flags = set(value.split())
        elif key == "model name" and ghz is None:
            m = re.search(r"@\s*([\d.]+)\s*GHz", value)
            if m:
                ghz = float(m.group(1))
        elif key == "cpu MHz" and ghz is None:
            with contextlib.suppress(ValueError):
                ghz = float(value) / 1000
    if not flags or not ghz:
        return None
    per_cycle = 32 if {"avx2", "fma"} <= flags else 16 if "avx" in flags else 8
    return cores * ghz * 1e9 * per_cycle


def calibrate(run_dir: RunDir, same_preset: bool = True) -> Calibration:
    """Calibration from ``run_dir``; ``same_preset``: the projection is at the run's own sizes."""
    run = load_run(run_dir)
    points = points_from_run(run_dir)
    if run.topology is None or run.topology.kind != "logical-cpu":
        return Calibration(None, None, None, None, (
            "not calibrated: the run used real accelerators; the host and accelerator rates "
            "are the profile's",), tuple(points))
    result = fit(points)
    if result is None:
        return Calibration(None, None, None, None, ("not calibrated: no successful variant with a "
                                                    "measured step time and placement",), tuple(points))
    notes = [f"host per-op overhead {result.overhead_s * 1e6:.2f} us: fitted to {len(points)} measured "
             "variants (t = FLOPs/R + ops*o) on logical CPU devices"]
    if result.seconds_per_flop is None:
        notes.append("host efficiency not calibrated: compute was under "
                     f"{MIN_COMPUTE_SHARE:.0%} of a measured step (profile a larger preset)")
        return Calibration(None, result.overhead_s, None, None, tuple(notes), tuple(points))
    achieved = 1.0 / result.seconds_per_flop
    if not same_preset:
        notes.append(f"host efficiency not calibrated: achieved {achieved / 1e9:.1f} GFLOP/s at the run's "
                     "preset, whose matrix sizes differ from the projected preset's")
        return Calibration(None, result.overhead_s, achieved, None, tuple(notes), tuple(points))
    peak = _this_machine_peak(run)
    if peak is None:
        notes.append(f"host efficiency not calibrated: achieved {achieved / 1e9:.1f} GFLOP/s, but this "
                     "machine's nominal peak is unknown (run made elsewhere, or no /proc/cpuinfo)")
        return Calibration(None, result.overhead_s, achieved, None, tuple(notes), tuple(points))
    eff = min(1.0, max(0.01, achieved / peak))
    notes.append(f"host efficiency {eff:.2f}: achieved {achieved / 1e9:.1f} GFLOP/s of this machine's "
                 f"nominal {peak / 1e9:.1f} GFLOP/s, applied to the profile's host peak")
    return Calibration(eff, result.overhead_s, achieved, peak, tuple(notes), tuple(points))


def _this_machine_peak(run: RunDoc) -> float | None:
    if run.host.get("node") != platform.node():
        return None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    return local_peak_flops(text, os.cpu_count() or 1)


def placement_check(static: GraphWork, record: Mapping[str, Any]) -> dict[str, Any]:
    """Static placement vs the run's partition graphs: ops on the same device, bytes per link."""
    placement = record.get("placement") or {}
    measured = {n["name"]: n["device"] for n in placement.get("nodes") or []}
    compared = [op for op in static.ops if op.name in measured]
    agree = sum(1 for op in compared if measured[op.name] == op.device)
    static_links: dict[tuple[str, str], int] = defaultdict(int)
    for c in static.copies:
        static_links[(c.src, c.dst)] += c.bytes
    measured_links: dict[tuple[str, str], int] = defaultdict(int)
    for t in placement.get("transfers") or []:
        if t.get("kind", "send_recv") == "send_recv":  # all-reduce traffic is compared apart
            measured_links[(t["src"], t["dst"])] += int(t["bytes_per_step"])
    links = [
        {"src": s, "dst": d, "static_bytes": static_links.get((s, d), 0),
         "measured_bytes": measured_links.get((s, d), 0)}
        for s, d in sorted(set(static_links) | set(measured_links))
    ]
    static_payloads = sorted(g.bytes for g in static.collectives)
    measured_payloads = _collective_payloads(placement.get("collectives") or [])
    return {
        "ops_compared": len(compared),
        "ops_same_device": agree,
        "links": links,
        "links_agree": all(x["static_bytes"] == x["measured_bytes"] for x in links),
        "max_link_difference_bytes": max((abs(x["static_bytes"] - x["measured_bytes"]) for x in links),
                                         default=0),
        "collectives_agree": static_payloads == measured_payloads,
    }


def _collective_payloads(rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """The measured all-reduces' payloads, one per group (members on every device contribute the same)."""
    per_device: dict[str, list[int]] = {}
    for r in rows:
        per_device.setdefault(r["device"], []).append(int(r["bytes"]))
    return sorted(max(sizes) for sizes in zip(*per_device.values())) if per_device else []
