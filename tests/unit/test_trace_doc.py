"""rundir/trace_doc.py: the trace analysis document read typed and written back as the same JSON."""

from __future__ import annotations

import json

from tfprof_towers.rundir.paths import json_text
from tfprof_towers.rundir.summary import SummaryEntry
from tfprof_towers.rundir.trace_doc import NO_EVENTS, TraceDoc, as_trace_doc

GPU0 = "/device:GPU:0"


def _doc() -> dict:
    """A two-step analysis as trace.analysis.trace_doc writes it: counts are ints, times floats."""
    return {
        "source": "w.xplane.pb",
        "producer": {"framework": "tensorflow", "vendor": "nvidia", "evidence": ["a", "b"]},
        "steps": 2, "step_numbers": [7, 8], "window": "markers", "per_step": False,
        "step_time_s": [0.5, 0.25], "step_time_avg_s": 0.375, "idle_accelerators": [],
        "unread_planes": {"/device:TPU:0": "no such plane kind"},
        "devices": {GPU0: {"window_s": 0.75,
                           "total": {"compute": {"count": 3, "seconds": 0.5},
                                     "h2d": {"count": 1, "seconds": 0.125, "bytes": 4096}},
                           "wall": {"compute": 0.5, "h2d": 0.0625, "idle": 0.1875},
                           "idle_split": {"host_wait": 0.125, "kernel_wait": 0.0, "other": 0.0625}}},
        "links": [{"src": "/host:CPU", "dst": GPU0, "kind": "h2d", "bytes": 4096, "count": 1,
                   "seconds": 0.125, "gbps": 3.2e-05, "measured": True, "impossible": True},
                  {"src": GPU0, "dst": "/host:CPU", "kind": "send_recv", "bytes": None, "count": 2.5,
                   "seconds": None, "gbps": None, "measured": False}],
        "tasks": [{"task": "", "host": "w", "steps": [{"step": 7, "start_s": 0.0, "end_s": 0.5,
                                                      "collective_s": 0.0}]}],
        "memory": {"devices": {GPU0: {
            "allocator": "GPU_0_bfc", "peak_bytes": 1024, "peak_time_s": 0.25, "peak_in_steps_bytes": None,
            "peak_in_steps_time_s": None, "lifetime_peak_bytes": 2048, "capacity_bytes": 8192,
            "device_memory_bytes": None, "fragmentation": 0.0, "before_trace_bytes": 0,
            "top_ops": [{"op": "MatMul", "bytes": 512, "count": 2}], "events": 9, "peak_op": "MatMul",
            "unknown": ["an event without a size"]}}, "note": "from the allocators' events"},
        "hosts": 2, "failed_hosts": [{"host": "w9", "file": "w9.xplane.pb", "reason": "truncated"}],
        "notes": ["a note"],
    }


def test_a_document_reads_typed_and_writes_the_same_json() -> None:
    doc = _doc()
    t = TraceDoc.from_json(doc)
    d = t.devices[GPU0]
    assert (t.steps, t.step_numbers, t.window, t.producer.vendor) == (2, (7, 8), "markers", "nvidia")
    assert (d.seconds("compute"), d.seconds("collective"), d.wall_s("collective"), d.idle) == (
        0.5, 0.0, None, 0.1875)
    assert d.split_s("host_wait") == 0.125 and d.total_of("h2d").bytes == 4096
    assert d.total_of("memset") is NO_EVENTS and NO_EVENTS.count is None
    first, second = t.links
    assert first.impossible and not second.impossible and second.seconds is None
    assert t.tasks[0].steps[0].duration_s == 0.5
    peak = t.memory.devices[GPU0]
    assert (peak.peak_bytes, peak.top_ops[0].op, peak.unknown) == (
        1024, "MatMul", ("an event without a size",))
    assert t.failed_hosts[0].reason == "truncated" and t.hosts == 2
    assert t.to_json() == doc
    assert json_text(t.to_json()) == json_text(doc)  # counts stay ints: "count": 3, not 3.0


def test_a_run_breakdown_has_no_source_nor_hosts_and_each_device_its_role() -> None:
    doc = _doc()
    del doc["source"], doc["hosts"], doc["failed_hosts"]
    doc["devices"][GPU0]["role"] = "accelerator"
    doc["kind"] = "gpu"
    t = TraceDoc.from_json(doc)
    assert t.source is None and t.failed_hosts is None and t.devices[GPU0].role == "accelerator"
    assert json.dumps(t.to_json()) == json.dumps(doc)


def test_an_analysis_that_failed_is_only_its_error() -> None:
    t = TraceDoc.from_json({"error": "trace analysis failed: boom"})
    assert not t.ok and t.to_json() == {"error": "trace analysis failed: boom"}
    assert t.error == "trace analysis failed: boom" and t.devices == {}
    assert t.links == () and t.tasks == ()


def test_an_entry_read_from_json_holds_the_breakdown_typed() -> None:
    e = SummaryEntry.from_json({"name": "single", "status": "ok", "breakdown": _doc()})
    assert isinstance(e.breakdown, TraceDoc) and e.breakdown.devices[GPU0].window_s == 0.75
    assert as_trace_doc(e.breakdown) is e.breakdown and as_trace_doc(_doc()) == e.breakdown
    assert e.to_json()["breakdown"] == _doc()
