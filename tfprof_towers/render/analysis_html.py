"""The HTML page of ``tfprof-towers analyze PATH --html OUT``: one trace's time attribution.

Input is the analysis document of :meth:`tfprof_towers.trace.analysis.Analysis.to_doc`
(``producer``, ``steps``, ``window``, ``devices`` with ``window_s``/``total``/``wall``/``idle_split``,
``links``, ``tasks``, ``notes``); totals over all steps are shown per step.  Same page machinery as
the report (:mod:`.html`): autoescaped templates, inlined assets, no network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tfprof_towers.render.hosts import hosts_view
from tfprof_towers.render.html import environment
from tfprof_towers.render.memory_charts import timelines_view
from tfprof_towers.rundir.outputs import write_output
from tfprof_towers.trace.producer import FRAMEWORK_NAMES, VENDOR_NAMES
from tfprof_towers.vocab import categories

WINDOWS = {
    "markers": "step markers", "steps-line": "the trace's Steps line",
    "modules": "the runs of the TPU chips' main XLA module",
    "program-runs": "the runs of the program the host ran most often (no steps in the trace)",
    "busy-regions": "the accelerators' busy regions (no steps in the trace)",
    "whole-trace": "the whole trace",
}


def per_step(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The document with every time, count and byte figure per step (no-op when it already is)."""
    steps = max(int(doc.get("steps") or 0), 1)
    scale = 1.0 if doc.get("per_step") else 1.0 / steps
    devices = {}
    for name, d in (doc.get("devices") or {}).items():
        devices[name] = {
            "window_s": float(d.get("window_s") or 0.0) * scale,
            "wall": {c: float(s or 0.0) * scale for c, s in (d.get("wall") or {}).items()},
            "total": {
                c: {k: (None if v is None else float(v) * scale) for k, v in t.items()}
                for c, t in (d.get("total") or {}).items()
            },
        }
        if d.get("idle_split") is not None:
            devices[name]["idle_split"] = {k: float(v or 0.0) * scale for k, v in d["idle_split"].items()}
    links = [{
        **ln,
        "bytes": None if ln.get("bytes") is None else float(ln["bytes"]) * scale,
        "count": float(ln.get("count") or 0) * scale,
        "seconds": None if ln.get("seconds") is None else float(ln["seconds"]) * scale,
    } for ln in doc.get("links") or ()]
    return {**doc, "devices": devices, "links": links}


def analysis_view(doc: Mapping[str, Any]) -> dict[str, Any]:
    d = per_step(doc)
    rows = [
        {"variant": "", "device": name, "step_s": dev["window_s"] or sum(dev["wall"].values()),
         "wall": {k: v for k, v in dev["wall"].items() if v}}
        for name, dev in d["devices"].items()
    ]
    from tfprof_towers.trace.idle import KERNEL_WAIT_PS

    source = str(doc.get("source") or "trace")
    idle_rows = [
        {"device": name, "idle": dev["wall"].get("idle", 0.0), "split": dev["idle_split"]}
        for name, dev in d["devices"].items()
        if "idle_split" in dev
    ]
    task_rows = [
        {"task": t.get("task", ""), "host": t.get("host", ""), **step}
        for t in doc.get("tasks") or ()
        for step in t.get("steps") or ()
    ] if len(doc.get("tasks") or ()) > 1 or any(t.get("task") for t in doc.get("tasks") or ()) else []
    return {
        "findings": list(doc.get("findings") or ()),  # the trace rules' (advice/trace_rules.py)
        "rules": list(doc.get("rules") or ()),
        "idle_rows": idle_rows,
        "task_rows": task_rows,
        "hosts": hosts_view(doc),
        "kernel_wait": f"{KERNEL_WAIT_PS / 1e6:g} µs",
        "title": f"tfprof-towers analysis — {Path(source).name}",
        "doc": d,
        "source": source,
        "producer": producer_view(doc.get("producer")),
        "window": WINDOWS.get(str(doc.get("window")), str(doc.get("window"))),
        "categories": categories.legend(),
        "rows": rows,
        "data": {"breakdown": {"categories": categories.legend(), "rows": rows}, "timelines": []},
    }


def producer_view(producer: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Who wrote the trace, in words (trace text: shown escaped), or None for a document without it."""
    if not producer:
        return None
    fw, vendor = str(producer.get("framework", "unknown")), str(producer.get("vendor", "unknown"))
    return {"framework": FRAMEWORK_NAMES.get(fw, fw), "vendor": VENDOR_NAMES.get(vendor, vendor),
            "evidence": [str(e) for e in producer.get("evidence") or ()]}


def render_analysis_html(
    analysis_doc: dict[str, Any], out: Path, inputs: Sequence[Path | str] = (),
    memory_series: Mapping[str, tuple[Sequence[float], Sequence[int]]] | None = None,
) -> None:
    """Write the analysis page for ``analysis_doc`` to ``out`` (atomically, through
    :func:`~tfprof_towers.rundir.outputs.write_output`: never over a device, an input or a run's file);
    ``memory_series``: per device, its bytes in use over time (:func:`.trace.memory_peaks.timelines`),
    drawn in the Memory section."""
    view = analysis_view(analysis_doc)
    view["memory_rows"] = timelines_view(analysis_doc.get("memory") or {}, memory_series or {})
    view["memory_note"] = (analysis_doc.get("memory") or {}).get("note", "")
    text = environment().get_template("analysis.html").render(**view)
    write_output(Path(out), text, inputs, "--html")
