"""Number formats shared by the advice text, the terminal and the report (no rendering imports).

Each takes a number (or ``None``, shown as an en dash) and returns plain text;
none of them returns markup, so Jinja's autoescaping still applies where the
report uses them as filters (:mod:`tfprof_towers.render.filters`).
"""

from __future__ import annotations

import math

MISSING = "–"


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def fmt_seconds(value: float | None, digits: int = 3) -> str:
    """Seconds in the largest unit that keeps the number ≥ 1: ``0.00123`` -> ``"1.23 ms"``."""
    if _missing(value):
        return MISSING
    v = float(value)
    if v == 0:
        return "0 s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(v) >= scale:
            return f"{_sig(v / scale, digits)} {unit}"
    return f"{_sig(v / 1e-12, digits)} ps"


def fmt_step(value: float | None) -> str:
    """A (projected) step time, fixed decimals: ``0.01234`` -> ``"12.34 ms"``, ``1.5`` -> ``"1.500 s"``."""
    if _missing(value):
        return MISSING
    v = float(value)
    return f"{v * 1e3:.2f} ms" if v < 1 else f"{v:.3f} s"


def fmt_bytes(value: float | None) -> str:
    """Bytes in decimal units (kB = 1000 B, as link bandwidths are quoted): ``1536`` -> ``"1.54 kB"``."""
    if _missing(value):
        return MISSING
    v = float(value)
    for scale, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(v) >= scale:
            return f"{_sig(v / scale, 3)} {unit}"
    return f"{round(v)} B"


def fmt_rate(value: float | None) -> str:
    """Bytes per second: ``12e9`` -> ``"12.0 GB/s"``."""
    if _missing(value):
        return MISSING
    return fmt_bytes(value) + "/s"


def fmt_percent(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.4123`` -> ``"41.2%"``."""
    if _missing(value):
        return MISSING
    return f"{float(value) * 100:.{digits}f}%"


def fmt_count(value: float | None) -> str:
    """An integer with thousands separators: ``557056`` -> ``"557,056"``."""
    if _missing(value):
        return MISSING
    return f"{round(float(value)):,}"


def fmt_flops(value: float | None) -> str:
    """FLOPs in SI units: ``2.3e12`` -> ``"2.30 TFLOP"``."""
    if _missing(value):
        return MISSING
    v = float(value)
    for scale, unit in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if abs(v) >= scale:
            return f"{_sig(v / scale, 3)} {unit}"
    return f"{round(v)} FLOP"


def fmt_ratio(value: float | None, digits: int = 2) -> str:
    """A speedup: ``1.5`` -> ``"1.50×"``."""
    if _missing(value):
        return MISSING
    return f"{float(value):.{digits}f}×"


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
