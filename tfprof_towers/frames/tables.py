"""One variant's frames, before the profile puts the variants together (:mod:`.profile`).

Trace frames come from an :class:`~tfprof_towers.trace.analysis.Analysis` (the same arrays
``analyze`` and ``report`` print from: nothing is attributed twice); run frames from the summary
``report`` computes and the variants' records.  ``device`` columns here are plain Categoricals or
strings; :mod:`.profile` gives every frame the profile's ordered dtypes.  Vectorised throughout:
the per-row Python below is per variant, finding, node or link, never per event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from tfprof_towers.frames.schema import CATEGORY, COLUMNS, IDLE_KIND, PS, TEXT
from tfprof_towers.rundir.records import VariantRecord
from tfprof_towers.trace.analysis import Analysis
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


def steps(a: Analysis) -> pd.DataFrame:
    """Each device's step windows: its own where the trace gives it some (a ``Steps`` line of its
    plane, its host's markers), else the trace's -- the windows its time is attributed in."""
    tables = [(d, a.trace.steps_of(d)) for d in a.breakdown.devices]
    return pd.DataFrame({
        "device": np.repeat(np.array([d for d, _ in tables], dtype=object), [len(s) for _, s in tables]),
        "step": np.concatenate([s.step for _, s in tables] or [np.zeros(0)]).astype(np.int64),
        "start_s": np.concatenate([s.start_ps for _, s in tables] or [np.zeros(0)]) / PS,
        "end_s": np.concatenate([s.end_ps for _, s in tables] or [np.zeros(0)]) / PS,
    })


def wall(a: Analysis) -> pd.DataFrame:
    w = a.breakdown.wall
    return pd.DataFrame({"device": w["device"], "step": w["step"],
                         "category": pd.Categorical(w["category"], dtype=CATEGORY),
                         "seconds": w["dur_ps"].to_numpy() / PS})


def total(a: Analysis) -> pd.DataFrame:
    t = a.breakdown.total
    return pd.DataFrame({"device": t["device"], "step": t["step"],
                         "category": pd.Categorical(t["category"], dtype=CATEGORY), "count": t["count"],
                         "seconds": t["dur_ps"].to_numpy() / PS, "bytes": t["bytes"]})


def idle(a: Analysis) -> pd.DataFrame:
    i = a.breakdown.idle
    return pd.DataFrame({"device": i["device"], "step": i["step"],
                         "kind": pd.Categorical(i["kind"], dtype=IDLE_KIND),
                         "seconds": i["dur_ps"].to_numpy() / PS})


def links(a: Analysis) -> pd.DataFrame:
    lk = a.links
    return pd.DataFrame({"src": lk["src"], "dst": lk["dst"], "kind": pd.Categorical(lk["kind"]),
                         "steps": np.full(len(lk), a.n_steps, dtype=np.int64), "count": lk["count"],
                         "bytes": lk["bytes"], "seconds": lk["seconds"], "gbps": lk["gbps"],
                         "measured": lk["measured"]})


# ------------------------------------------------------------------------------------------
# Run directories: the summary report computes, and the records


def memory(a: Analysis) -> pd.DataFrame:
    """One row per allocator event (``trace/memory.py``): the device it serves, bytes in use after it
    (``bytes_available`` -1 where the allocator does not say), the block and the op that asked for it."""
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
