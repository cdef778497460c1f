"""The whole analysis of one trace (load -> attribute -> links), and its JSON document.

``Analysis.to_doc()`` is what ``tfprof-towers analyze --json`` prints (format: :mod:`tfprof_towers.trace`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tfprof_towers.trace.attribute import Breakdown, attribute, exact_sums
from tfprof_towers.trace.classify import NodeDevices
from tfprof_towers.trace.hosts import load_hosts
from tfprof_towers.trace.idle import IDLE_KINDS
from tfprof_towers.trace.links import Link, links, links_frame
from tfprof_towers.trace.load import Trace
from tfprof_towers.trace.memory_peaks import DeviceMemory, device_memory, memory_doc
from tfprof_towers.trace.producer import Producer
from tfprof_towers.trace.steps import StepSources, StepTable, apart, step_times
from tfprof_towers.trace.tasks import task_steps
from tfprof_towers.vocab.categories import (
    COPY_CATEGORIES,
    DEVICE_CATEGORIES,
    EVENT_CATEGORIES,
    HOST_CATEGORIES,
    TIME_CATEGORIES,
    WALL_CATEGORIES,
)
from tfprof_towers.vocab.device_names import device_sort_key, is_accelerator_plane
from tfprof_towers.vocab.links import impossible_rate

if TYPE_CHECKING:
    import pandas as pd

_PS = 1e12


@dataclass(frozen=True, eq=False)
class Analysis:
    """A trace with its attribution and links."""

    trace: Trace
    breakdown: Breakdown
    link_rows: tuple[Link, ...]
    kind: str | None = None  # "gpu" | "logical-cpu" | None (unknown)
    label: str = ""  # e.g. the variant name

    @cached_property
    def links(self) -> pd.DataFrame:
        """The links as a DataFrame (:data:`~.links.LINK_COLUMNS`)."""
        return links_frame(list(self.link_rows))

    @property
    def n_steps(self) -> int:
        return len(self.trace.step_table)

    @cached_property
    def step_time_ps(self) -> np.ndarray:
        """Per step (the trace's windows): its duration, the longest of its owners' windows (a device's
        own ``Steps`` line, a host's markers; :func:`~.steps.step_times`), int64 picoseconds."""
        return step_times(self.trace.step_table, self.trace.step_sources)

    @cached_property
    def idle_accelerators(self) -> tuple[str, ...]:
        """Accelerators the trace knows of (a device plane, even one without lines) that ran no kernel
        (``compute`` or ``collective``) in their step windows, sorted; a plane this tool cannot read
        (``trace.unread``) is never among them.  A kernel counts where any of its time lies in a window
        (the wall breakdown, clipped to the windows), also one that started before it: a TPU's
        on-device loop, an event with a start far in the past."""
        b = self.breakdown
        t = b.totals
        kernels = np.isin(t.category, [EVENT_CATEGORIES.index(c) for c in ("compute", "collective")])
        busy = {b.devices[d] for d in np.unique(t.device[kernels & (t.count > 0)]).tolist()}
        ran = b.wall_ps[:, :, [WALL_CATEGORIES.index(c) for c in ("compute", "collective")]].sum(axis=(1, 2))
        busy.update(b.devices[d] for d in np.flatnonzero(ran > 0).tolist())
        known = dict.fromkeys([*self.trace.planes, *b.devices])
        unread = self.trace.unread
        idle = (d for d in known if is_accelerator_plane(d) and d not in busy and d not in unread)
        return tuple(sorted(idle, key=device_sort_key))

    @cached_property
    def memory(self) -> tuple[DeviceMemory, ...]:
        """Per allocator (named as its device): peaks, capacity, live ops at the peak (memory_peaks.py)."""
        t = self.trace
        return device_memory(t.memory, t.step_table, t.device_steps)

    def step_notes(self) -> list[str]:
        """Where owners of step windows did not step together: one note per pair, with the gap(s)."""
        return step_notes(self.trace.step_table, self.trace.step_sources)

    def to_doc(self, per_step: bool = False) -> dict[str, Any]:
        """The JSON document; ``per_step`` divides every count, time and byte figure by the steps."""
        scale = 1.0 / self.n_steps if per_step and self.n_steps else 1.0
        t = self.trace
        return trace_doc(t.source, t.producer, t.step_table, t.window, per_step, self.step_time_ps,
                         self.idle_accelerators, t.unread, devices_doc(self.breakdown, scale),
                         links_doc(self.link_rows, scale), task_steps(t), self.memory,
                         [*t.notes, *self.step_notes()], self.kind)


def trace_doc(source: str, producer: Producer, steps: StepTable, window: str, per_step: bool,
              step_time_ps: np.ndarray, idle_accelerators: Sequence[str], unread: Mapping[str, str],
              devices: dict[str, Any], links: list[dict[str, Any]], tasks: list[dict[str, Any]],
              memory: Sequence[DeviceMemory], notes: list[str], kind: str | None,
              extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``analyze --json``'s document (docs/output.md) of one analysis or of a pod's reduce
    (:mod:`.pod`, whose ``hosts`` and ``failed_hosts`` are ``extra``, before the notes): ``devices`` and
    ``links`` already scaled as ``per_step`` says."""
    step_s = step_time_ps / _PS
    doc: dict[str, Any] = {
        "source": source,
        "producer": producer.to_json(),
        "steps": len(steps),
        "step_numbers": steps.step.tolist(),
        "window": window,
        "per_step": bool(per_step),
        "step_time_s": step_s.tolist(),
        "step_time_avg_s": float(step_s.mean()) if step_s.size else 0.0,
        "idle_accelerators": list(idle_accelerators),
        "unread_planes": dict(unread),
        "devices": devices,
        "links": links,
        "tasks": tasks,
        "memory": memory_doc(memory),
        **(extra or {}),
        "notes": notes,
    }
    if kind:
        doc["kind"] = kind
    return doc


def step_notes(steps: StepTable, sources: StepSources) -> list[str]:
    """Where owners of step windows did not step together: one note per pair, with the gap(s)."""
    pairs: dict[tuple[str, str], list] = {}
    for a in apart(steps, sources):
        pairs.setdefault((a.first, a.second), []).append(a)
    notes = []
    for (first, second), rows in pairs.items():
        gaps = [r.gap_ps / 1e9 for r in rows]
        if len(rows) == 1:
            when = f"ran step {rows[0].step} {gaps[0]:.1f} ms apart"
        else:
            shown = ", ".join(str(r.step) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
            when = (
                f"ran {len(rows)} steps ({shown}) {min(gaps):.1f} to {max(gaps):.1f} ms apart"
                if min(gaps) != max(gaps)
                else f"ran {len(rows)} steps ({shown}) {gaps[0]:.1f} ms apart"
            )
        devices = "/device:" in first and "/device:" in second
        why = "separate processes merged into one file" if devices else "hosts whose clocks disagree"
        notes.append(
            f"{first} and {second} {when} (from the end of one's step window to the start of the "
            f"other's): they did not step together (for example {why}); each is broken down "
            "within its own windows, and a step lasts as long as the longest of them"
        )
    return notes


def categories_for(device: str) -> tuple[str, ...]:
    return DEVICE_CATEGORIES if is_accelerator_plane(device) else HOST_CATEGORIES


def devices_doc(b: Breakdown, scale: float = 1.0) -> dict[str, Any]:
    """``{device: {"window_s", "total": {cat: {count, seconds, bytes}}, "wall": {cat: s, "idle": s},
    "idle_split": {kind: s}}}`` (``idle_split``: accelerators only)."""
    window_s = b.device_window_ps().sum(axis=1) / _PS  # each device's own windows
    n_dev, n_cat = len(b.devices), len(EVENT_CATEGORIES)
    t = b.totals
    key = t.device * n_cat + t.category
    count, dur, nbytes = (exact_sums(key, v, n_dev * n_cat) for v in (t.count, t.dur_ps, t.bytes))
    has = np.zeros(n_dev * n_cat, dtype=bool)
    has[key] = True
    wall = b.wall_ps.sum(axis=1)  # [device, WALL_CATEGORIES]
    idle = b.idle_ps.sum(axis=1)
    out: dict[str, Any] = {}
    for d, dev in enumerate(b.devices):
        cats = list(categories_for(dev))
        cats += [c for c in TIME_CATEGORIES if has[d * n_cat + EVENT_CATEGORIES.index(c)] and c not in cats]
        tot = {}
        for c in cats:
            i = d * n_cat + EVENT_CATEGORIES.index(c)
            entry: dict[str, Any] = {"count": _num(int(count[i]) * scale),
                                     "seconds": int(dur[i]) / _PS * scale}
            if c in COPY_CATEGORIES:
                entry["bytes"] = _num(int(nbytes[i]) * scale)
            tot[c] = entry
        walls = {c: float(wall[d, j]) / _PS * scale for j, c in enumerate(WALL_CATEGORIES)
                 if c in cats or c == "idle" or wall[d, j]}
        out[dev] = {"window_s": float(window_s[d]) * scale, "total": tot, "wall": walls}
        if b.accelerator[d]:
            out[dev]["idle_split"] = {k: float(idle[d, j]) / _PS * scale for j, k in enumerate(IDLE_KINDS)}
    return out


def links_doc(rows: tuple[Link, ...] | list[Link], scale: float = 1.0) -> list[dict[str, Any]]:
    return [
        {
            "src": r.src,
            "dst": r.dst,
            "kind": r.kind,
            "bytes": None if r.bytes is None else _num(r.bytes * scale),
            "count": _num(r.count * scale),
            "seconds": None if not r.measured or r.seconds is None else r.seconds * scale,
            "gbps": None if not r.measured or r.gbps is None else float(r.gbps),
            "measured": bool(r.measured),
            **({"impossible": True} if r.measured and impossible_rate(r.kind, r.gbps) else {}),
        }
        for r in rows
    ]


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def analyze_trace(
    trace: Trace, kind: str | None = None, edge_bytes: Mapping[str, int] | None = None, label: str = ""
) -> Analysis:
    return Analysis(trace, attribute(trace), tuple(links(trace, kind, edge_bytes)), kind, label)


def analyze_xplane(
    path: Path | str, node_devices: NodeDevices | None = None, kind: str | None = None,
    edge_bytes: Mapping[str, int] | None = None, run: str | None = None,
    tasks: Mapping[str, str] | None = None,
) -> Analysis:
    """Load a trace (a file, or every host of a logdir's run, ``tasks``: host file -> task) and analyse it."""
    return analyze_trace(load_hosts(path, run, node_devices, tasks), kind, edge_bytes)
