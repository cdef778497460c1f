"""The report's Jinja filters: the number formats of :mod:`tfprof_towers.vocab.fmt`, by filter name.

Formatting lives in :mod:`tfprof_towers.vocab.fmt` so that advice text and the report
share it without advice depending on rendering; this module only names the
functions for the templates (``{{ x|fmt_seconds }}``).
"""

from __future__ import annotations

from collections.abc import Callable

from tfprof_towers.vocab.fmt import (
    MISSING,
    fmt_bytes,
    fmt_count,
    fmt_float,
    fmt_flops,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_rel,
    fmt_seconds,
)

__all__ = ["FILTERS", "MISSING", "fmt_bytes", "fmt_count", "fmt_float", "fmt_flops", "fmt_percent",
           "fmt_rate", "fmt_ratio", "fmt_rel", "fmt_seconds"]

FILTERS: dict[str, Callable[..., str]] = {
    "fmt_seconds": fmt_seconds,
    "fmt_bytes": fmt_bytes,
    "fmt_rate": fmt_rate,
    "fmt_percent": fmt_percent,
    "fmt_count": fmt_count,
    "fmt_flops": fmt_flops,
    "fmt_ratio": fmt_ratio,
    "fmt_float": fmt_float,
    "fmt_rel": fmt_rel,
}
