"""The analysis page's "Hosts" section for a multi-host profile: each host's step times as a heatmap,
the slowest and fastest hosts and the wall category that grew between them, and the hosts left out.

Pure functions on the analysis document (:meth:`tfprof_towers.trace.analysis.Analysis.to_doc`:
``tasks``, ``devices``, ``failed_hosts``) to small dataclasses, so the text output can use
them too; :func:`heatmap_svg` draws the inline SVG (no network, no script library), every name escaped
(:func:`markupsafe.escape`) with its control and bidi characters made visible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from tfprof_towers.rundir.trace_doc import TaskStep, TraceDoc, as_trace_doc
from tfprof_towers.vocab.device_names import is_accelerator_plane
from tfprof_towers.vocab.fmt import fmt_seconds
from tfprof_towers.vocab.textcap import visible

#: The heatmap's colour scale, fastest step to slowest (light to dark).
FAST_RGB = (255, 247, 220)
SLOW_RGB = (178, 24, 43)
MISSING = "#d9d9d9"
LEGEND_STOPS = 5
LEGEND_X = 64  # the legend's first swatch


@dataclass(frozen=True)
class HostSteps:
    """One host's step times (seconds; None where it has no such step), by the document's step numbers."""

    task: str
    host: str
    times: dict[int, float]

    @property
    def label(self) -> str:
        return self.host or self.task

    @property
    def mean_s(self) -> float:
        return sum(self.times.values()) / len(self.times) if self.times else 0.0


@dataclass(frozen=True)
class CategoryDiff:
    """One wall category's seconds per step, averaged over a host's accelerators."""

    category: str
    fastest_s: float
    slowest_s: float

    @property
    def diff_s(self) -> float:
        return self.slowest_s - self.fastest_s


@dataclass(frozen=True)
class HostsView:
    hosts: list[HostSteps]
    steps: list[int]
    fastest: HostSteps
    slowest: HostSteps
    diffs: list[CategoryDiff]  # largest growth first
    grown: CategoryDiff | None  # the category that grew most (None when none grew)
    failed: list[dict[str, str]]
    svg: Markup


def _natural(text: str) -> list[Any]:
    """``task:10`` after ``task:9``: digits compared as numbers."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text) if p]


def busy_s(step: TaskStep) -> float:
    """A host's step time less its time inside collectives: how long it took to reach the all-reduce.
    In a synchronous job every host leaves the all-reduce together, so their step windows are alike;
    what a straggler's shows is a longer time before it arrives (the others wait in collectives)."""
    return float(step.end_s) - float(step.start_s) - float(step.collective_s or 0.0)


def host_steps(doc: TraceDoc | Mapping[str, Any]) -> list[HostSteps]:
    """The hosts (tasks) that have steps, sorted by task; each step's time is :func:`busy_s`."""
    hosts = [HostSteps(str(t.task or ""), str(t.host or ""), {int(s.step): busy_s(s) for s in t.steps})
             for t in as_trace_doc(doc).tasks]
    return sorted((h for h in hosts if h.times), key=lambda h: (_natural(h.task), _natural(h.host)))


def on_task(device: str, task: str) -> bool:
    """``device`` is on ``task``: ``/job:w/task:1/device:GPU:0`` on ``/job:w/task:1``, not on ``task:10``."""
    return bool(task) and (device == task or device.startswith(task.rstrip("/") + "/"))


def accelerator_wall(doc: TraceDoc | Mapping[str, Any], host: HostSteps) -> dict[str, float]:
    """Per wall category, seconds per step of ``host``'s accelerators, averaged over them (a host of 8
    GPUs and one of 4 compare per GPU)."""
    doc = as_trace_doc(doc)
    scale = 1.0 if doc.per_step else 1.0 / max(len(host.times), 1)
    out: dict[str, float] = {}
    n = 0
    for name, d in doc.devices.items():
        if not (on_task(name, host.task) and is_accelerator_plane(name)):
            continue
        n += 1
        for category, s in (d.wall or {}).items():
            out[category] = out.get(category, 0.0) + float(s or 0.0) * scale
    return {c: v / n for c, v in out.items()} if n else out


def category_diffs(fast: Mapping[str, float], slow: Mapping[str, float]) -> list[CategoryDiff]:
    """The categories either host spent time in, largest growth (fastest to slowest) first."""
    rows = [CategoryDiff(c, fast.get(c, 0.0), slow.get(c, 0.0)) for c in dict.fromkeys([*fast, *slow])]
    return sorted((r for r in rows if r.fastest_s or r.slowest_s), key=lambda r: -r.diff_s)


def failed_hosts(doc: TraceDoc) -> list[dict[str, str]]:
    return [{"host": f.host, "file": f.file, "reason": f.reason} for f in doc.failed_hosts or ()]


def hosts_view(doc: TraceDoc | Mapping[str, Any]) -> HostsView | None:
    """The Hosts section of ``doc``, or None when fewer than two hosts have steps."""
    doc = as_trace_doc(doc)
    hosts = host_steps(doc)
    if len(hosts) < 2:
        return None
    steps = sorted({s for h in hosts for s in h.times})
    fastest = min(hosts, key=lambda h: h.mean_s)
    slowest = max(hosts, key=lambda h: h.mean_s)
    diffs = category_diffs(accelerator_wall(doc, fastest), accelerator_wall(doc, slowest))
    grown = diffs[0] if diffs and diffs[0].diff_s > 0 else None
    return HostsView(hosts, steps, fastest, slowest, diffs, grown, failed_hosts(doc),
                     heatmap_svg(hosts, steps))


# ------------------------------------------------------------------------------------------
# The heatmap


def colour(t: float) -> str:
    """The scale's colour at ``t`` in [0, 1] (0: the fastest step, 1: the slowest)."""
    t = min(max(t, 0.0), 1.0)
    r, g, b = (round(a + (z - a) * t) for a, z in zip(FAST_RGB, SLOW_RGB, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms"


def _text(name: str) -> Markup:
    return escape(visible(name))


def heatmap_svg(hosts: Sequence[HostSteps], steps: Sequence[int]) -> Markup:
    """Hosts down, steps across; each cell's colour its step time on the fastest-to-slowest scale,
    its ``<title>`` "host, step N: X ms"; a legend of the scale's seconds below."""
    times = [v for h in hosts for v in h.times.values()]
    lo, hi = min(times), max(times)
    cw = max(4, min(28, 960 // max(len(steps), 1)))
    ch, label_w, top = 16, min(220, 12 + 7 * max(len(h.label) for h in hosts)), 18
    width, grid_h = max(label_w + cw * len(steps) + 10, LEGEND_X + LEGEND_STOPS * 80), ch * len(hosts)
    height = top + grid_h + 50
    out = [f'<svg class="hosts-heatmap" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="step time per host and step" xmlns="http://www.w3.org/2000/svg">']
    out += _step_labels(steps, label_w, cw, top)
    for i, h in enumerate(hosts):
        y = top + i * ch
        out.append(f'<text class="host" x="{label_w - 6}" y="{y + ch - 4}" font-size="11" '
                   f'text-anchor="end">{_text(h.label)}<title>{_text(h.task)}</title></text>')
        for j, step in enumerate(steps):
            out.append(_cell(h, step, label_w + j * cw, y, cw, ch, lo, hi))
    out += _legend(lo, hi, top + grid_h + 12)
    out.append("</svg>")
    return Markup("".join(out))


def _cell(h: HostSteps, step: int, x: int, y: int, w: int, hgt: int, lo: float, hi: float) -> str:
    v = h.times.get(step)
    if v is None:
        fill, what = MISSING, "no such step"
    else:
        fill, what = colour((v - lo) / (hi - lo) if hi > lo else 0.0), fmt_ms(v)
    tip = f"{visible(h.label)}, step {step}: {what}"
    return (f'<rect class="cell" x="{x}" y="{y}" width="{w - 1}" height="{hgt - 1}" fill="{fill}">'
            f'<title>{escape(tip)}</title></rect>')


def _step_labels(steps: Sequence[int], x0: int, cw: int, top: int) -> list[str]:
    every = max(1, -(-28 // cw))  # a label about every 28 px
    return [f'<text x="{x0 + j * cw + cw / 2:.1f}" y="{top - 5}" font-size="10" '
            f'text-anchor="middle">{s}</text>' for j, s in enumerate(steps) if j % every == 0]


def _legend(lo: float, hi: float, y: int) -> list[str]:
    out = [f'<text x="0" y="{y + 12}" font-size="11">step time:</text>']
    for k in range(LEGEND_STOPS):
        t = k / (LEGEND_STOPS - 1)
        v = lo + (hi - lo) * t
        x = LEGEND_X + k * 80
        out.append(f'<rect class="legend-swatch" x="{x}" y="{y}" width="16" height="16" fill="{colour(t)}"/>'
                   f'<text x="{x + 20}" y="{y + 12}" font-size="11">{escape(fmt_seconds(v))}</text>')
    return out
