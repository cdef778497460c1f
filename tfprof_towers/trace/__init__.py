"""Profiler traces (XSpace, as TensorFlow and JAX write them, on GPUs and TPUs) -> numpy columns ->
per-device time attribution.  Never imports TensorFlow (nor pandas, unless a DataFrame is asked for).
Who wrote a trace is :attr:`Trace.producer` (:mod:`.producer`).

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

A profile of many hosts is analysed host by host, then reduced (:mod:`.pod`, :mod:`.executors`:
``analyze_pod``, what ``analyze`` runs): ``PodAnalysis.to_doc`` is the same document, with ``hosts``
and ``failed_hosts``.

The document ``Analysis.to_doc`` makes (``analyze --json``; ``summary.json``'s
``variants[].breakdown``) is described in docs/output.md, "The `--json` document".
"""

from tfprof_towers.trace.analysis import Analysis, analyze_trace, analyze_xplane
from tfprof_towers.trace.executors import analyze_pod
from tfprof_towers.trace.hosts import load_hosts
from tfprof_towers.trace.load import Trace, load_trace, trace_from_bytes

__all__ = [
    "Analysis", "Trace", "analyze_pod", "analyze_trace", "analyze_xplane", "load_hosts", "load_trace",
    "trace_from_bytes",
]
