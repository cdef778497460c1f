"""One variant's frames, before the profile puts the variants together (:mod:`.profile`).

Trace frames come from an :class:`~tfprof_towers.trace.analysis.Analysis` (the same arrays
``analyze`` and ``report`` print from: nothing is attributed twice) or, for a trace or logdir, from a
:class:`~tfprof_towers.trace.pod.PodAnalysis` (each host's results, a few rows per device and step,
moved to the pod's clock), by the same builders; the ``events`` and ``memory`` frames, one row per
event, always come from the merged analysis, built only when they are asked for; run frames from the summary
``report`` computes and the variants' records.  ``device`` columns here are plain Categoricals or
strings; :mod:`.profile` gives every frame the profile's ordered dtypes.  Vectorised throughout:
the per-row Python below is per variant, finding, node or link, never per event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tfprof_towers.frames.schema import CATEGORY, COLUMNS, IDLE_KIND, PS, TEXT
from tfprof_towers.rundir.records import VariantRecord
from tfprof_towers.trace.analysis import Analysis
from tfprof_towers.trace.attribute import Breakdown
from tfprof_towers.trace.links import Link, links_frame
from tfprof_towers.trace.pod import PodAnalysis
from tfprof_towers.trace.steps import StepTable
from tfprof_towers.trace.tasks import hosts_of


def events(a: Analysis) -> pd.DataFrame:
    """One row per event of the trace (derived lines left out, as the analysis does)."""
    ev = a.trace.events
    c = a.trace.columns
    tasks = [h.task for h in hosts_of(a.trace)]
    task_cats = list(dict.fromkeys(tasks))
    lut = np.array([task_cats.index(t) for t in tasks], dtype=np.int32)
    host = c.host.astype(np.int64) if len(tasks) > 1 else np.zeros(c.n, dtype=np.int64)
    return pd.DataFrame({
        "task": pd.Categorical.from_codes(lut[host], categories=task_cats),
        "device": ev["device"],
        "line": ev["line"],
        "category": pd.Categorical.from_codes(ev["category"].cat.codes.to_numpy(), dtype=CATEGORY),
        "name": ev["name"],
        "op_type": ev["op_type"],
        "node": ev["tf_op"],
        "step": ev["step"],
        "start_s": ev["start_ps"].to_numpy() / PS,
        "dur_s": ev["dur_ps"].to_numpy() / PS,
        "bytes": ev["bytes"],
        "src": ev["src_device"],
        "dst": ev["dst_device"],
    }, copy=False)


def device_hosts(a: Analysis | PodAnalysis) -> dict[str, str]:
    """Each device's host (its trace file's name, :func:`~tfprof_towers.trace.tasks.hosts_of`): the host
    of its events; with one host, every device's is that host's name ("" where the trace has none).  A
    pod's: the host whose breakdown or allocators name it."""
    if isinstance(a, PodAnalysis):
        return {d: r.name for r in a.results
                for d in [*r.breakdown.devices, *(m.device for m in r.facts.memory)]}
    hosts = [h.name for h in hosts_of(a.trace)]
    c = a.trace.columns
    if len(hosts) == 1 or not c.n:
        return dict.fromkeys(a.breakdown.devices, hosts[0] if len(hosts) == 1 else "")
    pairs = np.unique(c.device.astype(np.int64) * 65536 + c.host.astype(np.int64))
    return {c.text(int(k)): hosts[int(h)] for k, h in zip((pairs >> 16).tolist(), (pairs & 0xFFFF).tolist())}


def _host_names(devices: pd.Series | np.ndarray, lookup: dict[str, str], default: str = "") -> np.ndarray:
    """The host of each of ``devices`` (``default`` for a device ``lookup`` does not name)."""
    return pd.Series(np.asarray(devices, dtype=object)).map(lookup).fillna(default).to_numpy(dtype=object)


def _categorical(names: np.ndarray, lookup: dict[str, str]) -> pd.Categorical:
    """``names`` as a Categorical: the hosts in ``lookup``'s order, then any other name."""
    return pd.Categorical(names, categories=list(dict.fromkeys([*lookup.values(), *names.tolist()])))


def _hosts(devices: pd.Series | np.ndarray, lookup: dict[str, str]) -> pd.Categorical:
    return _categorical(_host_names(devices, lookup), lookup)


def _with_host(df: pd.DataFrame, host: pd.Categorical) -> pd.DataFrame:
    """``df`` with a first column ``host``: a new frame."""
    return pd.concat([pd.DataFrame({"host": host}, index=df.index), df], axis=1)


def _link_hosts(rows: Sequence[Link], lookup: dict[str, str]) -> pd.Categorical:
    """Each link's host: where its source device is (copies, sends), else its destination (receives)."""
    src = _host_names(np.array([r.src for r in rows], dtype=object), lookup)
    dst = _host_names(np.array([r.dst for r in rows], dtype=object), lookup)
    return _categorical(np.where(src != "", src, dst), lookup)


def _steps(devices: Sequence[str], tables: Sequence[StepTable]) -> pd.DataFrame:
    return pd.DataFrame({
        "device": np.repeat(np.array(devices, dtype=object), [len(s) for s in tables]),
        "step": np.concatenate([s.step for s in tables] or [np.zeros(0)]).astype(np.int64),
        "start_s": np.concatenate([s.start_ps for s in tables] or [np.zeros(0)]) / PS,
        "end_s": np.concatenate([s.end_ps for s in tables] or [np.zeros(0)]) / PS,
    })


def _wall(b: Breakdown) -> pd.DataFrame:
    w = b.wall
    return pd.DataFrame({"device": w["device"], "step": w["step"],
                         "category": pd.Categorical(w["category"], dtype=CATEGORY),
                         "seconds": w["dur_ps"].to_numpy() / PS})


def _total(b: Breakdown) -> pd.DataFrame:
    t = b.total
    return pd.DataFrame({"device": t["device"], "step": t["step"],
                         "category": pd.Categorical(t["category"], dtype=CATEGORY), "count": t["count"],
                         "seconds": t["dur_ps"].to_numpy() / PS, "bytes": t["bytes"]})


def _idle(b: Breakdown) -> pd.DataFrame:
    i = b.idle
    return pd.DataFrame({"device": i["device"], "step": i["step"],
                         "kind": pd.Categorical(i["kind"], dtype=IDLE_KIND),
                         "seconds": i["dur_ps"].to_numpy() / PS})


def _links(rows: Sequence[Link], n_steps: int) -> pd.DataFrame:
    lk = links_frame(list(rows))
    return pd.DataFrame({"src": lk["src"], "dst": lk["dst"], "kind": pd.Categorical(lk["kind"]),
                         "steps": np.full(len(lk), n_steps, dtype=np.int64), "count": lk["count"],
                         "bytes": lk["bytes"], "seconds": lk["seconds"], "gbps": lk["gbps"],
                         "measured": lk["measured"]})


#: What a device's steps are read from: the builder's breakdown and its devices' step windows.
Build = Callable[[Breakdown, Callable[[str], StepTable]], pd.DataFrame]


def _per_device(x: Analysis | PodAnalysis, build: Build) -> pd.DataFrame:
    """``build`` on an analysis (each device's ``host``: of its events), or on each host's results of a
    pod (moved to the pod's clock), one after the other, each with its ``host``."""
    if isinstance(x, Analysis):
        df = build(x.breakdown, x.trace.steps_of)
        return _with_host(df, _hosts(df["device"], device_hosts(x)))
    names = list(dict.fromkeys(r.name for r in x.results))
    pieces = []
    for r in x.results:
        delta = x.delta_ps(r)
        df = build(r.breakdown, lambda d, r=r, delta=delta: r.device_steps.get(d, r.steps).shifted(delta))
        code = np.full(len(df), names.index(r.name), dtype=np.int32)
        pieces.append(_with_host(df, pd.Categorical.from_codes(code, categories=names)))
    return pd.concat(pieces, ignore_index=True) if len(pieces) > 1 else pieces[0]


def steps(x: Analysis | PodAnalysis) -> pd.DataFrame:
    """Each device's step windows: its own where the trace gives it some (a ``Steps`` line of its
    plane, its host's markers), else the trace's -- the windows its time is attributed in."""
    return _per_device(x, lambda b, steps_of: _steps(b.devices, [steps_of(d) for d in b.devices]))


def wall(x: Analysis | PodAnalysis) -> pd.DataFrame:
    return _per_device(x, lambda b, _: _wall(b))


def total(x: Analysis | PodAnalysis) -> pd.DataFrame:
    return _per_device(x, lambda b, _: _total(b))


def idle(x: Analysis | PodAnalysis) -> pd.DataFrame:
    return _per_device(x, lambda b, _: _idle(b))


def links(x: Analysis | PodAnalysis) -> pd.DataFrame:
    """The links (a pod's: its hosts' joined, :func:`~tfprof_towers.trace.links.join_links`), each with
    its host."""
    df = _links(x.link_rows, x.n_steps)
    return _with_host(df, _link_hosts(x.link_rows, device_hosts(x)))


# ------------------------------------------------------------------------------------------
# Run directories: the summary report computes, and the records


def memory(a: Analysis) -> pd.DataFrame:
    """One row per allocator event (``trace/allocator_events.py``): the device it serves, bytes in use
    after it (``bytes_available`` -1 where the allocator does not say), the block and the op that asked
    for it."""
    t = a.trace
    f = t.memory.frame(t.step_table, t.device_steps)
    return pd.DataFrame({
        "device": f["device"], "allocator": f["allocator"], "step": f["step"],
        "start_s": f["start_ps"].to_numpy() / PS, "activity": f["activity"],
        "bytes_in_use": f["bytes_in_use"], "bytes_available": f["bytes_available"],
        "requested_bytes": f["requested_bytes"], "allocation_bytes": f["allocation_bytes"],
        "op": f["tf_op"], "region_type": f["region_type"], "data_type": f["data_type"],
        "tensor_shape": f["tensor_shape"],
    })


def _rows(frame: str, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    cols = [c for c in COLUMNS[frame] if c != "variant"]
    dtypes = {c: t for c, t in COLUMNS[frame].items() if c != "variant" and t != "category"}
    df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)
    return df.astype(dtypes) if len(df) else df


def findings(summary: Mapping[str, Any], variant: str) -> pd.DataFrame:
    """The findings on ``variant`` (``summary.json`` -> ``findings``)."""
    return _rows("findings", [f for f in summary.get("findings") or () if f.get("variant") == variant])


def variant_row(entry: Mapping[str, Any], recommended: str | None) -> pd.DataFrame:
    """The variant's line of ``summary.json``: status, step time, speedup, rank."""
    st = entry.get("step_time_s") or {}
    bd = entry.get("breakdown") or {}
    row = {
        "status": entry.get("status"), "family": entry.get("family"), "source": entry.get("source"),
        "error": entry.get("error"), "median_s": st.get("median"), "p10_s": st.get("p10"),
        "p90_s": st.get("p90"), "min_s": st.get("min"), "max_s": st.get("max"),
        "timed_steps": int(st.get("n") or 0),
        "profiled_median_s": (entry.get("profiled_step_time_s") or {}).get("median"),
        "speedup": entry.get("speedup_vs_single"), "scaling_efficiency": entry.get("scaling_efficiency"),
        "rank": entry.get("rank"),
        "recommended": recommended is not None and recommended == entry.get("name"),
        "grad_norm": entry.get("grad_norm"),
        "trace_error": bd.get("error") if isinstance(bd, Mapping) else None,
    }
    return _rows("variants", [{k: (np.nan if v is None and k.endswith("_s") else v) for k, v in row.items()}])


def step_times(record: VariantRecord | None) -> pd.DataFrame:
    """Every timed step's duration (``timed``: un-profiled, the ranking's; ``profiled``)."""
    t = record.timings if record is not None else None
    parts = [("timed", (t.step_times_s if t else None) or ()),
             ("profiled", (t.profiled_step_times_s if t else None) or ())]
    return pd.DataFrame({
        "phase": [p for p, xs in parts for _ in xs],
        "index": np.concatenate([np.arange(len(xs), dtype=np.int64) for _, xs in parts]),
        "seconds": np.array([x for _, xs in parts for x in xs], dtype=np.float64),
    }).astype({"phase": TEXT, "index": "int64", "seconds": "float64"})


def losses(entry: Mapping[str, Any]) -> pd.DataFrame:
    """The first training steps' losses (the same-math check), step 1 first."""
    xs = entry.get("losses") or ()
    return pd.DataFrame({"step": np.arange(1, len(xs) + 1, dtype=np.int64),
                         "loss": np.array(xs, dtype=np.float64)})


def _sources(sources: Sequence[Mapping[str, Any]]) -> str:
    return "; ".join(f"{s.get('file')}:{s.get('line')} ({s.get('device')})" for s in sources)


def placement(record: VariantRecord | None) -> pd.DataFrame:
    """Each node of the partition graphs: op type, kernel, the graph ops fused into it (``fused``,
    "; "-separated: a MatMul fused into its Sigmoid's node), device, FLOPs and the ``with tf.device``
    lines that put it there (``source_file``/``source_line``: the innermost; ``sources``: all,
    innermost first)."""
    nodes = ((record.placement or {}).get("nodes") or []) if record is not None else []
    rows = []
    for n in nodes:
        src = [s for s in n.get("sources") or () if isinstance(s, Mapping)]
        rows.append({"node": n.get("name"), "op_type": n.get("type"),
                     "kernel": n.get("kernel") or n.get("type"),
                     "fused": "; ".join(str(x) for x in n.get("fused") or ()), "device": n.get("device"),
                     "requested": n.get("requested") or "", "flops": int(n.get("flops") or 0),
                     "source_file": src[0].get("file") if src else None,
                     "source_line": src[0].get("line") if src else None, "sources": _sources(src)})
    return _rows("placement", rows)
