"""Reading a JSON document into typed records: every error names the file and the dotted field.

:class:`Fields` wraps one JSON object of a run-directory document and reads its
fields with their types checked (``text``, ``integer``, ``number``, ``flag``,
``obj``, ``objects`` ...).  A missing or wrongly typed field raises
:class:`RecordError`, one line: ``variants/x/record.json: timings.step_time_s.median
must be a number, not the string "fast"``.  Used by :mod:`tfprof_towers.rundir.records`,
:mod:`tfprof_towers.rundir.summary` and :mod:`tfprof_towers.advice.recommend`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from tfprof_towers.vocab.errors import TowersError

T = TypeVar("T")


class RecordError(TowersError):
    """A run-directory document with a missing or wrongly typed field (names the file and the field)."""

    def __init__(self, where: str, field_name: str, problem: str) -> None:
        self.where, self.field, self.problem = where, field_name, problem
        super().__init__(f"{where}: {self.detail}")

    @property
    def detail(self) -> str:
        """The message without the file: ``"timings.step_time_s.median must be a number, not ..."``."""
        return f"{self.field} {self.problem}" if self.field else self.problem


def describe(value: Any) -> str:
    """A short, one-line description of a JSON value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value if len(value) <= 40 else value[:40] + "…", ensure_ascii=False)
        return f"the string {text}"
    if isinstance(value, (int, float)):
        text = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "…"
        return f"the number {text}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


_ABSENT = object()


@dataclass(frozen=True)
class Fields:
    """One JSON object being read into a record; every error names the file and the dotted field."""

    data: Mapping[str, Any]
    where: str
    prefix: str = ""

    @classmethod
    def of(cls, value: Any, where: str, prefix: str = "") -> Fields:
        if not isinstance(value, Mapping):
            raise RecordError(where, prefix, f"must be an object, not {describe(value)}")
        return cls(value, where, prefix)

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def fail(self, key: str, problem: str) -> NoReturn:
        raise RecordError(self.where, self.name(key), problem)

    def _get(self, key: str, required: bool) -> Any:
        value = self.data.get(key, _ABSENT)
        if value is _ABSENT:
            if required:
                self.fail(key, "is missing")
            return None
        return value

    def _typed(self, key: str, ok: Callable[[Any], bool], want: str, required: bool, default: Any) -> Any:
        value = self._get(key, required)
        if value is None:
            if required:
                self.fail(key, f"must be {want}, not null")
            return default
        if not ok(value):
            self.fail(key, f"must be {want}, not {describe(value)}")
        return value

    def text(self, key: str, required: bool = False, default: str | None = None) -> str | None:
        return self._typed(key, lambda v: isinstance(v, str), "a string", required, default)

    def integer(self, key: str, required: bool = False, default: int | None = None) -> int | None:
        return self._typed(key, _is_int, "an integer", required, default)

    def number(self, key: str, required: bool = False, default: float | None = None) -> float | None:
        value = self._typed(key, _is_number, "a number", required, default)
        if value is not None and not _is_finite(value):
            self.fail(key, f"must be a finite number, not {describe(value)}")
        return None if value is None else float(value)

    def flag(self, key: str, default: bool = False) -> bool:
        return bool(self._typed(key, lambda v: isinstance(v, bool), "true or false", False, default))

    def choice(self, key: str, choices: Sequence[str], required: bool = False) -> str | None:
        value = self.text(key, required)
        if value is not None and value not in choices:
            self.fail(key, f"must be one of {', '.join(map(repr, choices))}, not {describe(value)}")
        return value

    def obj(self, key: str, required: bool = False) -> Fields | None:
        value = self._get(key, required)
        if value is None:
            if required:
                self.fail(key, "must be an object, not null")
            return None
        return Fields.of(value, self.where, self.name(key))

    def obj_as(self, key: str, build: Callable[[Fields], T]) -> T | None:
        """The object at ``key`` made into a record by ``build`` (absent or null: None)."""
        sub = self.obj(key)
        return None if sub is None else build(sub)

    def mapping(self, key: str) -> Mapping[str, Any] | None:
        """An open-ended object, checked only for being one."""
        return self.obj_as(key, lambda sub: sub.data)

    def items(self, key: str) -> tuple[Any, ...]:
        """A list (absent or null: empty)."""
        value = self._get(key, False)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(key, f"must be a list, not {describe(value)}")
        return tuple(value)

    def objects(self, key: str) -> tuple[Fields, ...]:
        return tuple(Fields.of(v, self.where, self.item(key, i)) for i, v in enumerate(self.items(key)))

    def item(self, key: str, i: int) -> str:
        return f"{self.name(key)}[{i}]"

    def texts(self, key: str) -> tuple[str, ...]:
        values = self.items(key)
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise RecordError(self.where, self.item(key, i), f"must be a string, not {describe(v)}")
        return values

    def numbers(self, key: str) -> tuple[float, ...] | None:
        if self._get(key, False) is None:
            return None
        values = self.items(key)
        for i, v in enumerate(values):
            if not _is_number(v):
                raise RecordError(self.where, self.item(key, i), f"must be a number, not {describe(v)}")
            if not _is_finite(v):
                raise RecordError(self.where, self.item(key, i),
                                  f"must be a finite number, not {describe(v)}")
        return tuple(float(v) for v in values)

    def number_map(self, key: str) -> dict[str, float] | None:
        sub = self.obj(key)
        if sub is None:
            return None
        return {k: sub.number(k, required=True) for k in sub.data}

    def text_map(self, key: str) -> dict[str, str | None]:
        sub = self.obj(key)
        return {} if sub is None else {k: sub.text(k) for k in sub.data}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v: Any) -> bool:
    """A number that strict JSON can hold: not NaN, not an infinity (``json.loads`` accepts both)."""
    try:
        return _is_number(v) and math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def drop_none(doc: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``doc`` without the optional ``keys`` whose value is None (documents keep their old shape)."""
    return {k: v for k, v in doc.items() if not (k in keys and v is None)}
