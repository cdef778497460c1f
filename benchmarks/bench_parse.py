"""Trace-parsing speed: ``make bench-parse`` (``python -m benchmarks.bench_parse``).

Builds a synthetic XSpace of at least one million events (GPU kernels and copies
with their usual stats, host TF ops, step markers, derived lines), writes it to a
temporary folder and measures:

* ours: file -> ``Trace`` (events + steps DataFrames), :func:`load_trace`;
* bare protobuf parse: file read + ``XSpace.FromString`` (the protobuf runtime);
  ours and this one run in the same process, each once untimed, then ``repeats``
  times alternately (best and median of each, and the median of the pairs' ratios):
  both pay the same file read from a warm page cache and see the same machine;
* the xprof path a user would otherwise take: xprof's ``trace_viewer`` conversion
  of the same file to JSON, ``json.loads`` and ``pandas.DataFrame`` of its
  ``traceEvents`` (one run: tens of seconds);
* peak memory (VmHWM) of a fresh process that loads the trace, and the same
  process's figure just before loading (imports only); likewise for the bare parse.

The bare parse's time depends on how cheaply the process gets fresh memory pages
(upb allocates the whole message tree): on the same machine it has ranged from
about 75 to 190 ms for the default trace, so compare the two figures of one run.

``run_benchmark()`` returns the figures as a dict (for ``make bench``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGET_XPROF_SPEEDUP = 10.0
TARGET_PROTOBUF_RATIO = 3.0


def build_trace(n_events: int = 1_000_000, gpus: int = 4, line_events: int = 5000) -> tuple[bytes, int]:
    """A realistic synthetic XSpace with at least ``n_events`` events: (bytes, event count)."""
    from tfprof_towers.trace.synth import Ref, TraceBuilder, memcpy_details

    b = TraceBuilder()
    host = b.plane("/host:CPU")
    planes = [b.plane(f"/device:GPU:{g}") for g in range(gpus)]
    templates = []  # (plane builder, line proto) to replicate
    period = line_events * 10_000
    # host: a python thread with step markers, and executor threads with TF ops
    py = host.line("python", line_id=1)
    steps = 20
    for s in range(steps):
        py.event("train", s * period // steps, period // steps - 1000, {"step_num": s, "_r": 1})
    tf_line = host.line("tf_Compute/1", line_id=2)
    for i in range(line_events):
        t = i * 10_000
        if i % 5 == 0:
            tf_line.event("ExecutorState::Process", t, 9_000, {"id": i, "iter_num": 0, "_ct": 2, "_c": i})
        elif i % 5 == 4:
            tf_line.event(
                f"x_{i % 40}/_{i % 7}:_Send",
                t,
                900,
                {
                    "from": Ref(f"x_{i % 40}"),
                    "to": Ref("y"),
                    "key": Ref(
                        f"/job:localhost/replica:0/task:0/device:CPU:0;1;/job:localhost/replica:0/task:0/"
                        f"device:GPU:{i % gpus};edge_{i % 40}_x;0:0"
                    ),
                },
            )
        else:
            tf_line.event(f"layer_{i % 60}/mm:MatMul", t, 3_000)
    templates.append((host, tf_line.proto))
    for g, plane in enumerate(planes):
        compute = plane.line("Stream #13(Compute)", line_id=13)
        copies = plane.line("Stream #14(MemcpyH2D)", line_id=14)
        ops = plane.line("TensorFlow Ops")
        for i in range(line_events):
            t = i * 10_000
            op = f"layer_{i % 60}/mm:MatMul"
            compute.event(
                f"volta_sgemm_128x64_nn_{i % 12}",
                t,
                7_000,
                {
                    "correlation_id": i,
                    "context_id": 1,
                    "kernel_details": Ref(f"regs:64 grid:{i % 12},1,1"),
                    "tf_op": Ref(op),
                    "group_id": i // 250,
                },
            )
            kind = ("MemcpyH2D", "MemcpyD2H", "MemcpyP2P", "Memset")[i % 4]
            dest = (g + 1) % gpus if kind == "MemcpyP2P" else g
            copies.event(
                kind,
                t + 2_000,
                4_000,
                {
                    "correlation_id": i,
                    "context_id": 1,
                    "tf_op": Ref(op),
                    "memcpy_details": memcpy_details(4096 * (1 + i % 16), dest, "pinned", "device"),
                },
            )
            if i % 2 == 0:
                ops.event(op, t, 7_000, {"group_id": i // 250})
        templates += [(plane, compute.proto), (plane, copies.proto), (plane, ops.proto)]
    count = sum(len(line.events) for plane in b.space.planes for line in plane.lines)
    copy_no = 0
    while count < n_events:  # more threads / streams with the same content (the parser cannot tell)
        for plane, line in templates:
            copy_no += 1
            new = plane.proto.lines.add()
            new.CopyFrom(line)
            new.id = 1000 + copy_no
            new.name = f"{line.name} #{copy_no}" if new.id > 0 else line.name
            count += len(line.events)
    return b.to_bytes(), count


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


def _ours(path: Path):
    from tfprof_towers.trace.load import load_trace

    return load_trace(path)


def _protobuf(path: Path):
    from tfprof_towers.xplane.schema import XSpace

    return XSpace.FromString(path.read_bytes())


def time_pair(path: Path, repeats: int) -> dict[str, Any]:
    """Ours and the bare protobuf parse of the same file, interleaved in one process.

    Both start from the file (read included; the page cache is warm), each is run once
    untimed first, then ``repeats`` times alternately, so that neither gets a quieter
    machine or a warmer heap than the other; results are freed outside the timing.
    Returns per-path lists of seconds and the event rows of ours.
    """
    rows = len(_ours(path).events)
    _protobuf(path)
    ours, pb = [], []
    for _ in range(repeats):
        seconds, result = _timed(lambda: _ours(path))
        ours.append(seconds)
        del result
        seconds, result = _timed(lambda: _protobuf(path))
        pb.append(seconds)
        del result
    return {"ours": ours, "protobuf": pb, "rows": rows}


def time_ours(path: Path, repeats: int) -> tuple[float, int]:
    seconds, trace = _best(lambda: _ours(path), repeats)
    return seconds, len(trace.events)


def time_protobuf(path: Path, repeats: int) -> float:
    return _best(lambda: _protobuf(path), repeats)[0]


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

    try:
        seconds, n = _best(convert, repeats)
    except Exception as exc:
        return None, None, f"xprof trace_viewer conversion failed ({type(exc).__name__}: {exc})"
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


def run_benchmark(n_events: int = 1_000_000, repeats: int = 5, xprof: bool = True) -> dict[str, Any]:
    """Build the trace, time every path and return the figures."""
    t0 = time.perf_counter()
    data, count = build_trace(n_events)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.xplane.pb"
        path.write_bytes(data)
        pair = time_pair(path, repeats)
        # one xprof run: it takes tens of seconds, and its margin is wide
        xp_s, xp_rows, xp_how = time_xprof(path, 1) if xprof else (None, None, "skipped")
        peak, base = peak_memory(path)
        pb_peak, pb_base = peak_memory(path, "protobuf")
    ours, pb = pair["ours"], pair["protobuf"]
    ours_s, pb_s = min(ours), min(pb)
    return {
        "events_in_file": count,
        "event_rows": pair["rows"],
        "file_mb": len(data) / 1e6,
        "build_s": build_s,
        "repeats": repeats,
        "ours_s": ours_s,
        "ours_median_s": statistics.median(ours),
        "ours_runs_s": ours,
        "events_per_s": count / ours_s,
        "protobuf_parse_s": pb_s,
        "protobuf_median_s": statistics.median(pb),
        "protobuf_runs_s": pb,
        "ratio_to_protobuf": ours_s / pb_s,
        "ratio_to_protobuf_median": statistics.median(o / p for o, p in zip(ours, pb)),
        "xprof_s": xp_s,
        "xprof_rows": xp_rows,
        "xprof_path": xp_how,
        "speedup_vs_xprof": (xp_s / ours_s) if xp_s else None,
        "peak_rss_mib": peak,
        "rss_before_load_mib": base,
        "protobuf_peak_rss_mib": pb_peak,
        "protobuf_rss_before_mib": pb_base,
        "targets": {"speedup_vs_xprof": TARGET_XPROF_SPEEDUP, "ratio_to_protobuf": TARGET_PROTOBUF_RATIO},
    }


def report(r: dict[str, Any]) -> str:
    ratio = r["ratio_to_protobuf"]
    median = r.get("ratio_to_protobuf_median")
    lines = [
        f"trace: {r['events_in_file']:,} events ({r['event_rows']:,} rows after dropping derived lines), "
        f"{r['file_mb']:.1f} MB, built in {r['build_s']:.1f} s",
        f"ours (file -> events/steps DataFrames): {r['ours_s'] * 1e3:.0f} ms best"
        + (f", {r['ours_median_s'] * 1e3:.0f} ms median" if "ours_median_s" in r else "")
        + f" = {r['events_per_s'] / 1e6:.2f} M events/s",
        f"bare protobuf parse (read + XSpace.FromString): {r['protobuf_parse_s'] * 1e3:.0f} ms best"
        + (f", {r['protobuf_median_s'] * 1e3:.0f} ms median" if "protobuf_median_s" in r else ""),
        f"ours / protobuf = {ratio:.2f}x best/best"
        + (f", {median:.2f}x median of the {r.get('repeats', '?')} interleaved pairs" if median else "")
        + f" (target <= {TARGET_PROTOBUF_RATIO:.0f}x: "
        f"{'met' if max(ratio, median or 0) <= TARGET_PROTOBUF_RATIO else 'NOT met'})",
    ]
    if r["xprof_s"] is None:
        lines.append(f"xprof path: not measured -- {r['xprof_path']}")
    else:
        lines.append(
            f"xprof path ({r['xprof_path']}): {r['xprof_s'] * 1e3:.0f} ms for {r['xprof_rows']:,} rows; "
            f"ours is {r['speedup_vs_xprof']:.1f}x faster (target >= {TARGET_XPROF_SPEEDUP:.0f}x: "
            f"{'met' if r['speedup_vs_xprof'] >= TARGET_XPROF_SPEEDUP else 'NOT met'})"
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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="bench_parse", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-xprof", action="store_true")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    figures = run_benchmark(args.events, args.repeats, xprof=not args.no_xprof)
    print(json.dumps(figures, indent=2) if args.json else report(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
