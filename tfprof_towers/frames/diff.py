"""What changed between two profiles: ``tfprof-towers diff BASE NEW``.

BASE and NEW are loaded with :func:`~.profile.load` and must be of one kind: two run directories
(every variant present in both is compared), two variants (``RUN/variants/A`` and ``RUN/variants/B``)
or two traces / logdirs.  For each pair of variants, :func:`diff_pair` reports the step time (medians,
the change in %, and whether it is beyond noise: :mod:`.noise`), then what changed per device and
category, per op type and op (Holistic Trace Analysis's TraceDiff idea), in placement, links and
findings, and whether the losses are still the same (one function below each).

The result is one JSON-able document (:func:`diff`); :mod:`.diff_view` prints and renders it.
No TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tfprof_towers.frames.noise import ALPHA, mann_whitney
from tfprof_towers.frames.profile import RUN, TRACE, VARIANT, Part, Profile
from tfprof_towers.frames.schema import PS
from tfprof_towers.vocab.categories import TIME_CATEGORIES
from tfprof_towers.vocab.errors import TowersError

#: Rows each ranked table keeps (the JSON keeps them all for placement moves).
TOP = 10
#: Partition-graph plumbing, not the user's ops (their names differ run to run).
PLUMBING = frozenset({"_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval", "NoOp"})


@dataclass(frozen=True)
class Side:
    """One variant of one profile, and the profile's frames cut to it."""

    profile: Profile
    part: Part

    @property
    def name(self) -> str:
        return self.part.name

    def frame(self, frame: str) -> pd.DataFrame:
        df = getattr(self.profile, frame)
        return df[df["variant"] == self.name]

    @property
    def n_steps(self) -> int:
        a = self.part.analysis
        return a.n_steps if a is not None else 0

    def samples(self) -> tuple[list[float], str]:
        """Every timed step's duration, and where they come from."""
        rec = self.part.record
        if rec is not None and rec.timings.step_times_s:
            return list(rec.timings.step_times_s), "timed steps (record.json)"
        a = self.part.analysis
        if a is not None and len(a.trace.step_table):
            return (a.trace.step_table.window_ps / PS).tolist(), "the trace's step windows"
        return [], "no step times"


def pairs(base: Profile, new: Profile, only: Sequence[str] = ()) -> tuple[list[tuple[Side, Side]], list[str]]:
    """The pairs of variants to compare, and notes (variants only one side has)."""
    if base.kind != new.kind:
        raise TowersError(f"diff: BASE is a {_kind_text(base.kind)} and NEW a {_kind_text(new.kind)}; "
                          "compare two run directories, two variants or two traces")
    if base.kind in (TRACE, VARIANT):
        if only:
            raise TowersError("diff: --variant applies to two run directories")
        return [(Side(base, base.parts[0]), Side(new, new.parts[0]))], []
    names_b, names_n = base.variant_names, new.variant_names
    for n in only:
        missing = [side for side, names in (("BASE", names_b), ("NEW", names_n)) if n not in names]
        if missing:
            raise TowersError(f"diff: variant {n} is missing from {' and '.join(missing)}")
    common = [n for n in names_b if n in names_n and (not only or n in only)]
    if not common:
        raise TowersError(f"diff: the runs have no variant in common (BASE: {', '.join(names_b) or 'none'}; "
                          f"NEW: {', '.join(names_n) or 'none'})")
    notes = [f"only in BASE: {n}" for n in names_b if n not in names_n and not only]
    notes += [f"only in NEW: {n}" for n in names_n if n not in names_b and not only]
    return [(Side(base, base.part(n)), Side(new, new.part(n))) for n in common], notes


def _kind_text(kind: str) -> str:
    return {RUN: "run directory", VARIANT: "variant directory", TRACE: "trace or logdir"}[kind]


def step_time(b: Side, n: Side, alpha: float = ALPHA) -> dict[str, Any]:
    xs, src_b = b.samples()
    ys, src_n = n.samples()
    test = mann_whitney(xs, ys)
    mb = float(np.median(xs)) if xs else None
    mn = float(np.median(ys)) if ys else None
    change = (mn - mb) / mb * 100.0 if mb and mn is not None else None
    return {"base_median_s": mb, "new_median_s": mn, "change_pct": change,
            "beyond_noise": test.beyond_noise(alpha), "alpha": alpha, "test": test.to_json(),
            "samples": src_b if src_b == src_n else f"BASE: {src_b}; NEW: {src_n}",
            "base_steps_s": xs, "new_steps_s": ys}


def _per_step(df: pd.DataFrame, keys: list[str], values: list[str], steps: int) -> pd.DataFrame:
    if not len(df) or not steps:
        return pd.DataFrame({**{k: pd.Series(dtype=object) for k in keys},
                             **{v: pd.Series(dtype=np.float64) for v in values}})
    out = df.astype({k: str for k in keys}).groupby(keys, observed=True)[values].sum().reset_index()
    out[values] = out[values].astype(np.float64) / steps
    return out


def _compare(base: pd.DataFrame, new: pd.DataFrame, keys: list[str], values: list[str], by: str,
             top: int | None = TOP) -> list[dict[str, Any]]:
    """Rows of ``keys`` with each value ``base_<v>``, ``new_<v>``, ``change`` (of ``by``), biggest first."""
    m = base.merge(new, on=keys, how="outer", suffixes=("_base", "_new"))
    for v in values:
        m[f"base_{v}"] = m.pop(f"{v}_base").fillna(0.0)
        m[f"new_{v}"] = m.pop(f"{v}_new").fillna(0.0)
    m["change"] = m[f"new_{by}"] - m[f"base_{by}"]
    m = m[(m[f"base_{by}"] != 0) | (m[f"new_{by}"] != 0)]
    m = m.assign(_abs=m["change"].abs()).sort_values(["_abs", *keys], ascending=[False] + [True] * len(keys))
    m = m.drop(columns="_abs")
    if top is not None:
        m = m.head(top)
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in m.to_dict("records")]


def devices(b: Side, n: Side) -> list[dict[str, Any]]:
    """Per device and category: wall seconds per step before and after."""
    keys = ["device", "category"]
    return _compare(_per_step(b.frame("wall"), keys, ["seconds"], b.n_steps),
                    _per_step(n.frame("wall"), keys, ["seconds"], n.n_steps), keys, ["seconds"], "seconds",
                    top=None)


def _op_events(s: Side) -> pd.DataFrame:
    ev = s.frame("events")
    ev = ev[ev["category"].isin(TIME_CATEGORIES) & (ev["step"] >= 0)]
    node = ev["node"].astype(str)
    name = node.where(node != "", ev["name"].astype(str))
    return pd.DataFrame({"op_type": ev["op_type"].astype(str), "op": name, "count": np.ones(len(ev)),
                         "seconds": ev["dur_s"].to_numpy()})


def ops(b: Side, n: Side) -> dict[str, list[dict[str, Any]]]:
    """The op types and ops whose device time per step changed most (count and time before, after)."""
    eb, en = _op_events(b), _op_events(n)
    out = {}
    for key in ("op_type", "op"):
        vals = ["count", "seconds"]
        rows = _compare(_per_step(eb, [key], vals, b.n_steps), _per_step(en, [key], vals, n.n_steps),
                        [key], vals, "seconds", top=None)
        out[key] = [r for r in rows if r["change"] or r["base_count"] != r["new_count"]][:TOP]
    return out


def placement_moves(b: Side, n: Side) -> list[dict[str, Any]]:
    """Nodes on another device in NEW, the heaviest first, with what placed them on each side."""
    pb, pn = b.frame("placement"), n.frame("placement")
    if not len(pb) or not len(pn):
        return []
    cols = ["node", "op_type", "kernel", "fused", "device", "flops", "sources", "source_file", "source_line"]
    m = pb[cols].astype({"device": str}).merge(pn[cols].astype({"device": str}), on="node",
                                                suffixes=("_base", "_new"))
    m = m[(m["device_base"] != m["device_new"]) & ~m["op_type_new"].isin(PLUMBING)]
    m = m.sort_values(["flops_new", "node"], ascending=[False, True])
    return [{"node": r["node"], "op_type": r["op_type_new"], "kernel": r["kernel_new"],
             "fused": [x for x in str(r["fused_new"] or "").split("; ") if x],
             "base_device": r["device_base"], "new_device": r["device_new"], "flops": int(r["flops_new"]),
             "placed_by": _where(r["source_file_new"], r["source_line_new"]),
             "base_sources": r["sources_base"], "new_sources": r["sources_new"]}
            for r in m.to_dict("records")]


def _where(file: Any, line: Any) -> str | None:
    """``builders.py:46``: the innermost ``with tf.device`` of a node, or None."""
    if file is None or pd.isna(file):
        return None
    return f"{str(file).replace(chr(92), '/').rsplit('/', 1)[-1]}:{'' if pd.isna(line) else int(line)}"


def _links(s: Side) -> pd.DataFrame:
    lk = s.frame("links")
    df = pd.DataFrame({"src": lk["src"].astype(str), "dst": lk["dst"].astype(str),
                       "kind": lk["kind"].astype(str),
                       "bytes": lk["bytes"].astype("Float64").fillna(0.0).astype(np.float64)})
    return _per_step(df, ["src", "dst", "kind"], ["bytes"], s.n_steps)


def links(b: Side, n: Side) -> list[dict[str, Any]]:
    """Links whose bytes per step changed."""
    keys = ["src", "dst", "kind"]
    rows = _compare(_links(b), _links(n), keys, ["bytes"], "bytes", top=None)
    return [r for r in rows if r["change"] != 0]


def memory(b: Side, n: Side) -> list[dict[str, Any]]:
    """Per device either side's allocators name: its peak bytes in use on each side (None: no allocator
    events for it there) and the change, by device order."""
    from tfprof_towers.vocab.device_names import device_sort_key

    def peaks(s: Side) -> dict[str, int]:
        a = s.part.analysis
        return {d.device: d.peak_bytes for d in a.memory} if a is not None else {}

    pb, pn = peaks(b), peaks(n)
    rows = []
    for dev in sorted(set(pb) | set(pn), key=device_sort_key):
        before, after = pb.get(dev), pn.get(dev)
        change = None if before is None or after is None else after - before
        rows.append({"device": dev, "base_peak_bytes": before, "new_peak_bytes": after, "change": change,
                     "change_pct": None if change is None or not before else 100.0 * change / before})
    return rows


def findings(b: Side, n: Side) -> dict[str, list[dict[str, Any]]]:
    """Findings (by rule) that appeared in NEW or went away."""
    fb, fn = b.frame("findings"), n.frame("findings")
    rb = dict(zip(fb["rule"].astype(str), fb["message"].astype(str)))
    rn = dict(zip(fn["rule"].astype(str), fn["message"].astype(str)))
    sev = dict(zip(fb["rule"].astype(str), fb["severity"].astype(str))) | dict(
        zip(fn["rule"].astype(str), fn["severity"].astype(str)))
    return {"appeared": [{"rule": r, "severity": sev[r], "message": m} for r, m in rn.items() if r not in rb],
            "gone": [{"rule": r, "severity": sev[r], "message": m} for r, m in rb.items() if r not in rn],
            "kept": sorted(set(rb) & set(rn))}


def math(b: Side, n: Side) -> dict[str, Any]:
    """Whether NEW's first losses and step-1 gradient norm match BASE's (the ``changed_math`` tolerances)."""
    from tfprof_towers.advice.rules import RULES
    from tfprof_towers.analysis.samemath import Reference, compare

    eb, en = b.part.entry or {}, n.part.entry or {}
    lb, ln = list(eb.get("losses") or ()), list(en.get("losses") or ())
    doc: dict[str, Any] = {"base_losses": lb, "new_losses": ln, "base_grad_norm": eb.get("grad_norm"),
                           "new_grad_norm": en.get("grad_norm"), "same": None}
    if not lb or not ln:
        doc["why"] = "no losses recorded on " + ("either side" if not lb and not ln else
                                                  "BASE" if not lb else "NEW")
        return doc
    rule = next(r for r in RULES if r.name == "changed_math")
    loss_rtol, norm_rtol = rule.param("loss_rtol"), rule.param("grad_norm_rtol")
    c = compare(en, Reference(b.name, tuple(lb), eb.get("grad_norm"), "BASE"), loss_rtol, norm_rtol)
    doc.update(same=not c.differs, loss_rel_diff=list(c.loss_rel_diff),
               grad_norm_rel_diff=c.grad_norm_rel_diff,
               loss_rtol=loss_rtol, grad_norm_rtol=norm_rtol)
    return doc


def diff_pair(b: Side, n: Side, alpha: float = ALPHA) -> dict[str, Any]:
    return {"base": b.name, "new": n.name, "base_status": (b.part.entry or {}).get("status"),
            "new_status": (n.part.entry or {}).get("status"), "steps": {"base": b.n_steps, "new": n.n_steps},
            "step_time": step_time(b, n, alpha), "devices": devices(b, n), "ops": ops(b, n),
            "placement_moves": placement_moves(b, n), "links": links(b, n), "memory": memory(b, n),
            "findings": findings(b, n),
            "math": math(b, n)}


def slower(pair: Mapping[str, Any], pct: float) -> bool:
    """The gate: NEW's median step time is more than ``pct`` % above BASE's, and beyond noise."""
    st = pair["step_time"]
    return bool(st["change_pct"] is not None and st["change_pct"] > pct and st["beyond_noise"])


def diff(base: Profile, new: Profile, only: Sequence[str] = (), alpha: float = ALPHA,
         fail_if_slower: float | None = None) -> dict[str, Any]:
    """The whole comparison as one document (module docstring)."""
    chosen, notes = pairs(base, new, only)
    compared = [diff_pair(b, n, alpha) for b, n in chosen]
    doc: dict[str, Any] = {"base": base.source, "new": new.source, "kind": base.kind, "alpha": alpha,
                           "notes": notes, "pairs": compared}
    if fail_if_slower is not None:
        doc["gate"] = {"fail_if_slower_pct": fail_if_slower,
                       "slower": [p["new"] for p in compared if slower(p, fail_if_slower)],
                       "untested": [p["new"] for p in compared if p["step_time"]["beyond_noise"] is None]}
    return doc
