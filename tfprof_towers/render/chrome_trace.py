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

from tfprof_towers.render.timeline import device_rank, groups
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
    first, pair_of_event = groups(c.device, c.line_name[c.line])
    keys = [(items[c.device[i]], items[c.line_name[c.line[i]]]) for i in first.tolist()]
    devices = device_rank(sorted({d for d, _ in keys}), topology)
    pid_of = {d: i + 1 for i, d in enumerate(devices)}
    tid_of = {k: i + 1 for i, k in enumerate(sorted(set(keys)))}
    pid = np.array([pid_of[d] for d, _ in keys], dtype=np.int64)[pair_of_event]
    tid = np.array([tid_of[k] for k in keys], dtype=np.int64)[pair_of_event]
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


def _event_texts(c: Any, items: list[str], t0: int, pid: np.ndarray, tid: np.ndarray) -> list[str]:
    """One complete (``"ph": "X"``) event per trace event, as JSON text; ``args`` holds the category and
    step, and the TF op, op type and bytes where the event has them.  The text before ``ts`` is made once
    per distinct name, category and thread, the text after ``dur`` once per distinct args."""
    if not c.n:
        return []
    enc = encode_basestring_ascii
    cats = [enc(k) for k in EVENT_CATEGORIES]
    first, group = groups(c.name, c.category, tid)
    heads = [f'{{"name":{enc(items[c.name[i]])},"cat":{cats[c.category[i]]},"ph":"X","pid":{pid[i]},'
             f'"tid":{tid[i]},"ts":' for i in first.tolist()]
    head = np.array(heads, dtype=object)[group].tolist()
    first, group = groups(c.category, c.step, c.tf_op, c.op_type, c.bytes)
    tails = []
    for i in first.tolist():
        op, typ, nbytes = items[c.tf_op[i]], items[c.op_type[i]], int(c.bytes[i])
        args = f'"category":{cats[c.category[i]]},"step":{int(c.step[i])}'
        if op:
            args += f',"tf_op":{enc(op)}'
        if typ:
            args += f',"op_type":{enc(typ)}'
        if nbytes:
            args += f',"bytes":{nbytes}'
        tails.append(f',"args":{{{args}}}}}')
    tail = np.array(tails, dtype=object)[group].tolist()
    ts, dur = ((c.start_ps - t0) / 1e6).tolist(), (c.dur_ps / 1e6).tolist()
    return [f'{h}{t!r},"dur":{d!r}{a}' for h, t, d, a in zip(head, ts, dur, tail)]


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def write_chrome_trace(trace: Any, path: Path, topology: Mapping[str, Any] | None = None,
                       label: str = "") -> Path:
    """Write the export to ``path`` (atomically) and return it."""
    atomic_write_text(Path(path), chrome_trace_json(trace, topology, label))
    return Path(path)
