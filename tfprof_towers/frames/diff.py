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
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from tfprof_towers.frames.noise import ALPHA, mann_whitney
from tfprof_towers.frames.profile import RUN, TRACE, VARIANT, Part, Profile
from tfprof_towers.frames.schema import PS
from tfprof_towers.vocab.categories import TIME_CATEGORIES
from tfprof_towers.vocab.errors import TowersError

if TYPE_CHECKING:
    from tfprof_towers.trace.analysis import Analysis
    from tfprof_towers.trace.pod import PodAnalysis

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
    def analysed(self) -> Analysis | PodAnalysis | None:
        """The part's trace analysis: its hosts' results for a trace or logdir, else its analysis."""
        return self.part.pod if self.part.pod is not None else self.part.analysis

    @property
    def n_steps(self) -> int:
        a = self.analysed
        return a.n_steps if a is not None else 0

    def samples(self) -> tuple[list[float], str]:
        """Every timed step's duration, and where they come from."""
        timed = self.timed()
        if timed:
            return timed, TIMED
        windows = self.windows()
        if windows:
            return windows, WINDOWS
        return [], "no step times"

    def timed(self) -> list[float]:
        """The record's timed steps (none for a trace, or a record without them)."""
        rec = self.part.record
        return list(rec.timings.step_times_s) if rec is not None and rec.timings.step_times_s else []

    def windows(self) -> list[float]:
        """The trace's step windows, seconds (none without a trace)."""
        a = self.analysed
        table = None if a is None else a.step_table if self.part.pod is not None else a.trace.step_table
        return (table.window_ps / PS).tolist() if table is not None and len(table) else []


#: Where a side's step times come from.
TIMED, WINDOWS = "timed steps (record.json)", "the trace's step windows"


def like_samples(b: Side, n: Side) -> tuple[list[float], list[float], str, str | None]:
    """BASE's and NEW's step times from the same source -- timed steps on both sides, else the trace's
    step windows on both -- where they come from, and why they cannot be compared (None: they can).
    A side whose timed steps are missing is never compared by its trace windows against the other's
    timed steps: a profiled window is not a timed step."""
    xs, src_b = b.samples()
    ys, src_n = n.samples()
    if src_b == src_n or not xs or not ys:
        return xs, ys, src_b if src_b == src_n else f"BASE: {src_b}; NEW: {src_n}", None
    wb, wn = b.windows(), n.windows()
    if wb and wn:
        return wb, wn, f"{WINDOWS} (one side has no {TIMED})", None
    has = "BASE" if src_b == TIMED else "NEW"
    other = "NEW" if has == "BASE" else "BASE"
    return [], [], f"BASE: {src_b}; NEW: {src_n}", (
        f"{has} has {TIMED} and {other} only {WINDOWS}, and {has} has no trace to compare windows with: "
        "unlike samples, not compared")


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
    """The two sides' step times compared: like with like (:func:`like_samples`)."""
    xs, ys, source, unlike = like_samples(b, n)
    test = mann_whitney(xs, ys)
    mb = float(np.median(xs)) if xs else None
    mn = float(np.median(ys)) if ys else None
    change = (mn - mb) / mb * 100.0 if mb and mn is not None else None
    return {"base_median_s": mb, "new_median_s": mn, "change_pct": change,
            "beyond_noise": test.beyond_noise(alpha), "alpha": alpha, "test": test.to_json(),
            "samples": source, "base_steps_s": xs, "new_steps_s": ys,
            **({"unlike": unlike} if unlike else {})}


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
        a = s.analysed
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
    from tfprof_towers.analysis.samemath import Reference, compare_numbers
    from tfprof_towers.rundir import nonfinite

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
    norm = nonfinite.restore(en, "grad_norm")  # a NaN is written as null and named in "not_finite"
    losses = tuple(float(x) for x in nonfinite.restore(en, "losses") or ())
    c = compare_numbers(losses, None if norm is None else float(norm),
                        Reference(b.name, tuple(lb), eb.get("grad_norm"), "BASE"), loss_rtol, norm_rtol)
    doc.update(same=not c.differs, loss_rel_diff=list(c.loss_rel_diff),
               grad_norm_rel_diff=c.grad_norm_rel_diff,
               loss_rtol=loss_rtol, grad_norm_rtol=norm_rtol)
    return doc


def no_data(s: Side) -> str | None:
    """Why a side has nothing to compare (it did not run, or its trace could not be analysed); None
    when it has data."""
    entry = s.part.entry or {}
    status = entry.get("status")
    if status not in (None, "ok"):
        return str(status)  # the reason is the pair's ``base_error``/``new_error``
    if s.analysed is None and not s.samples()[0]:
        return "no trace and no step times"
    return None


def diff_pair(b: Side, n: Side, alpha: float = ALPHA) -> dict[str, Any]:
    """One pair compared.  When a side has no data (``no_data``), only its status and reason: no
    change tables against nothing (every row would read "after 0 s")."""
    eb, en = b.part.entry or {}, n.part.entry or {}
    doc: dict[str, Any] = {"base": b.name, "new": n.name, "base_status": eb.get("status"),
                           "new_status": en.get("status"), "base_error": eb.get("error"),
                           "new_error": en.get("error"), "steps": {"base": b.n_steps, "new": n.n_steps},
                           "step_time": step_time(b, n, alpha)}
    missing = {side: why for side, why in (("BASE", no_data(b)), ("NEW", no_data(n))) if why}
    doc["no_data"] = missing
    if missing:
        return doc | {"devices": [], "ops": {"op_type": [], "op": []}, "placement_moves": [], "links": [],
                      "memory": [], "findings": {"appeared": [], "gone": [], "kept": []},
                      "math": {"same": None, "why": f"{' and '.join(missing)} did not run"}}
    return doc | {"devices": devices(b, n), "ops": ops(b, n), "placement_moves": placement_moves(b, n),
                  "links": links(b, n), "memory": memory(b, n), "findings": findings(b, n),
                  "math": math(b, n)}


#: The gate's outcome per variant (:func:`judge`).
SLOWER, REGRESSED, INCONCLUSIVE = "slower", "regressed", "inconclusive"
PASSED, NOT_GATED = "passed", "not gated"


@dataclass(frozen=True)
class Verdict:
    """What the gate decided for one variant, and why (one line)."""

    variant: str
    outcome: str  # SLOWER | REGRESSED | INCONCLUSIVE | PASSED | NOT_GATED
    why: str

    def to_json(self) -> dict[str, str]:
        return {"variant": self.variant, "outcome": self.outcome, "why": self.why}


def more_samples_hint(samples: str, kind: str) -> str:
    """The option that gives the compared samples more steps: ``--steps`` for a run's timed steps,
    ``--profile-steps`` for a run's trace windows, a longer capture for traces from elsewhere."""
    if "record.json" in samples and "step windows" not in samples:
        return f"profile both sides with more --steps ({_REACH})"
    if kind == TRACE:
        return f"capture more steps in each trace ({_REACH})"
    return f"profile both sides with more --profile-steps (the trace's steps are the samples; {_REACH})"


#: The smallest sizes at which the exact test can give p < 0.05: 4 and 4 (2 / C(8, 4) = 0.029).
_REACH = "p < 0.05 needs at least 4 steps a side, and more to find a small change"


def slower(pair: Mapping[str, Any], pct: float) -> bool:
    """NEW's median step time is more than ``pct`` % above BASE's, and beyond noise."""
    st = pair["step_time"]
    return bool(st["change_pct"] is not None and st["change_pct"] > pct and st["beyond_noise"])


def judge(pair: Mapping[str, Any], pct: float, kind: str = RUN) -> Verdict:
    """The gate on one pair of variants.

    * BASE ran and NEW did not (failed, skipped, an unreadable or invalid ``record.json``): REGRESSED,
      with NEW's reason; a BASE that did not run is NOT_GATED (nothing to regress from).
    * Enough steps for the Mann–Whitney test to reach alpha: SLOWER when the median is more than
      ``pct`` % slower and the change is beyond noise, else PASSED.
    * Too few steps for the test ever to reach alpha (3 and 3 steps: p >= 0.1), a rule that needs no
      p-value: SLOWER when every NEW step is more than ``pct`` % slower than every BASE step
      (``min(NEW) > max(BASE) * (1 + pct / 100)``); PASSED when every NEW step is within ``pct`` % of
      the fastest BASE step (``max(NEW) <= min(BASE) * (1 + pct / 100)``); otherwise INCONCLUSIVE,
      which fails the gate unless ``--allow-inconclusive``.  This is what asv does when its samples
      are too few for its Mann–Whitney test (``asv.statistics.is_different`` runs the test only when
      ``p_min`` can reach the threshold, else calls two results different only when their
      confidence intervals do not overlap), with the samples' range as the interval; and the
      failing half is a stricter form of pytest-benchmark's ``--benchmark-compare-fail=min:PCT%``
      (NEW's fastest step against BASE's slowest, not its fastest).
    """
    name, st = str(pair["new"]), pair["step_time"]
    bs, ns = pair.get("base_status"), pair.get("new_status")
    if bs not in (None, "ok"):
        why = pair.get("base_error") or "no reason given"
        return Verdict(name, NOT_GATED, f"BASE did not run ({bs}: {why})")
    if ns not in (None, "ok"):
        return Verdict(name, REGRESSED, f"ok -> {ns}: {pair.get('new_error') or 'no reason given'}")
    xs, ys = st["base_steps_s"], st["new_steps_s"]
    bad = [side for side, v in (("BASE", xs), ("NEW", ys)) if not np.isfinite(np.asarray(v, float)).all()]
    if bad:
        return Verdict(name, REGRESSED, f"a step time on {' and '.join(bad)} is not a finite number")
    if st.get("unlike"):
        return Verdict(name, INCONCLUSIVE, str(st["unlike"]))
    if not xs or not ys:
        side = "either side" if not xs and not ys else "BASE" if not xs else "NEW"
        return Verdict(name, INCONCLUSIVE, f"no step times on {side}")
    change = f"median {st['change_pct']:+.1f}%" if st["change_pct"] is not None else "median unknown"
    test = st["test"]
    if test["p"] is not None and (test["min_p"] is None or test["min_p"] < st["alpha"]):
        p = f"p = {test['p']:.3g}"
        if slower(pair, pct):
            return Verdict(name, SLOWER, f"{change}, beyond noise ({p}), more than {pct:g}%")
        return Verdict(name, PASSED, f"{change}, {'beyond' if st['beyond_noise'] else 'within'} noise ({p})")
    factor = 1.0 + pct / 100.0
    steps = f"{len(xs)} and {len(ys)} steps can never reach p < {st['alpha']:g}"
    if min(ys) > max(xs) * factor:
        return Verdict(name, SLOWER, f"{change}: every NEW step is more than {pct:g}% slower than every "
                                     f"BASE step ({steps}: decided without a p-value)")
    if max(ys) <= min(xs) * factor:
        return Verdict(name, PASSED, f"{change}: every NEW step is within {pct:g}% of the fastest BASE step "
                                     f"({steps}: decided without a p-value)")
    return Verdict(name, INCONCLUSIVE, f"{change}; {steps} and the steps of the two sides overlap: "
                                       f"{more_samples_hint(str(st['samples']), kind)}")


def gate(pairs_: Sequence[Mapping[str, Any]], only_in_base: Sequence[Mapping[str, Any]], pct: float,
         kind: str = RUN, allow_inconclusive: bool = False) -> dict[str, Any]:
    """Every verdict, and the variants per outcome (``slower`` and ``regressed`` fail the gate;
    ``inconclusive`` fails it too unless allowed)."""
    verdicts = [judge(p, pct, kind) for p in pairs_]
    for e in only_in_base:  # ok -> missing: the variant is gone from NEW
        if e.get("status") in (None, "ok"):
            verdicts.append(Verdict(str(e["name"]), REGRESSED, "ok -> missing: not in NEW"))
    doc: dict[str, Any] = {"fail_if_slower_pct": pct, "allow_inconclusive": allow_inconclusive,
                           "verdicts": [v.to_json() for v in verdicts]}
    for outcome in (SLOWER, REGRESSED, INCONCLUSIVE, PASSED, NOT_GATED):
        doc[outcome.replace(" ", "_")] = [v.variant for v in verdicts if v.outcome == outcome]
    if not any(v.outcome != NOT_GATED for v in verdicts):
        doc["inconclusive_all"] = "no variant could be gated: none ran on BASE"
    return doc


def gate_failed(g: Mapping[str, Any]) -> str | None:
    """``"slower"`` (exit 5), ``"inconclusive"`` (exit 6) or None (pass)."""
    if g["slower"] or g["regressed"]:
        return SLOWER
    if (g["inconclusive"] or g.get("inconclusive_all")) and not g.get("allow_inconclusive"):
        return INCONCLUSIVE
    return None


def diff(base: Profile, new: Profile, only: Sequence[str] = (), alpha: float = ALPHA,
         fail_if_slower: float | None = None, allow_inconclusive: bool = False) -> dict[str, Any]:
    """The whole comparison as one document (module docstring); ``gate`` with ``fail_if_slower``."""
    chosen, notes = pairs(base, new, only)
    compared = [diff_pair(b, n, alpha) for b, n in chosen]
    notes = [f"BASE: {x}" for x in base.notes] + [f"NEW: {x}" for x in new.notes] + notes
    doc: dict[str, Any] = {"base": base.source, "new": new.source, "kind": base.kind, "alpha": alpha,
                           "notes": notes, "pairs": compared}
    if fail_if_slower is not None:
        gone = [] if only or base.kind != RUN else [
            {"name": p.name, "status": (p.entry or {}).get("status")}
            for p in base.parts if p.name not in new.variant_names]
        doc["gate"] = gate(compared, gone, fail_if_slower, base.kind, allow_inconclusive)
    return doc
