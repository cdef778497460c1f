"""TensorFlow profiler traces -> pandas -> per-device time attribution.  Never imports TensorFlow.

The data flow::

    xplane.read_xspace -> classify -> steps -> Trace (load) -> attribute -> links -> Analysis

one module per step::

    tfprof_towers.xplane   the reader: XSpace (``*.xplane.pb``) -> raw columns (plane, line,
                           name, start, duration, the stats asked for); knows no TensorFlow
    locate.py     which file a path names (file / logdir / ``--run``), with notes
    classify.py   TensorFlow meaning per event: category, device (node -> device join),
                  TF node and op type, send/recv endpoints from rendezvous keys
      copies.py   device copies: bytes, direction, peer endpoints from ``memcpy_details``
      codes.py    categories as int8 codes
    steps.py      step windows: markers, else the ``Steps`` line, else the whole trace
    load.py       the glue: ``Trace(source, events, steps, window, hostnames, notes)``
    attribute.py  per device and step: ``total`` per category, exclusive ``wall``
    links.py      per (src, dst, kind): bytes, count, seconds, GB/s
    analysis.py   ``Analysis`` = trace + breakdown + links, and its JSON document
    synth.py      build TensorFlow-style traces in code (tests, benchmark)

A run directory's traces, with the node -> device join, edge bytes and topology kind
from its records, are analysed by :mod:`tfprof_towers.run_traces` (the trace package
never reads the run directory's format).  Another trace source (JAX, PyTorch) reuses
:func:`tfprof_towers.xplane.read_xspace` and brings its own ``classify``.

Entry points::

    analyze_xplane(path, node_devices=None, kind=None, edge_bytes=None, run=None) -> Analysis
    analyze_trace(trace, kind=None, edge_bytes=None) -> Analysis
    load_trace(path, run=None, node_devices=None) -> Trace
    trace_from_bytes(data, source="<bytes>", node_devices=None) -> Trace
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

from .analysis import Analysis, analyze_trace, analyze_xplane
from .load import Trace, load_trace, trace_from_bytes

__all__ = [
    "Analysis",
    "Trace",
    "analyze_trace",
    "analyze_xplane",
    "load_trace",
    "trace_from_bytes",
]
