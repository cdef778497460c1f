"""The report's Scaling section: ``summary.json`` -> ``scaling`` as charts and tables.

One chart per family: throughput against the accelerator count, in units of the family's
1-accelerator baseline (so the ideal line is y = N, and the measured CPU stand-in and the
projected GPUs share one axis), one series per variant: measured solid, projected dashed.
Then the efficiency table and, per measured variant, a stacked bar per count of what each
step's time is made of.  The charts are inline SVG written here (no network, no script
library); every name is escaped (:func:`markupsafe.escape`) before it enters the markup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

from tfprof_towers.rundir.scaling import (
    ProjectedPoint,
    ProjectedVariant,
    ScalingPoint,
    ScalingSection,
    ScalingVariant,
)
from tfprof_towers.vocab import categories
from tfprof_towers.vocab.fmt import fmt_percent, fmt_ratio, fmt_seconds

W, H = 660, 320
LEFT, RIGHT, TOP, BOTTOM = 56, 230, 18, 44
PALETTE = ("#2e6fdb", "#e04f16", "#0e9384", "#7a5af8", "#c4a000", "#dd2590", "#66c61c", "#475467")
#: The stacked bars' groups (analysis.scaling.GROUPS) and the category colour each borrows.
GROUP_STYLE: dict[str, tuple[str, str]] = {
    "compute": ("compute", categories.BY_KEY["compute"].colour),
    "collectives": ("collective", categories.BY_KEY["collective"].colour),
    "copies": ("copies", categories.BY_KEY["h2d"].colour),
    "send_recv": ("send/recv", categories.BY_KEY["send_recv"].colour),
    "host": ("host (input, framework)", categories.BY_KEY["framework"].colour),
    "idle": ("idle", "#c9ced6"),
}


Point = ScalingPoint | ProjectedPoint


def _relative(p: Point, first: Point | None) -> float | None:
    """A point's throughput in units of the 1-accelerator baseline; without a baseline, in units
    of its own smallest count's throughput per accelerator (perfect up to there, as stated)."""
    if p.speedup_vs_baseline is not None:
        return float(p.speedup_vs_baseline)
    if p.speedup is not None and first is not None:
        return float(p.speedup) * int(first.count)
    return None


def _series(variant: ScalingVariant | ProjectedVariant, kind: str) -> dict[str, Any]:
    ok = [p for p in variant.points if p.examples_per_s]
    first = ok[0] if ok else None
    pts = [(int(p.count), y) for p in ok if (y := _relative(p, first)) is not None]
    return {"variant": variant.variant, "family": variant.family, "kind": kind, "points": pts,
            "relative_to": "baseline" if first is not None and first.speedup_vs_baseline is not None
            else "own"}


def _x(count: float, top: int) -> float:
    span = math.log2(max(top, 2))
    return LEFT + (W - LEFT - RIGHT) * (math.log2(count) / span)


def _y(value: float, ymax: float) -> float:
    return TOP + (H - TOP - BOTTOM) * (1 - value / ymax)


def chart_svg(family: str, series: Sequence[Mapping[str, Any]]) -> Markup:
    """One family's chart: each series a polyline (projected dashed), the ideal line, axes, legend."""
    counts = sorted({n for s in series for n, _ in s["points"]} | {1})
    top = max(counts)
    ymax = max([float(top)] + [y for s in series for _, y in s["points"]]) * 1.08
    out = [f'<svg class="scaling-chart" data-family="{escape(family)}" viewBox="0 0 {W} {H}" width="{W}" '
           f'height="{H}" role="img" xmlns="http://www.w3.org/2000/svg">',
           f'<title>{escape(family)}: throughput against accelerators</title>']
    x0, x1, y0 = LEFT, W - RIGHT, H - BOTTOM
    out.append(f'<line class="axis" x1="{x0}" y1="{y0}" x2="{x1}" y2="{y0}" stroke="#667085"/>')
    out.append(f'<line class="axis" x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y0}" stroke="#667085"/>')
    for n in counts:
        x = _x(n, top)
        out.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 4}" stroke="#667085"/>'
                   f'<text class="tick" x="{x:.1f}" y="{y0 + 16}" text-anchor="middle" '
                   f'font-size="11">{n}</text>')
    for k in range(5):
        v = ymax / 1.08 * k / 4
        y = _y(v, ymax)
        out.append(f'<text class="tick" x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">'
                   f'{v:.3g}</text><line x1="{x0}" y1="{y:.1f}" x2="{x1}" y2="{y:.1f}" stroke="#eaecf0"/>')
    out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{H - 8}" text-anchor="middle" font-size="12">'
               'accelerators</text>')
    out.append(f'<text x="14" y="{(TOP + y0) / 2:.1f}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 14 {(TOP + y0) / 2:.1f})">throughput, × 1 accelerator</text>')
    ideal = " ".join(f"{_x(n, top):.1f},{_y(n, ymax):.1f}" for n in counts)
    out.append(f'<polyline class="ideal" points="{ideal}" fill="none" stroke="#98a2b3" stroke-width="1.5" '
               'stroke-dasharray="2 3"/>')
    legend = [("ideal (N×)", "#98a2b3", "2 3")]
    colours: dict[str, str] = {}
    for s in series:
        colour = colours.setdefault(s["variant"], PALETTE[len(colours) % len(PALETTE)])
        dash = "6 4" if s["kind"] == "projected" else ""
        pts = " ".join(f"{_x(n, top):.1f},{_y(y, ymax):.1f}" for n, y in s["points"])
        name = escape(s["variant"])
        if len(s["points"]) > 1:  # a one-point series is its dot
            out.append(f'<polyline class="series {s["kind"]}" data-variant="{name}" points="{pts}" '
                       f'fill="none" stroke="{colour}" stroke-width="2"'
                       + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        for n, y in s["points"]:
            out.append(f'<circle class="dot {s["kind"]}" data-variant="{name}" cx="{_x(n, top):.1f}" '
                       f'cy="{_y(y, ymax):.1f}" r="3" fill="{colour}"><title>{name} ({s["kind"]}) at {n}: '
                       f'{y:.2f}×</title></circle>')
        legend.append((f"{s['variant']} ({s['kind']})", colour, dash))
    for i, (text, colour, dash) in enumerate(legend):
        y = TOP + 8 + 16 * i
        out.append(f'<line x1="{x1 + 10}" y1="{y}" x2="{x1 + 30}" y2="{y}" stroke="{colour}" stroke-width="2"'
                   + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
                   f'<text class="legend" x="{x1 + 34}" y="{y + 4}" font-size="11">{escape(text)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


def bars_svg(variant: str, points: Sequence[ScalingPoint]) -> Markup | None:
    """A stacked bar per count of what the variant's step is made of (its ``wall_per_step``)."""
    rows = [(p.count, p.wall_per_step) for p in points if p.wall_per_step]
    if not rows:
        return None
    longest = max(sum(float(v) for v in wall.values()) for _, wall in rows) or 1.0
    bar_w, row_h = 380, 22
    height = 16 + row_h * len(rows) + 22
    out = [f'<svg class="scaling-bars" data-variant="{escape(variant)}" viewBox="0 0 {bar_w + 190} {height}" '
           f'width="{bar_w + 190}" height="{height}" role="img" xmlns="http://www.w3.org/2000/svg">']
    for i, (count, wall) in enumerate(rows):
        y = 8 + row_h * i
        x = 70.0
        out.append(f'<text x="64" y="{y + 14}" text-anchor="end" font-size="11">'
                   f'{int(count)} accel.</text>')
        total = 0.0
        for group, (label, colour) in GROUP_STYLE.items():
            s = float(wall.get(group, 0.0))
            total += s
            w = bar_w * s / longest
            if w <= 0:
                continue
            out.append(f'<rect class="part" data-group="{group}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                       f'height="{row_h - 6}" fill="{colour}"><title>{escape(variant)} at {int(count)}: '
                       f'{label} {escape(fmt_seconds(s))} per step</title></rect>')
            x += w
        out.append(f'<text x="{x + 6:.1f}" y="{y + 14}" font-size="11">{escape(fmt_seconds(total))}</text>')
    lx = 70.0
    for label, colour in GROUP_STYLE.values():
        out.append(f'<rect x="{lx:.1f}" y="{height - 14}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{lx + 13:.1f}" y="{height - 5}" font-size="10">{escape(label)}</text>')
        lx += 13 + 6.2 * len(label) + 10
    out.append("</svg>")
    return Markup("".join(out))


def _row(variant: str, p: Point, kind: str) -> dict[str, Any]:
    if isinstance(p, ScalingPoint):
        median, step, status, note = p.step_time_s.median, p.step_time_s, p.status, p.reason
    else:
        median, step, note = p.step_time_s, None, p.error or p.bottleneck
        status = "ok" if p.examples_per_s else "failed"
    spread = (f"{fmt_seconds(step.p10)} – {fmt_seconds(step.p90)}"
              if step is not None and step.p10 is not None else "")
    eff = p.headline_efficiency
    return {"variant": variant, "kind": kind, "count": p.count, "status": status,
            "step": fmt_seconds(median) if median is not None else "–", "spread": spread,
            "examples_per_s": p.examples_per_s, "speedup": fmt_ratio(p.speedup),
            "speedup_vs_baseline": fmt_ratio(p.speedup_vs_baseline),
            "efficiency": fmt_percent(eff, 0) if eff is not None else "–",
            "low": eff is not None and eff < 0.9, "note": note or ""}


def scaling_view(sc: ScalingSection | None) -> dict[str, Any] | None:
    """The Scaling section's view model; None for a run without a sweep."""
    if sc is None:
        return None
    if sc.error:
        return {"error": sc.error}
    projected_doc = sc.projected
    projected = projected_doc.variants if projected_doc is not None else ()
    families: dict[str, list[dict[str, Any]]] = {}
    for v in sc.variants:
        families.setdefault(v.family, []).append(_series(v, "measured"))
    for pv in projected:
        families.setdefault(pv.family, []).append(_series(pv, "projected"))
    charts = [{"family": fam, "svg": chart_svg(fam, ss)} for fam, ss in families.items()
              if any(s["points"] for s in ss)]
    rows = [_row(v.variant, p, "measured") for v in sc.variants for p in v.points]
    rows += [_row(v.variant, p, "projected") for v in projected for p in v.points]
    bars = [{"variant": v.variant, "svg": svg} for v in sc.variants
            if (svg := bars_svg(v.variant, v.points)) is not None]
    return {
        "error": None, "mode": sc.mode, "counts": sc.counts, "batch": sc.batch,
        "batch_is": sc.batch_is, "label": sc.label, "stand_in": sc.stand_in,
        "headline_basis": sc.headline, "recommendation": sc.recommendation,
        "recommendation_for": sc.recommendation_for,
        "projected": projected_doc, "charts": charts, "rows": rows, "bars": bars,
        "growth": [(v.variant, t) for v in sc.variants for t in v.growth],
        "measured_headlines": [v.headline for v in sc.variants if v.headline],
        "projected_headlines": [v.headline for v in projected if v.headline],
        "notes": [*sc.notes, *(projected_doc.notes if projected_doc is not None else ())],
    }
