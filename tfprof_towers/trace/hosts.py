"""Several hosts in one trace: a multi-host profile (one ``<host>.xplane.pb`` per task) merged on one clock.

:func:`load_hosts` reads every host file of the run a path names -- in parallel processes,
up to the cores available -- and joins them into one :class:`~.load.Trace`:

* **Names.** Each host's devices and host threads get its task's name in front:
  ``/job:worker/task:1/device:GPU:0``, ``/job:worker/task:1/host:CPU``, so they never
  collide.  ``tasks`` maps a host file's name (``127.0.0.1_34567``, from
  ``127.0.0.1_34567.xplane.pb``) to its task (``/job:worker/task:1``: a run directory
  records it at capture).  A host it does not name gets ``/job:<host file name>/task:0``,
  stable for the file, and the notes say so.
* **Clocks.** Each file counts time from its own earliest line timestamp; they are put on
  one clock by their timestamps (nanoseconds since the epoch), i.e. the hosts' clocks are
  assumed to agree -- true on one machine (loopback), as close as NTP keeps them on a
  real cluster.  The notes say so.
* **Steps.** Each host's step windows come from its own ``train`` markers (:class:`~.load.Host`;
  devices with a ``Steps`` line of their own: :mod:`.steps`).  The trace's table is their union
  per step number (earliest start, latest end).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tfprof_towers.trace.allocator_events import MemoryEvents
from tfprof_towers.trace.classify import NodeDevices
from tfprof_towers.trace.columns import EventColumns, merge
from tfprof_towers.trace.load import Host, Trace, read_trace
from tfprof_towers.trace.locate import host_name, host_names, locate_hosts
from tfprof_towers.trace.pools import process_pool
from tfprof_towers.trace.producer import combine
from tfprof_towers.trace.steps import StepSources, StepTable
from tfprof_towers.vocab.device_names import canonical_device
from tfprof_towers.xplane.parallel import available_cores, decode_threads

if TYPE_CHECKING:
    import tempfile

CLOCK_NOTE = (
    "hosts put on one clock by their trace timestamps: assumes their clocks agree "
    "(exact on one machine, as close as NTP keeps them across machines)"
)


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of every CPU since boot, from ``/proc/stat`` (None: not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(interval_s: float = 0.1) -> float | None:
    """How many of the machine's cores were busy over the last ``interval_s`` (None: cannot tell).  A
    sample now, not the load average, which trails what ran a minute ago (a command just finished
    would keep the cores looking busy)."""
    first = _cpu_times()
    if first is None:
        return None
    time.sleep(interval_s)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return None
    share = (second[0] - first[0]) / (second[1] - first[1])
    return share * (os.cpu_count() or 1)


def idle_cores() -> int:
    """The cores not already busy: :func:`available_cores` less the other work running now
    (:func:`busy_cores`, else the 1-minute load average less this process's share), at least one.
    Extra processes on busy cores only slow every one of them down."""
    cores = available_cores()
    busy = busy_cores()
    if busy is None:
        try:
            busy = max(0.0, os.getloadavg()[0] - 1.0)
        except (AttributeError, OSError):
            return cores
    return max(1, min(cores, int(cores - busy + 0.5)))


def host_prefixes(files: Sequence[Path], tasks: Mapping[str, str] | None) -> tuple[list[str], list[str]]:
    """Per file, its task's name (``/job:worker/task:1``), distinct for every file, and notes on names
    that were made up or told apart (two files of one host name, or whose names differ only by
    characters a job name cannot hold, ``10.0.0.1:2222`` and ``10.0.0.1_2222``)."""
    tasks = tasks or {}
    names, renamed = host_names(files)
    out, made_up = [], []
    for f, name in zip(files, names):
        task = tasks.get(host_name(f)) or tasks.get(f.name)
        if task:
            out.append(canonical_device(task))
        else:
            out.append(f"/job:{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}/task:0")
            made_up.append(name)
    notes = list(renamed)
    if made_up:
        notes.append(
            f"no task known for host(s) {', '.join(made_up)}: their devices are named "
            "/job:<host file name>/task:0/..."
        )
    distinct, apart = _distinct_prefixes(out, names)
    return distinct, notes + apart


def _distinct_prefixes(prefixes: Sequence[str], names: Sequence[str]) -> tuple[list[str], list[str]]:
    """``prefixes``, each repeat's job renamed ``JOB_2``, ``JOB_3``... (unused by another), and a note."""
    taken: set[str] = set()
    out, moved = [], []
    for prefix, name in zip(prefixes, names):
        pick, k = prefix, 2
        while pick in taken or (pick != prefix and pick in prefixes):
            pick = re.sub(r"^/job:([^/]+)", lambda m, k=k: f"/job:{m.group(1)}_{k}", prefix, count=1)
            if pick == prefix:  # no job to rename
                pick = f"/job:host_{k}{prefix}"
            k += 1
        if pick != prefix:
            moved.append(f"{name}'s devices are named {pick}/... ({prefix} is another host's)")
        taken.add(pick)
        out.append(pick)
    notes = [f"hosts that would share a task name were told apart: {'; '.join(moved)}"] if moved else []
    return out, notes


def _read(args: tuple[Path, NodeDevices | None, str, int, str | None, int | None]) -> Trace:
    """Read one host (on ``threads`` decoding threads); with ``out`` (a folder), hand its columns over
    as ``.npy`` files there instead of through the pipe (written and mapped back without pickling
    tens of megabytes)."""
    file, node_devices, prefix, host, out, threads = args
    trace = read_trace(file, node_devices, prefix, host, threads)
    if out is None:
        return trace
    arrays = {}
    for name in EventColumns.__dataclass_fields__:
        value = getattr(trace.columns, name)
        if isinstance(value, np.ndarray):
            np.save(Path(out) / f"{name}.npy", np.ascontiguousarray(value))
            arrays[name] = None
        else:
            arrays[name] = value
    return replace(trace, columns=arrays)  # the small fields travel; the arrays wait in ``out``


def _mapped(trace: Trace, out: str) -> Trace:
    fields = {name: np.load(Path(out) / f"{name}.npy", mmap_mode="r") if value is None else value
              for name, value in trace.columns.items()}
    return replace(trace, columns=EventColumns(**fields))


def read_hosts(
    files: Sequence[Path], prefixes: Sequence[str], node_devices: NodeDevices | None = None,
    workers: int | None = None, handoff: str | None = None,
) -> list[Trace]:
    """Read each file (its devices named with its prefix), in parallel processes up to the idle cores
    (:func:`idle_cores`; ``workers`` says how many instead).

    In parallel, each worker leaves its columns as files in the folder ``handoff`` (default: a
    temporary one, and the columns are copied out of it); with ``handoff`` given, the traces'
    columns are mapped from its files, which must outlive them (:func:`join_hosts` copies them).
    """
    cores = workers or idle_cores()
    workers = min(len(files), cores)
    if workers <= 1:
        return [_read((f, node_devices, p, i, None, None)) for i, (f, p) in enumerate(zip(files, prefixes))]
    if handoff is None:
        with handoff_folder() as tmp:
            traces = read_hosts(files, prefixes, node_devices, workers, tmp)
            return [replace(t, columns=_copied(t.columns)) for t in traces]
    outs = [os.path.join(handoff, str(i)) for i in range(len(files))]
    for out in outs:
        os.makedirs(out, exist_ok=True)
    threads = max(1, min(decode_threads(), cores // workers))  # each process's share of the cores
    jobs = [(f, node_devices, p, i, out, threads) for i, (f, p, out) in enumerate(zip(files, prefixes, outs))]
    with process_pool(workers, _start_method()) as pool:  # Ctrl-C: stopped at once
        traces = list(pool.map(_read, jobs))
    return [_mapped(t, out) for t, out in zip(traces, outs)]


def _start_method():
    """``fork`` (instant, nothing re-imported) in a process with no other thread; else ``forkserver``
    or ``spawn``: forking a process whose other threads may hold locks is not safe."""
    import multiprocessing  # only where a pool starts: one host never needs it

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def handoff_folder() -> tempfile.TemporaryDirectory:
    """A temporary folder for workers' columns: in memory (``/dev/shm``) where there is one."""
    import tempfile

    shm = Path("/dev/shm")
    return tempfile.TemporaryDirectory(dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None)


def _copied(c: EventColumns) -> EventColumns:
    fields = {name: getattr(c, name) for name in EventColumns.__dataclass_fields__}
    return EventColumns(**{k: np.array(v) if isinstance(v, np.memmap) else v for k, v in fields.items()})


@dataclass(frozen=True)
class JoinedSteps:
    """Several hosts' step windows on one clock: the join both the merged trace and the host-by-host
    reduce (:class:`~.pod.PodAnalysis`) make (module docstring, "Clocks" and "Steps")."""

    origin_ns: int  # the earliest host's
    deltas: tuple[int, ...]  # per host: how many picoseconds later than ``origin_ns`` its clock starts
    hosts: tuple[Host, ...]  # each host's steps, on the joined clock
    steps: StepTable  # their union per step number
    window: str
    sources: StepSources


def joined_window(windows: Sequence[str]) -> str:
    """How several hosts found their steps, as one (``markers`` where any host had them)."""
    kinds = set(windows)
    if len(kinds) <= 1:
        return kinds.pop() if kinds else "whole-trace"
    return "markers" if "markers" in kinds else "steps-line"


def join_steps(
    names: Sequence[str], tasks: Sequence[str], origins: Sequence[int], tables: Sequence[StepTable],
    windows: Sequence[str], sources: Sequence[StepSources],
) -> JoinedSteps:
    """The hosts' step windows (each on its own clock, counted from ``origins`` in ns) on one clock."""
    origin = min(origins)
    deltas = tuple((o - origin) * 1000 for o in origins)
    hosts = tuple(Host(n, t, s.shifted(d), w) for n, t, s, w, d in zip(names, tasks, tables, windows, deltas))
    shifted = [s.shifted(d) for s, d in zip(sources, deltas)]
    joined = StepSources(tuple(n for s in shifted for n in s.names),
                         tuple(t for s in shifted for t in s.tables), {})
    steps = StepTable.join([h.steps for h in hosts])
    return JoinedSteps(origin, deltas, hosts, steps, joined_window(windows), joined)


def join_notes(notes: list[str], hosts: Sequence[Host], host_notes: Sequence[Sequence[str]]) -> list[str]:
    """``notes`` with the join's: the clock, how the hosts found their steps where they differ, then each
    host's own notes not said yet."""
    notes = [*notes, CLOCK_NOTE]
    if len({h.window for h in hosts}) > 1:
        how = ", ".join(f"{h.name}: {h.window}" for h in hosts)
        notes.append(f"hosts found their steps differently: {how}")
    for own in host_notes:
        notes += [n for n in own if n not in notes]
    return notes


def join_hosts(traces: Sequence[Trace], prefixes: Sequence[str], names: Sequence[str], source: str) -> Trace:
    """One trace of several hosts' traces (module docstring)."""
    j = join_steps(names, prefixes, [t.origin_ns for t in traces], [t.step_table for t in traces],
                   [t.window for t in traces], [t.step_sources for t in traces])
    shifted, device_steps = [], {}
    for t, delta, host in zip(traces, j.deltas, j.hosts):
        cols = t.columns
        if delta:
            cols = replace(cols, start_ps=cols.start_ps + delta)
        shifted.append(cols)
        own = {d: table.shifted(delta) for d, table in t.device_steps.items()}
        # every device of this host: its own windows, else the host's (each host's ``step`` column
        # was assigned so, and moves with its times)
        for code in np.flatnonzero(np.bincount(cols.device)).tolist():
            dev = cols.strings.items[code]
            device_steps[dev] = own.get(dev, host.steps)
    columns = merge(shifted)
    del shifted
    notes = join_notes([], j.hosts, [t.notes for t in traces])
    hostnames = tuple(dict.fromkeys(n for t in traces for n in t.hostnames))
    planes = tuple(p for t in traces for p in t.planes)
    memory = MemoryEvents.concat([t.memory.shifted(d) for t, d in zip(traces, j.deltas)])
    return Trace(source, columns, j.steps, j.window, hostnames, tuple(notes), j.hosts, j.origin_ns, j.sources,
                 device_steps, planes, combine([t.producer for t in traces]),
                 {k: v for t in traces for k, v in t.unread.items()}, memory)


def one_host(trace: Trace, name: str, prefix: str, notes: tuple[str, ...]) -> Trace:
    """A single host's trace (read with ``prefix``) as :func:`load_hosts` gives it: ``notes`` (where the
    host came from) first, and the host named."""
    host = Host(name, prefix, trace.step_table, trace.window)
    return replace(trace, notes=notes + trace.notes, hosts=(host,))


def load_hosts(
    path: Path | str, run: str | None = None, node_devices: NodeDevices | None = None,
    tasks: Mapping[str, str] | None = None, workers: int | None = None, skip: Sequence[str] = (),
) -> Trace:
    """Every host of the run ``path`` names, as one trace (a single host: as :func:`~.load.load_trace`,
    named with its task's prefix only when ``tasks`` names it); ``skip``: host names to leave out (those
    a host-by-host analysis could not read)."""
    files, notes = locate_hosts(path, run)
    names = host_names(files)[0]
    if len(files) == 1:
        task = (tasks or {}).get(host_name(files[0]))
        prefix = canonical_device(task) if task else ""
        return one_host(read_trace(files[0], node_devices, prefix), names[0], prefix, notes)
    prefixes, made_up = host_prefixes(files, tasks)  # of every host: the names the host-by-host map used
    kept = [i for i, n in enumerate(names) if n not in set(skip)] or list(range(len(files)))
    files, names, prefixes = ([seq[i] for i in kept] for seq in (files, names, prefixes))  # none left: all
    source = str(files[0].parent)
    with handoff_folder() as tmp:  # the hosts' columns, mapped until they are joined
        traces = read_hosts(files, prefixes, node_devices, workers, tmp)
        trace = join_hosts(traces, prefixes, names, source)
        del traces
    return with_join_notes(trace, names, prefixes, notes, made_up)


def with_join_notes(trace: Trace, names: Sequence[str], prefixes: Sequence[str], found: Sequence[str],
                    made_up: Sequence[str]) -> Trace:
    """The joined ``trace`` of the hosts ``names`` (named ``prefixes``) with the notes :func:`load_hosts`
    puts first: where the hosts came from (``found``), which host is which task, and the names made up."""
    note = f"{len(names)} hosts analysed together: " + ", ".join(
        f"{n} = {p}" for n, p in zip(names, prefixes)
    )
    return replace(trace, notes=(*found, note, *made_up, *trace.notes))


def numbered(trace: Trace, host: int) -> Trace:
    """``trace`` (one host's, read as host 0) as the ``host``-th of a multi-host read (its lines' host)."""
    lines = np.full(trace.columns.line_host.shape, host, dtype=np.int16)
    return replace(trace, columns=replace(trace.columns, line_host=lines))
