"""Measures the profiler's overhead: profiled over un-profiled step time, per built-in variant.

In each process of a variant (:mod:`.overhead_child`), blocks of un-profiled steps alternate with
blocks of profiled steps (the harness's own recipe: ``tf.profiler.experimental.start`` with its
ProfilerOptions, ``Trace("train", step_num=i)`` markers, ``stop``).  A process's ratio is the median
over its rounds of the median profiled step time over the median un-profiled one; the figure is the
median of 3 processes' ratios (``--overhead-runs``).  Start and stop (trace collection) are timed
apart and never counted as step time.  Several tracer settings are measured the same way, so the
harness's defaults (``capture.families.PROFILER_OPTIONS``) are chosen from numbers.  A
tf2-strategy variant's step is its ``tf.function`` built as its capture child builds it; one that
needs what the machine lacks (NCCL without GPUs) is listed as skipped.  A cluster variant runs as
several processes, so it is measured in whole ``profile --workers 2`` runs whose stepping tasks run
the same paired rounds after their timed steps (``TFPROF_TOWERS_CLUSTER_OVERHEAD``; the median of
the runs' ratios).  The children are forked from a fork server (TensorFlow imported once).

    python -m benchmarks.bench_overhead [--preset cpu] [--rounds 10] [--sweep] [--quick]

``make bench`` runs it as its first figure (``python -m benchmarks.bench --only overhead`` alone);
run alone it writes ``reports/bench_overhead.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    CLUSTER_WORKERS,
    REPO,
    BenchOptions,
    Part,
    Spread,
    cluster_argv,
    median_ratio,
    ms,
    num,
    profile_argv,
    run_alone,
    spread_json,
)
from tfprof_towers.rundir.paths import write_json
from tfprof_towers.variants.config import PRESETS
from tfprof_towers.variants.registry import CLUSTER_NAMES

OVERHEAD_TARGET = 1.05  # profiled / un-profiled median step time, every variant


@dataclass(frozen=True)
class TracerConfig:
    """One setting of ``tf.profiler.experimental.ProfilerOptions`` to measure."""

    name: str
    host_tracer_level: int
    python_tracer_level: int
    device_tracer_level: int
    note: str = ""

    @property
    def usable(self) -> bool:
        """Gives the analysis what it needs: TF op events on the host plane (level >= 2;
        CPU-device ops exist only there) and GPU kernels and copies (device tracer on)."""
        return self.host_tracer_level >= 2 and self.device_tracer_level >= 1

    def options(self) -> dict[str, int]:
        return {
            "host_tracer_level": self.host_tracer_level,
            "python_tracer_level": self.python_tracer_level,
            "device_tracer_level": self.device_tracer_level,
        }


#: The settings compared with "harness" (whatever capture.families.PROFILER_OPTIONS holds:
#: host level 2, TensorFlow op events, which the analysis needs to attribute CPU-device ops).
SWEEP: tuple[TracerConfig, ...] = (
    TracerConfig("host1", 1, 0, 1, "host: user TraceMe events only (step markers)"),
    TracerConfig("host3", 3, 0, 1, "host: + verbose runtime events"),
    TracerConfig("host2+python", 2, 1, 1, "as host2, plus the Python function tracer"),
    TracerConfig("host2-device", 2, 0, 0, "as host2, without the device (CUDA/CUPTI) tracer"),
)


def flatten(blocks: Sequence[Sequence[float]]) -> list[float]:
    return [x for b in blocks for x in b]


def paired_ratios(on: Sequence[Sequence[float]], off: Sequence[Sequence[float]]) -> list[float]:
    """median(on block) / median(off block) for each adjacent pair of blocks."""
    return [r for r in (median_ratio(a, b) for a, b in zip(on, off)) if r is not None]


def overhead_figures(samples: Mapping[str, Any]) -> dict[str, Any]:
    """One tracer setting's measurements (blocks of step times, start/stop times) -> its figures.

    Each round holds an un-profiled and a profiled block run back to back, so
    their ratio sees the same machine; ``ratio`` is the median of these paired
    ratios (a burst of load elsewhere spoils a pair or two, not the median), and
    ``rounds`` their min / median / max.  ``pooled_ratio`` is the median of all
    profiled steps over the median of all un-profiled ones; ``cpu_ratio`` is the
    paired ratio of process CPU time per step (all threads), which other
    processes' load hardly moves.
    """
    on, off = samples["on"], samples["off"]
    paired = paired_ratios(on, off)
    cpu = paired_ratios(samples.get("on_cpu", []), samples.get("off_cpu", []))
    return {
        "ratio": statistics.median(paired) if paired else None,
        "rounds": spread_json(Spread.of(paired)),
        "pooled_ratio": median_ratio(flatten(on), flatten(off)),
        "cpu_ratio": statistics.median(cpu) if cpu else None,
        "cpu_rounds": spread_json(Spread.of(cpu)),
        "on_median_s": statistics.median(flatten(on)) if flatten(on) else None,
        "off_median_s": statistics.median(flatten(off)) if flatten(off) else None,
        "start_s": spread_json(Spread.of(samples.get("start_s", []))),
        "stop_s": spread_json(Spread.of(samples.get("stop_s", []))),
        "trace_bytes": spread_json(Spread.of(samples.get("trace_bytes", []))),
        "steps": {"on": len(flatten(on)), "off": len(flatten(off))},
    }


#: The sample keys of one process's (or one cluster run's) measurements.
SAMPLE_KEYS = ("on", "off", "on_cpu", "off_cpu", "start_s", "stop_s", "trace_bytes")


def runs_figures(per_run: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several runs' measurements of one setting (each a process's, or a cluster run's, blocks) ->
    the figures: ``ratio`` and ``cpu_ratio`` the medians of the runs' own (:func:`overhead_figures`),
    ``rounds`` the runs' ratios min / median / max (listed in ``run_ratios``), ``round_ratios`` the
    spread of every run's paired rounds together, and the rest over every run's blocks pooled."""
    pooled = overhead_figures({k: [x for s in per_run for x in s.get(k) or ()] for k in SAMPLE_KEYS})
    own = [overhead_figures(s) for s in per_run]
    ratios = [f["ratio"] for f in own if f["ratio"] is not None]
    cpu = [f["cpu_ratio"] for f in own if f["cpu_ratio"] is not None]
    return {
        **pooled, "ratio": statistics.median(ratios) if ratios else None,
        "rounds": spread_json(Spread.of(ratios)),
        "run_ratios": ratios, "round_ratios": pooled["rounds"],
        "cpu_ratio": statistics.median(cpu) if cpu else None, "cpu_rounds": spread_json(Spread.of(cpu)),
        "cpu_run_ratios": cpu, "runs": len(per_run),
    }


def choose_config(per_variant: Mapping[str, Mapping[str, Mapping[str, Any]]], preferred: Sequence[str],
                  target: float = OVERHEAD_TARGET) -> dict[str, Any]:
    """The first setting in ``preferred`` order whose ratio meets ``target`` for every variant.

    ``per_variant[variant][config]["ratio"]``.  Returns the choice and, for each
    setting, its worst ratio over the variants.
    """
    worst: dict[str, float | None] = {}
    for name in preferred:
        ratios = [cfgs[name]["ratio"] for cfgs in per_variant.values() if name in cfgs]
        worst[name] = max(ratios) if ratios and None not in ratios else None
    chosen = next((n for n in preferred if worst.get(n) is not None and worst[n] <= target), None)
    return {"chosen": chosen, "worst_ratio": worst, "target": target}


def _run_child(opts: BenchOptions, variant: str, configs: Mapping[str, dict[str, int]],
               tmp: Path) -> dict[str, Any]:
    """One variant's overhead child, supervised; forked from the fork server while one serves."""
    from tfprof_towers.procs import supervise

    preset = PRESETS[opts.preset]
    spec = {
        "variant": variant, "preset": asdict(preset), "accelerators": None, "warmup": opts.warmup,
        "rounds": opts.rounds, "block_steps": opts.block_steps, "configs": dict(configs),
        "tmp": str(tmp / variant),
    }
    tmp.mkdir(parents=True, exist_ok=True)
    spec_path = tmp / f"{variant}.spec.json"
    result_path = tmp / f"{variant}.result.json"
    write_json(spec_path, spec)
    args = (str(spec_path), str(result_path))
    ended = supervise.run(supervise.Command(
        (opts.python, "-m", "benchmarks.overhead_child", *args), tmp / f"{variant}.stderr.txt",
        deadline_s=opts.timeout_s, env=supervise.tf_child_env(), cwd=str(REPO), label=variant,
        entry=supervise.Entry("benchmarks.overhead_child:overhead_entry", args)))
    if not ended.ok or not result_path.is_file():
        err = tmp / f"{variant}.stderr.txt"
        tail = "\n".join(err.read_text(errors="replace").strip().splitlines()[-5:]) if err.is_file() else ""
        raise RuntimeError(f"overhead child for {variant} failed (exit {ended.returncode}):\n{tail}")
    return json.loads(result_path.read_text())


#: What the bench's fork server imports once: TensorFlow and the runners, and the overhead child.
BENCH_PRELOAD = ("tfprof_towers.capture.preload", "benchmarks.overhead_child")


def harness_config() -> TracerConfig:
    from tfprof_towers.capture.families import PROFILER_OPTIONS

    return TracerConfig("harness", note="capture.families.PROFILER_OPTIONS", **PROFILER_OPTIONS)


def measure_overhead(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    configs = [harness_config(), *(SWEEP if opts.sweep else ())]
    by_name = {c.name: c.options() for c in configs}
    per_variant: dict[str, dict[str, Any]] = {}
    extra: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    from tfprof_towers.procs import forkserver, supervise

    runs = max(1, opts.overhead_runs)
    single = [v for v in opts.variants if v not in CLUSTER_NAMES]
    samples: dict[str, list[Mapping[str, Any]]] = {v: [] for v in single}
    with tempfile.TemporaryDirectory(prefix="tfprof-bench-") as tmp, forkserver.serving(
            BENCH_PRELOAD, Path(tmp) / "fork-server.txt", supervise.tf_child_env(), say):
        for i in range(runs):  # run i of every variant, then run i + 1: a loaded spell spoils one run each
            for v in [v for v in single if v not in skipped]:
                say(f"  profiler overhead: {v}, process {i + 1}/{runs} ...")
                res = _run_child(opts, v, by_name, Path(tmp) / f"run{i}")
                if "skipped" in res:
                    skipped[v] = res["skipped"]
                    continue
                samples[v].append(res["samples"])
                extra.setdefault(v, {k: res[k] for k in ("first_start_s", "first_stop_s")})
                extra["devices"], extra["tensorflow"] = res["devices"], res["tensorflow"]
        for v in opts.variants:
            if v in CLUSTER_NAMES:
                say(f"  profiler overhead: {v}, {runs} whole run(s) ...")
                per_variant[v] = {"harness": measure_cluster_overhead(opts, v, Path(tmp) / v)}
            elif v not in skipped:
                per_variant[v] = {n: runs_figures([r[n] for r in samples[v]]) for n in by_name}
    choice = choose_config(per_variant, [c.name for c in configs if c.usable])
    return {
        "method": (f"{runs} process(es) per variant (forked from a fork server; run 1 of every variant, then "
                   f"run 2, ...); in each, {opts.rounds} rounds per setting, each an un-profiled and "
                   f"a profiled block of {opts.block_steps} steps back to back (order flips every round); "
                   "a process's ratio = median over its rounds of median profiled / median un-profiled step; "
                   "the figure = the median of the processes' ratios (`runs`: their min / median / max); "
                   "profiler start and stop timed apart"),
        "runs": runs,
        "preset": opts.preset, "rounds": opts.rounds, "block_steps": opts.block_steps,
        "configs": {c.name: {**c.options(), "note": c.note, "usable": c.usable} for c in configs},
        "devices": extra.pop("devices", None), "tensorflow": extra.pop("tensorflow", None),
        "first_start": extra, "variants": per_variant, "skipped_variants": skipped,
        "families": families_of(per_variant), "cluster_method": CLUSTER_METHOD, **choice,
        "meets_target": bool(choice["worst_ratio"].get("harness") is not None
                             and choice["worst_ratio"]["harness"] <= OVERHEAD_TARGET),
    }


CLUSTER_METHOD = (
    f"a cluster variant runs as several processes: whole `profile --workers {CLUSTER_WORKERS}` runs "
    "(--overhead-runs, 3 by default); in each run every stepping task, after its timed steps, runs the "
    "same paired rounds as a single-process variant (an un-profiled and a profiled block, order flipping "
    "every round; a profiled block under its own profiler session with the harness's options, started "
    "and stopped outside the steps; every task starts each block together); a step's wall time is the "
    "slowest task's, its CPU the tasks' sum; each run's ratio = the median over rounds of median "
    "profiled / median un-profiled step; the figure = the median of the runs' ratios.  `record` = the "
    "run record's own one-block ratio (its timed steps against its profiled steps, taken some seconds "
    "apart), the median over the runs")


def families_of(per_variant: Mapping[str, Any]) -> dict[str, list[str]]:
    """The variants measured, by family (tf1-graph, tf2-strategy, cluster)."""
    from tfprof_towers.variants import registry

    out: dict[str, list[str]] = {}
    for v in per_variant:
        out.setdefault(registry.builtin(v).family, []).append(v)
    return out


#: ``method`` of a cluster variant's figures (:func:`cluster_figures`), which the printing looks for.
CLUSTER_FIGURE = "paired rounds in whole runs"


def measure_cluster_overhead(opts: BenchOptions, variant: str, out: Path) -> dict[str, Any]:
    """A cluster variant's profiled / un-profiled step time: ``opts.overhead_runs`` whole runs, each
    with the tasks' paired rounds (:data:`CLUSTER_METHOD`); the median of the runs' ratios."""
    runs = [cluster_run_steps(opts, variant, out / f"run{i}") for i in range(max(1, opts.overhead_runs))]
    return cluster_figures(runs)


@dataclass(frozen=True)
class ClusterSteps:
    """One whole cluster run's step times: the tasks' paired blocks (``samples``: ``on``/``off`` blocks
    of wall times, each step the slowest task's, ``on_cpu``/``off_cpu`` the tasks' summed CPU, as
    :func:`overhead_figures` takes), and the run record's timed and profiled steps (``record_on``,
    ``record_off``)."""

    samples: Mapping[str, Any]
    record_on: tuple[float, ...] = ()
    record_off: tuple[float, ...] = ()


def cluster_steps_argv(opts: BenchOptions, variant: str) -> list[str]:
    """`profile`'s arguments for a cluster overhead run: as many profiled steps as timed ones (so the
    record's own ratio is a median of as many steps on each side), after a warm-up as long as
    ``opts.warmup`` plus the two math calls (the preset's one step past them left the first timed
    steps still warming up)."""
    preset = PRESETS[opts.preset]
    return [*cluster_argv(variant), "--warmup", str(max(preset.warmup, opts.warmup + 2)),
            "--profile-steps", str(max(preset.profile_steps, preset.steps))]


def cluster_run_steps(opts: BenchOptions, variant: str, out: Path) -> ClusterSteps:
    """One whole `profile --workers 2` run of ``variant`` with the tasks' paired rounds."""
    from tfprof_towers.capture.cluster.driver import OVERHEAD_ENV

    cmd = profile_argv(opts, out, cluster_steps_argv(opts, variant))
    env = {**os.environ, OVERHEAD_ENV: json.dumps({"rounds": opts.rounds, "block_steps": opts.block_steps})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout_s, env=env)
    folder = out / "variants" / variant
    record = json.loads((folder / "record.json").read_text()) if (folder / "record.json").is_file() else {}
    if proc.returncode != 0 or record.get("status") != "ok":
        why = record.get("error") or proc.stderr[-500:]
        raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (exit {proc.returncode}): {why}")
    blocks = [t["overhead_blocks"] for t in task_records(folder, record) if t.get("overhead_blocks")]
    if not blocks:
        raise RuntimeError(f"{folder}: no task recorded its paired blocks ({OVERHEAD_ENV} was set)")
    timings = record["timings"]
    return ClusterSteps(across_tasks(blocks), tuple(timings["profiled_step_times_s"]),
                        tuple(timings["step_times_s"]))


def task_records(folder: Path, record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stepping tasks' records of a cluster run's last attempt (those that timed steps)."""
    attempts = (record.get("cluster") or {}).get("attempts") or ()
    if not attempts:
        return []
    paths = sorted((folder / str(attempts[-1].get("folder", "")) / "tasks").glob("*/record.json"))
    docs = [json.loads(p.read_text()) for p in paths]
    return [d for d in docs if d.get("step_times_s")]


def across_tasks(per_task: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stepping tasks' ``overhead_blocks`` -> one set of blocks: each step's wall time the slowest
    task's (the run record's rule: a synchronous step is over when its last task is), its CPU time
    the tasks' sum; every block as long as its shortest task's; start and stop the slowest task's."""

    def per_step(key: str, how: Callable[[Sequence[float]], float]) -> list[list[float]]:
        return [[float(how(xs)) for xs in zip(*blocks)] for blocks in zip(*(t[key] for t in per_task))]

    def per_block(key: str) -> list[float]:
        return [float(max(xs)) for xs in zip(*(t.get(key) or () for t in per_task))]

    return {"on": per_step("on", max), "off": per_step("off", max), "on_cpu": per_step("on_cpu", sum),
            "off_cpu": per_step("off_cpu", sum), "start_s": per_block("start_s"),
            "stop_s": per_block("stop_s")}


def cluster_figures(runs: Sequence[ClusterSteps]) -> dict[str, Any]:
    """Whole runs' paired blocks -> the figures (:func:`runs_figures`), with ``record_ratio`` the
    median of the run records' own one-block ratios beside them."""
    record = [x for x in (median_ratio(r.record_on, r.record_off) for r in runs) if x is not None]
    return {**runs_figures([r.samples for r in runs]),
            "record_ratio": statistics.median(record) if record else None, "record_run_ratios": record,
            "method": CLUSTER_FIGURE}


def format_overhead(doc: Mapping[str, Any]) -> list[str]:
    lines = [
        f"Profiler overhead: profiled / un-profiled step time, preset {doc['preset']} "
        f"(target <= {OVERHEAD_TARGET:.2f} for every variant)",
        *(f"  {line}" for line in textwrap.wrap(doc["method"], 100)),
        f"  {'variant':<19} {'setting':<13} {'ratio':>6}  {'runs min / median / max':<25} {'pooled':>6}"
        f" {'cpu':>6} {'off step':>9} {'stop ms':>8}",
    ]
    for v, cfgs in doc["variants"].items():
        for name, f in cfgs.items():
            rounds = Spread(**f["rounds"]).fmt(3) if f["rounds"] else "-"
            stop = num(f["stop_s"]["median"] * 1e3, 1) if f["stop_s"] else "-"
            lines.append(
                f"  {v:<19} {name:<13} {num(f['ratio']):>6}  {rounds:<25} {num(f['pooled_ratio']):>6}"
                f" {num(f['cpu_ratio']):>6} {ms(f['off_median_s']):>9} {stop:>8}"
            )
    for v, why in (doc.get("skipped_variants") or {}).items():
        lines.append(f"  {v:<19} skipped: {why}")
    cluster = {v: f for v, cfgs in doc["variants"].items() for f in cfgs.values()
               if f.get("method") == CLUSTER_FIGURE}
    if cluster:
        lines += [f"  {line}" for line in textwrap.wrap(doc.get("cluster_method") or "", 100)]
        for v, f in cluster.items():
            lines.append(f"  {v}: record {num(f.get('record_ratio'))}")
    families = doc.get("families") or {}
    lines.append("  families measured: " + "; ".join(f"{k}: {len(v)}" for k, v in families.items()))
    worst = doc["worst_ratio"]
    lines.append("  worst ratio over variants, settings the analysis can use: "
                 + ", ".join(f"{n} {num(w)}" for n, w in worst.items()))
    twins = same_settings(doc.get("configs", {}))
    if twins:
        lines.append("  noise gauge: " + ", ".join(f"{a} and {b}" for a, b in twins)
                     + " are the same setting measured twice")
    lines.append(f"  chosen setting: {doc['chosen'] or 'none meets the target'}"
                 f" ({'meets' if doc['meets_target'] else 'MISSES'} the target with the harness's setting)")
    return lines


def same_settings(configs: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Pairs of setting names whose tracer levels are identical."""
    keys = ("host_tracer_level", "python_tracer_level", "device_tracer_level")
    names = list(configs)
    return [
        (a, b) for i, a in enumerate(names) for b in names[i + 1:]
        if all(configs[a].get(k) == configs[b].get(k) for k in keys)
    ]


#: This figure as a part of a bench run (its functions looked up when called, so a test may replace them).
PART = Part("profiler_overhead", lambda opts, say: measure_overhead(opts, say),
            lambda doc: format_overhead(doc))


def main(argv: Sequence[str] | None = None) -> int:
    """Measures this figure alone and writes ``reports/bench_overhead.json``."""
    return run_alone("overhead", PART, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    sys.exit(main())
