"""Non-finite numbers in strict JSON: written as ``null`` plus a flag that says which and what.

A model that diverges computes a NaN loss; its timings are still valid, so its record
must still be read.  Strict JSON (RFC 8259) has no NaN, and a plain ``null`` cannot be
told from "not measured".  So a document that may hold such numbers writes each one as
``null`` and names it in ``"not_finite"``::

    {"losses": [null, null], "grad_norm": null, "not_finite": {"losses[0]": "NaN",
     "losses[1]": "NaN", "grad_norm": "NaN"}}

Reading back, a ``null`` that the flag names becomes the float again; any other ``null`` in a
list is a wrongly typed field.  Only the fields that may hold such numbers use it (a variant's
math check); timings never do: a NaN step time is a wrongly typed record.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tfprof_towers.rundir.fields import Fields, RecordError, describe

NOT_FINITE = "not_finite"
_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def word(x: float) -> str:
    """``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (the spelling ``json.dumps`` would use)."""
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def is_finite(x: Any) -> bool:
    return not isinstance(x, float) or math.isfinite(x)


def strict(doc: Mapping[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``doc`` with every non-finite float of ``keys`` (a number, or a list of numbers) as None,
    and ``doc["not_finite"]`` naming each (absent when every number is finite)."""
    out = dict(doc)
    flags: dict[str, str] = {}
    for key in keys:
        value = out.get(key)
        if isinstance(value, (list, tuple)):
            items = list(value)
            for i, x in enumerate(items):
                if not is_finite(x):
                    flags[f"{key}[{i}]"], items[i] = word(x), None
            out[key] = items
        elif not is_finite(value):
            flags[key], out[key] = word(value), None
    if flags:
        out[NOT_FINITE] = flags
    else:
        out.pop(NOT_FINITE, None)
    return out


def _flags(data: Mapping[str, Any]) -> Mapping[str, Any]:
    flags = data.get(NOT_FINITE)
    return flags if isinstance(flags, Mapping) else {}


def _flagged(f: Fields, name: str) -> float | None:
    """The float that ``not_finite`` names for ``name`` (None: not named)."""
    flag = _flags(f.data).get(name)
    if flag is None:
        return None
    if flag not in _WORDS:
        raise RecordError(f.where, f.name(NOT_FINITE), f"[{name!r}] must be one of "
                          f"{', '.join(map(repr, _WORDS))}, not {describe(flag)}")
    return _WORDS[flag]


def read_numbers(f: Fields, key: str) -> tuple[float, ...] | None:
    """A list of numbers where a ``null`` named in ``not_finite`` is that NaN or infinity."""
    if f.data.get(key) is None:
        return None
    values = []
    for i, v in enumerate(f.items(key)):
        name = f"{key}[{i}]"
        if v is None and (x := _flagged(f, name)) is not None:
            values.append(x)
            continue
        values.append(Fields.of({name: v}, f.where, f.prefix).number(name, required=True))
    return tuple(values)


def read_number(f: Fields, key: str) -> float | None:
    """A number where a ``null`` named in ``not_finite`` is that NaN or infinity."""
    if f.data.get(key) is None:
        return _flagged(f, key)
    return f.number(key)


def restore(data: Mapping[str, Any], key: str) -> Any:
    """``data[key]`` with the nulls ``not_finite`` names made floats again (a plain mapping)."""
    flags = _flags(data)
    value = data.get(key)
    if isinstance(value, (list, tuple)):
        return [(_WORDS.get(flags.get(f"{key}[{i}]")) if x is None else x) for i, x in enumerate(value)]
    if value is None:
        return _WORDS.get(flags.get(key))
    return value


def first_not_finite(losses: Sequence[float]) -> tuple[int, str] | None:
    """``(step, "NaN")`` of the first non-finite loss (steps count from 1), None when all are finite."""
    for i, x in enumerate(losses):
        if not is_finite(x):
            return i + 1, word(x)
    return None
