"""`tfprof-towers analyze`: attribute the time of a trace captured here or elsewhere."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from tfprof_towers.rundir.paths import json_text
from tfprof_towers.rundir.trace_doc import DeviceTime, LinkRow, TaskSteps, TraceDoc, as_trace_doc
from tfprof_towers.vocab.categories import IDLE_SPLIT
from tfprof_towers.vocab.device_names import is_accelerator_plane, short_device, task_of
from tfprof_towers.vocab.errors import EXIT_SOME_HOSTS, TowersError
from tfprof_towers.vocab.fmt import fmt_some
from tfprof_towers.vocab.textcap import single_line, visible


def register(sub: argparse._SubParsersAction) -> None:
    from tfprof_towers.cli import add_command

    p = add_command(sub, "analyze", run)
    p.add_argument("path", metavar="PATH",
                   help="an *.xplane.pb file, a TensorBoard logdir or a run directory")
    p.add_argument("--json", action="store_true", help="print the analysis as one JSON document")
    p.add_argument("--html", metavar="OUT", type=out_file,
                   help="also write an HTML page of the analysis to OUT")
    p.add_argument("--run", metavar="NAME",
                   help="which profile run (logdir) or variant (run directory) to analyse")
    p.add_argument("--all", action="store_true", dest="every",
                   help="print every device, link and allocator of a pod (by default, a pod of many devices "
                        "is printed one row per host; --json and --html always hold everything)")
    p.add_argument("--dask", metavar="ADDRESS",
                   help="analyse the hosts on the Dask cluster at ADDRESS (tcp://scheduler:8786) instead of "
                        "a local process pool (docs/cluster.md)")


def out_file(text: str) -> Path:
    """An OUT file name of the command line; an empty one (``Path("")`` is the current directory) refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty file name; give a file to write")
    return Path(text)


def run(args: argparse.Namespace) -> int:
    """Attribute each device's time in a profiler trace to compute, copies, send/recv, framework and idle.

    PATH is an *.xplane.pb file, a TensorBoard logdir holding
    plugins/profile/<run>/<host>.xplane.pb, or a tfprof-towers run directory
    (then --run names the variant).  Prints, per device, seconds per step and
    % of the step for each category of the exclusive (wall) breakdown, and the
    bytes, time and achieved bandwidth of each link; then the findings of the trace rules
    (tfprof_towers.advice.trace_rules), most severe first, and why any rule could not be
    evaluated (--json: "findings" and "rules"; --html: above the tables).  Never imports TensorFlow.

    A profile of several hosts is analysed host by host (each on a process of a local pool, or
    of a Dask cluster with --dask), then reduced: memory does not grow with the hosts.  A host
    that cannot be read is named and left out; the others are analysed, everything is printed,
    and the command then exits 7.

    A pod of many devices (more than POD_ROWS) is printed one row per host -- the median of its
    accelerators and the one furthest from it -- with the slowest and fastest hosts, the links and
    allocators that matter most, and every finding; --all prints every device, link and allocator.
    """
    from tfprof_towers.commands.progress import HostProgress, err

    if args.html is not None:  # refused before the trace is read: a device, an input, a run's own file
        from tfprof_towers.rundir.outputs import output_path

        output_path(args.html, [args.path], "--html")
    if args.dask is not None:  # a bad address is refused before anything is read
        from tfprof_towers.trace.executors import check_executor

        check_executor(args.dask)
    with HostProgress() as progress:
        doc, analysis = document(args, progress)
    if args.html is not None:
        try:
            from tfprof_towers.render.analysis_html import render_analysis_html
        except ImportError:
            raise TowersError("--html: the HTML renderer is not available in this build") from None
        render_analysis_html(doc, args.html, [args.path], analysis.timelines)
    if args.json:
        sys.stdout.write(json_text(doc) + "\n")
    else:  # names from the trace are printed with their control and bidi characters made visible
        buf = io.StringIO()
        trace = as_trace_doc(doc)
        print_tables(trace, buf, every=args.every)
        print_memory(trace, buf, every=args.every)
        print_findings(doc, buf)
        if args.html is not None:
            buf.write(f"\nwrote {single_line(str(args.html))}\n")
        if analysis.executor_note:
            buf.write(f"\n{analysis.executor_note}\n")
        sys.stdout.write(visible(buf.getvalue()))
    if analysis.failures:
        names = ", ".join(f.name for f in analysis.failures)
        err(f"error: {len(analysis.failures)} of {doc['hosts']} hosts could not be read ({names}): "
            "the results above leave them out")
        return EXIT_SOME_HOSTS
    return 0


def document(args: argparse.Namespace, progress: Any = None) -> tuple[dict[str, Any], Any]:
    """What ``analyze --json`` prints (the analysis, its "findings" most severe first and "rules"), and
    the pod analysis it came from (``progress``: called as each host is done)."""
    from tfprof_towers.analysis.run_traces import pod_of_path
    from tfprof_towers.xplane.glibc_heap import prefer_heap

    prefer_heap()  # a big trace's columns reuse freed memory, not fresh pages (xplane/glibc_heap.py)
    from tfprof_towers.advice.trace_rules import evaluate_trace

    analysis = pod_of_path(args.path, run=args.run, executor=args.dask, progress=progress)
    doc = analysis.to_doc(per_step=False)
    doc.update(evaluate_trace(analysis.facts).to_json())  # "findings" (most severe first) and "rules"
    return doc, analysis


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        cells = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        out.write("  ".join(cells).rstrip() + "\n")
        if k == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def _idle_table(devices: Mapping[str, DeviceTime], steps: int, out: TextIO) -> None:
    """Each accelerator's idle time per step and its split (host wait, kernel wait, other)."""
    split = {name: d for name, d in devices.items() if d.idle_split is not None}
    if not split:
        return
    out.write(
        "\naccelerator idle per step, split as Holistic Trace Analysis does (host wait: the work ending "
        "a gap was launched after the device ran out of work; kernel wait: short gaps between work "
        "launched in time; other: the rest):\n"
    )
    rows = [["device", "idle", *IDLE_SPLIT.values()]]
    for name, d in split.items():
        idle = d.seconds("idle")
        cells = [name, _fmt_s(idle / steps)]
        for k in IDLE_SPLIT:
            s = d.split_s(k)
            cells.append(f"{_fmt_s(s / steps)} {100.0 * s / idle if idle else 0.0:4.1f}%")
        rows.append(cells)
    _table(rows, out)


#: Above this many tasks, ``analyze`` prints a line per task (its means) instead of a line per task and step.
TASK_ROWS = 8


def _task_table(tasks: Sequence[TaskSteps], out: TextIO) -> None:
    """Per task and step: start, end (after the earliest step start) and time in collectives; with more
    than :data:`TASK_ROWS` tasks, per task the means over its steps, and the slowest and fastest hosts."""
    if len(tasks) < 2 and not any(t.task for t in tasks):
        return
    if len(tasks) > TASK_ROWS:
        _task_means(tasks, out)
        return
    out.write("\nper task and step (after the earliest step start; the hosts' clocks assumed to agree):\n")
    rows = [["task", "step", "start", "end", "duration", "in collectives"]]
    for t in tasks:
        for s in t.steps:
            rows.append([t.task or t.host, str(s.step), _fmt_s(s.start_s), _fmt_s(s.end_s),
                         _fmt_s(s.duration_s), _fmt_s(s.collective_s)])
    _table(rows, out)


def _task_means(tasks: Sequence[TaskSteps], out: TextIO) -> None:
    out.write("\nper task, mean over its steps (before the collectives: the step less its time in "
              "collective ops; the HTML page draws every step):\n")
    rows = [["task", "host", "steps", "step", "before the collectives", "in collectives"]]
    for t in tasks:
        if not t.steps:
            continue
        n = len(t.steps)
        dur = sum(s.duration_s for s in t.steps) / n
        coll = sum(s.collective_s for s in t.steps) / n
        rows.append([t.task, t.host, str(n), _fmt_s(dur), _fmt_s(dur - coll), _fmt_s(coll)])
    _table(rows, out)


def _hosts_line(doc: TraceDoc, out: TextIO) -> None:
    """The slowest and fastest hosts (by their time before the collectives) and the category that grew."""
    from tfprof_towers.render.hosts import hosts_view

    view = hosts_view(doc)
    if view is None:
        return
    s, f = view.slowest, view.fastest
    out.write(f"\nslowest host: {s.label} ({_fmt_s(s.mean_s)} per step before the collectives); fastest: "
              f"{f.label} ({_fmt_s(f.mean_s)})")
    if view.grown is not None:
        out.write(f"; on the slowest, its accelerators' {view.grown.category} grew most, by "
                  f"{_fmt_s(view.grown.diff_s)} per step")
    out.write("\n")


#: Above this many devices on several hosts, ``analyze`` prints one row per host (``--all``: every device).
POD_ROWS = 24
#: At pod scale, the links and allocators printed (the rest: ``--all``).
POD_TOP = 10

#: How the step windows were found, in words.
WINDOWS = {"markers": "step markers", "steps-line": "the Steps line",
           "modules": "the runs of the TPU chips' main XLA module",
           "program-runs": "the runs of the program the host ran most often (no steps in the trace)",
           "busy-regions": "the accelerators' busy regions (no steps in the trace)",
           "whole-trace": "the whole trace"}


def pod_scale(doc: TraceDoc | Mapping[str, Any]) -> bool:
    """Whether the document is a pod too large to print device by device."""
    devices = as_trace_doc(doc).devices
    return len(devices) > POD_ROWS and len({task_of(d) for d in devices}) > 1


def print_tables(doc: TraceDoc | Mapping[str, Any], out: TextIO, every: bool = False) -> None:
    """The per-device wall table (seconds per step and % of step) and the per-link table; at pod scale
    (:func:`pod_scale`) and without ``every``, one row per host and the links with the most time."""
    doc = as_trace_doc(doc)
    steps = max(int(doc.steps), 1)
    out.write(f"trace: {doc.source}\n")
    producer = doc.producer
    if producer is not None and (producer.framework or producer.vendor or producer.evidence):
        out.write(f"producer: framework {producer.framework}, vendor {producer.vendor}"
                  + (f" ({'; '.join(producer.evidence)})" if producer.evidence else "") + "\n")
    out.write(f"steps: {doc.steps} (windows from {WINDOWS.get(doc.window, doc.window)})\n")
    times = doc.step_time_s
    if times:
        spread = ""
        if min(times) < max(times):
            spread = f" (shortest {_fmt_s(min(times))}, longest {_fmt_s(max(times))})"
        out.write(
            f"step time: {_fmt_s(doc.step_time_avg_s)} on average{spread}; a step lasts as long as "
            "the longest of its devices' own windows\n"
        )
    for note in doc.notes:
        out.write(f"note: {note}\n")
    idle = doc.idle_accelerators
    if idle:
        out.write(
            f"note: {len(idle)} accelerator(s) ran no kernel in the analysed window: "
            f"{', '.join(idle) if every or not pod_scale(doc) else fmt_some(idle, 6)} "
            "(see the idle_accelerators finding)\n"
        )
    devices = doc.devices
    if not devices:
        out.write("\nno device time in the analysed window\n")
        return
    cats: list[str] = []  # categories with time on some device, in precedence order
    for d in devices.values():
        cats += [c for c, s in d.wall.items() if s and c not in cats and c != "idle"]
    cats.append("idle")
    pod = pod_scale(doc) and not every
    if pod:
        _host_table(doc, cats, steps, out)
    else:
        _device_table(devices, cats, steps, out)
        _idle_table(devices, steps, out)
    _task_table(doc.tasks, out)
    _hosts_line(doc, out)
    _link_table(doc.links, steps, out, POD_TOP if pod else None)


def _device_table(devices: Mapping[str, DeviceTime], cats: list[str], steps: int, out: TextIO) -> None:
    out.write("\nper device, wall time per step (exclusive; the columns sum to the step):\n")
    rows = [["device", "step", *cats]]
    for name, d in devices.items():
        step_s = d.window_s / steps
        row = [name, _fmt_s(step_s)]
        for c in cats:
            s = d.seconds(c)
            if not s and c != "idle":
                row.append("")
            else:
                pct = 100.0 * s / d.window_s if d.window_s else 0.0
                row.append(f"{_fmt_s(s / steps)} {pct:4.1f}%")
        rows.append(row)
    _table(rows, out)


def _share(d: DeviceTime, cat: str) -> float:
    return 100.0 * d.seconds(cat) / d.window_s if d.window_s else 0.0


def _host_table(doc: TraceDoc, cats: list[str], steps: int, out: TextIO) -> None:
    """One row per host: the median over its accelerators (its devices, if it has none) of each
    category's time per step, and the accelerator whose idle share is furthest from that median."""
    import statistics

    names = {t.task: t.host for t in doc.tasks if t.task}
    by_task: dict[str, list[tuple[str, DeviceTime]]] = {}
    for name, d in doc.devices.items():
        by_task.setdefault(task_of(name), []).append((name, d))
    out.write(f"\nper host, the median of its accelerators' wall time per step ({len(doc.devices)} "
              f"devices on {len(by_task)} hosts: --all prints every device; --json and --html hold all):\n")
    rows = [["host", "devices", "step", *cats, "furthest from the median (idle)"]]
    for task, members in by_task.items():
        acc = [(n, d) for n, d in members if is_accelerator_plane(n)] or members
        row = [names.get(task) or task or "(no task)", str(len(acc)),
               _fmt_s(statistics.median(d.window_s for _, d in acc) / steps)]
        for c in cats:
            secs = statistics.median(d.seconds(c) for _, d in acc)
            pct = statistics.median(_share(d, c) for _, d in acc)
            row.append("" if not secs and c != "idle" else f"{_fmt_s(secs / steps)} {pct:4.1f}%")
        idle = statistics.median(_share(d, "idle") for _, d in acc)
        far_name, far = max(acc, key=lambda nd: abs(_share(nd[1], "idle") - idle))
        gap = _share(far, "idle") - idle
        row.append(f"{short_device(far_name).rsplit('/', 1)[-1]} {_share(far, 'idle'):.1f}% ({gap:+.1f} pts)"
                   if len(acc) > 1 and abs(gap) >= 0.05 else "-")
        rows.append(row)
    _table(rows, out)


def _link_table(links: Sequence[LinkRow], steps: int, out: TextIO, top: int | None = None) -> None:
    """Every link per step; with ``top``, the ``top`` links with the most time (then bytes)."""
    out.write("\nper link, per step:\n")
    if not links:
        out.write("no copies or send/recv edges in the analysed window\n")
        return
    shown = links
    if top is not None and len(links) > top:
        shown = sorted(links, key=lambda k: (-(k.seconds or 0.0), -(k.bytes or 0)))[:top]
    rows = [["src", "dst", "kind", "bytes", "count", "time", "GB/s"]]
    for link in shown:
        b = None if link.bytes is None else link.bytes / steps
        t = None if link.seconds is None else link.seconds / steps
        measured = link.measured
        gbps = ("-" if link.gbps is None else f"{link.gbps:.2f}") if measured else "not measured"
        if link.impossible:
            gbps += " (!)"
        rows.append([link.src, link.dst, link.kind, _fmt_bytes(b), f"{link.count / steps:g}",
                     _fmt_s(t) if measured else "not measured", gbps])
    _table(rows, out)
    impossible = sum(1 for k in links if k.impossible)
    if impossible:
        out.write(f"note: (!) {impossible} link(s) at a rate above any such link's peak: their byte counts "
                  "are not per copy, so their rates are left out of the findings\n")
    if len(shown) < len(links):
        out.write(f"(the {len(shown)} links with the most time of {len(links)}: --all prints every link)\n")


def print_memory(doc: TraceDoc | Mapping[str, Any], out: TextIO, every: bool = False) -> None:
    """Per device: the allocator's peak (over the trace and within the steps), its capacity, the
    fragmentation and the largest op live at the peak; or why there is nothing to show.  At pod scale
    (:func:`pod_scale`) and without ``every``: the :data:`POD_TOP` largest peaks."""
    doc = as_trace_doc(doc)
    memory = doc.memory
    devices = memory.devices
    out.write("\nmemory per device (the allocators' events; peak = most bytes in use):\n")
    if not devices:
        out.write(f"{memory.note or 'no allocator events in this trace'}\n")
        return
    rows = [["device", "allocator", "peak", "in steps", "capacity", "of capacity", "fragmentation",
             "before trace", "largest op live at the peak"]]
    shown = devices
    if not every and pod_scale(doc) and len(devices) > POD_TOP:
        top = sorted(devices, key=lambda n: -devices[n].peak_bytes)[:POD_TOP]
        shown = {n: devices[n] for n in devices if n in top}
    for name, d in shown.items():
        cap, peak = d.capacity_bytes, d.peak_bytes
        op = d.top_ops[0] if d.top_ops else None
        frag = d.fragmentation
        rows.append([name, d.allocator, _fmt_bytes(peak), _fmt_bytes(d.peak_in_steps_bytes),
                     _fmt_bytes(cap), f"{100.0 * peak / cap:.1f}%" if cap else "-",
                     "-" if frag is None else f"{frag:.4f}", _fmt_bytes(d.before_trace_bytes),
                     f"{op.op} ({_fmt_bytes(op.bytes)})" if op else "-"])
    _table(rows, out)
    if len(shown) < len(devices):
        out.write(f"(the {len(shown)} largest peaks of {len(devices)} allocators: --all prints every one)\n")
    out.write(f"note: {memory.note}\n")
    for name, d in devices.items():
        for what in d.unknown:
            out.write(f"note: {name}: {what}\n")


def print_findings(doc: dict[str, Any], out: TextIO) -> None:
    """The trace rules' findings, most severe first, then the rules that could not be evaluated."""
    findings = doc.get("findings") or []
    rules = doc.get("rules") or []
    out.write("\nfindings from the trace (most severe first):\n")
    if not findings and any(r.get("evaluated") for r in rules):
        out.write("none: no rule that could be evaluated crossed its threshold\n")
    elif not findings:
        out.write("none: no rule could be evaluated on this trace (why below)\n")
    for f in findings:
        devices = f" ({fmt_some(f['devices'], 6)})" if f.get("devices") else ""  # --json has them all
        out.write(f"[{f['severity']}] {f['rule']}{devices}\n    {f['message']}\n    {f['suggestion']}\n")
    why_not: dict[str, list[str]] = {}  # one line per reason, naming its rules in order
    for r in rules:
        if not r.get("evaluated"):
            why_not.setdefault(str(r.get("why_not")), []).append(str(r["rule"]))
    if why_not:
        out.write("\n")
    for why, names in why_not.items():
        out.write(f"{', '.join(names)} could not be evaluated, because {why}\n")
