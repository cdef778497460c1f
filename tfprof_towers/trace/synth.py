"""Build TensorFlow-style XSpace traces in code: the generic builder of
:mod:`tfprof_towers.xplane.build`, and the ``memcpy_details`` stat text TensorFlow writes."""

from __future__ import annotations

from ..xplane.build import DERIVED_LINE_ID, DERIVED_LINE_IDS, LineBuilder, PlaneBuilder, Ref, TraceBuilder

__all__ = [
    "DERIVED_LINE_ID",
    "DERIVED_LINE_IDS",
    "LineBuilder",
    "PlaneBuilder",
    "Ref",
    "TraceBuilder",
    "memcpy_details",
]


def memcpy_details(
    size: int, dest: int, kind_src: str | None = None, kind_dst: str | None = None, asynchronous: bool = True
) -> str:
    """The ``memcpy_details`` stat string: the current form when kinds are given, else the older one."""
    tail = f"size:{size} dest:{dest} async:{int(asynchronous)}"
    return f"kind_src:{kind_src} kind_dst:{kind_dst} {tail}" if kind_src is not None else tail
