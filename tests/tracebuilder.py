"""Build synthetic XSpace traces in tests (re-exported from :mod:`tfprof_towers.trace.synth`).

from tracebuilder import TraceBuilder, Ref, memcpy_details, US
"""

from tfprof_towers.trace.synth import (
    DERIVED_LINE_IDS,
    LineBuilder,
    PlaneBuilder,
    Ref,
    TraceBuilder,
    memcpy_details,
)

US = 1_000_000  # picoseconds in a microsecond

__all__ = ["DERIVED_LINE_IDS", "US", "LineBuilder", "PlaneBuilder", "Ref", "TraceBuilder", "memcpy_details"]
