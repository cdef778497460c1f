"""Multi-host analysis at pod scale: ``make bench-hosts`` (``python -m benchmarks.bench_hosts``).

A synthetic logdir of ``--hosts`` hosts x ``--events`` events each
(:func:`tfprof_towers.testing.synth.pod_host_trace`: GPU-shaped, an NCCL all-reduce ending each
step on every host, two of the hosts stragglers), made in parallel processes and cached by its
parameters under ``reports/bench-hosts-cache`` (the logdirs are folders of links to the cached
host files).  Each figure is a whole ``tfprof-towers analyze PATH --json`` process, start to exit
(:data:`benchmarks.analyze_process.CLI`, its own VmHWM), run by a small wrapper that reports the
largest peak RSS of the whole process tree (``RUSAGE_CHILDREN``: the analysis and every pool
worker it waited for):

* one host alone: T1, R1;
* all hosts on the default local pool: time against ``hosts x T1 / cores`` (target <= 1.3x) and
  every process's peak RSS against R1 (target <= 1.25x);
* on a two-worker ``distributed.LocalCluster`` (``--dask``): time against the local pool (target
  <= 1.3x), stdout byte-identical to the pool's and to a serial in-process run's, the workers'
  peak RSS;
* scaling: 8, 16, 32 hosts (the first k), time per host (target: the largest within 15% of the
  smallest);
* the old merged path (every host's events in one process, ``analyze_xplane``) under a memory cap
  and a wall timeout: its time and peak RSS, or where and why it stopped.

A measurement: exits 0 when a target is missed, non-zero only on an error.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.analyze_process import CLI as _CLI
from benchmarks.analyze_process import met as _met

TARGET_POOL_VS_IDEAL = 1.3  # pool time / (hosts x T1 / cores)
TARGET_RSS_VS_ONE = 1.25  # any process's peak RSS / R1
TARGET_DASK_VS_POOL = 1.3  # Dask time / pool time
TARGET_SCALING = 1.15  # time per host: largest count / smallest count
STRAGGLERS = (1, 5)  # in every subset of 8 or more hosts; fewer hosts: the second is the last
CACHE = Path(__file__).resolve().parents[1] / "reports" / "bench-hosts-cache"
RUN = "2024_01_01_00_00_00"

#: Runs ``_CLI`` (env ``TFPROF_BENCH_CLI``) with the arguments given, passes its output on and adds
#: ``SECONDS`` (start to exit of the analysis) and ``TREE`` (the largest ru_maxrss, KiB, of every
#: process below this one that was waited for) to stderr.
_TREE = (
    "import os, resource, subprocess, sys, time\n"
    "t0 = time.perf_counter()\n"
    "p = subprocess.run([sys.executable, '-c', os.environ['TFPROF_BENCH_CLI'], *sys.argv[1:]],\n"
    "                   capture_output=True)\n"
    "dt = time.perf_counter() - t0\n"
    "sys.stdout.buffer.write(p.stdout)\n"
    "sys.stderr.buffer.write(p.stderr)\n"
    "tree = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write(f'SECONDS {dt}\\nTREE {tree}\\n')\n"
    "sys.exit(p.returncode)\n"
)

#: The old merged path in a child under a memory cap: ``analyze_xplane(path).to_doc()``.
_MERGED = (
    "import resource, sys, time\n"
    "cap = int(sys.argv[2])\n"
    "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))\n"
    "def hwm():\n"
    "    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            return line.split()[1] + f'\\nCHILDREN {kids}'\n"
    "t0 = time.perf_counter()\n"
    "try:\n"
    "    from tfprof_towers.trace.analysis import analyze_xplane\n"
    "    analyze_xplane(sys.argv[1]).to_doc()\n"
    "except MemoryError:\n"
    "    sys.stderr.write(f'STOPPED MemoryError after {time.perf_counter() - t0:.1f} s\\nVmHWM {hwm()}\\n')\n"
    "    sys.exit(2)\n"
    "sys.stderr.write(f'SECONDS {time.perf_counter() - t0}\\nVmHWM {hwm()}\\n')\n"
)


@dataclass(frozen=True)
class Run:
    """One whole ``analyze`` process: seconds, its own peak RSS and the tree's (MiB), its stdout."""

    seconds: float
    parent_mib: float
    tree_mib: float
    stdout: bytes


# ---------------------------------------------------------------- the logdir


def _host_file(events: int, steps: int, gpus: int, host: int, slow_ps: int) -> Path:
    tag = f"e{events}_s{steps}_g{gpus}"
    return CACHE / tag / f"host{host:03d}{'_slow' if slow_ps else ''}.xplane.pb"


def _make_host(args: tuple[int, int, int, int, int]) -> str:
    from tfprof_towers.testing.synth import pod_host_trace

    events, steps, gpus, host, slow_ps = args
    path = _host_file(events, steps, gpus, host, slow_ps)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        pod_host_trace(host, events, gpus, steps, slow_ps=slow_ps).write(tmp)
        tmp.replace(path)
    return str(path)


def stragglers_of(hosts: int) -> tuple[int, ...]:
    """The slow hosts of an ``hosts``-host logdir (two of them)."""
    picked = [h for h in STRAGGLERS if h < hosts]
    spare = [h for h in range(hosts - 1, 0, -1) if h not in picked]
    return tuple(sorted(picked + spare[:len(STRAGGLERS) - len(picked)]))


def host_files(hosts: int, events: int, steps: int = 10, gpus: int = 4) -> list[Path]:
    """The ``hosts`` cached host files (made now, in parallel, where missing)."""
    from tfprof_towers.testing.synth import pod_host_windows

    slow = pod_host_windows(events, gpus, steps)[1] // 5
    late = set(stragglers_of(hosts))
    jobs = [(events, steps, gpus, h, slow if h in late else 0) for h in range(hosts)]
    CACHE.mkdir(parents=True, exist_ok=True)
    todo = [j for j in jobs if not _host_file(*j).exists()]
    if todo:
        with ProcessPoolExecutor(max_workers=min(len(todo), _cores())) as pool:
            list(pool.map(_make_host, todo))
    return [_host_file(*j) for j in jobs]


def logdir_of(files: list[Path], root: Path) -> Path:
    """A logdir under ``root`` whose run holds links to ``files`` (named as their hosts)."""
    run = root / f"h{len(files)}" / "plugins" / "profile" / RUN
    run.mkdir(parents=True, exist_ok=True)
    for f in files:
        (run / f"{f.name.split('_')[0].split('.')[0]}.xplane.pb").symlink_to(f.resolve())
    return run.parents[2]


def _cores() -> int:
    from tfprof_towers.trace.hosts import available_cores

    return available_cores()


# ---------------------------------------------------------------- the runs


def analyze_run(path: Path, *args: str) -> Run:
    """``analyze PATH --json ARGS`` as a whole process (the wrapper's figures)."""
    env = dict(os.environ, TFPROF_BENCH_CLI=_CLI)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.run([sys.executable, "-c", _TREE, "analyze", str(path), "--json", *args],
                          capture_output=True, env=env)
    err = proc.stderr.decode(errors="replace")
    if proc.returncode:
        what = " ".join((str(path), *args))
        raise RuntimeError(f"analyze {what} failed ({proc.returncode}): {err.strip()[-400:]}")
    return Run(_last(err, "SECONDS"), _last(err, "VmHWM") / 1024, _last(err, "TREE") / 1024, proc.stdout)


def _last(text: str, key: str) -> float:
    vals = [float(ln.split()[1]) for ln in text.splitlines() if ln.startswith(key + " ")]
    return vals[-1] if vals else float("nan")


def repeated(path: Path, repeats: int, *args: str) -> dict[str, Any]:
    """``repeats`` runs: median seconds, the largest peaks, every run's seconds, the last stdout."""
    runs = [analyze_run(path, *args) for _ in range(repeats)]
    return {"seconds": statistics.median(r.seconds for r in runs), "runs_s": [r.seconds for r in runs],
            "parent_peak_mib": max(r.parent_mib for r in runs),
            "tree_peak_mib": max(r.tree_mib for r in runs), "stdout": runs[-1].stdout}


def serial_stdout(path: Path) -> bytes:
    """What ``analyze PATH --json`` prints, with the hosts mapped in this process."""
    from tfprof_towers.advice.trace_rules import evaluate_trace
    from tfprof_towers.rundir.paths import json_text
    from tfprof_towers.trace.executors import analyze_pod

    analysis = analyze_pod(path, executor="serial")
    doc = analysis.to_doc(per_step=False)
    doc.update(evaluate_trace(analysis.facts).to_json())
    return (json_text(doc) + "\n").encode()


def dask_figures(path: Path, repeats: int) -> dict[str, Any]:
    """``analyze --dask`` on a two-worker LocalCluster started here; its workers' peak RSS."""
    import warnings

    from distributed import Client, LocalCluster

    with warnings.catch_warnings():  # "port 8787 is in use": another cluster's dashboard
        warnings.simplefilter("ignore", UserWarning)
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None)
    with cluster, Client(cluster) as client:
        out = repeated(path, repeats, "--dask", cluster.scheduler_address)
        peaks = client.run(_own_peak_kib)
    out["worker_peak_mib"] = {w: kib / 1024 for w, kib in sorted(peaks.items())}
    return out


def _own_peak_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def merged_figures(path: Path, cap_bytes: int, timeout_s: float) -> dict[str, Any]:
    """The old merged path in a child capped at ``cap_bytes`` of address space and ``timeout_s``."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", _MERGED, str(path), str(cap_bytes)],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "stopped": f"wall timeout after {timeout_s:.0f} s", "seconds": None,
                "peak_mib": None, "cap_gib": cap_bytes / 2**30}
    wall = time.perf_counter() - t0
    stopped = [ln for ln in proc.stderr.splitlines() if ln.startswith("STOPPED ")]
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    why = stopped[0][8:] if stopped else (last if proc.returncode else None)
    return {"ok": proc.returncode == 0, "stopped": why, "returncode": proc.returncode,
            "seconds": _last(proc.stderr, "SECONDS") if proc.returncode == 0 else wall,
            "peak_mib": _last(proc.stderr, "VmHWM") / 1024,
            "children_peak_mib": _last(proc.stderr, "CHILDREN") / 1024, "cap_gib": cap_bytes / 2**30}


def default_cap() -> int:
    """A few GiB below this machine's memory (the old path's cap)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return max(2**30, int(line.split()[1]) * 1024 - 4 * 2**30)
    return 20 * 2**30


# ---------------------------------------------------------------- the figures


def straggler_hosts(stdout: bytes) -> list[str]:
    """The hosts the ``straggler`` finding names (its task, then the others late), from ``--json``."""
    doc = json.loads(stdout)
    host_of = {t["task"]: t["host"] for t in doc.get("tasks") or ()}
    for f in doc.get("findings") or ():
        if f["rule"] == "straggler":
            ev = f["evidence"]
            return [host_of.get(t, t) for t in (ev["task"], *ev.get("others_late", ()))]
    return []


def scaling_figures(files: list[Path], root: Path, sizes: list[int], repeats: int,
                    known: dict[int, float]) -> dict[str, Any]:
    """Time per host for each count of hosts (``known``: counts already timed)."""
    rows = []
    for k in sizes:
        seconds = known.get(k)
        if seconds is None:
            seconds = repeated(logdir_of(files[:k], root), repeats)["seconds"]
        rows.append({"hosts": k, "seconds": seconds, "per_host_s": seconds / k})
    per = [r["per_host_s"] for r in rows]
    ratio = per[-1] / per[0] if len(per) > 1 else 1.0
    return {"rows": rows, "ratio": ratio, "ok": ratio <= TARGET_SCALING}


def run_benchmark(hosts: int, events: int, repeats: int, sizes: list[int], merged: bool = True,
                  merged_timeout_s: float = 1800.0) -> dict[str, Any]:
    """Make (or reuse) the logdir and time every figure of the module docstring."""
    t0 = time.perf_counter()
    files = host_files(hosts, events)
    made_s = time.perf_counter() - t0
    cores = _cores()
    from tfprof_towers.trace.hosts import idle_cores

    idle = idle_cores()
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        root = Path(tmp)
        one = repeated(logdir_of(files[:1], root), repeats)
        path = logdir_of(files, root)
        pool = repeated(path, repeats)
        dask = dask_figures(path, repeats)
        serial = serial_stdout(path)
        scaling = scaling_figures(files, root, sorted({k for k in sizes if k < hosts} | {hosts}), repeats,
                                  {hosts: pool["seconds"]})
        old = merged_figures(path, default_cap(), merged_timeout_s) if merged else None
    return figures(hosts, events, files, made_s, cores, idle, one, pool, dask, serial, scaling, old)


def figures(hosts: int, events: int, files: list[Path], made_s: float, cores: int, idle: int,
            one: dict[str, Any], pool: dict[str, Any], dask: dict[str, Any], serial: bytes,
            scaling: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    r1 = one["parent_peak_mib"]
    ideal = hosts * one["seconds"] / cores
    pool_peak = max(pool["parent_peak_mib"], pool["tree_peak_mib"])
    return {
        "hosts": hosts, "events_per_host": events,
        "stragglers": [f"host{h:03d}" for h in stragglers_of(hosts)],
        "logdir_mb": sum(f.stat().st_size for f in files) / 1e6, "generate_s": made_s,
        "cores": cores, "idle_cores_at_start": idle,
        "one_host": _strip(one),
        "pool": {**_strip(pool), "ideal_s": ideal, "vs_ideal": pool["seconds"] / ideal,
                 "vs_ideal_ok": pool["seconds"] / ideal <= TARGET_POOL_VS_IDEAL,
                 "rss_vs_one": pool_peak / r1, "rss_ok": pool_peak <= TARGET_RSS_VS_ONE * r1,
                 "straggler_hosts": straggler_hosts(pool["stdout"])},
        "dask": {**_strip(dask), "vs_pool": dask["seconds"] / pool["seconds"],
                 "vs_pool_ok": dask["seconds"] / pool["seconds"] <= TARGET_DASK_VS_POOL,
                 "identical_to_pool": dask["stdout"] == pool["stdout"],
                 "identical_to_serial": serial == pool["stdout"],
                 "worker_rss_vs_one": max(dask["worker_peak_mib"].values()) / r1},
        "scaling": scaling,
        "merged": old,
        "load_avg": list(os.getloadavg()),
        "targets": {"pool_vs_ideal": TARGET_POOL_VS_IDEAL, "rss_vs_one": TARGET_RSS_VS_ONE,
                    "dask_vs_pool": TARGET_DASK_VS_POOL, "scaling": TARGET_SCALING},
    }


def _strip(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k != "stdout"}


# ---------------------------------------------------------------- the report


def report(f: dict[str, Any]) -> str:
    one, pool, dask, sc = f["one_host"], f["pool"], f["dask"], f["scaling"]
    rows = [
        ("logdir", f"{f['hosts']} hosts x {f['events_per_host']:,} events, {f['logdir_mb']:.0f} MB "
                   f"(made/reused in {f['generate_s']:.1f} s); stragglers {', '.join(f['stragglers'])}", ""),
        ("one host (T1, R1)", f"{one['seconds']:.2f} s, {one['parent_peak_mib']:.0f} MiB", ""),
        ("local pool: time", f"{pool['seconds']:.2f} s vs hosts x T1 / {f['cores']} cores = "
                             f"{pool['ideal_s']:.2f} s: {pool['vs_ideal']:.2f}x",
         f"<= {TARGET_POOL_VS_IDEAL}x: {_met(pool['vs_ideal_ok'])}"),
        ("local pool: peak RSS", f"parent {pool['parent_peak_mib']:.0f} MiB, largest of the tree "
                                 f"{pool['tree_peak_mib']:.0f} MiB: {pool['rss_vs_one']:.2f}x R1",
         f"<= {TARGET_RSS_VS_ONE}x: {_met(pool['rss_ok'])}"),
        ("straggler finding", ", ".join(pool["straggler_hosts"]) or "none",
         _met(sorted(pool["straggler_hosts"]) == sorted(f["stragglers"]))),
        ("dask (2 workers): time", f"{dask['seconds']:.2f} s: {dask['vs_pool']:.2f}x the pool",
         f"<= {TARGET_DASK_VS_POOL}x: {_met(dask['vs_pool_ok'])}"),
        ("dask: same --json", f"as the pool: {dask['identical_to_pool']}, as serial: "
                              f"{dask['identical_to_serial']}",
         _met(dask["identical_to_pool"] and dask["identical_to_serial"])),
        ("dask: peak RSS", f"client {dask['parent_peak_mib']:.0f} MiB, workers "
                           + ", ".join(f"{v:.0f}" for v in dask["worker_peak_mib"].values())
                           + f" MiB: {dask['worker_rss_vs_one']:.2f}x R1",
         f"<= {TARGET_RSS_VS_ONE}x: {_met(dask['worker_rss_vs_one'] <= TARGET_RSS_VS_ONE)}"),
        ("scaling", "; ".join(f"{r['hosts']}: {r['seconds']:.2f} s = {r['per_host_s']:.3f} s/host"
                              for r in sc["rows"]) + f"; ratio {sc['ratio']:.2f}",
         f"<= {TARGET_SCALING}: {_met(sc['ok'])}"),
        ("old merged path", _merged_text(f["merged"]), ""),
        ("load average", " ".join(f"{x:.1f}" for x in f["load_avg"]), "a shared machine: compare ratios"),
    ]
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{a:<{width}}  {b}" + (f"  [{c}]" if c else "") for a, b, c in rows)


def _merged_text(m: dict[str, Any] | None) -> str:
    if m is None:
        return "skipped"
    if m["ok"]:
        return (f"{m['seconds']:.2f} s, peak RSS {m['peak_mib']:.0f} MiB (its host-reading children: "
                f"{m['children_peak_mib']:.0f} MiB; cap {m['cap_gib']:.0f} GiB)")
    peak = f", peak RSS {m['peak_mib']:.0f} MiB" if m.get("peak_mib") == m.get("peak_mib") else ""
    return f"stopped: {m['stopped']}{peak} (cap {m['cap_gib']:.0f} GiB)"


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="bench_hosts", description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=32)
    p.add_argument("--events", type=int, default=1_000_000, help="events per host")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--scale", default="8,16,32", help="host counts of the scaling figure (<= --hosts)")
    p.add_argument("--out", type=Path, default=Path("reports/bench-hosts.json"))
    p.add_argument("--no-merged", action="store_true", help="skip the old merged path")
    p.add_argument("--merged-timeout", type=float, default=1800.0, help="seconds")
    p.add_argument("--quick", action="store_true", help="a tiny run: 3 hosts x 2,000 events, no scaling")
    p.add_argument("--clean", action="store_true", help="remove the cached host files first")
    args = p.parse_args(argv)
    if args.quick:
        args.hosts, args.events, args.scale = 3, 2000, "3"
    if args.clean:
        shutil.rmtree(CACHE, ignore_errors=True)
    sizes = [int(x) for x in args.scale.split(",") if x.strip()]
    f = run_benchmark(args.hosts, args.events, args.repeats, sizes, not args.no_merged, args.merged_timeout)
    print(report(f))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(f, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
