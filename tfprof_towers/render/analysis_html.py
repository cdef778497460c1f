"""The HTML page of ``tfprof-towers analyze PATH --html OUT``: one trace's time attribution.

Input is the analysis document of :meth:`tfprof_towers.trace.analysis.Analysis.to_doc`
(``producer``, ``steps``, ``window``, ``devices`` with ``window_s``/``total``/``wall``/``idle_split``,
``links``, ``tasks``, ``notes``); totals over all steps are shown per step.  Same page machinery as
the report (:mod:`.html`): autoescaped templates, inlined assets, no network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tfprof_towers.render.hosts import hosts_view
from tfprof_towers.render.html import environment
from tfprof_towers.render.memory_charts import timelines_view
from tfprof_towers.rundir.outputs import write_output
from tfprof_towers.rundir.trace_doc import CategoryTotal, DeviceTime, ProducerDoc, TraceDoc, as_trace_doc
from tfprof_towers.trace.producer import FRAMEWORK_NAMES, VENDOR_NAMES
from tfprof_towers.vocab import categories

WINDOWS = {
    "markers": "step markers", "steps-line": "the trace's Steps line",
    "modules": "the runs of the TPU chips' main XLA module",
    "program-runs": "the runs of the program the host ran most often (no steps in the trace)",
    "busy-regions": "the accelerators' busy regions (no steps in the trace)",
    "whole-trace": "the whole trace",
}


def per_step(doc: TraceDoc) -> TraceDoc:
    """The document with every time, count and byte figure per step (the same where it already is)."""
    scale = 1.0 if doc.per_step else 1.0 / max(int(doc.steps or 0), 1)
    links = tuple(replace(ln, bytes=_scaled(ln.bytes, scale), count=float(ln.count or 0) * scale,
                          seconds=_scaled(ln.seconds, scale)) for ln in doc.links)
    return replace(doc, devices={n: _device_per_step(d, scale) for n, d in doc.devices.items()}, links=links)


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else float(value) * scale


def _device_per_step(d: DeviceTime, scale: float) -> DeviceTime:
    return DeviceTime(
        window_s=float(d.window_s or 0.0) * scale,
        wall={c: float(s or 0.0) * scale for c, s in (d.wall or {}).items()},
        total={c: CategoryTotal(_scaled(t.count, scale), _scaled(t.seconds, scale), _scaled(t.bytes, scale))
               for c, t in d.total.items()},
        idle_split=None if d.idle_split is None
        else {k: float(v or 0.0) * scale for k, v in d.idle_split.items()},
    )


def analysis_view(doc: TraceDoc, findings: Sequence[Any] = (), rules: Sequence[Any] = ()) -> dict[str, Any]:
    """The analysis page's view model: the document per step, its rows, its hosts and its findings."""
    d = per_step(doc)
    rows = [
        {"variant": "", "device": name, "step_s": dev.window_s or sum(dev.wall.values()),
         "wall": {k: v for k, v in dev.wall.items() if v}}
        for name, dev in d.devices.items()
    ]
    from tfprof_towers.trace.idle import KERNEL_WAIT_PS

    source = str(doc.source or "trace")
    idle_rows = [{"device": name, "idle": dev.seconds("idle"), "split": dev.idle_split}
                 for name, dev in d.devices.items() if dev.idle_split is not None]
    tasks = doc.tasks
    task_rows = [{"task": t.task, "host": t.host, "step": s.step, "start_s": s.start_s, "end_s": s.end_s,
                  "collective_s": s.collective_s} for t in tasks for s in t.steps] \
        if len(tasks) > 1 or any(t.task for t in tasks) else []
    return {
        "findings": list(findings),  # the trace rules' (advice/trace_rules.py)
        "rules": list(rules),
        "idle_rows": idle_rows,
        "task_rows": task_rows,
        "hosts": hosts_view(doc),
        "kernel_wait": f"{KERNEL_WAIT_PS / 1e6:g} µs",
        "title": f"tfprof-towers analysis — {Path(source).name}",
        "doc": d,
        "source": source,
        "producer": producer_view(doc.producer),
        "window": WINDOWS.get(doc.window, doc.window),
        "categories": categories.legend(),
        "rows": rows,
        "data": {"breakdown": {"categories": categories.legend(), "rows": rows}, "timelines": []},
    }


def producer_view(producer: ProducerDoc | None) -> dict[str, Any] | None:
    """Who wrote the trace, in words (trace text: shown escaped), or None for a document without it."""
    if producer is None:
        return None
    fw, vendor = producer.framework or "unknown", producer.vendor or "unknown"
    return {"framework": FRAMEWORK_NAMES.get(fw, fw), "vendor": VENDOR_NAMES.get(vendor, vendor),
            "evidence": list(producer.evidence)}


def render_analysis_html(
    analysis_doc: TraceDoc | Mapping[str, Any], out: Path, inputs: Sequence[Path | str] = (),
    memory_series: Mapping[str, tuple[Sequence[float], Sequence[int]]] | None = None,
) -> None:
    """Write the analysis page for ``analysis_doc`` (``analyze --json``'s document: the analysis, its
    "findings" and "rules") to ``out`` (atomically, through
    :func:`~tfprof_towers.rundir.outputs.write_output`: never over a device, an input or a run's file);
    ``memory_series``: per device, its bytes in use over time (:func:`.trace.memory_peaks.timelines`),
    drawn in the Memory section."""
    doc = as_trace_doc(analysis_doc)
    # the trace rules' findings and status beside the analysis (none in a bare analysis)
    view = analysis_view(doc, analysis_doc.get("findings") or (), analysis_doc.get("rules") or ())
    view["memory_rows"] = timelines_view(doc.memory, memory_series or {})
    view["memory_note"] = doc.memory.note or ""
    text = environment().get_template("analysis.html").render(**view)
    write_output(Path(out), text, inputs, "--html")
