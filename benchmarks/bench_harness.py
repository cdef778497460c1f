"""Measures the harness's own cost: whole `profile` runs' wall time, TensorFlow's and the harness's.

Whole default ``tfprof-towers profile`` runs, their wall time split into TensorFlow start-up,
graph build, first call, graph collection, warm-up, timed steps, profiled steps, trace collection,
analysis and rendering, and the rest, from the phase times the children and the parent record in
the run directory (a TF2 first call split by what graph collection was measured to add to it,
:mod:`.bench_collection`, first); the harness's own share is what a plain TensorFlow program
running the same steps would not spend (``SHARE_MEANS``), printed beside the old share; and
``profile --workers 2`` runs, split from the lead task's phases the same way.  Each run also says
how its TensorFlow children started (``run.json`` -> ``tensorflow_starts``): how many TensorFlow
imports, what the children's start-up cost, and the import-free lower bound of the whole command
(its wall time less that cost).

    python -m benchmarks.bench_harness [--preset cpu] [--profile-runs 3] [--collection-pairs 4] [--quick]

``make bench`` runs it as its second figure; run alone it writes ``reports/bench_harness.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_collection import CollectionCost, cost_of, format_collection, measure_collection
from benchmarks.common import (
    BenchOptions,
    Part,
    Spread,
    cluster_argv,
    run_alone,
    spread_json,
    timed_profile,
)
from tfprof_towers.variants.registry import BUILTIN_NAMES, CLUSTER_NAMES
from tfprof_towers.vocab import phase

HARNESS_SHARE_TARGET = 0.15  # harness's own share of a whole default profile run


# Harness-overhead categories: (label, counts as the harness's own cost?)
TF_STARTUP = "TensorFlow start-up/exit"
FIRST_CALL = "first call (trace and optimise)"
COLLECTION = "graph collection"
CATEGORIES: tuple[tuple[str, bool], ...] = (
    (TF_STARTUP, False),  # import, session + variable init, the child's exit
    ("child process start", True),  # interpreter + harness imports before main()
    ("graph build", False),  # the variant's model, strategy and step: what any program running it builds
    (FIRST_CALL, False),  # a tf.function's first call (tracing, Grappler, first step) less collection's part
    (COLLECTION, True),  # what graph collection adds to that first call (measured: bench_collection)
    ("warm-up steps", False),
    ("placement trace", True),  # the one FULL_TRACE step (tf1-graph) + reading partition graphs
    ("timed steps", False),
    ("profiled steps", False),
    ("trace collection", True),  # profiler start + stop (writes xplane.pb), in a cluster task too
    ("cluster coordination", True),  # a cluster task waiting for the capture, its peers, servers, release
    ("child bookkeeping", True),  # spec/record reading and writing in the child
    ("runner bookkeeping", True),  # parent: spec/record files, progress display
    ("setup", True),  # parent: options, run directory, run.json
    ("projection", False),  # parent: the what-if projection (graphs built in a child): product work
    ("analysis and rendering", True),  # parent: finish_run + printed summary
    ("CLI start and exit", True),  # parent interpreter, imports, exit
    ("failed variants", True),  # a variant that crashed has no phase times
)
OWN = frozenset(name for name, own in CATEGORIES if own)
#: The categories the share counted before it was defined against plain TensorFlow programs: everything
#: outside TensorFlow's start-up, the steps and the projection (printed beside the share, for comparison).
OLD_OWN = OWN | {"graph build", FIRST_CALL}
#: What "the harness's own share" counts, as the report and docs/benchmarks.md say it.
SHARE_MEANS = ("the harness's own share = what `profile` spends beyond what plain TensorFlow programs "
               "running the same variants' steps would spend: ("
               + ", ".join(n for n, own in CATEGORIES if own)
               + ") / the whole command's wall time (the sum of every category, start to exit); not "
               "counted, since a plain program pays them too: TensorFlow start-up (imports, session and "
               "strategy set-up, the wait for the fork server's import, exit), the graph build (the "
               "variant's model, strategy and step), a tf.function's first call (tracing, Grappler, the "
               "first step; a tf1-graph variant's first run is in its warm-up) less what graph collection "
               "adds to it, measured in paired fresh processes (bench_collection: the call times "
               "(1 - 1/ratio), the ratio of the variant's first call with collection on to off, the larger "
               "of the wall-time and CPU-time ratios), and the "
               "warm-up, timed and profiled steps; nor the projection (product work: a part of its own). "
               "A cluster run is split by its lead task's phases: the driver's and that task's process "
               "start are child process start, the task's own profiler start and stop are trace "
               "collection, its waits for the capture, its peers and the driver's release are cluster "
               "coordination, its first call is split by the ratio of every measured pair. The old "
               "share (everything outside TensorFlow start-up, the steps and the projection) is printed "
               "beside it")


def _phases(record: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in (record.get("phases_s") or {}).items()}


def variant_breakdown(record: Mapping[str, Any],
                      collection: CollectionCost | None = None) -> dict[str, float]:
    """One variant's wall time (record ``wall_s``) split into the categories above; a tf.function's first
    call split by ``collection`` (:func:`split_first_call`)."""
    wall = float(record.get("wall_s") or 0.0)
    proc = record.get("process_s")
    ph = _phases(record)
    if not proc or not ph:
        return {"failed variants": wall}
    out = {
        TF_STARTUP: ph.get(phase.TF_IMPORT, 0.0) + ph.get(phase.SESSION_INIT, 0.0)
        + ph.get(phase.LOAD_VALUES, 0.0) + ph.get(phase.DEVICES, 0.0) + proc["exit"],
        "child process start": proc["start"],
        "graph build": ph.get(phase.BUILD, 0.0),
        # the math steps and a tf.function's second call are warm-up steps
        "warm-up steps": ph.get(phase.WARMUP, 0.0) + ph.get(phase.MATH, 0.0) + ph.get(phase.SECOND_CALL, 0.0),
        **split_first_call(collection, str(record.get("name") or ""),
                           ph.get(phase.FIRST_CALL_PLACEMENT, 0.0)),
        # a tf1-graph variant's one FULL_TRACE step, and reading the partition graphs (both families)
        "placement trace": ph.get(phase.PLACEMENT_TRACE, 0.0) + ph.get(phase.PLACEMENT_EXTRACT, 0.0),
        "timed steps": ph.get(phase.TIMED, 0.0),
        "profiled steps": ph.get(phase.PROFILED, 0.0),
        "trace collection": ph.get(phase.PROFILER_START, 0.0) + ph.get(phase.COLLECT, 0.0),
    }
    out["child bookkeeping"] = max(0.0, wall - sum(out.values()))
    return out


def split_first_call(collection: CollectionCost | None, variant: str,
                     first_call_s: float) -> dict[str, float]:
    """A tf.function's first call (made with graph collection on): what graph collection added, as
    ``collection`` measured it (:meth:`~benchmarks.bench_collection.CollectionCost.cost`; with nothing
    measured, the whole call), and the rest, TensorFlow's first call."""
    cost = min(first_call_s, cost_of(collection, variant, first_call_s))
    return {FIRST_CALL: first_call_s - cost, COLLECTION: cost}


#: A cluster task's phases (capture.cluster.task) -> the categories above.
CLUSTER_PHASES: dict[str, tuple[str, ...]] = {
    TF_STARTUP: (phase.TF_IMPORT, phase.STRATEGY_INIT, phase.SERVER_START, phase.COORDINATOR_INIT),
    "graph build": (phase.BUILD,),
    "warm-up steps": (phase.WARMUP, phase.FIRST_CALL, phase.SECOND_CALL),
    "placement trace": (phase.PLACEMENT_EXTRACT,),  # its first call: split_first_call
    "timed steps": (phase.TIMED,),
    "profiled steps": (phase.PROFILED,),
    # each captured task runs its own profiler session: its start, and its stop that writes the trace
    "trace collection": (phase.PROFILER_START, phase.COLLECT),
    # waits for the capture's start, for peers, for servers, and for the driver's release at the end
    "cluster coordination": (phase.WAIT_CAPTURE, phase.WAIT_PEERS, phase.WAIT_SERVERS, phase.WAIT_RELEASE),
}


#: Where profile_once puts the lead task's ``clock_unix`` (from its record in the attempt folder).
LEAD_CLOCK = "lead_clock_unix"


def cluster_breakdown(record: Mapping[str, Any],
                      collection: CollectionCost | None = None) -> dict[str, float]:
    """A cluster variant's wall time split as :func:`variant_breakdown` splits one child's: from its
    first stepping task's phases (every task runs at once, so one task's time is the variant's).

    The driver child's spawn-to-main() (which holds its wait for the fork server's TensorFlow import)
    is "child process start", as for any variant, and its exit is TensorFlow's; with the lead task's
    clock (``LEAD_CLOCK``), the time from the driver's main() to the task's main() (the task's
    interpreter and harness imports) is "child process start" too; what is left is the driver's and
    the task's own bookkeeping.
    """
    wall = float(record.get("wall_s") or 0.0)
    lead = lead_task(record)
    if lead is None or record.get("status") != "ok":
        return {"failed variants": wall}
    ph = {k: float(v) for k, v in lead["phases_s"].items()}
    out = {cat: sum(ph.get(k, 0.0) for k in keys) for cat, keys in CLUSTER_PHASES.items()}
    # no pair measured a cluster task's first call: every pair's ratio (CollectionCost.pooled)
    out.update(split_first_call(collection, "", ph.get(phase.FIRST_CALL_PLACEMENT, 0.0)))
    proc = record.get("process_s") or {}
    out[TF_STARTUP] += float(proc.get("exit") or 0.0)
    task_start = _task_start(record.get("clock_unix") or {}, record.get(LEAD_CLOCK) or {})
    out["child process start"] = float(proc.get("start") or 0.0) + task_start
    out["child bookkeeping"] = max(0.0, wall - sum(out.values()))  # the driver's and the task's own work
    return out


def lead_task(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A cluster record's first stepping task (chief or worker) that has phase times."""
    tasks = [t for t in (record.get("cluster") or {}).get("tasks") or () if t.get("phases_s")]
    return next((t for t in tasks if str(t.get("task", "")).startswith(("chief", "worker"))), None)


def _task_start(driver: Mapping[str, Any], task: Mapping[str, Any]) -> float:
    """Seconds from the driver's main() to the lead task's main() (0 without both clocks)."""
    if not driver.get("main_start") or not task.get("main_start"):
        return 0.0
    return max(0.0, float(task["main_start"]) - float(driver["main_start"]))


def run_breakdown(run_doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                  total_wall_s: float, collection: CollectionCost | None = None) -> dict[str, float]:
    """A whole `profile` run's wall time split into CATEGORIES (seconds; sums to the total); the first
    calls split by ``collection`` (None: counted whole as graph collection)."""
    parts = dict.fromkeys((name for name, _ in CATEGORIES), 0.0)
    for rec in records:
        split = cluster_breakdown if rec.get("family") == "cluster" else variant_breakdown
        for k, v in split(rec, collection).items():
            parts[k] += v
    # the fork server's one import is spent while the first child waits to start: TensorFlow's
    # start-up, not the harness's (a child started fresh imports it in its tf_import phase)
    server_import = min(float((run_doc.get("tensorflow_starts") or {}).get("import_s") or 0.0),
                        parts["child process start"])
    parts["child process start"] -= server_import
    parts[TF_STARTUP] += server_import
    harness = run_doc.get("harness_s") or {}
    variants_wall = float(harness.get("variants", 0.0))
    parts["runner bookkeeping"] = max(0.0, variants_wall - sum(float(r.get("wall_s") or 0) for r in records))
    parts["setup"] = float(harness.get("setup", 0.0))
    parts["projection"] = float(harness.get("projection", 0.0))  # inside "finish"
    parts["analysis and rendering"] = float(harness.get("finish", 0.0)) - parts["projection"]
    inside = parts["setup"] + variants_wall + parts["projection"] + parts["analysis and rendering"]
    parts["CLI start and exit"] = max(0.0, total_wall_s - inside)
    return parts


def own_share(parts: Mapping[str, float], own: frozenset[str] = OWN) -> float:
    """The harness's own categories (``own``; :data:`OLD_OWN` for the old share) over all CATEGORIES
    (other keys, such as ``tf_start_s``, ignored)."""
    names = {name for name, _ in CATEGORIES}
    total = sum(v for k, v in parts.items() if k in names)
    return sum(v for k, v in parts.items() if k in own) / total if total > 0 else 0.0


def profile_once(opts: BenchOptions, out: Path, argv: Sequence[str] = (),
                 env: Mapping[str, str] | None = None,
                 collection: CollectionCost | None = None) -> dict[str, float]:
    """One whole `profile` run, timed and split into CATEGORIES, with how its TensorFlow started."""
    total = timed_profile(opts, out, argv, env)
    run_doc = json.loads((out / "run.json").read_text())
    records = [with_lead_clock(json.loads(p.read_text()), p.parent)
               for p in sorted(out.glob("variants/*/record.json"))]
    parts = run_breakdown(run_doc, records, total, collection)
    return {**parts, "total": total, **tensorflow_starts(run_doc, records, total)}


def with_lead_clock(record: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A cluster variant's record with its lead task's ``clock_unix`` (from the last attempt's task
    record) under ``LEAD_CLOCK``; any other record as it is."""
    if record.get("family") != "cluster":
        return record
    lead = lead_task(record)
    attempts = (record.get("cluster") or {}).get("attempts") or ()
    if lead is None or not attempts:
        return record
    from tfprof_towers.capture.cluster.docs import task_dir
    from tfprof_towers.capture.cluster.spec import TaskId

    attempt = folder / str(attempts[-1].get("folder", ""))
    path = task_dir(attempt, TaskId.parse(str(lead["task"]))) / "record.json"
    try:
        clock = json.loads(path.read_text()).get("clock_unix") or {}
    except (OSError, ValueError):
        return record
    return {**record, LEAD_CLOCK: clock}


def tensorflow_starts(run_doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                      total: float) -> dict[str, float]:
    """How a run's TensorFlow children started: ``tf_imports`` (run.json's count), ``tf_start_s`` (what
    the variants' children spent before their first line of work: spawn to main(), which holds the
    wait for the fork server's import, plus their own ``tf_import`` phase, which holds the import of
    a child started fresh), and ``lower_bound_s``, the whole command less that: what it would take
    if no child ever waited on an import (the projection's builders are not counted: a lower bound)."""
    starts = run_doc.get("tensorflow_starts") or {}
    start_s = sum(float((r.get("process_s") or {}).get("start") or 0.0)
                  + float((r.get("phases_s") or {}).get(phase.TF_IMPORT) or 0.0) for r in records)
    return {"tf_imports": float(starts.get("imports") or 0), "tf_start_s": start_s,
            "server_import_s": float(starts.get("import_s") or 0.0),
            "lower_bound_s": max(0.0, total - start_s)}


def measure_harness(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    runs: list[dict[str, float]] = []
    cluster_runs: list[dict[str, float]] = []
    single_machine = [v for v in opts.variants if v not in CLUSTER_NAMES]
    argv = [] if tuple(single_machine) == BUILTIN_NAMES else ["--variants", ",".join(single_machine)]
    clusters = [v for v in opts.variants if v in CLUSTER_NAMES]
    if (opts.profile_runs if single_machine else 0) + (opts.cluster_runs if clusters else 0) < 1:
        return {"skipped": "--profile-runs 0"}
    measured = measure_collection(opts, say)  # what graph collection adds to a TF2 first call
    collection = CollectionCost.of(measured)
    with tempfile.TemporaryDirectory(prefix="tfprof-bench-runs-") as tmp:
        for i in range(opts.profile_runs if single_machine else 0):
            say(f"  harness overhead: `profile --preset {opts.preset}`, run {i + 1}/{opts.profile_runs} ...")
            runs.append(profile_once(opts, Path(tmp) / f"run{i}", argv, collection=collection))
        for i in range(opts.cluster_runs if clusters else 0):
            say(f"  harness overhead: `profile {' '.join(cluster_argv(clusters[0]))}`, run {i + 1} ...")
            cluster_runs.append(profile_once(opts, Path(tmp) / f"cluster{i}", cluster_argv(clusters[0]),
                                             collection=collection))
    for r in (*runs, *cluster_runs):
        with_shares(r)
    keys = [name for name, _ in CATEGORIES] + ["total", "own_share", "old_share", "tf_imports", "tf_start_s",
                                                "lower_bound_s"]
    cluster = None if not cluster_runs else {
        "command": f"profile --preset {opts.preset} {' '.join(cluster_argv(clusters[0]))}",
        "runs": cluster_runs,
        "spread": {k: spread_json(Spread.of(r[k] for r in cluster_runs)) for k in keys},
    }
    return {"cluster": cluster, "graph_collection": measured,
        "method": "whole default `tfprof-towers profile` runs; phase times from run.json and each "
                  "variant's record.json; a TF2 first call split by the measured graph collection's cost",
        "share_means": SHARE_MEANS,
        "preset": opts.preset, "target_share": HARNESS_SHARE_TARGET,
        "own_categories": sorted(OWN),
        "runs": runs,
        "spread": {k: spread_json(Spread.of(r[k] for r in runs)) for k in keys},
        "meets_target": max(r["own_share"] for r in (*runs, *cluster_runs)) <= HARNESS_SHARE_TARGET,
    }


def with_shares(run: dict[str, float]) -> dict[str, float]:
    """``run`` (a :func:`profile_once` dict) with ``own_share`` and ``old_share`` added (in place)."""
    parts = {k: v for k, v in run.items() if k != "total"}
    run["own_share"] = own_share(parts)
    run["old_share"] = own_share(parts, OLD_OWN)
    return run


def format_harness(doc: Mapping[str, Any]) -> list[str]:
    lines = format_collection(doc["graph_collection"]) if doc.get("graph_collection") else []
    lines += _format_runs(f"whole `profile --preset {doc['preset']}` runs ({len(doc['runs'])})",
                         doc["spread"]) if doc["runs"] else []
    cluster = doc.get("cluster")
    if cluster:
        lines += _format_runs(f"`{cluster['command']}` runs ({len(cluster['runs'])})", cluster["spread"])
    lines += [f"  {line}" for line in textwrap.wrap(doc.get("share_means") or SHARE_MEANS, 100)]
    lines.append(f"  target: the harness's own share <= {HARNESS_SHARE_TARGET:.0%} in every run: "
                 f"{'met' if doc['meets_target'] else 'MISSED'}")
    return lines


def _format_runs(what: str, sp: Mapping[str, Any]) -> list[str]:
    lines = [f"Harness overhead: {what}, seconds min / median / max"]
    for name, own in CATEGORIES:
        s = sp.get(name)
        if s and s["max"] > 0:
            tag = ("harness" if own else "product work, its own part" if name == "projection"
                   else "TensorFlow's (a plain program pays it; the old share counted it)" if name in OLD_OWN
                   else "")
            lines.append(f"  {name:<32} {Spread(**s).fmt(2):>22}  {tag}")
    if sp.get("total"):
        lines.append(f"  {'total':<32} {Spread(**sp['total']).fmt(2):>22}")
    if sp.get("own_share"):
        lines.append(f"  harness's own share: {Spread(**sp['own_share']).fmt(1, 100, ' %')}")
    if sp.get("old_share"):
        lines.append(f"  the old share (everything outside TensorFlow start-up, the steps and the "
                     f"projection; not a speed-up): {Spread(**sp['old_share']).fmt(1, 100, ' %')}")
    if sp.get("tf_imports") and sp.get("total"):
        lines.append(f"  TensorFlow imports {Spread(**sp['tf_imports']).fmt(0)}; the children's start-up "
                     f"{Spread(**sp['tf_start_s']).fmt(2)} s; import-free lower bound "
                     f"{Spread(**sp['lower_bound_s']).fmt(2)} s (the whole command less that start-up)")
    return lines


#: This figure as a part of a bench run (its functions looked up when called, so a test may replace them).
PART = Part("harness_overhead", lambda opts, say: measure_harness(opts, say), lambda doc: format_harness(doc))


def main(argv: Sequence[str] | None = None) -> int:
    """Measures this figure alone and writes ``reports/bench_harness.json``."""
    return run_alone("harness", PART, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
