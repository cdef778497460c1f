"""The report's Jinja filters (``{{ x|fmt_seconds }}``): the formats of :mod:`tfprof_towers.vocab.fmt`."""

from __future__ import annotations

from collections.abc import Callable

from tfprof_towers.vocab.fmt import (
    MISSING,
    fmt_bytes,
    fmt_count,
    fmt_float,
    fmt_flops,
    fmt_gib,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_rel,
    fmt_seconds,
)

__all__ = ["FILTERS", "MISSING", "fmt_bytes", "fmt_count", "fmt_float", "fmt_flops", "fmt_percent",
           "fmt_rate", "fmt_ratio", "fmt_rel", "fmt_seconds"]

FILTERS: dict[str, Callable[..., str]] = {f.__name__: f for f in (
    fmt_seconds, fmt_bytes, fmt_rate, fmt_percent, fmt_count, fmt_flops, fmt_ratio, fmt_float, fmt_rel,
    fmt_gib)}
