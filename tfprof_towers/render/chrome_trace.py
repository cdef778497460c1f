"""Export a trace as Chrome trace-event JSON, which Perfetto and chrome://tracing open.

One process per device (host threads, host device, accelerators), one thread per
trace line (host thread or GPU stream), one complete (``"ph": "X"``) event per
trace event, with the TF op, op type, category, bytes and step in ``args``; step
windows go on a ``Steps`` process of their own.  Times are microseconds from the
trace's first event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import numpy as np

from tfprof_towers.render.timeline import device_rank
from tfprof_towers.rundir.paths import atomic_write_text
from tfprof_towers.vocab.categories import EVENT_CATEGORIES

STEPS_PID = 0
_COMPACT = (",", ":")


def chrome_trace(trace: Any, topology: Mapping[str, Any] | None = None, label: str = "") -> dict[str, Any]:
    """The trace-event document of a :class:`tfprof_towers.trace.load.Trace`."""
    return json.loads(chrome_trace_json(trace, topology, label))


def chrome_trace_json(trace: Any, topology: Mapping[str, Any] | None = None, label: str = "") -> str:
    """:func:`chrome_trace`'s document as compact JSON text (``json.dumps(doc, separators=(",", ":"))``,
    to the byte), written from the trace's columns: each distinct string encoded once, one line of
    text per event rather than a dict."""
    c = trace.columns
    items = c.strings.items
    steps = trace.step_table
    starts = [int(c.start_ps.min())] if c.n else []
    if len(steps):
        starts.append(int(steps.start_ps.min()))
    t0 = min(starts) if starts else 0
    # per event: its device's and its line's codes; each distinct pair is one thread
    line_name = c.line_name[c.line]
    dev_codes, dev_of_event = np.unique(c.device, return_inverse=True)
    dev_names = [items[k] for k in dev_codes.tolist()]
    devices = device_rank(sorted(set(dev_names)), topology)
    pid_of = {d: i + 1 for i, d in enumerate(devices)}
    pairs, pair_of_event = np.unique(np.stack([c.device.astype(np.int64), line_name.astype(np.int64)]),
                                     axis=1, return_inverse=True) if c.n else (np.zeros((2, 0), np.int64),
                                                                               np.zeros(0, np.int64))
    keys = [(items[d], items[ln]) for d, ln in zip(pairs[0].tolist(), pairs[1].tolist())]
    threads = sorted(set(keys))
    tid_of = {k: i + 1 for i, k in enumerate(threads)}
    pid = np.array([pid_of[d] for d in dev_names], dtype=np.int64)[dev_of_event.reshape(-1)]
    tid = np.array([tid_of[k] for k in keys], dtype=np.int64)[pair_of_event.reshape(-1)]
    head: list[dict[str, Any]] = [
        _meta("process_name", STEPS_PID, 0, {"name": "Steps"}),
        _meta("process_sort_index", STEPS_PID, 0, {"sort_index": 0}),
    ]
    for d, p in pid_of.items():
        head.append(_meta("process_name", p, 0, {"name": d}))
        head.append(_meta("process_sort_index", p, 0, {"sort_index": p}))
    for (d, ln), t in tid_of.items():
        head.append(_meta("thread_name", pid_of[d], t, {"name": ln}))
    for n, a, b in zip(*(np.asarray(x, dtype=np.int64).tolist() for x in (steps.step, steps.start_ps,
                                                                         steps.end_ps))):
        head.append({"name": f"step {n}", "cat": "step", "ph": "X", "pid": STEPS_PID, "tid": 1,
                     "ts": (a - t0) / 1e6, "dur": (b - a) / 1e6, "args": {"step": n}})
    texts = [json.dumps(e, separators=_COMPACT) for e in head]
    texts += _event_texts(c, items, t0, pid, tid)
    other = {"source": str(getattr(trace, "source", "")), "exported_by": "tfprof-towers", "variant": label}
    return ('{"traceEvents":[' + ",".join(texts) + '],"displayTimeUnit":"ns","otherData":'
            + json.dumps(other, separators=_COMPACT) + "}")


def _encoded(codes: np.ndarray, items: list[str]) -> list[str]:
    """Each code's string as JSON text (``json.dumps``), one encoding per distinct code."""
    used, inverse = np.unique(codes, return_inverse=True)
    enc = [encode_basestring_ascii(items[k]) for k in used.tolist()]
    return [enc[i] for i in inverse.reshape(-1).tolist()]


def _event_texts(c: Any, items: list[str], t0: int, pid: np.ndarray, tid: np.ndarray) -> list[str]:
    """One complete (``"ph": "X"``) event per trace event, as JSON text; ``args`` holds the category and
    step, and the TF op, op type and bytes where the event has them."""
    if not c.n:
        return []
    cats = [encode_basestring_ascii(k) for k in EVENT_CATEGORIES]
    names, tf_ops, op_types = _encoded(c.name, items), _encoded(c.tf_op, items), _encoded(c.op_type, items)
    category = [cats[k] for k in c.category.tolist()]
    ts, dur = ((c.start_ps - t0) / 1e6).tolist(), (c.dur_ps / 1e6).tolist()
    nbytes, step = c.bytes.astype(np.int64).tolist(), c.step.astype(np.int64).tolist()
    empty = encode_basestring_ascii("")
    out = []
    for name, cat, t, d, p, th, op, typ, b, st in zip(names, category, ts, dur, pid.tolist(), tid.tolist(),
                                                      tf_ops, op_types, nbytes, step):
        args = f'"category":{cat},"step":{st}'
        if op != empty:
            args += f',"tf_op":{op}'
        if typ != empty:
            args += f',"op_type":{typ}'
        if b:
            args += f',"bytes":{b}'
        out.append(f'{{"name":{name},"cat":{cat},"ph":"X","pid":{p},"tid":{th},"ts":{t!r},"dur":{d!r},'
                   f'"args":{{{args}}}}}')
    return out


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def write_chrome_trace(trace: Any, path: Path, topology: Mapping[str, Any] | None = None,
                       label: str = "") -> Path:
    """Write the export to ``path`` (atomically) and return it."""
    atomic_write_text(Path(path), chrome_trace_json(trace, topology, label))
    return Path(path)
