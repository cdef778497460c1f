"""Where the map of a multi-host analysis runs, and :func:`analyze_pod` (the map on one of them, then
the reduce).  Where it runs (:mod:`.pod`): this process, a local process pool, or a
Dask cluster.

* :class:`Serial` -- every host in this process, one after the other (one host; tests).
* :class:`LocalPool` (the default) -- a process pool sized to the idle cores
  (:func:`~.hosts.idle_cores`), each process decoding on its share of them; results come back as they
  finish, the hosts in flight bounded by the pool.
* :class:`DaskCluster` -- ``dask.distributed``: an address (``tcp://scheduler:8786``) or a
  ``distributed.Client`` the caller made.  Its own ``Client.submit`` and ``as_completed``; nothing here
  schedules, queues or talks to a worker by itself.  Workers read the host files from the path
  they share with this machine when every worker can read every file; otherwise each file's bytes are
  sent with its job (``note`` says which).  At most twice as many hosts as the cluster has worker
  threads are in flight, so neither side holds every file at once.

Every executor runs the same :func:`~.pod.map_host` on the same jobs and returns the results in the
jobs' order: the reduce, hence every figure, does not depend on which one ran.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from tfprof_towers.trace.classify import NodeDevices
from tfprof_towers.trace.facts import DEFAULT_CUTOFFS, Cutoffs
from tfprof_towers.trace.hosts import (
    _start_method,
    host_prefixes,
    idle_cores,
    join_hosts,
    numbered,
    one_host,
    with_join_notes,
)
from tfprof_towers.trace.load import Trace
from tfprof_towers.trace.locate import host_name, host_names, locate_hosts, unreadable
from tfprof_towers.trace.pod import (
    HostFailure,
    HostJob,
    HostResult,
    PodAnalysis,
    Progress,
    host_failure,
    map_host,
    map_trace,
    read_host,
)
from tfprof_towers.trace.pools import process_pool
from tfprof_towers.vocab.device_names import canonical_device
from tfprof_towers.vocab.errors import TowersError, TraceError
from tfprof_towers.vocab.textcap import visible
from tfprof_towers.xplane.parallel import decode_threads

Outcome = HostResult | HostFailure


class Executor(Protocol):
    name: str
    note: str

    def map(self, jobs: Sequence[HostJob], progress: Progress | None = None) -> list[Outcome]: ...


def _die_with_parent() -> None:
    """A pool worker's initializer: on Linux the kernel kills it (SIGKILL) when the process that started
    it dies, even killed -9 -- the command under ``fork``; under ``forkserver`` (a parent with threads)
    multiprocessing's server, which leaves when the command does -- so a worker never outlives the
    command by more than the host it is on; Ctrl-C is the command's to handle (the worker ignores
    SIGINT and is stopped by the pool's shutdown)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown still ends the workers
        pass


def _report(progress: Progress | None, done: int, total: int, out: Outcome) -> None:
    if progress is not None:
        progress(done, total, out.name, out if isinstance(out, HostFailure) else None)


class Serial:
    """Every host in this process."""

    name = "serial"
    note = "hosts analysed one after the other in this process"

    def map(self, jobs: Sequence[HostJob], progress: Progress | None = None) -> list[Outcome]:
        out = []
        for job in jobs:
            out.append(map_host(job))
            _report(progress, len(out), len(jobs), out[-1])
        return out


class LocalPool:
    """A process pool on this machine (module docstring); ``workers``: how many (default: the idle cores,
    at most one per host)."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers
        self.note = ""

    def map(self, jobs: Sequence[HostJob], progress: Progress | None = None) -> list[Outcome]:
        cores = self.workers or idle_cores()
        workers = max(1, min(len(jobs), cores))
        self.note = f"hosts analysed on a local pool of {workers} process{'es' if workers != 1 else ''}"
        if workers <= 1:
            return Serial().map(jobs, progress)
        threads = max(1, min(decode_threads(), cores // workers))
        jobs = [replace(j, threads=threads) for j in jobs]
        out: list[Outcome | None] = [None] * len(jobs)
        from concurrent.futures import FIRST_COMPLETED, wait  # only a pool needs it (and its logging import)

        with process_pool(workers, _start_method(), _die_with_parent) as pool:  # Ctrl-C: stopped at once
            futures = {pool.submit(map_on_worker, j): i for i, j in enumerate(jobs)}
            pending = set(futures)
            done = 0
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    i = futures[f]
                    try:
                        out[i] = f.result()
                    except Exception as e:
                        out[i] = HostFailure(jobs[i].name, jobs[i].file,
                                             f"its analysis process ended ({type(e).__name__}: {e})")
                    done += 1
                    _report(progress, done, len(jobs), out[i])
        return [o for o in out if o is not None]


def map_on_worker(job: HostJob) -> Outcome:
    """:func:`~.pod.map_host` in a worker process (a Dask worker's, a pool's), with the allocator set for
    a decode while it runs (:func:`~tfprof_towers.xplane.glibc_heap.heap_for_decode`; the process's own
    settings come back after): a Dask worker sets ``MALLOC_TRIM_THRESHOLD_``, and a process that has
    started a Dask client passes it on to the pool's workers when they start from a fork server."""
    from tfprof_towers.xplane.glibc_heap import heap_for_decode

    with heap_for_decode():
        return map_host(job)


def _is_client(target: Any) -> bool:
    """Whether ``target`` is a ``distributed.Client`` (without importing dask for an address)."""
    return type(target).__module__.startswith("distributed") and hasattr(target, "submit")


def _connect(client_type: Any, address: str) -> Any:
    """A client of the scheduler at ``address``; a :class:`TowersError` of one line where none can be made,
    and the half-made client closed at once (left to the garbage collector, its close would wait 20 s and
    print a traceback at exit)."""
    client = client_type.__new__(client_type)
    try:
        client.__init__(address, timeout="10s", set_as_default=False)
    except Exception as e:  # OSError, TimeoutError, ValueError; TypeError from a transport's own checks
        _discard(client)
        why = " ".join(str(e).split()) or type(e).__name__
        raise TowersError(f"--dask {visible(address)}: cannot reach a Dask scheduler there ({why})") from None
    return client


def _discard(client: Any) -> None:
    """Stop a client whose start failed: its event loop thread ends, and its ``__del__`` has nothing left
    to close."""
    with contextlib.suppress(Exception):
        client._loop_runner.stop()
    with contextlib.suppress(Exception):
        client.status = "closed"


def _can_read(paths: Sequence[str]) -> bool:
    """On a worker: whether it can read every one of ``paths``."""
    return all(os.access(p, os.R_OK) and os.path.isfile(p) for p in paths)


#: The schemes of a scheduler's network address (``inproc://`` names a scheduler inside one Python
#: process, which a command line cannot reach).
DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
_DASK_ADDRESS = re.compile(r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?(?P<rest>.*)$", re.DOTALL)
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.%\w]+\]|[^\s/:\[\]@]+):(?P<port>[0-9]{1,5})$")
#: How long the check waits for the scheduler's port to accept a connection.
PROBE_S = 2.0


def check_dask_address(text: str, probe: bool = True) -> str:
    """``text`` as a Dask scheduler's address (``tcp://HOST:PORT``; a bare ``HOST:PORT`` is TCP), checked
    before any client is made: its scheme, host and port, then (``probe``) that something accepts a
    connection there within :data:`PROBE_S`.  A :class:`TowersError` of one line says what is wrong."""
    shown = visible(repr(text) if not text.strip() else text)
    m = _DASK_ADDRESS.match(text.strip())
    scheme = (m.group("scheme") or "tcp").lower() if m else ""
    rest = m.group("rest") if m else ""
    example = "a scheduler's address is tcp://HOST:PORT, as `dask scheduler` prints it"
    if not text.strip():
        raise TowersError(f"--dask {shown}: an empty address; {example}")
    if scheme == "inproc":
        raise TowersError(f"--dask {shown}: inproc:// names a scheduler inside one Python process, which a "
                          f"command cannot reach; {example}")
    if scheme not in DASK_SCHEMES:
        raise TowersError(f"--dask {shown}: unknown scheme {scheme!r} (Dask's are "
                          f"{', '.join(s + '://' for s in DASK_SCHEMES)}); {example}")
    if scheme == "ucx" and not any(importlib.util.find_spec(mod) for mod in ("distributed_ucxx", "ucp")):
        raise TowersError(f"--dask {shown}: ucx:// needs UCX support for Dask (distributed-ucxx), which is "
                          f"not installed; {example}")
    hp = _HOST_PORT.match(rest)
    if hp is None:
        why = "no port" if ":" not in rest.rstrip("]") else "not HOST:PORT"
        raise TowersError(f"--dask {shown}: {why}; {example} (an IPv6 host in brackets: [::1])")
    host, port = hp.group("host").strip("[]"), int(hp.group("port"))
    if not 0 < port < 65536:
        raise TowersError(f"--dask {shown}: port {port} is not in 1-65535")
    if probe and scheme != "ucx":
        _probe(shown, host, port, speaks_first=scheme == "tcp")
    return f"{scheme}://{hp.group('host')}:{port}"


def _probe(shown: str, host: str, port: int, speaks_first: bool) -> None:
    """Refuse at once, in one line, an address where nothing accepts a connection (Dask would retry for
    its whole timeout), or (``speaks_first``: plain TCP, where a Dask scheduler sends its handshake as soon
    as it accepts) where what accepts says nothing within :data:`PROBE_S` (a web server: Dask's client
    would wait on it for good)."""
    import socket

    try:
        sock = socket.create_connection((host, port), timeout=PROBE_S)
    except socket.gaierror as e:
        raise TowersError(f"--dask {shown}: cannot resolve host {host!r} ({e.strerror or e})") from None
    except OSError as e:  # refused, unreachable, no answer in time
        why = e.strerror or str(e) or type(e).__name__
        raise TowersError(f"--dask {shown}: no Dask scheduler answers there ({why})") from None
    with sock:
        if not speaks_first:
            return
        try:
            said = sock.recv(1)
        except OSError:  # a timeout: it waits for us to speak first
            said = None
    if not said:
        why = (f"sent no Dask handshake within {PROBE_S:g} s" if said is None
               else "closed the connection at once")
        raise TowersError(f"--dask {shown}: what listens there {why}; not a Dask scheduler")


class DaskCluster:
    """The map on a Dask cluster (module docstring): ``target`` is an address or a ``distributed.Client``."""

    name = "dask"

    def __init__(self, target: Any) -> None:
        self.note = ""
        if not _is_client(target):
            address = check_dask_address(str(target))  # before dask is imported: a bad one costs nothing
        try:
            from distributed import Client
        except ImportError:
            raise TowersError("--dask needs dask.distributed, which is not installed: "
                              "pip install 'dask[distributed]'") from None
        if isinstance(target, Client):
            self.client, self.owned = target, False
        else:
            self.client, self.owned = _connect(Client, address), True
        self.address = getattr(self.client.scheduler, "address", "") or str(target)

    def close(self) -> None:
        if self.owned:
            self.client.close()

    def _workers_read(self, jobs: Sequence[HostJob]) -> bool:
        paths = [j.file for j in jobs]
        answers = self.client.run(_can_read, paths)
        return bool(answers) and all(answers.values())

    def _slots(self) -> int:
        info = self.client.scheduler_info()
        threads = sum(int(w.get("nthreads", 1)) for w in (info.get("workers") or {}).values())
        return max(2, 2 * threads)

    def map(self, jobs: Sequence[HostJob], progress: Progress | None = None) -> list[Outcome]:
        from distributed import as_completed

        inflight: dict[Any, Any] = {}  # key -> future: what Ctrl-C cancels
        try:
            shared = self._workers_read(jobs)
            self.note = (f"hosts analysed on the Dask cluster at {self.address}: "
                         + ("its workers read the host files from the path they share with this machine"
                            if shared else "its workers cannot read the host files here, so each file's "
                            "bytes were sent to them"))
            # one decoding thread per task: the cluster runs as many tasks at once as it has worker threads
            prepare: Callable[[HostJob], HostJob] = (
                (lambda j: replace(j, threads=1)) if shared
                else (lambda j: replace(j, threads=1, data=Path(j.file).read_bytes())))
            out: list[Outcome | None] = [None] * len(jobs)
            todo = list(enumerate(jobs))[::-1]
            index: dict[Any, int] = {}
            first = []
            for _ in range(min(self._slots(), len(todo))):
                i, job = todo.pop()
                f = self.client.submit(map_on_worker, prepare(job), pure=False)
                index[f.key], inflight[f.key] = i, f
                first.append(f)
            flow = as_completed(first, loop=self.client.loop)
            for done, f in enumerate(flow, 1):
                i = index.pop(f.key)
                inflight.pop(f.key, None)
                try:
                    out[i] = f.result()
                except Exception as e:
                    out[i] = HostFailure(jobs[i].name, jobs[i].file,
                                         f"its Dask task failed ({type(e).__name__}: {e})")
                f.release()
                _report(progress, done, len(jobs), out[i])  # type: ignore[arg-type]
                if todo:
                    k, job = todo.pop()
                    g = self.client.submit(map_on_worker, prepare(job), pure=False)
                    index[g.key], inflight[g.key] = k, g
                    flow.add(g)
            return [o for o in out if o is not None]
        except BaseException:  # Ctrl-C, or an error: the cluster stops the hosts in flight now
            self._cancel(list(inflight.values()))
            raise
        finally:
            self.close()

    def _cancel(self, futures: list[Any]) -> None:
        """Cancel ``futures`` on the cluster (best effort: the command is leaving)."""
        if futures:
            with contextlib.suppress(Exception):
                self.client.cancel(futures, force=True)


#: The executors named by a word rather than an address (``--dask serial`` runs the map in this process).
NAMED_EXECUTORS = ("local", "serial")


def check_executor(text: str) -> None:
    """``--dask``'s value checked before anything is read: one of :data:`NAMED_EXECUTORS`, else a Dask
    scheduler's address (:func:`check_dask_address`)."""
    if text not in NAMED_EXECUTORS:
        check_dask_address(text)


def executor_for(target: Any = None) -> Executor:
    """``None`` or ``"local"``: :class:`LocalPool`; ``"serial"``: :class:`Serial`; an executor: itself;
    anything else (an address, a ``distributed.Client``): :class:`DaskCluster`."""
    if target is None or target == "local":
        return LocalPool()
    if target == "serial":
        return Serial()
    if hasattr(target, "map") and hasattr(target, "note"):
        return target
    return DaskCluster(target)


# ------------------------------------------------------------------------------------------
# From a path to the jobs, and the whole analysis (map, then reduce)


def host_jobs(
    path: Path | str, run: str | None = None, node_devices: NodeDevices | None = None,
    tasks: Mapping[str, str] | None = None, kind: str | None = None,
    edge_bytes: Mapping[str, int] | None = None, cutoffs: Cutoffs = DEFAULT_CUTOFFS,
) -> tuple[list[HostJob], tuple[str, ...], list[str]]:
    """One job per host file of the run ``path`` names, notes on which run, and notes on made-up task
    names."""
    files, notes = locate_hosts(path, run)
    if len(files) == 1:
        task = (tasks or {}).get(host_name(files[0]))
        prefixes = [canonical_device(task) if task else ""]
        made_up: list[str] = []
    else:
        prefixes, made_up = host_prefixes(files, tasks)
    jobs = [HostJob(str(f), name, p, node_devices, kind, edge_bytes, cutoffs)
            for f, name, p in zip(files, host_names(files)[0], prefixes)]
    return jobs, notes, made_up


#: A multi-host analysis keeps every host's events (``analyze_pod(keep_events=True)``) only while its
#: trace files come to at most this many bytes together: then the map runs here, host after host, and
#: each host's read is kept for the merged trace (which holds every host's events anyway, joined).
#: Above it the map runs where it would (a pool, Dask), each host's events left there, and the caller
#: reads them again: a pod's hosts are never all held in this process while the map runs.
KEEP_EVENTS_BYTES = 64 << 20


def _keeps_events(jobs: Sequence[HostJob], executor: Any) -> bool:
    """Whether the map of ``jobs`` runs here keeping each host's events (:data:`KEEP_EVENTS_BYTES`)."""
    if executor not in (None, "local", "serial"):  # a Dask cluster's, or an executor the caller made
        return False
    total = 0
    for job in jobs:
        try:
            total += os.stat(job.file).st_size
        except OSError:
            return False
    return total <= KEEP_EVENTS_BYTES


def map_keeping(jobs: Sequence[HostJob], progress: Progress | None = None
                ) -> tuple[list[Outcome], list[Trace]]:
    """:meth:`Serial.map` that keeps each host's events: the outcomes in the jobs' order, and the traces
    of the hosts mapped (numbered as :func:`~.hosts.read_hosts` numbers them, among those hosts)."""
    out: list[Outcome] = []
    traces: list[Trace] = []
    for job in jobs:
        try:
            trace = read_host(job)
            result: Outcome = map_trace(trace, job)
        except Exception as exc:  # as map_host: a host's bad file must not lose the other hosts' results
            result = host_failure(job, exc)
        else:
            traces.append(numbered(trace, len(traces)))
        out.append(result)
        _report(progress, len(out), len(jobs), result)
    return out, traces


def analyze_pod(
    path: Path | str, run: str | None = None, node_devices: NodeDevices | None = None,
    tasks: Mapping[str, str] | None = None, kind: str | None = None,
    edge_bytes: Mapping[str, int] | None = None, label: str = "", notes: Sequence[str] = (),
    executor: Any = None, progress: Progress | None = None, cutoffs: Cutoffs = DEFAULT_CUTOFFS,
    keep_events: bool = False,
) -> PodAnalysis:
    """Every host of the run ``path`` names, mapped on ``executor`` (:func:`.executors.executor_for`:
    None = the local process pool sized to the idle cores, ``"serial"`` = this process, a Dask address
    or ``distributed.Client``), then reduced.  Raises :class:`TraceError` when no host could be read
    (every host's reason in one line).  ``keep_events``: the hosts' events, read once for the map, are
    kept on the result (``events``: the trace :func:`~.hosts.load_hosts` gives, less the hosts that
    failed) for a caller that needs them too; of several hosts, only while their files are small
    (:data:`KEEP_EVENTS_BYTES`), else ``events`` is None."""
    jobs, found, made_up = host_jobs(path, run, node_devices, tasks, kind, edge_bytes, cutoffs)
    events = None
    if len(jobs) == 1 and keep_events:  # the same map on the same read, the events kept
        runner: Executor = Serial()
        trace = read_host(jobs[0])
        out: list[Outcome] = [map_trace(trace, jobs[0])]
        events = one_host(trace, jobs[0].name, jobs[0].prefix, found)
    elif len(jobs) == 1:  # one host: the same map, here; its failure is the command's
        runner = Serial()
        out = [map_host(jobs[0], keep_going=False)]
    else:  # a stray entry (a dangling link, a folder, a FIFO) is a host that failed, never opened
        stray = {i: HostFailure(j.name, j.file, why) for i, j in enumerate(jobs)
                 if (why := unreadable(Path(j.file))) is not None}
        for failure in stray.values():
            _report(progress, 0, len(jobs), failure)
        todo = [j for i, j in enumerate(jobs) if i not in stray]
        if keep_events and todo and _keeps_events(todo, executor):
            runner = Serial()
            done, traces = map_keeping(todo, progress)
            if traces:
                kept = [r for r in done if isinstance(r, HostResult)]
                prefixes, names = [r.task for r in kept], [r.name for r in kept]
                events = with_join_notes(join_hosts(traces, prefixes, names, str(Path(kept[0].file).parent)),
                                         names, prefixes, found, made_up)
                del traces
            mapped = iter(done)
        else:
            runner = executor_for(executor)
            mapped = iter(runner.map(todo, progress) if todo else [])
        out = [stray[i] if i in stray else next(mapped) for i in range(len(jobs))]
    results = tuple(r for r in out if isinstance(r, HostResult))
    failures = tuple(r for r in out if isinstance(r, HostFailure))
    if not results:
        if len(failures) == 1:
            raise TraceError(failures[0].reason)
        raise TraceError(f"none of the {len(failures)} hosts could be read: "
                         + "; ".join(f"{f.name}: {f.reason}" for f in failures))
    source = str(Path(jobs[0].file).parent) if len(jobs) > 1 else str(jobs[0].file)
    return PodAnalysis(source, results, failures, kind, label, (*notes, *found), tuple(made_up),
                       runner.note if len(jobs) > 1 else "", events)


__all__ = ["HostFailure", "HostJob", "HostResult", "PodAnalysis", "analyze_pod", "host_jobs", "map_host"]
