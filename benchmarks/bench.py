"""`make bench`: what the harness itself costs, measured (prints figures, writes reports/bench.json).

Three figures, each a ratio or a breakdown taken inside one run, so that a busy
shared machine slows both sides of a comparison alike:

1. **Profiler overhead** per built-in variant of every family (each tf1-graph and
   tf2-strategy built-in, and ``multi_worker``): in ONE process per variant, blocks
   of un-profiled steps alternate with blocks of profiled steps (the harness's
   own recipe: ``tf.profiler.experimental.start`` with its ProfilerOptions,
   ``Trace("train", step_num=i)`` markers, ``stop``).  The ratio is the median
   profiled step time over the median un-profiled one; start and stop (trace
   collection) are timed apart and never counted as step time.  Several tracer
   settings are measured the same way, so the harness's defaults
   (``capture.families.PROFILER_OPTIONS``) are chosen from numbers.  A tf2-strategy
   variant's step is its ``tf.function`` built as its capture child builds it; one
   that needs what the machine lacks (NCCL without GPUs) is listed as skipped.  A
   cluster variant runs as several processes, so its ratio comes from one
   ``profile --workers 2`` run's record (each task times its steps, then profiles).
2. **Harness overhead**: whole default ``tfprof-towers profile`` runs, their wall
   time split into TensorFlow start-up, graph build, warm-up, timed steps,
   profiled steps, trace collection, analysis and rendering, and the rest, from
   the phase times the children and the parent record in the run directory; and
   ``profile --workers 2`` runs, split from the lead task's phases the same way.
   Each run also says how its TensorFlow children started (``run.json`` ->
   ``tensorflow_starts``): how many TensorFlow imports, what the children's start-up cost,
   and the import-free lower bound of the whole command (its wall time less that cost).
3. **Fork server**: the same ``profile`` with every child fresh (``TFPROF_TOWERS_FORK_SERVER=0``)
   and forked from the fork server, one after the other: the whole command's wall time, each
   variant's median step time (forked over fresh), and whether losses, placements and trace
   ops are identical.
4. **Parse speed**: the trace-parsing benchmark (``benchmarks.bench_parse``) at small
   sizes (``make bench-parse`` runs it at full size; ``--full-parse`` here).

Every figure prints min / median / max over its repeated measurements.  ``reports/bench.json``
is rewritten as each part finishes, so a bench stopped half-way keeps what it measured.  The
overhead children are forked from a fork server too (TensorFlow imported once).  The default
measures only the harness's own profiler setting; ``--sweep`` adds the four other tracer
settings (about four times the overhead part's time).

    python -m benchmarks.bench [--preset cpu] [--rounds 10] [--profile-runs 3] [--sweep] [--quick]

``--quick`` (``make bench ARGS=--quick``) runs every part on small sizes; the test suite
runs it on one variant of each family (tests/e2e/test_bench_e2e.py).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.paths import write_json
from tfprof_towers.variants.config import PRESETS
from tfprof_towers.variants.registry import BUILTIN_NAMES, CLUSTER_NAMES
from tfprof_towers.vocab import phase

TF1, TF2 = "tf1-graph", "tf2-strategy"
#: The cluster variant whose overhead is measured (a cluster runs as several processes, so its
#: figure comes from a whole `profile --workers 2` run's record; see measure_cluster_overhead).
CLUSTER_VARIANT = "multi_worker"
CLUSTER_WORKERS = 2
#: Every family: each tf1-graph and tf2-strategy built-in, and one cluster variant.
DEFAULT_VARIANTS = (*BUILTIN_NAMES, CLUSTER_VARIANT)

SCHEMA = 1
OVERHEAD_TARGET = 1.05  # profiled / un-profiled median step time, every variant
HARNESS_SHARE_TARGET = 0.15  # harness's own share of a whole default profile run
DEFAULT_OUT = Path("reports") / "bench.json"


# --------------------------------------------------------------------------- options


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


@dataclass(frozen=True)
class BenchOptions:
    preset: str = "cpu"
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    rounds: int = 10
    block_steps: int = 4
    warmup: int = 5
    parts: tuple[str, ...] = ("overhead", "harness", "fork", "parse", "allocator")
    sweep: bool = False
    profile_runs: int = 3
    cluster_runs: int = 1  # whole `profile --workers 2` runs (each starts every task's TensorFlow afresh)
    fork_variants: tuple[str, ...] = ("single", "mirrored")  # a TF1 graph and a TF2 strategy
    full_parse: bool = False
    out: Path = DEFAULT_OUT
    timeout_s: float = 900.0
    python: str = field(default=sys.executable)
    quick: bool = False  # --quick: every part on small sizes (the parse benchmark's too)


# --------------------------------------------------------------------------- arithmetic


@dataclass(frozen=True)
class Spread:
    """min / median / max of repeated measurements."""

    min: float
    median: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        vals = sorted(float(v) for v in values)
        if not vals:
            return None
        return cls(vals[0], statistics.median(vals), vals[-1], len(vals))

    def fmt(self, digits: int = 3, scale: float = 1.0, unit: str = "") -> str:
        f = f"{{:.{digits}f}}"
        parts = (f.format(x * scale) for x in (self.min, self.median, self.max))
        return " / ".join(parts) + unit


def _spread_json(s: Spread | None) -> dict[str, float] | None:
    return None if s is None else asdict(s)


def median_ratio(on: Sequence[float], off: Sequence[float]) -> float | None:
    """median(on) / median(off), or None when either side is empty or off is zero."""
    if not on or not off:
        return None
    base = statistics.median(off)
    return statistics.median(on) / base if base > 0 else None


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
        "rounds": _spread_json(Spread.of(paired)),
        "pooled_ratio": median_ratio(flatten(on), flatten(off)),
        "cpu_ratio": statistics.median(cpu) if cpu else None,
        "cpu_rounds": _spread_json(Spread.of(cpu)),
        "on_median_s": statistics.median(flatten(on)) if flatten(on) else None,
        "off_median_s": statistics.median(flatten(off)) if flatten(off) else None,
        "start_s": _spread_json(Spread.of(samples.get("start_s", []))),
        "stop_s": _spread_json(Spread.of(samples.get("stop_s", []))),
        "trace_bytes": _spread_json(Spread.of(samples.get("trace_bytes", []))),
        "steps": {"on": len(flatten(on)), "off": len(flatten(off))},
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


# Harness-overhead categories: (label, counts as the harness's own cost?)
TF_STARTUP = "TensorFlow start-up/exit"
CATEGORIES: tuple[tuple[str, bool], ...] = (
    (TF_STARTUP, False),  # import, session + variable init, the child's exit
    ("child process start", True),  # interpreter + harness imports before main()
    ("graph build", True),
    ("warm-up steps", False),
    ("placement trace", True),  # the one FULL_TRACE step + reading partition graphs
    ("timed steps", False),
    ("profiled steps", False),
    ("trace collection", True),  # profiler start + stop (writes xplane.pb)
    ("cluster coordination", True),  # a cluster task waiting on its peers, the profiler client, the driver
    ("child bookkeeping", True),  # spec/record reading and writing in the child
    ("runner bookkeeping", True),  # parent: spec/record files, progress display
    ("setup", True),  # parent: options, run directory, run.json
    ("projection", True),  # parent: the what-if projection (graphs built in a child), CPU-only runs
    ("analysis and rendering", True),  # parent: finish_run + printed summary
    ("CLI start and exit", True),  # parent interpreter, imports, exit
    ("failed variants", True),  # a variant that crashed has no phase times
)
OWN = frozenset(name for name, own in CATEGORIES if own)


def _phases(record: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in (record.get("phases_s") or {}).items()}


def variant_breakdown(record: Mapping[str, Any]) -> dict[str, float]:
    """One variant's wall time (record ``wall_s``) split into the categories above."""
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
        # a tf.function's first call traces it with graph collection on: the placement's trace
        "placement trace": ph.get(phase.PLACEMENT_TRACE, 0.0) + ph.get(phase.PLACEMENT_EXTRACT, 0.0)
        + ph.get(phase.FIRST_CALL_PLACEMENT, 0.0),
        "timed steps": ph.get(phase.TIMED, 0.0),
        "profiled steps": ph.get(phase.PROFILED, 0.0),
        "trace collection": ph.get(phase.PROFILER_START, 0.0) + ph.get(phase.COLLECT, 0.0),
    }
    out["child bookkeeping"] = max(0.0, wall - sum(out.values()))
    return out


#: A cluster task's phases (capture.cluster.task) -> the categories above.
CLUSTER_PHASES: dict[str, tuple[str, ...]] = {
    TF_STARTUP: (phase.TF_IMPORT, phase.STRATEGY_INIT, phase.SERVER_START, phase.COORDINATOR_INIT),
    "graph build": (phase.BUILD,),
    "warm-up steps": (phase.WARMUP, phase.FIRST_CALL, phase.SECOND_CALL),
    "placement trace": (phase.FIRST_CALL_PLACEMENT, phase.PLACEMENT_EXTRACT),
    "timed steps": (phase.TIMED,),
    "profiled steps": (phase.PROFILED,),
    "cluster coordination": (phase.WAIT_CAPTURE, phase.WAIT_PEERS, phase.WAIT_RELEASE, phase.WAIT_SERVERS),
}


def cluster_breakdown(record: Mapping[str, Any]) -> dict[str, float]:
    """A cluster variant's wall time split as :func:`variant_breakdown` splits one child's: from its
    first stepping task's phases (every task runs at once, so one task's time is the variant's)."""
    wall = float(record.get("wall_s") or 0.0)
    tasks = [t for t in (record.get("cluster") or {}).get("tasks") or () if t.get("phases_s")]
    lead = next((t for t in tasks if str(t.get("task", "")).startswith(("chief", "worker"))), None)
    if lead is None or record.get("status") != "ok":
        return {"failed variants": wall}
    ph = {k: float(v) for k, v in lead["phases_s"].items()}
    out = {cat: sum(ph.get(k, 0.0) for k in keys) for cat, keys in CLUSTER_PHASES.items()}
    out["child bookkeeping"] = max(0.0, wall - sum(out.values()))  # the driver, the tasks' start and exit
    return out


def run_breakdown(run_doc: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                  total_wall_s: float) -> dict[str, float]:
    """A whole `profile` run's wall time split into CATEGORIES (seconds; sums to the total)."""
    parts = dict.fromkeys((name for name, _ in CATEGORIES), 0.0)
    for rec in records:
        split = cluster_breakdown if rec.get("family") == "cluster" else variant_breakdown
        for k, v in split(rec).items():
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


def own_share(parts: Mapping[str, float]) -> float:
    total = sum(parts.values())
    return sum(v for k, v in parts.items() if k in OWN) / total if total > 0 else 0.0


# --------------------------------------------------------------------------- overhead child


@dataclass(frozen=True)
class _Stepper:
    """One variant's training step, stepped as its capture child steps it.

    ``call`` runs one step and waits for it (``Session.run`` for a tf1-graph variant; the
    ``tf.function`` with its loss read back for a tf2-strategy one, as
    ``capture.families.tf2_strategy.fetched``); the loop adds the process CPU time of each step.
    """

    tf: Any
    call: Callable[[], None]
    close: Callable[[], None] = lambda: None

    def steps(self, n: int, marker: Any = None) -> tuple[list[float], list[float]]:
        """(wall seconds, process CPU seconds) of each of ``n`` steps."""
        wall, cpu = [], []
        for i in range(n):
            w0, c0 = time.perf_counter(), time.process_time()
            if marker is None:
                self.call()
            else:
                with marker("train", step_num=i, _r=1):
                    self.call()
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        return wall, cpu

    def plain(self, n: int) -> dict[str, Any]:
        wall, cpu = self.steps(n)
        return {"off": wall, "off_cpu": cpu}

    def profiled(self, n: int, options: dict[str, int], logdir: Path) -> dict[str, Any]:
        """n steps under the profiler with step markers; start and stop timed apart."""
        prof = self.tf.profiler.experimental
        t0 = time.perf_counter()
        prof.start(str(logdir), options=prof.ProfilerOptions(**options))
        t1 = time.perf_counter()
        try:
            wall, cpu = self.steps(n, prof.Trace)
        finally:
            t2 = time.perf_counter()
            prof.stop()
            t3 = time.perf_counter()
        size = sum(p.stat().st_size for p in logdir.rglob("*.xplane.pb"))
        shutil.rmtree(logdir, ignore_errors=True)
        return {"on": wall, "on_cpu": cpu, "start_s": t1 - t0, "stop_s": t3 - t2, "trace_bytes": size}


class Skipped(Exception):
    """The machine lacks what the variant needs (NCCL without GPUs): no figure, and why."""


def _open_stepper(spec: Mapping[str, Any]) -> tuple[_Stepper, dict[str, Any]]:
    """The variant's step built as its family's capture child builds it (tf1-graph or tf2-strategy)."""
    from tfprof_towers.variants import registry

    if registry.builtin(spec["variant"]).family == TF2:
        return _open_tf2_stepper(spec)
    from tfprof_towers.capture.devices import plan_devices
    from tfprof_towers.capture.families import tf1_graph
    from tfprof_towers.variants.config import Preset

    tf = tf1_graph.import_tensorflow()
    preset = Preset(**spec["preset"])
    devices = plan_devices(len(tf.config.list_physical_devices("GPU")), spec.get("accelerators"), preset)
    graph, fetches, feed, init = tf1_graph.build_graph(tf, spec["variant"], None, devices)
    sess = tf1_graph.new_session(tf, graph, devices)
    sess.run(init)
    about = {"devices": devices.to_json(), "tensorflow": tf.__version__}
    return _Stepper(tf, lambda: sess.run(fetches, feed), sess.close), about


def _open_tf2_stepper(spec: Mapping[str, Any]) -> tuple[_Stepper, dict[str, Any]]:
    from tfprof_towers.capture.families import import_tensorflow, tf2_strategy
    from tfprof_towers.capture.tf2.strategies import machine_offers
    from tfprof_towers.rundir.records import ChildSpec
    from tfprof_towers.variants import registry
    from tfprof_towers.variants.config import Preset

    tf = import_tensorflow()
    child = ChildSpec(name=spec["variant"], family=TF2, file=None, preset=Preset(**spec["preset"]),
                      accelerators=spec.get("accelerators"), warmup=0, steps=0, profile_steps=0, logdir="",
                      record="")
    devices = tf2_strategy.plan(tf, child)
    accelerators = tuple(devices.topology().accelerators)
    why = registry.skip_reason(tf2_strategy.needs(child), machine_offers(devices), devices.kind, accelerators)
    if why:
        raise Skipped(why)
    strategy, build_step, _ = tf2_strategy.strategy_and_step(child, devices)
    step = tf2_strategy.check_step(build_step(strategy, devices), f"built-in variant {child.name}")
    call = tf2_strategy.fetched(step)
    about = {"devices": devices.to_json(), "tensorflow": tf.__version__}
    return _Stepper(tf, call), about


def rotated(names: Sequence[str], r: int) -> list[str]:
    """Round ``r``'s order of the settings: each goes first in turn."""
    k = r % len(names) if names else 0
    return [*names[k:], *names[:k]]


def overhead_child(spec: Mapping[str, Any]) -> dict[str, Any]:
    """In one process: build the variant, warm up, then per round and setting an off and an on block.

    The pair's order flips every round (ABBA), so a slow drift of the machine
    weighs on both sides alike.
    """
    try:
        stepper, about = _open_stepper(spec)
    except Skipped as exc:
        return {"variant": spec["variant"], "skipped": str(exc)}
    stepper.plain(max(spec["warmup"], 2))  # a tf.function's first call traces it
    tmp = Path(spec["tmp"])
    configs: dict[str, dict[str, int]] = spec["configs"]
    # A first start in the process, in case loading the profiler costs once: reported apart.
    first = stepper.profiled(1, next(iter(configs.values())), tmp / "first")
    samples: dict[str, dict[str, list]] = {n: defaultdict(list) for n in configs}
    k = spec["block_steps"]
    for r in range(spec["rounds"]):
        for name in rotated(list(configs), r):
            for side in ("off", "on") if r % 2 == 0 else ("on", "off"):
                block = (stepper.plain(k) if side == "off"
                         else stepper.profiled(k, configs[name], tmp / f"{name}-{r}"))
                for key, value in block.items():
                    samples[name][key].append(value)
    stepper.close()
    return {
        "variant": spec["variant"], **about,
        "first_start_s": first["start_s"], "first_stop_s": first["stop_s"], "samples": samples,
    }


# --------------------------------------------------------------------------- parent side


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
    spec_path = tmp / f"{variant}.spec.json"
    result_path = tmp / f"{variant}.result.json"
    write_json(spec_path, spec)
    args = (str(spec_path), str(result_path))
    ended = supervise.run(supervise.Command(
        (opts.python, "-m", "benchmarks.bench", "--overhead-child", *args), tmp / f"{variant}.stderr.txt",
        deadline_s=opts.timeout_s, env=supervise.tf_child_env(), cwd=str(REPO), label=variant,
        entry=supervise.Entry("benchmarks.bench:overhead_entry", args)))
    if not ended.ok or not result_path.is_file():
        err = tmp / f"{variant}.stderr.txt"
        tail = "\n".join(err.read_text(errors="replace").strip().splitlines()[-5:]) if err.is_file() else ""
        raise RuntimeError(f"overhead child for {variant} failed (exit {ended.returncode}):\n{tail}")
    return json.loads(result_path.read_text())


def overhead_entry(args: Sequence[str]) -> int:
    """The overhead child as a call (forked from the fork server): ``[SPEC, RESULT]``."""
    write_json(Path(args[1]), overhead_child(json.loads(Path(args[0]).read_text())))
    return 0


#: What the bench's fork server imports once: TensorFlow and the runners, and this module.
BENCH_PRELOAD = ("tfprof_towers.capture.preload", "benchmarks.bench")
REPO = Path(__file__).resolve().parents[1]


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

    with tempfile.TemporaryDirectory(prefix="tfprof-bench-") as tmp, forkserver.serving(
            BENCH_PRELOAD, Path(tmp) / "fork-server.txt", supervise.tf_child_env(), say):
        for v in opts.variants:
            say(f"  profiler overhead: {v} ...")
            if v in CLUSTER_NAMES:
                per_variant[v] = {"harness": measure_cluster_overhead(opts, v, Path(tmp) / v)}
                continue
            res = _run_child(opts, v, by_name, Path(tmp))
            if "skipped" in res:
                skipped[v] = res["skipped"]
                continue
            per_variant[v] = {n: overhead_figures(s) for n, s in res["samples"].items()}
            extra[v] = {"first_start_s": res["first_start_s"], "first_stop_s": res["first_stop_s"]}
            extra["devices"], extra["tensorflow"] = res["devices"], res["tensorflow"]
    choice = choose_config(per_variant, [c.name for c in configs if c.usable])
    return {
        "method": (f"one process per variant (forked from a fork server); {opts.rounds} rounds per setting, "
                   "each an un-profiled and "
                   f"a profiled block of {opts.block_steps} steps back to back (order flips every round); "
                   "ratio = median over rounds of median profiled / median un-profiled step; "
                   "profiler start and stop timed apart"),
        "preset": opts.preset, "rounds": opts.rounds, "block_steps": opts.block_steps,
        "configs": {c.name: {**c.options(), "note": c.note, "usable": c.usable} for c in configs},
        "devices": extra.pop("devices", None), "tensorflow": extra.pop("tensorflow", None),
        "first_start": extra, "variants": per_variant, "skipped_variants": skipped,
        "families": families_of(per_variant), "cluster_method": CLUSTER_METHOD, **choice,
        "meets_target": bool(choice["worst_ratio"].get("harness") is not None
                             and choice["worst_ratio"]["harness"] <= OVERHEAD_TARGET),
    }


CLUSTER_METHOD = ("a cluster variant runs as several processes: one "
                  f"`profile --workers {CLUSTER_WORKERS}` run; ratio = the variant's median profiled step "
                  "over its median un-profiled step (each task times its steps, then runs its profiled ones)")


def families_of(per_variant: Mapping[str, Any]) -> dict[str, list[str]]:
    """The variants measured, by family (tf1-graph, tf2-strategy, cluster)."""
    from tfprof_towers.variants import registry

    out: dict[str, list[str]] = {}
    for v in per_variant:
        out.setdefault(registry.builtin(v).family, []).append(v)
    return out


def cluster_argv(variant: str) -> list[str]:
    """`profile`'s arguments for a loopback cluster run of ``variant``."""
    ps = ["--ps", "1"] if variant == "parameter_server" else []
    return ["--workers", str(CLUSTER_WORKERS), *ps, "--variants", variant]


def measure_cluster_overhead(opts: BenchOptions, variant: str, out: Path) -> dict[str, Any]:
    """A cluster variant's profiled / un-profiled median step, from a whole run's record."""
    cmd = [opts.python, *PROFILE_COMMAND, "profile", "--preset", opts.preset, *cluster_argv(variant),
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout_s)
    record = json.loads((out / "variants" / variant / "record.json").read_text()) if (
        out / "variants" / variant / "record.json").is_file() else {}
    if proc.returncode != 0 or record.get("status") != "ok":
        why = record.get("error") or proc.stderr[-500:]
        raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (exit {proc.returncode}): {why}")
    timings = record["timings"]
    on, off = timings["profiled_step_times_s"], timings["step_times_s"]
    return {
        "ratio": median_ratio(on, off), "rounds": None, "pooled_ratio": median_ratio(on, off),
        "cpu_ratio": None, "cpu_rounds": None, "on_median_s": statistics.median(on),
        "off_median_s": statistics.median(off), "start_s": None, "stop_s": None, "trace_bytes": None,
        "steps": {"on": len(on), "off": len(off)}, "method": "run record",
    }


#: How `profile` is started (after the interpreter): the real command line.
PROFILE_COMMAND: tuple[str, ...] = ("-m", "tfprof_towers")


def _profile_once(opts: BenchOptions, out: Path, argv: Sequence[str] = (),
                  env: Mapping[str, str] | None = None) -> dict[str, float]:
    cmd = [opts.python, *PROFILE_COMMAND, "profile", "--preset", opts.preset, *argv, "--out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout_s,
                          env=None if env is None else dict(env))
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[1:])}` failed (exit {proc.returncode}): {proc.stderr[-500:]}")
    run_doc = json.loads((out / "run.json").read_text())
    records = [json.loads(p.read_text()) for p in sorted(out.glob("variants/*/record.json"))]
    parts = run_breakdown(run_doc, records, total)
    return {**parts, "total": total, **tensorflow_starts(run_doc, records, total)}


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
    with tempfile.TemporaryDirectory(prefix="tfprof-bench-runs-") as tmp:
        for i in range(opts.profile_runs if single_machine else 0):
            say(f"  harness overhead: `profile --preset {opts.preset}`, run {i + 1}/{opts.profile_runs} ...")
            runs.append(_profile_once(opts, Path(tmp) / f"run{i}", argv))
        for i in range(opts.cluster_runs if clusters else 0):
            say(f"  harness overhead: `profile {' '.join(cluster_argv(clusters[0]))}`, run {i + 1} ...")
            cluster_runs.append(_profile_once(opts, Path(tmp) / f"cluster{i}", cluster_argv(clusters[0])))
    if not runs and not cluster_runs:
        return {"skipped": "--profile-runs 0"}
    for r in (*runs, *cluster_runs):
        r["own_share"] = own_share({k: v for k, v in r.items() if k != "total"})
    keys = [name for name, _ in CATEGORIES] + ["total", "own_share", "tf_imports", "tf_start_s",
                                                "lower_bound_s"]
    cluster = None if not cluster_runs else {
        "command": f"profile --preset {opts.preset} {' '.join(cluster_argv(clusters[0]))}",
        "runs": cluster_runs,
        "spread": {k: _spread_json(Spread.of(r[k] for r in cluster_runs)) for k in keys},
    }
    return {"cluster": cluster,
        "method": "whole default `tfprof-towers profile` runs; phase times from run.json and each "
                  "variant's record.json; the harness's own = everything but TensorFlow start-up and steps",
        "preset": opts.preset, "target_share": HARNESS_SHARE_TARGET,
        "own_categories": sorted(OWN),
        "runs": runs,
        "spread": {k: _spread_json(Spread.of(r[k] for r in runs)) for k in keys},
        "meets_target": max(r["own_share"] for r in (*runs, *cluster_runs)) <= HARNESS_SHARE_TARGET,
    }


def measure_fork(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """The same `profile` with every TensorFlow child fresh, then forked from the fork server."""
    from tfprof_towers.procs.forkserver import ENV_SWITCH

    variants = list(opts.fork_variants)
    argv = ["--variants", ",".join(variants)]
    runs: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="tfprof-bench-fork-") as tmp:
        for mode in ("fresh", "forked"):
            say(f"  fork server: `profile --preset {opts.preset} {' '.join(argv)}`, children {mode} ...")
            env = {k: v for k, v in os.environ.items() if k != ENV_SWITCH}
            if mode == "fresh":
                env[ENV_SWITCH] = "0"
            runs[mode] = _profile_once(opts, Path(tmp) / mode, argv, env)
        compared = {v: compare_children(Path(tmp) / "fresh", Path(tmp) / "forked", v) for v in variants}
    return {
        "method": "one `profile` run with every TensorFlow child started fresh "
                  "(TFPROF_TOWERS_FORK_SERVER=0), "
                  "then one forked from the fork server; per variant: median step time forked / fresh, "
                  "and whether losses, placements (node -> device and source lines) and trace ops are equal",
        "preset": opts.preset, "variants": compared,
        "runs": {m: {k: r[k] for k in ("total", "tf_imports", "tf_start_s", "lower_bound_s")}
                 for m, r in runs.items()},
        "identical": all(c["same_losses"] and c["same_placement"] and c["same_ops"]
                         for c in compared.values()),
    }


def compare_children(fresh: Path, forked: Path, variant: str) -> dict[str, Any]:
    """One variant's records and traces, fresh against forked."""
    from tfprof_towers.trace.load import load_trace

    recs = [json.loads((run / "variants" / variant / "record.json").read_text()) for run in (fresh, forked)]
    if any(r.get("status") != "ok" for r in recs):
        return {"status": [r.get("status") for r in recs], "same_losses": False, "same_placement": False,
                "same_ops": False, "step_ratio": None}
    medians = [r["timings"]["step_time_s"]["median"] for r in recs]
    placements = [{n["name"]: (n["device"], [(x["file"], x["line"]) for x in n.get("sources") or ()])
                   for n in r["placement"]["nodes"]} for r in recs]
    ops = [set(load_trace(run / "tensorboard" / variant).events["name"].astype(str))
           for run in (fresh, forked)]
    return {"fresh_step_s": medians[0], "forked_step_s": medians[1],
            "step_ratio": medians[1] / medians[0] if medians[0] else None,
            "same_losses": recs[0].get("math") == recs[1].get("math"),
            "same_placement": placements[0] == placements[1], "same_ops": ops[0] == ops[1]}


def format_fork(doc: Mapping[str, Any]) -> list[str]:
    lines = [f"Fork server: the same `profile --preset {doc['preset']}`, children fresh then forked"]
    for mode, r in doc["runs"].items():
        lines.append(f"  {mode:<7} whole command {r['total']:.1f} s, "
                     f"{r['tf_imports']:.0f} TensorFlow import(s), "
                     f"children's start-up {r['tf_start_s']:.1f} s")
    for v, c in doc["variants"].items():
        same = ", ".join(k[5:] for k in ("same_losses", "same_placement", "same_ops") if c.get(k))
        lines.append(f"  {v:<22} step forked / fresh {_num(c.get('step_ratio'), 2):>5} "
                     f"({_ms(c.get('forked_step_s'))} / {_ms(c.get('fresh_step_s'))}); "
                     f"identical: {same or 'NOTHING'}")
    lines.append(f"  losses, placements and trace ops identical: {'yes' if doc['identical'] else 'NO'}")
    return lines


#: --quick: the parse benchmark's sizes (every path it times, on a small trace).
QUICK_PARSE = {"n_events": 20_000, "repeats": 1, "xprof": False, "big_events": 40_000, "whole_repeats": 1,
               "multihost": False}


def measure_parse(say: Callable[[str], None], full: bool = False) -> dict[str, Any]:
    """The trace-parsing benchmark (``benchmarks.bench_parse``), through the function it exposes:
    at its small sizes, or with ``full`` at its own (``make bench-parse``)."""
    try:
        mod = importlib.import_module("benchmarks.bench_parse")
    except ImportError as exc:
        return {"skipped": f"benchmarks/bench_parse.py not importable ({exc})"}
    fn = next((getattr(mod, n) for n in PARSE_ENTRY_POINTS if callable(getattr(mod, n, None))), None)
    if fn is None:
        return {"skipped": f"benchmarks.bench_parse exposes none of {', '.join(PARSE_ENTRY_POINTS)}"}
    say("  parse benchmark ...")
    if full:
        return dict(fn())
    import inspect

    accepted = inspect.signature(fn).parameters
    return dict(fn(**{k: v for k, v in QUICK_PARSE.items() if k in accepted}))


#: Names tried, in order, for the parse benchmark's "figures as a dict" function.
PARSE_ENTRY_POINTS = ("run_benchmark", "figures", "run")


# --------------------------------------------------------------------------- printing


def format_overhead(doc: Mapping[str, Any]) -> list[str]:
    lines = [
        f"Profiler overhead: profiled / un-profiled step time, preset {doc['preset']} "
        f"(target <= {OVERHEAD_TARGET:.2f} for every variant)",
        *(f"  {line}" for line in textwrap.wrap(doc["method"], 100)),
        f"  {'variant':<19} {'setting':<13} {'ratio':>6}  {'rounds min / median / max':<25} {'pooled':>6}"
        f" {'cpu':>6} {'off step':>9} {'stop ms':>8}",
    ]
    for v, cfgs in doc["variants"].items():
        for name, f in cfgs.items():
            rounds = Spread(**f["rounds"]).fmt(3) if f["rounds"] else "-"
            stop = _num(f["stop_s"]["median"] * 1e3, 1) if f["stop_s"] else "-"
            lines.append(
                f"  {v:<19} {name:<13} {_num(f['ratio']):>6}  {rounds:<25} {_num(f['pooled_ratio']):>6}"
                f" {_num(f['cpu_ratio']):>6} {_ms(f['off_median_s']):>9} {stop:>8}"
            )
    for v, why in (doc.get("skipped_variants") or {}).items():
        lines.append(f"  {v:<19} skipped: {why}")
    if any(f.get("method") == "run record" for cfgs in doc["variants"].values() for f in cfgs.values()):
        lines += [f"  {line}" for line in textwrap.wrap(doc.get("cluster_method") or "", 100)]
    families = doc.get("families") or {}
    lines.append("  families measured: " + "; ".join(f"{k}: {len(v)}" for k, v in families.items()))
    worst = doc["worst_ratio"]
    lines.append("  worst ratio over variants, settings the analysis can use: "
                 + ", ".join(f"{n} {_num(w)}" for n, w in worst.items()))
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


def format_harness(doc: Mapping[str, Any]) -> list[str]:
    lines = _format_runs(f"whole `profile --preset {doc['preset']}` runs ({len(doc['runs'])})", doc["spread"])
    cluster = doc.get("cluster")
    if cluster:
        lines += _format_runs(f"`{cluster['command']}` runs ({len(cluster['runs'])})", cluster["spread"])
    lines.append(f"  target: the harness's own share <= {HARNESS_SHARE_TARGET:.0%} in every run: "
                 f"{'met' if doc['meets_target'] else 'MISSED'}")
    return lines


def _format_runs(what: str, sp: Mapping[str, Any]) -> list[str]:
    lines = [f"Harness overhead: {what}, seconds min / median / max"]
    for name, own in CATEGORIES:
        s = sp.get(name)
        if s and s["max"] > 0:
            lines.append(f"  {name:<24} {Spread(**s).fmt(2):>22}  {'harness' if own else ''}")
    if sp.get("total"):
        lines.append(f"  {'total':<24} {Spread(**sp['total']).fmt(2):>22}")
    if sp.get("own_share"):
        lines.append(f"  harness's own share: {Spread(**sp['own_share']).fmt(1, 100, ' %')}")
    if sp.get("tf_imports") and sp.get("total"):
        lines.append(f"  TensorFlow imports {Spread(**sp['tf_imports']).fmt(0)}; the children's start-up "
                     f"{Spread(**sp['tf_start_s']).fmt(2)} s; import-free lower bound "
                     f"{Spread(**sp['lower_bound_s']).fmt(2)} s (the whole command less that start-up)")
    return lines


def format_parse(doc: Mapping[str, Any]) -> list[str]:
    if "skipped" in doc:
        return [f"Parse benchmark: skipped ({doc['skipped']})"]
    try:  # the parse benchmark's own wording of its figures, when it has one
        text = importlib.import_module("benchmarks.bench_parse").report(dict(doc))
        return ["Parse benchmark:", *(f"  {line}" for line in str(text).splitlines())]
    except Exception:  # absent, or figures from another version of it: print them plainly
        return ["Parse benchmark:"] + [f"  {k}: {_short(v)}" for k, v in doc.items()]


def _short(v: Any) -> str:
    text = json.dumps(v, default=str) if isinstance(v, dict | list) else str(v)
    return text if len(text) <= 200 else text[:197] + "..."


def _num(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.1f} ms"


# --------------------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    return {
        "node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def parse_args(argv: Sequence[str]) -> BenchOptions:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), help="workload size [default: cpu]")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help="built-ins to measure: tf1-graph, tf2-strategy and cluster ones [every tf1-graph and "
                        f"tf2-strategy built-in, and {CLUSTER_VARIANT}]")
    p.add_argument("--rounds", type=_positive, help=f"off/on block pairs per setting [{BenchOptions.rounds}]")
    p.add_argument("--block-steps", type=_positive, help=f"steps per block [{BenchOptions.block_steps}]")
    p.add_argument("--profile-runs", type=int, help=f"whole profile runs [{BenchOptions.profile_runs}]")
    p.add_argument("--cluster-runs", type=int,
                   help=f"whole `profile --workers 2` runs [{BenchOptions.cluster_runs}]")
    p.add_argument("--sweep", action="store_true",
                   help="also measure four other tracer settings' overhead (about 4x the overhead part)")
    p.add_argument("--no-sweep", action="store_true", help="the default: only the harness's profiler setting")
    p.add_argument("--full-parse", action="store_true",
                   help="the parse benchmark at its full size (as `make bench-parse`), not its small one")
    p.add_argument("--only", default=",".join(BenchOptions.parts), metavar="PARTS",
                   help="which figures: overhead, harness, fork, parse, allocator (comma-separated) [all]")
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: tiny preset, 2 rounds of 3 steps, 1 profile run (unless given)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(list(argv))
    variants = tuple(v.strip() for v in a.variants.split(",") if v.strip())
    unknown = [v for v in variants if v not in BUILTIN_NAMES + CLUSTER_NAMES]
    if unknown:
        p.error(f"unknown variant(s): {', '.join(unknown)}")
    parts = tuple(x.strip() for x in a.only.split(",") if x.strip())
    if not parts or set(parts) - set(BenchOptions.parts):
        p.error(f"--only takes some of: {', '.join(BenchOptions.parts)}")
    base = QUICK if a.quick else BenchOptions()
    given = {
        "preset": a.preset, "rounds": a.rounds, "block_steps": a.block_steps,
        "profile_runs": a.profile_runs, "cluster_runs": a.cluster_runs,
    }
    return replace(
        base, variants=variants, sweep=a.sweep and not a.no_sweep, parts=parts, out=a.out,
        full_parse=a.full_parse,
        **{k: v for k, v in given.items() if v is not None},
    )


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return v


#: --quick: enough to see every code path run, not to trust the numbers.
QUICK = BenchOptions(preset="tiny", rounds=2, block_steps=3, warmup=1, profile_runs=1, quick=True,
                     fork_variants=("single",))


def measure_allocator(opts: BenchOptions, say: Callable[[str], None]) -> dict[str, Any]:
    """What the host's BFC allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``, which every profile sets so a
    CPU-only run records memory) costs the timed steps: :func:`benchmarks.bench_memory.allocator_cost`
    on the fork-server variants (a TF1 graph, a TF2 strategy), ``profile_runs`` interleaved runs each."""
    rounds = max(opts.profile_runs, 1)
    say(f"  allocator: {rounds} profile run(s) each of {', '.join(opts.fork_variants)}, BFC on and off")
    cost = importlib.import_module("benchmarks.bench_memory").allocator_cost(
        opts.preset, list(opts.fork_variants), rounds)
    return {"rounds": rounds, "variants": cost}


def format_allocator(part: Mapping[str, Any]) -> list[str]:
    from benchmarks.bench_memory import allocator_lines

    return allocator_lines(part.get("variants") or {}, int(part.get("rounds") or 0))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--overhead-child"]:
        spec = json.loads(Path(argv[1]).read_text())
        write_json(Path(argv[2]), overhead_child(spec))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip TensorFlow's teardown
    opts = parse_args(argv)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.perf_counter()
    doc: dict[str, Any] = {
        "schema": SCHEMA, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "options": {**asdict(opts), "out": str(opts.out)},
    }
    say(f"tfprof-towers bench: preset {opts.preset}, {len(opts.variants)} variant(s)")
    measures = {
        "overhead": ("profiler_overhead", lambda: measure_overhead(opts, say)),
        "harness": ("harness_overhead", lambda: measure_harness(opts, say)),
        "fork": ("fork_server", lambda: measure_fork(opts, say)),
        "parse": ("parse", lambda: measure_parse(say, opts.full_parse)),
        "allocator": ("host_allocator", lambda: measure_allocator(opts, say)),
    }
    for part, (key, _) in measures.items():  # what is not measured yet says so, in every rewrite
        doc[key] = {"skipped": "not measured yet (the bench stopped before it)"} if part in opts.parts else {
            "skipped": f"not in --only {','.join(opts.parts)}"}
    for part, (key, measure) in measures.items():
        if part not in opts.parts:
            continue
        t0 = time.perf_counter()
        doc[key] = measure()
        doc.setdefault("part_wall_s", {})[part] = time.perf_counter() - t0
        doc["bench_wall_s"] = time.perf_counter() - started
        write_json(opts.out, doc)  # each part kept as soon as it is measured
        say(f"  {part}: {doc['part_wall_s'][part]:.0f} s (wrote {opts.out})")
    doc["bench_wall_s"] = time.perf_counter() - started
    write_json(opts.out, doc)
    print("\n".join([*report_lines(doc), f"wrote {opts.out} ({doc['bench_wall_s']:.0f} s)"]))
    return 0


def report_lines(doc: Mapping[str, Any]) -> list[str]:
    """The printed report of a bench.json document."""
    lines: list[str] = []
    for key, fmt in (("profiler_overhead", format_overhead), ("harness_overhead", format_harness),
                     ("fork_server", format_fork), ("parse", format_parse),
                     ("host_allocator", format_allocator)):
        part = doc.get(key) or {"skipped": "absent"}
        lines += [f"{key}: skipped ({part['skipped']})"] if "skipped" in part else fmt(part)
        lines.append("")
    return lines


if __name__ == "__main__":
    sys.exit(main())
