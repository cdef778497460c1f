"""Number formats shared by the advice text, the terminal and the report (no rendering imports).

Each takes a number (or ``None``, shown as an en dash) and returns plain text;
none of them returns markup, so Jinja's autoescaping still applies where the
report uses them as filters (:mod:`tfprof_towers.render.filters`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

MISSING = "–"
F = TypeVar("F", bound=Callable[..., str])


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def _or_dash(fn: F) -> F:
    """``fn`` of ``float(value)``; None, NaN and the infinities are shown as :data:`MISSING`."""
    @functools.wraps(fn)
    def shown(value: float | None, *args: Any, **kwargs: Any) -> str:
        return MISSING if _missing(value) else fn(float(value), *args, **kwargs)  # type: ignore[arg-type]

    return cast(F, shown)


@_or_dash
def fmt_seconds(v: float, digits: int = 3) -> str:
    """Seconds in the largest unit that keeps the number ≥ 1: ``0.00123`` -> ``"1.23 ms"``."""
    if v == 0:
        return "0 s"
    units = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
    return _in_units(v, units, digits) or f"{_sig(v / 1e-12, digits)} ps"


@_or_dash
def fmt_step(v: float) -> str:
    """A (projected) step time, fixed decimals: ``0.01234`` -> ``"12.34 ms"``, ``1.5`` -> ``"1.500 s"``."""
    return f"{v * 1e3:.2f} ms" if v < 1 else f"{v:.3f} s"


@_or_dash
def fmt_bytes(v: float) -> str:
    """Bytes in decimal units (kB = 1000 B, as link bandwidths are quoted): ``1536`` -> ``"1.54 kB"``."""
    return _in_units(v, ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))) or f"{round(v)} B"


@_or_dash
def fmt_gib(v: float) -> str:
    """Memory in GiB, as memory sizes are quoted (a "6 GB" card holds 6 GiB): ``6442450944`` -> ``"6 GiB"``,
    ``3.93e9`` -> ``"3.66 GiB"``; under 0.005 GiB, in MiB, KiB or bytes (``1048576`` -> ``"1.00 MiB"``)."""
    g = v / (1 << 30)
    if v and abs(g) < 0.005:  # "0.00 GiB" says nothing: a small size in the unit that shows it
        for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if abs(v) >= size:
                return f"{v / size:.2f} {unit}"
        return f"{v:.0f} B"
    if g == round(g) or g >= 100:
        return f"{g:.0f} GiB"
    return f"{g:.2f} GiB" if g < 10 else f"{g:.1f} GiB"


@_or_dash
def fmt_rate(v: float) -> str:
    """Bytes per second: ``12e9`` -> ``"12.0 GB/s"``."""
    return fmt_bytes(v) + "/s"


@_or_dash
def fmt_percent(v: float, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.4123`` -> ``"41.2%"``."""
    return f"{v * 100:.{digits}f}%"


@_or_dash
def fmt_count(v: float) -> str:
    """An integer with thousands separators: ``557056`` -> ``"557,056"``."""
    return f"{round(v):,}"


@_or_dash
def fmt_flops(v: float) -> str:
    """FLOPs in SI units: ``2.3e12`` -> ``"2.30 TFLOP"``."""
    units = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))
    return _in_units(v, units) or f"{round(v)} FLOP"


@_or_dash
def fmt_ratio(v: float, digits: int = 2) -> str:
    """A speedup: ``1.5`` -> ``"1.50×"``."""
    return f"{v:.{digits}f}×"


def fmt_float(value: float | None, digits: int = 8) -> str:
    """A value to compare digit by digit (a loss): ``0.4749059081`` -> ``"0.47490591"``; a diverged
    model's NaN loss -> ``"NaN"``."""
    if value is not None and math.isnan(float(value)):
        return "NaN"
    if value is not None and math.isinf(float(value)):
        return "∞" if float(value) > 0 else "-∞"
    if _missing(value):
        return MISSING
    return f"{float(value):.{digits}g}"


def _in_units(v: float, units: tuple[tuple[float, str], ...], digits: int = 3) -> str | None:
    """``v`` in the first (largest) unit it reaches, ``digits`` significant; None below them all."""
    return next((f"{_sig(v / scale, digits)} {unit}" for scale, unit in units if abs(v) >= scale), None)


def fmt_rel(value: float | None) -> str:
    """A relative difference: ``0`` -> ``"0"``, ``6.3e-08`` -> ``"6.3e-08"``, ``0.5`` -> ``"50.0%"``."""
    if value is not None and math.isnan(float(value)):
        return "NaN"
    if value is not None and math.isinf(float(value)):
        return "∞"
    if _missing(value):
        return MISSING
    v = float(value)
    if v == 0:
        return "0"
    return fmt_percent(v) if abs(v) >= 1e-3 else f"{v:.1e}"


def _sig(x: float, digits: int) -> str:
    """``x`` with ``digits`` significant digits, keeping trailing zeros (``12.0``, ``1.50``)."""
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    decimals = max(digits - 1 - magnitude, 0)
    return f"{x:.{decimals}f}"


def fmt_some(items: list[str] | tuple[str, ...], shown: int = 5) -> str:
    """The first ``shown`` items, comma-separated, and how many more (a finding on a profile of many hosts
    can name hundreds of devices: the evidence keeps them all)."""
    items = list(items)
    if len(items) <= shown:
        return ", ".join(items)
    return ", ".join(items[:shown]) + f" and {len(items) - shown} more"


def fmt_workload(preset: Any) -> str:
    """Where a projection was made, after "projected": ``"at the seed preset (batch 64, dim 1000)"``,
    ``"for the Keras model cnn.py (global batch 64)"`` (a preset of a ``keras_model``), or ``""``."""
    if not isinstance(preset, dict) or not preset.get("name"):
        return ""
    if preset.get("keras_model"):
        return f"for the Keras model {preset['name']} (global batch {preset.get('batch')})"
    return f"at the {preset['name']} preset (batch {preset.get('batch')}, dim {preset.get('dim')})"
