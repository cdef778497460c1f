"""Profiler traces (XSpace ``*.xplane.pb``) -> pandas -> per-device time attribution.

Never imports TensorFlow.  The modules follow the data flow::

    xspace.py     the XSpace schema (built in code, private descriptor pool) and a
                  vectorised numpy decoder of events and stats
    layout.py     where planes, lines and events are in the file: a vectorised walk
                  of the wire format (protobuf parses only the planes' metadata)
    load.py       locate the file (file / logdir / --run), decode, classify:
                  ``Trace(source, events, steps, window, hostnames, notes)``
    attribute.py  per device and step: ``total`` per category, exclusive ``wall``
    links.py      per (src, dst, kind): bytes, count, seconds, GB/s
    analysis.py   ``Analysis`` = trace + breakdown + links, and its JSON document
    synth.py      build XSpace traces in code (tests, benchmark)

Entry points::

    analyze_xplane(path, node_devices=None, kind=None, edge_bytes=None, run=None) -> Analysis
    analyze_run_dir(run_dir, variant=None) -> Analysis   # uses run.json + record.json
    analyze_path(path, run=None) -> Analysis             # run directory or trace/logdir
    load_trace(path, run=None, node_devices=None) -> Trace
    Analysis.to_doc(per_step=False) -> dict

``node_devices`` maps TF node names to devices (``/device:CPU:1``; any form TF
prints is canonicalised): host TF-op events of mapped nodes -- and the async
``_Recv`` events naming them -- are attributed to that device, so each logical CPU
device gets its own ``host_compute``/``send_recv``; unmapped host events stay on
``/host:CPU``.  ``kind`` is the run's topology kind (``"gpu"`` or
``"logical-cpu"``); on logical-CPU runs (or traces without device planes)
``_Send`` events give ``send_recv`` links whose time is not measured, with bytes
from ``edge_bytes`` (rendezvous edge name -> bytes, from the partition graphs).

The document (``tfprof-towers analyze --json``; ``summary.json``'s
``variants[].breakdown`` is its ``devices`` part with ``per_step=True``)::

    {"source": str, "steps": N, "step_numbers": [...],
     "window": "markers" | "steps-line" | "whole-trace",
     "per_step": bool, "kind": "gpu" | "logical-cpu" (when known), "notes": [str],
     "devices": {"<device>": {"window_s": s,
                              "total": {"<category>": {"count": n, "seconds": s, "bytes": b}},
                              "wall": {"<category>": s, ..., "idle": s}}},
     "links": [{"src", "dst", "kind", "bytes", "count", "seconds", "gbps", "measured"}]}

``total``/``wall``/``links`` cover all step windows together; ``per_step=True``
divides every count, second and byte figure by ``steps``.  GPU devices list
``compute collective p2p d2d h2d d2h memset``; the host and CPU devices
``host_compute send_recv input framework`` (any other category with events is
added); ``bytes`` only for copy categories.  Unmeasured links have
``"seconds": null, "gbps": null, "measured": false``.
"""

from .analysis import Analysis, analyze_path, analyze_run_dir, analyze_trace, analyze_xplane
from .load import CATEGORIES, TIME_CATEGORIES, Trace, load_trace

__all__ = [
    "CATEGORIES",
    "TIME_CATEGORIES",
    "Analysis",
    "Trace",
    "analyze_path",
    "analyze_run_dir",
    "analyze_trace",
    "analyze_xplane",
    "load_trace",
]
