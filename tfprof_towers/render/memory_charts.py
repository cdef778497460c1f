"""Memory charts: a device's bytes in use over time (``analyze --html``, the report), and per variant
each device's peak against the target's capacity (the report's Memory section).

Inline SVG written here, like :mod:`.scaling` (no network, no script library); every name is escaped
(:func:`markupsafe.escape`) before it enters the markup.  Measured peaks are solid bars, estimated
ones outlined and hatched, and each bar says which it is in its ``<title>``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from tfprof_towers.rundir.projection_doc import MemoryFit, ProjectionMemory, ProjectionSummary
from tfprof_towers.rundir.summary import Summary
from tfprof_towers.rundir.trace_doc import MemoryDoc
from tfprof_towers.vocab.device_names import short_device
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_gib, fmt_seconds

W, H = 660, 200
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 14, 34
LINE = "#2e6fdb"
CAPACITY = "#d92d20"
ESTIMATED = "#7a5af8"


def _ticks(top: float) -> list[float]:
    return [top * k / 4 for k in range(5)]


def timeline_svg(device: str, times_s: Sequence[float], in_use: Sequence[int], capacity: int | None,
                 peak_bytes: int, peak_time_s: float) -> Markup:
    """One device's bytes in use over the trace (a step line: in use holds until the next event), its
    capacity as a dashed line where known, and the peak marked."""
    name = escape(device)
    t = list(times_s)
    b = [float(v) for v in in_use]
    ymax = max([*b, float(capacity or 0), 1.0]) * 1.05
    t0, t1 = (min(t), max(t)) if t else (0.0, 1.0)
    span = (t1 - t0) or 1.0
    x0, x1, y0 = LEFT, W - RIGHT, H - BOTTOM

    def x(v: float) -> float:
        return x0 + (x1 - x0) * (v - t0) / span

    def y(v: float) -> float:
        return TOP + (y0 - TOP) * (1 - v / ymax)

    out = [f'<svg class="memory-timeline" data-device="{name}" viewBox="0 0 {W} {H}" width="{W}" '
           f'height="{H}" role="img" xmlns="http://www.w3.org/2000/svg">',
           f"<title>{name}: bytes in use over time</title>",
           f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#667085"/>',
           f'<line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y0}" stroke="#667085"/>']
    for v in _ticks(ymax / 1.05):
        out.append(f'<text class="tick" x="{x0 - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">'
                   f'{escape(fmt_bytes(v))}</text><line x1="{x0}" y1="{y(v):.1f}" x2="{x1}" y2="{y(v):.1f}" '
                   'stroke="#eaecf0"/>')
    out.append(f'<text x="{x0}" y="{H - 8}" font-size="11">{escape(fmt_seconds(t0))}</text>'
               f'<text x="{x1}" y="{H - 8}" font-size="11" text-anchor="end">{escape(fmt_seconds(t1))}</text>'
               f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 8}" font-size="11" text-anchor="middle">'
               'time on the trace\'s clock</text>')
    if t:
        pts = [f"{x(t[0]):.1f},{y(b[0]):.1f}"]
        for i in range(1, len(t)):
            pts.append(f"{x(t[i]):.1f},{y(b[i - 1]):.1f}")
            pts.append(f"{x(t[i]):.1f},{y(b[i]):.1f}")
        out.append(f'<polyline class="in-use" points="{" ".join(pts)}" fill="none" stroke="{LINE}" '
                   'stroke-width="1.5"/>')
        out.append(f'<circle class="peak" cx="{x(peak_time_s):.1f}" cy="{y(peak_bytes):.1f}" r="4" '
                   f'fill="{LINE}"><title>peak {escape(fmt_bytes(peak_bytes))} at '
                   f'{escape(fmt_seconds(peak_time_s))}</title></circle>')
    if capacity:
        yc = y(capacity)
        out.append(f'<line class="capacity" x1="{x0}" y1="{yc:.1f}" x2="{x1}" y2="{yc:.1f}" '
                   f'stroke="{CAPACITY}" stroke-dasharray="6 4"/><text x="{x1 - 4}" y="{yc - 4:.1f}" '
                   f'text-anchor="end" font-size="11" fill="{CAPACITY}">capacity '
                   f'{escape(fmt_bytes(capacity))}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def timelines_view(memory: MemoryDoc, series: Mapping[str, tuple[Sequence[float], Sequence[int]]]
                   ) -> list[dict[str, Any]]:
    """Per allocator of ``memory`` (``analyze --json``'s ``memory``) with a series: its name, figures
    and chart."""
    rows = []
    for device, d in memory.devices.items():
        times, in_use = series.get(device, ((), ()))
        rows.append({"device": device, "d": d, "svg": timeline_svg(
            device, times, in_use, d.capacity_bytes, int(d.peak_bytes), float(d.peak_time_s))})
    return rows


def peaks_svg(variant: str, bars: Sequence[Mapping[str, Any]], capacity: int | None) -> Markup:
    """One variant's peak per device against the target's capacity (a dashed line): ``bars`` rows of
    ``device``, ``peak_bytes``, ``basis`` ("measured" solid, "estimated" hatched outline), ``fits``."""
    n = max(len(bars), 1)
    width = 120 + 90 * n
    height = 180
    x0, y0, top = 70, height - 40, 16
    ymax = max([float(b["peak_bytes"]) for b in bars] + [float(capacity or 0), 1.0]) * 1.1
    name = escape(variant)
    hatch = f"hatch-{zlib.crc32(variant.encode()):08x}"  # stable: the page is the same run to run

    def y(v: float) -> float:
        return top + (y0 - top) * (1 - v / ymax)

    out = [f'<svg class="memory-peaks" data-variant="{name}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" xmlns="http://www.w3.org/2000/svg">',
           f"<title>{name}: peak memory per device</title>",
           f'<defs><pattern id="{hatch}" width="6" height="6" '
           'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" '
           f'stroke="{ESTIMATED}" stroke-width="2"/></pattern></defs>',
           f'<line x1="{x0}" y1="{y0}" x2="{width - 10}" y2="{y0}" stroke="#667085"/>']
    for v in _ticks(ymax / 1.1):
        out.append(f'<text class="tick" x="{x0 - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">'
                   f'{escape(fmt_gib(v))}</text>')
    for i, b in enumerate(bars):
        bx = x0 + 20 + 90 * i
        peak = float(b["peak_bytes"])
        basis = str(b.get("basis") or "estimated")
        style = (f'fill="{LINE}"' if basis == "measured"
                 else f'fill="url(#{hatch})" stroke="{ESTIMATED}" stroke-width="1.5"')
        verdict = "" if b.get("fits") is None else (" — fits" if b["fits"] else " — does not fit")
        out.append(f'<rect class="peak {escape(basis)}" x="{bx}" y="{y(peak):.1f}" width="50" '
                   f'height="{y0 - y(peak):.1f}" {style}><title>{escape(b["device"])}: '
                   f'{escape(fmt_gib(peak))} ({escape(basis)}){verdict}</title></rect>'
                   f'<text x="{bx + 25}" y="{y0 + 14}" text-anchor="middle" font-size="10">'
                   f'{escape(short_device(str(b["device"])))}</text>'
                   f'<text x="{bx + 25}" y="{y(peak) - 3:.1f}" text-anchor="middle" font-size="10">'
                   f'{escape(fmt_gib(peak))}</text>')
    if capacity:
        out.append(f'<line class="capacity" x1="{x0}" y1="{y(capacity):.1f}" x2="{width - 10}" '
                   f'y2="{y(capacity):.1f}" stroke="{CAPACITY}" stroke-dasharray="6 4"><title>the target\'s '
                   f'capacity: {escape(fmt_gib(capacity))}</title></line>')
    out.append("</svg>")
    return Markup("".join(out))


def memory_view(summary: Summary,
                series: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[int]]]] | None = None
                ) -> dict[str, Any] | None:
    """The report's Memory section: per variant, each device's peak (``variants[].memory``) against the
    target's capacity, its fit verdict (the projection's), and its measured timelines (``series``:
    variant -> device -> (seconds, bytes in use)); None when no variant has a figure."""
    from tfprof_towers.rundir.summary import estimate_gap
    from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane

    projection = summary.projection or ProjectionSummary()
    fits = {r.name: r.memory_fit for r in projection.variants if r.memory_fit}
    series = series or {}
    rows = []
    for v in summary.variants:
        memory = v.memory
        if not memory:
            continue
        devices = sorted(memory, key=device_sort_key)
        shown = [d for d in devices if memory[d].label or is_accelerator_plane(d)] or devices
        caps = {memory[d].capacity_bytes for d in shown if memory[d].capacity_bytes}
        bars = [{"device": d, "peak_bytes": memory[d].calibrated_peak_bytes or memory[d].peak_bytes,
                 "basis": memory[d].basis, "fits": memory[d].fits} for d in shown]  # a verdict's own peak
        timelines = []
        for d, (t, b) in series.get(v.name, {}).items():
            if len(b):
                top = max(b)
                cap = memory[d].capacity_bytes if d in memory else None
                timelines.append({"device": d, "svg": timeline_svg(d, t, b, cap, top, t[list(b).index(top)])})
        fit = MemoryFit.of(fits.get(v.name))
        rows.append({
            "variant": v.name,
            "devices": [{"device": d, "row": memory[d], "apart": memory[d].estimate_vs_measured}
                        for d in devices],
            "svg": peaks_svg(v.name, bars, max(caps) if len(caps) == 1 else None),
            "verdict": fit.verdict,
            "gap": gap.text() if (gap := estimate_gap(memory)) is not None else "",
            "fits": fit.fits,
            "may_not_fit": fit.may_not_fit,  # only the low end of the range fits
            "why": fit.why,
            "timelines": timelines,
        })
    keras = summary.config.keras_model if summary.config is not None else None
    if not rows and not keras:
        return None
    mem = ProjectionMemory.of(projection.memory)
    return {
        "rows": rows,
        "hardware": projection.hardware,
        "basis": mem.basis,
        "headroom_why": mem.headroom_why,
        "note": mem.note,
        "keras": (f"Not estimated for --keras-model ({keras}): the model's projection has no memory "
                  "estimate (see its section); only the memory this run measured (its allocators' events) "
                  "is shown.")
        if keras and not rows else None,
    }
