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


def _relative(p: Mapping[str, Any], first: Mapping[str, Any] | None) -> float | None:
    """A point's throughput in units of the 1-accelerator baseline; without a baseline, in units
    of its own smallest count's throughput per accelerator (perfect up to there, as stated)."""
    if p.get("speedup_vs_baseline") is not None:
        return float(p["speedup_vs_baseline"])
    if p.get("speedup") is not None and first is not None:
        return float(p["speedup"]) * int(first["count"])
    return None


def _series(variant: Mapping[str, Any], kind: str) -> dict[str, Any]:
    ok = [p for p in variant.get("points") or () if p.get("examples_per_s")]
    first = ok[0] if ok else None
    pts = [(int(p["count"]), y) for p in ok if (y := _relative(p, first)) is not None]
    return {"variant": str(variant["variant"]), "family": str(variant.get("family") or ""), "kind": kind,
            "points": pts, "relative_to": "baseline" if first is not None and first.get(
                "speedup_vs_baseline") is not None else "own"}


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


def bars_svg(variant: str, points: Sequence[Mapping[str, Any]]) -> Markup | None:
    """A stacked bar per count of what the variant's step is made of (its ``wall_per_step``)."""
    rows = [p for p in points if p.get("wall_per_step")]
    if not rows:
        return None
    longest = max(sum(float(v) for v in p["wall_per_step"].values()) for p in rows) or 1.0
    bar_w, row_h = 380, 22
    height = 16 + row_h * len(rows) + 22
    out = [f'<svg class="scaling-bars" data-variant="{escape(variant)}" viewBox="0 0 {bar_w + 190} {height}" '
           f'width="{bar_w + 190}" height="{height}" role="img" xmlns="http://www.w3.org/2000/svg">']
    for i, p in enumerate(rows):
        y = 8 + row_h * i
        x = 70.0
        out.append(f'<text x="64" y="{y + 14}" text-anchor="end" font-size="11">'
                   f'{int(p["count"])} accel.</text>')
        total = 0.0
        for group, (label, colour) in GROUP_STYLE.items():
            s = float(p["wall_per_step"].get(group) or 0.0)
            total += s
            w = bar_w * s / longest
            if w <= 0:
                continue
            out.append(f'<rect class="part" data-group="{group}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                       f'height="{row_h - 6}" fill="{colour}"><title>{escape(variant)} at {int(p["count"])}: '
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


def _row(v: Mapping[str, Any], p: Mapping[str, Any], kind: str) -> dict[str, Any]:
    step = p.get("step_time_s")
    median = step.get("median") if isinstance(step, Mapping) else step
    spread = (f"{fmt_seconds(step.get('p10'))} – {fmt_seconds(step.get('p90'))}"
              if isinstance(step, Mapping) and step.get("p10") is not None else "")
    eff = p.get("efficiency_vs_baseline")
    eff = p.get("efficiency") if eff is None else eff
    return {"variant": str(v["variant"]), "kind": kind, "count": p.get("count"),
            "status": p.get("status", "ok" if p.get("examples_per_s") else "failed"),
            "step": fmt_seconds(median) if median is not None else "–", "spread": spread,
            "examples_per_s": p.get("examples_per_s"), "speedup": fmt_ratio(p.get("speedup")),
            "speedup_vs_baseline": fmt_ratio(p.get("speedup_vs_baseline")),
            "efficiency": fmt_percent(eff, 0) if eff is not None else "–",
            "low": eff is not None and eff < 0.9,
            "note": p.get("reason") or p.get("error") or p.get("bottleneck") or ""}


def scaling_view(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Scaling section's view model; None for a run without a sweep."""
    sc = summary.get("scaling")
    if not isinstance(sc, Mapping):
        return None
    if sc.get("error"):
        return {"error": str(sc["error"])}
    measured = list(sc.get("variants") or ())
    projected_doc = sc.get("projected") if isinstance(sc.get("projected"), Mapping) else None
    projected = list((projected_doc or {}).get("variants") or ())
    families: dict[str, list[dict[str, Any]]] = {}
    for v in measured:
        families.setdefault(str(v.get("family") or ""), []).append(_series(v, "measured"))
    for v in projected:
        families.setdefault(str(v.get("family") or ""), []).append(_series(v, "projected"))
    charts = [{"family": fam, "svg": chart_svg(fam, ss)} for fam, ss in families.items()
              if any(s["points"] for s in ss)]
    rows = [_row(v, p, "measured") for v in measured for p in v.get("points") or ()]
    rows += [_row(v, p, "projected") for v in projected for p in v.get("points") or ()]
    bars = [{"variant": str(v["variant"]), "svg": svg} for v in measured
            if (svg := bars_svg(str(v["variant"]), v.get("points") or ())) is not None]
    return {
        "mode": sc.get("mode"), "counts": sc.get("counts") or [], "batch": sc.get("batch"),
        "batch_is": sc.get("batch_is"), "label": sc.get("label"), "stand_in": bool(sc.get("stand_in")),
        "headline_basis": sc.get("headline"), "recommendation": sc.get("recommendation"),
        "recommendation_for": sc.get("recommendation_for"),
        "projected": projected_doc, "charts": charts, "rows": rows, "bars": bars,
        "growth": [(str(v["variant"]), t) for v in measured for t in v.get("growth") or ()],
        "measured_headlines": [v["headline"] for v in measured if v.get("headline")],
        "projected_headlines": [v["headline"] for v in projected if v.get("headline")],
        "notes": list(sc.get("notes") or ()) + list((projected_doc or {}).get("notes") or ()),
    }
