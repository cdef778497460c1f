"""Measures trace-parsing speed and memory: ``make bench-parse`` (``python -m benchmarks.bench_parse``).

Two kinds of synthetic XSpace (:mod:`.parse_traces`), written to a temporary folder:

* the *default* trace (:func:`build_trace`): at least one million events -- GPU kernels and
  copies with their usual stats, host TF ops, step markers, derived lines -- made by
  replicating template lines (few distinct strings);
* the *copy-heavy* trace (:func:`tfprof_towers.testing.synth.copy_heavy_trace`): GPU-shaped,
  a quarter of its events ``MemcpyH2D``/``MemcpyD2H`` of varied sizes, so nearly every
  ``memcpy_details`` text is distinct; 1M events (~40 MB) and 5M events (~200 MB).

Figures, each printed as a ratio against its target:

* in-process decode on the default trace: file -> ``Trace`` (:func:`load_trace`: events
  classified into numpy columns) against the bare protobuf parse (file read +
  ``XSpace.FromString``), in one process, each once untimed, then ``repeats`` times
  alternately (best and median of each, and the median of the pairs' ratios); ours as a
  user runs it (batches decoded on up to two threads) and on one thread; the pandas
  frame of the events, made on demand, is timed apart;
* the xprof path a user would otherwise take: xprof's ``trace_viewer`` conversion to JSON,
  ``json.loads`` and ``pandas.DataFrame`` of its ``traceEvents`` (one run each: tens of seconds);
* the whole process a user runs (:mod:`.bench_whole`), ``tfprof-towers analyze FILE --json`` from
  start to exit (imports included, from compiled modules as an installed package has them: a
  ``PYTHONDONTWRITEBYTECODE`` in the environment is dropped for it), on the copy-heavy 1M
  and 5M traces, run alternately ``whole_repeats`` times after one warm-up run: its time
  (best, and median), events/s, the ratio to xprof on the same 1M file, its peak RSS (its
  own VmHWM at exit) divided by the file's size, and the growth from 1M to 5M -- the targets
  judged on the best runs, the least disturbed by other work on a shared machine;
* the attribution of the copy-heavy 1M trace in-process, its devices on up to two threads (as
  ``analyze`` runs it) and on one, alternately: whether the second thread pays here;
* peak memory (VmHWM) of a fresh process that loads the default trace in-process, and the
  same process's figure just before loading (imports only); likewise for the bare parse;
* multi-host: a logdir of two copy-heavy hosts of 1M events each, decoded one after the other
  (each on its decoding threads) and then in parallel processes (as ``analyze LOGDIR`` does,
  up to the cores available, the cores shared out as threads).

The machine is shared (other work runs beside the benchmark): compare the figures of one
run -- ratios of interleaved runs and medians -- not absolute times across runs.
``--code DIR`` runs the whole-process figures with another checkout's package (``DIR`` first
on the path, ahead of an editable install): the "before" of a change.

``run_benchmark()`` returns the figures as a dict (for ``make bench``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.analyze_process import met as _met
from benchmarks.bench_load import load_figures, report_load
from benchmarks.bench_whole import (
    TARGET_GROWTH,
    TARGET_RSS_RATIO,
    TARGET_WHOLE_PROTOBUF_RATIO,
    TARGET_WHOLE_XPROF_SPEEDUP,
    report_whole,
    whole_figures,
)
from benchmarks.parse_traces import build_trace, copy_heavy_file

TARGET_XPROF_SPEEDUP = 10.0  # in-process decode vs xprof
TARGET_PROTOBUF_RATIO = 2.0  # in-process decode vs the bare protobuf parse


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds ``fn`` takes, and its result (kept alive: freeing it is not timed)."""
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        seconds, result = _timed(fn)
        best = min(best, seconds)
    return best, result


def _ours(path: Path, threads: int | None = None):
    from tfprof_towers.trace.load import load_trace

    return load_trace(path, threads=threads)


def _protobuf(path: Path):
    from tfprof_towers.xplane.schema import XSpace

    return XSpace.FromString(path.read_bytes())


def _ours_numpy(path: Path):
    """:func:`_ours` on one thread with the numpy decoders (``TFPROF_TOWERS_NATIVE=0``), where the C
    kernel is built."""
    from tfprof_towers.xplane import native

    with native.numpy_decoders():
        return _ours(path, 1)


def time_pair(path: Path, repeats: int) -> dict[str, Any]:
    """Ours and the bare protobuf parse of the same file, interleaved in one process.

    Both start from the file (read included; the page cache is warm), each is run once
    untimed first, then ``repeats`` times alternately, so that neither gets a quieter
    machine or a warmer heap than the other; results are freed outside the timing.  Ours
    runs as a user gets it (its decoding threads, up to two) and on one thread.
    Returns per-path lists of seconds and the event rows of ours.
    """
    from tfprof_towers.xplane import native

    rows = _ours(path).columns.n
    _ours(path, threads=1)
    _protobuf(path)
    ours, one, pb, numpy_one = [], [], [], []
    paths = [(ours, lambda: _ours(path)), (one, lambda: _ours(path, 1)), (pb, lambda: _protobuf(path))]
    if native.kernel is not None:  # the numpy decoders too: what a machine without a C compiler gets
        paths.append((numpy_one, lambda: _ours_numpy(path)))
    for _ in range(repeats):
        for runs, fn in paths:
            seconds, result = _timed(fn)
            runs.append(seconds)
            del result
    return {"ours": ours, "one_thread": one, "protobuf": pb, "numpy_one_thread": numpy_one, "rows": rows,
            "file_bytes": path.stat().st_size}


def time_attribution(path: Path, repeats: int) -> dict[str, Any]:
    """The attribution of a loaded trace (:func:`~tfprof_towers.trace.attribute.attribute`) as ``analyze``
    runs it (its devices on up to two threads) and on one thread, alternately after one untimed run of
    each: whether the second thread pays on this machine."""
    from tfprof_towers.trace.attribute import attribute
    from tfprof_towers.xplane.parallel import decode_threads

    trace = _ours(path)
    attribute(trace)
    attribute(trace, threads=1)
    ours, one = [], []
    for _ in range(repeats):
        ours.append(_timed(lambda: attribute(trace))[0])
        one.append(_timed(lambda: attribute(trace, threads=1))[0])
    return {"threads": decode_threads(), "ours_median_s": statistics.median(ours),
            "one_thread_median_s": statistics.median(one),
            "speedup": statistics.median(o / t for o, t in zip(one, ours))}


def time_frame(path: Path, repeats: int = 3) -> float:
    """The events DataFrame made from a loaded trace's columns (pandas already imported)."""
    import pandas  # noqa: F401  (its import is not the frame's cost)

    from tfprof_towers.trace.columns import events_frame

    columns = _ours(path).columns
    return _best(lambda: events_frame(columns), repeats)[0]


def time_ours(path: Path, repeats: int) -> tuple[float, int]:
    seconds, trace = _best(lambda: _ours(path), repeats)
    return seconds, trace.columns.n


def time_protobuf(path: Path, repeats: int) -> float:
    return _best(lambda: _protobuf(path), repeats)[0]


@contextlib.contextmanager
def native_stderr_to(log: Path) -> Iterator[None]:
    """File descriptor 2 into ``log`` meanwhile: xprof's C++ logs thousands of I0000/W0000 lines
    ("Found derived XLine with clashing display ID") that would bury the figures."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log, "wb") as fh:
            os.dup2(fh.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def time_xprof(path: Path, repeats: int) -> tuple[float | None, int | None, str]:
    """xprof's trace_viewer JSON + pandas, or (None, None, why) when it cannot run here."""
    try:
        import pandas as pd
        from xprof.convert import raw_to_tool_data
    except Exception as exc:  # xprof missing or its native library failing to load
        return None, None, f"xprof unavailable ({type(exc).__name__}: {exc})"

    def convert() -> int:
        with tempfile.TemporaryDirectory() as tmp:  # xprof may cache next to its input
            copy = Path(tmp) / path.name
            shutil.copyfile(path, copy)
            data, _ = raw_to_tool_data.xspace_to_tool_data(
                [str(copy)], "trace_viewer", {"use_saved_result": False}
            )
            if not data:
                raise RuntimeError("trace_viewer conversion returned nothing")
            events = json.loads(data)["traceEvents"]
            frame = pd.DataFrame(events)
            return len(frame)

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "xprof.log"
        try:
            with native_stderr_to(log):
                seconds, n = _best(convert, repeats)
        except Exception as exc:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
            return None, None, (f"xprof trace_viewer conversion failed ({type(exc).__name__}: {exc})"
                                + (f"; its log ends: {last[0][:200]}" if last else ""))
    return seconds, n, "xspace_to_tool_data(trace_viewer) + json.loads + pandas.DataFrame(traceEvents)"


_PEAK_SCRIPT = """
import sys
from pathlib import Path

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

if sys.argv[2] == "ours":
    from tfprof_towers.trace.load import load_trace as load
else:
    from tfprof_towers.xplane.schema import XSpace
    load = lambda p: XSpace.FromString(Path(p).read_bytes())
before = hwm()
result = load(sys.argv[1])
print(before, hwm())
"""


def peak_memory(path: Path, what: str = "ours") -> tuple[float, float]:
    """(peak RSS MiB of a fresh process that loads the trace, its peak RSS MiB just before loading);
    ``what``: ``"ours"`` (:func:`load_trace`) or ``"protobuf"`` (the bare parse)."""
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(path), what],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    before, after = (int(x) / 1024 for x in out.stdout.split())
    return after, before


def multihost_figures(logdir: Path, repeats: int) -> dict[str, Any]:
    """Decode a two-host logdir's hosts one after the other and in parallel processes, one per core
    (medians of runs alternating the two)."""
    from tfprof_towers.trace.hosts import available_cores, idle_cores, load_hosts

    cores = available_cores()
    load_hosts(logdir, workers=1)
    seq, par = [], []
    for _ in range(repeats):
        seq.append(_timed(lambda: load_hosts(logdir, workers=1))[0])
        par.append(_timed(lambda: load_hosts(logdir, workers=cores))[0])
    trace = load_hosts(logdir, workers=1)
    return {
        "hosts": len(trace.hosts),
        "events": int(trace.columns.n),
        "cores": cores,
        "idle_cores_now": idle_cores(),
        "sequential_s": statistics.median(seq),
        "parallel_s": statistics.median(par),
        "speedup": statistics.median(s / p for s, p in zip(seq, par)),
    }


def run_benchmark(
    n_events: int = 1_000_000,
    repeats: int = 5,
    xprof: bool = True,
    big_events: int = 5_000_000,
    whole_repeats: int = 3,
    multihost: bool = True,
    code: Path | None = None,
) -> dict[str, Any]:
    """Build the traces, time every path and return the figures."""
    from tfprof_towers.xplane.parallel import decode_threads

    t0 = time.perf_counter()
    data, count = build_trace(n_events)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.xplane.pb"
        path.write_bytes(data)
        del data
        pair = time_pair(path, repeats)
        frame_s = time_frame(path)
        # one xprof run: it takes tens of seconds, and its margin is wide
        xp_s, xp_rows, xp_how = time_xprof(path, 1) if xprof else (None, None, "skipped")
        peak, base = peak_memory(path)
        pb_peak, pb_base = peak_memory(path, "protobuf")
        path.unlink()
        small, big = Path(tmp) / "copy_heavy_1m.xplane.pb", Path(tmp) / "copy_heavy_5m.xplane.pb"
        t0 = time.perf_counter()
        copy_heavy_file(small, n_events)
        if big_events:
            copy_heavy_file(big, big_events)
        heavy_build_s = time.perf_counter() - t0
        whole = whole_figures(small, big if big_events else None, whole_repeats, code)
        attribution = time_attribution(small, repeats)
        load = load_figures(small, whole_repeats)
        ch_xp_s, ch_xp_rows, _ = time_xprof(small, 1) if xprof else (None, None, "skipped")
        whole["xprof_s"], whole["xprof_rows"] = ch_xp_s, ch_xp_rows
        whole["speedup_vs_xprof"] = ch_xp_s / whole["small"]["best_s"] if ch_xp_s else None
        whole["speedup_vs_xprof_median"] = ch_xp_s / whole["small"]["median_s"] if ch_xp_s else None
        whole["build_s"] = heavy_build_s
        for f in (small, big):
            f.unlink(missing_ok=True)
        hosts = None
        if multihost:
            logdir = Path(tmp) / "logdir"
            for i, host in enumerate(("worker0_6001", "worker1_6002")):
                run = logdir / "plugins" / "profile" / "2024_01_01_00_00_00"
                copy_heavy_file(run / f"{host}.xplane.pb", n_events, i)
            hosts = multihost_figures(logdir, max(2, whole_repeats))
    ours, one, pb = pair["ours"], pair["one_thread"], pair["protobuf"]
    ours_s, pb_s = min(ours), min(pb)
    return {
        "events_in_file": count,
        "event_rows": pair["rows"],
        "file_mb": pair["file_bytes"] / 1e6,
        "build_s": build_s,
        "repeats": repeats,
        "ours_s": ours_s,
        "ours_median_s": statistics.median(ours),
        "ours_runs_s": ours,
        "events_per_s": count / ours_s,
        "frame_s": frame_s,
        "protobuf_parse_s": pb_s,
        "protobuf_median_s": statistics.median(pb),
        "protobuf_runs_s": pb,
        "ratio_to_protobuf": ours_s / pb_s,
        "ratio_to_protobuf_median": statistics.median(o / p for o, p in zip(ours, pb)),
        "decode_threads": decode_threads(),
        "one_thread_s": min(one),
        "one_thread_median_s": statistics.median(one),
        "one_thread_ratio_to_protobuf": min(one) / pb_s,
        "one_thread_ratio_to_protobuf_median": statistics.median(o / p for o, p in zip(one, pb)),
        "numpy_one_thread_median_s": statistics.median(pair["numpy_one_thread"] or [0]) or None,
        "xprof_s": xp_s,
        "xprof_rows": xp_rows,
        "xprof_path": xp_how,
        "speedup_vs_xprof": (xp_s / ours_s) if xp_s else None,
        "peak_rss_mib": peak,
        "rss_before_load_mib": base,
        "protobuf_peak_rss_mib": pb_peak,
        "protobuf_rss_before_mib": pb_base,
        "whole": whole,
        "attribution": attribution,
        "load": load,
        "multihost": hosts,
        "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "targets": {
            "speedup_vs_xprof": TARGET_XPROF_SPEEDUP,
            "ratio_to_protobuf": TARGET_PROTOBUF_RATIO,
            "whole_speedup_vs_xprof": TARGET_WHOLE_XPROF_SPEEDUP,
            "whole_ratio_to_protobuf": TARGET_WHOLE_PROTOBUF_RATIO,
            "rss_over_file": TARGET_RSS_RATIO,
            "growth": TARGET_GROWTH,
        },
    }


def report(r: dict[str, Any]) -> str:
    ratio = r["ratio_to_protobuf"]
    median = r.get("ratio_to_protobuf_median")
    lines = [
        f"default trace: {r['events_in_file']:,} events ({r['event_rows']:,} rows after dropping derived "
        "lines), "
        f"{r['file_mb']:.1f} MB, built in {r['build_s']:.1f} s",
        f"ours (file -> Trace: classified numpy columns): {r['ours_s'] * 1e3:.0f} ms best"
        + (f", {r['ours_median_s'] * 1e3:.0f} ms median" if "ours_median_s" in r else "")
        + f" = {r['events_per_s'] / 1e6:.2f} M events/s"
        + (f"; the events DataFrame, on demand: +{r['frame_s'] * 1e3:.0f} ms" if r.get("frame_s") else ""),
        f"bare protobuf parse (read + XSpace.FromString): {r['protobuf_parse_s'] * 1e3:.0f} ms best"
        + (f", {r['protobuf_median_s'] * 1e3:.0f} ms median" if "protobuf_median_s" in r else ""),
        f"ours / protobuf = {ratio:.2f}x best/best"
        + (f", {median:.2f}x median of the {r.get('repeats', '?')} interleaved pairs" if median else "")
        + f" (target <= {TARGET_PROTOBUF_RATIO:.0f}x: "
        f"{_met(max(ratio, median or 0) <= TARGET_PROTOBUF_RATIO)})",
    ]
    if r.get("one_thread_s"):
        lines.append(
            f"  ours decodes on {r['decode_threads']} thread(s); on one: "
            f"{r['one_thread_s'] * 1e3:.0f} ms best, "
            f"{r['one_thread_median_s'] * 1e3:.0f} ms median = {r['one_thread_ratio_to_protobuf']:.2f}x "
            f"protobuf best/best, {r['one_thread_ratio_to_protobuf_median']:.2f}x median of the pairs"
        )
    if r.get("numpy_one_thread_median_s"):
        lines.append(
            f"  on one thread with the numpy decoders (TFPROF_TOWERS_NATIVE=0, no C kernel): "
            f"{r['numpy_one_thread_median_s'] * 1e3:.0f} ms median, "
            f"{r['numpy_one_thread_median_s'] / r['one_thread_median_s']:.2f}x the C kernel's"
        )
    if r["xprof_s"] is None:
        lines.append(f"xprof path: not measured -- {r['xprof_path']}")
    else:
        lines.append(
            f"xprof path ({r['xprof_path']}): {r['xprof_s'] * 1e3:.0f} ms for {r['xprof_rows']:,} rows; "
            f"ours is {r['speedup_vs_xprof']:.1f}x faster (target >= {TARGET_XPROF_SPEEDUP:.0f}x: "
            f"{_met(r['speedup_vs_xprof'] >= TARGET_XPROF_SPEEDUP)})"
        )
    lines.append(
        f"peak memory of a process loading the trace: {r['peak_rss_mib']:.0f} MiB RSS "
        f"({r['peak_rss_mib'] - r['rss_before_load_mib']:.0f} MiB above its "
        f"{r['rss_before_load_mib']:.0f} MiB before loading)"
    )
    if r.get("protobuf_peak_rss_mib") is not None:
        lines.append(
            f"peak memory of a process doing the bare parse: {r['protobuf_peak_rss_mib']:.0f} MiB RSS "
            f"({r['protobuf_peak_rss_mib'] - r['protobuf_rss_before_mib']:.0f} MiB above its "
            f"{r['protobuf_rss_before_mib']:.0f} MiB before)"
        )
    lines += report_whole(r.get("whole"))
    a = r.get("attribution")
    if a:
        n_small = (r.get("whole") or {}).get("small", {}).get("events", 0)
        lines.append(
            f"attribution of the copy-heavy {n_small:,}-event trace (in-process, as analyze runs it: its "
            "devices on up to two threads, one where no second core is free): "
            f"{a['ours_median_s'] * 1e3:.0f} ms median; on one thread "
            f"{a['one_thread_median_s'] * 1e3:.0f} ms: {a['speedup']:.2f}x by the median of the pairs"
        )
    lines += report_load(r.get("load"))
    lines += _report_hosts(r.get("multihost"))
    if r.get("load_avg"):
        lines.append("load average at the end: " + " ".join(f"{x:.1f}" for x in r["load_avg"])
                     + " (a shared machine: compare the ratios of one run)")
    return "\n".join(lines)


def _report_hosts(h: dict[str, Any] | None) -> list[str]:
    if not h:
        return []
    return [
        f"multi-host logdir: {h['hosts']} hosts, {h['events']:,} events: decoded one after the other "
        f"{h['sequential_s']:.2f} s, in parallel processes ({h['cores']} cores) "
        f"{h['parallel_s']:.2f} s: speedup {h['speedup']:.2f}x (`analyze` would use "
        f"{h.get('idle_cores_now', '?')} worker(s) at the present load)"
    ]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="bench_parse", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--big-events", type=int, default=5_000_000, help="the large copy-heavy trace (0: none)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--whole-repeats", type=int, default=3)
    p.add_argument("--no-xprof", action="store_true")
    p.add_argument("--no-multihost", action="store_true")
    p.add_argument("--code", type=Path, help="run the whole-process figures with this checkout's package")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--only-load", action="store_true",
                   help="only tfprof_towers.load against `analyze --json` (benchmarks/bench_load.py)")
    args = p.parse_args(argv)
    if args.only_load:
        with tempfile.TemporaryDirectory() as tmp:
            small = Path(tmp) / "copy_heavy_1m.xplane.pb"
            copy_heavy_file(small, args.events)
            load = load_figures(small, args.whole_repeats)
        print(json.dumps(load, indent=2) if args.json else "\n".join(report_load(load)))
        return 0
    figures = run_benchmark(
        args.events, args.repeats, xprof=not args.no_xprof, big_events=args.big_events,
        whole_repeats=args.whole_repeats, multihost=not args.no_multihost, code=args.code,
    )
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
