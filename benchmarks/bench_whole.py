"""Measures the whole `tfprof-towers analyze FILE --json` process, start to exit, on copy-heavy traces.

The process a user runs (imports included, from compiled modules as an installed package has
them: a ``PYTHONDONTWRITEBYTECODE`` in the environment is dropped for it), on a copy-heavy 1M and
5M trace run alternately ``repeats`` times after one warm-up run: its time (best, and median),
events/s, its peak RSS (its own VmHWM at exit) divided by the file's size, and the growth from 1M
to 5M -- the growth and memory targets judged on the best runs, the least disturbed by other work
on a shared machine.  Between the runs, the bare protobuf parse of the 1M file (read +
``XSpace.FromString``, in this process) is timed as often: the whole process's median over the
parse's median is the ratio to the bare parse (target <= 7x).  Part of ``make bench-parse``
(:mod:`.bench_parse` adds the ratio to xprof on the same 1M file, judged on the whole process's
median); ``python -m benchmarks.bench_whole`` runs this figure alone.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.analyze_process import met as _met
from benchmarks.analyze_process import whole_process
from benchmarks.parse_traces import copy_heavy_file, events_in

TARGET_WHOLE_XPROF_SPEEDUP = 20.0  # whole `analyze --json` process vs xprof, copy-heavy 1M (medians)
TARGET_WHOLE_PROTOBUF_RATIO = 7.0  # whole `analyze --json` process / the bare protobuf parse (medians)
TARGET_RSS_RATIO = 4.0  # peak RSS of `analyze` / file size, copy-heavy 5M
TARGET_GROWTH = 5.5  # 5M time / 1M time


def whole_figures(
    small: Path, big: Path | None, repeats: int, code: Path | None = None
) -> dict[str, Any]:
    """The whole process on the copy-heavy traces, the two sizes run alternately (medians), and the bare
    protobuf parse of the small one between them."""
    runs: dict[str, list[tuple[float, float]]] = {"small": [], "big": []}
    whole_process(small, code)  # warm the page cache and the imports' .pyc files
    protobuf_parse(small)
    parse: list[float] = []
    for _ in range(repeats):
        runs["small"].append(whole_process(small, code))
        parse.append(protobuf_parse(small))
        if big is not None:
            runs["big"].append(whole_process(big, code))
    out: dict[str, Any] = {"repeats": repeats, "code": str(code) if code else "this checkout"}
    for key, path in (("small", small), ("big", big)):
        if path is None:
            continue
        times = [t for t, _ in runs[key]]
        events = events_in(path)
        median = statistics.median(times)
        peak = max(r for _, r in runs[key])
        out[key] = {
            "events": events,
            "file_mb": path.stat().st_size / 1e6,
            "runs_s": times,
            "median_s": median,
            "best_s": min(times),
            "events_per_s": events / min(times),
            "peak_rss_mib": peak,
            "rss_over_file": peak * 1024 * 1024 / path.stat().st_size,
        }
    out["protobuf_runs_s"] = parse
    out["protobuf_median_s"] = statistics.median(parse)
    out["ratio_to_protobuf"] = out["small"]["median_s"] / out["protobuf_median_s"]
    if big is not None:
        out["growth"] = out["big"]["best_s"] / out["small"]["best_s"]
        out["growth_median"] = statistics.median(b / s for (b, _), (s, _) in zip(runs["big"], runs["small"]))
        out["growth_events"] = out["big"]["events"] / out["small"]["events"]
    return out


def protobuf_parse(path: Path) -> float:
    """Seconds of the bare protobuf parse of ``path`` in this process: the file read and
    ``XSpace.FromString`` (the result freed outside the timing)."""
    from tfprof_towers.xplane.schema import XSpace

    t0 = time.perf_counter()
    space = XSpace.FromString(path.read_bytes())
    seconds = time.perf_counter() - t0
    del space
    return seconds


def report_whole(w: dict[str, Any] | None) -> list[str]:
    """The printed lines of :func:`whole_figures`' figures (with xprof's, when measured)."""
    if not w:
        return []
    s = w["small"]
    lines = [
        f"whole process, `tfprof-towers analyze FILE --json` ({w['code']}), copy-heavy traces, "
        f"{w['repeats']} alternating runs each, best (median):",
        f"  {s['events']:,} events, {s['file_mb']:.0f} MB: {s.get('best_s', s['median_s']):.2f} s "
        f"({s['median_s']:.2f} s) = {s['events_per_s'] / 1e6:.2f} M events/s; peak RSS "
        f"{s['peak_rss_mib']:.0f} MiB = {s['rss_over_file']:.1f}x the file",
    ]
    if w.get("xprof_s"):
        median = w.get("speedup_vs_xprof_median") or w["speedup_vs_xprof"]
        lines.append(
            f"  xprof (trace_viewer + json + pandas) on the same file: {w['xprof_s']:.1f} s (one run); "
            f"ours is {median:.1f}x faster by our median ({w['speedup_vs_xprof']:.1f}x by our best) "
            f"(target >= {TARGET_WHOLE_XPROF_SPEEDUP:.0f}x: {_met(median >= TARGET_WHOLE_XPROF_SPEEDUP)})"
        )
    if w.get("protobuf_median_s"):
        within = w["ratio_to_protobuf"] <= TARGET_WHOLE_PROTOBUF_RATIO
        lines.append(
            f"  the bare protobuf parse of the same file (read + XSpace.FromString, in-process): "
            f"{w['protobuf_median_s'] * 1e3:.0f} ms median; the whole process is "
            f"{w['ratio_to_protobuf']:.1f}x that by the medians "
            f"(target <= {TARGET_WHOLE_PROTOBUF_RATIO:.0f}x: {_met(within)})"
        )
    if "big" in w:
        b = w["big"]
        growth_median = w.get("growth_median")
        lines += [
            f"  {b['events']:,} events, {b['file_mb']:.0f} MB: {b.get('best_s', b['median_s']):.2f} s "
            f"({b['median_s']:.2f} s) = {b['events_per_s'] / 1e6:.2f} M events/s; peak RSS "
            f"{b['peak_rss_mib']:.0f} MiB = {b['rss_over_file']:.1f}x the file (target <= "
            f"{TARGET_RSS_RATIO:.0f}x: {_met(b['rss_over_file'] <= TARGET_RSS_RATIO)})",
            f"  growth: {w['growth']:.2f}x the time (best/best"
            + (f"; {growth_median:.2f}x the median of the pairs" if growth_median else "")
            + f") for {w['growth_events']:.2f}x the events "
            f"(target <= {TARGET_GROWTH}x: {_met(w['growth'] <= TARGET_GROWTH)})",
        ]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Measures this figure alone on freshly built copy-heavy traces."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_whole", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--big-events", type=int, default=5_000_000, help="the large copy-heavy trace (0: none)")
    p.add_argument("--whole-repeats", type=int, default=3)
    p.add_argument("--code", type=Path, help="run the whole process with this checkout's package")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "copy_heavy_1m.xplane.pb", Path(tmp) / "copy_heavy_5m.xplane.pb"
        copy_heavy_file(small, args.events)
        if args.big_events:
            copy_heavy_file(big, args.big_events)
        whole = whole_figures(small, big if args.big_events else None, args.whole_repeats, args.code)
    print(json.dumps(whole, indent=2) if args.json else "\n".join(report_whole(whole)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
