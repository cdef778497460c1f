"""TensorFlow profiler traces -> numpy columns -> per-device time attribution.  Never imports TensorFlow
(nor pandas, unless a DataFrame is asked for).

The modules and their data flow are in ARCHITECTURE.md (``trace/``); a run directory's traces are
analysed through :mod:`tfprof_towers.analysis.run_traces` (this package never reads its format).
The arguments of the entry points (``analyze_xplane``, ``analyze_trace``, ``load_trace``, ``load_hosts``):

``node_devices`` maps TF node names to devices (``/device:CPU:1``; any form TF prints is
canonicalised; a node of the same name on several tasks may list them all): host TF-op
events of mapped nodes -- and the async ``_Recv`` events naming them -- are attributed to
that device when it has no plane of its own (so each logical CPU device gets its own
``host_compute``/``send_recv``/``collective``); those of nodes on a device with a plane (a
GPU) stay on the host threads as ``framework`` (the launch), since the device's time is
what its streams did.  ``kind`` is the run's topology kind (``"gpu"`` or
``"logical-cpu"``); on logical-CPU runs (or traces without device planes) ``_Send``
events give ``send_recv`` links whose time is not measured, with bytes from
``edge_bytes`` (rendezvous edge name -> bytes, from the partition graphs); edges between
two tasks are ``network`` links whatever the kind.  ``tasks`` maps a host file's name to
its task (``{"127.0.0.1_34567": "/job:worker/task:1"}``).

The document (``tfprof-towers analyze --json``; ``summary.json``'s
``variants[].breakdown`` is it with ``per_step=True``, without ``source``)::

    {"source": str, "steps": N, "step_numbers": [...],
     "window": "markers" | "steps-line" | "whole-trace",
     "per_step": bool, "kind": "gpu" | "logical-cpu" (when known), "notes": [str],
     "step_time_s": [s per step], "step_time_avg_s": s, "idle_accelerators": [device],
     "devices": {"<device>": {"window_s": s,
                              "total": {"<category>": {"count": n, "seconds": s, "bytes": b}},
                              "wall": {"<category>": s, ..., "idle": s},
                              "idle_split": {"host_wait": s, "kernel_wait": s, "other": s}}},
     "links": [{"src", "dst", "kind", "bytes", "count", "seconds", "gbps", "measured"}],
     "tasks": [{"task": "/job:worker/task:1" | "", "host": str,
                "steps": [{"step", "start_s", "end_s", "collective_s"}]}]}

Each device is broken down within its own step windows (:mod:`.steps`); ``window_s`` is their sum.
``step_time_s``: per step (in ``step_numbers`` order), the longest of its owners' windows --
XProf's overview rule for the steps of several devices; not divided by ``per_step``.  A note
says where owners' windows for a step do not overlap (they did not step together).
``idle_accelerators``: the accelerator planes (lines or not) that ran no kernel (``compute``
or ``collective``) in their windows.

``total``/``wall``/``idle_split``/``links`` cover all step windows together; ``per_step=True``
divides every count, second and byte figure by ``steps``.  GPU devices list ``compute
collective p2p d2d h2d d2h memset`` and an ``idle_split`` (accelerators only; it sums to
``wall.idle``); the host and CPU devices ``host_compute send_recv input framework``
(any other category with events is added); ``bytes`` only for copy categories.
Unmeasured links have ``"seconds": null, "gbps": null, "measured": false``.  ``tasks``
has one entry per host (one for a single trace, task ``""``): its own step windows, in
seconds after the earliest step start of any task, and the wall time it spent inside
collective events in each (not divided by ``per_step``: they are per step already).
"""

from tfprof_towers.trace.analysis import Analysis, analyze_trace, analyze_xplane
from tfprof_towers.trace.hosts import load_hosts
from tfprof_towers.trace.load import Trace, load_trace, trace_from_bytes

__all__ = [
    "Analysis", "Trace", "analyze_trace", "analyze_xplane", "load_hosts", "load_trace", "trace_from_bytes"
]
