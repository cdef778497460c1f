"""Run-directory documents to and from JSON; every error names the file and the dotted field.

:class:`Fields` reads one JSON object with the types checked; a missing or wrongly typed
field raises :class:`RecordError`, one line: ``variants/x/record.json: timings.step_time_s.median
must be a number, not the string "fast"``.  :class:`Record` gives a frozen dataclass its
``to_json``/``from_json`` from its fields' type hints (str, int, float, bool, nested dataclasses,
tuples and mappings of them, ``X | None``); :func:`meta` says where a field differs (its JSON key,
left out when empty, a legacy reader, a check of an open mapping).  A field with no default is
required unless it may be None; an absent one takes its default, so older documents still load.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field
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


def check_fields(f: Fields, **kinds: str) -> None:
    """Type-check fields of an open mapping: ``kind`` is ``text``, ``integer``, ``number`` or ``flag``;
    ``text!`` (and so on) a required one."""
    for key, kind in kinds.items():
        if kind == "flag":
            f.flag(key)
        else:
            getattr(f, kind.rstrip("!"))(key, required=kind.endswith("!"))


def check_items(f: Fields, key: str, **kinds: str) -> None:
    """:func:`check_fields` on every object of the list at ``key``."""
    for item in f.objects(key):
        check_fields(item, **kinds)


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


# ------------------------------------------------------------------------------------------
# The codec: to_json/from_json made from a dataclass's fields and their type hints


def if_none(value: Any) -> bool:
    return value is None


def if_empty(value: Any) -> bool:
    return not value


def meta(default: Any = MISSING, *, factory: Any = MISSING, **json: Any) -> Any:
    """A dataclass field with what the codec needs beyond its type (every key optional):

    ``key`` the JSON name; ``omit(value)`` true: not written; ``choices`` for a text;
    ``missing`` the value when absent (a field without a default that is not required);
    ``check(fields)`` type-checks an open mapping (or each item of a tuple of mappings) it keeps;
    ``read(fields, key)`` / ``write(value)`` replace the codec's for this field;
    ``own_where``: a nested record's errors name it as ``"<file>: <field>"`` with its own field names.
    """
    return field(default=default, default_factory=factory, metadata=json)


@dataclass(frozen=True)
class _Spec:
    name: str
    tp: Any  # the type, without None
    optional: bool
    value: Any  # the default (MISSING: none)
    factory: Any
    meta: Mapping[str, Any]

    @property
    def key(self) -> str:
        return self.meta.get("key", self.name)

    @property
    def required(self) -> bool:
        return self.value is MISSING and self.factory is MISSING and not self.optional

    def default(self) -> Any:
        if self.factory is not MISSING:
            return self.factory()
        return None if self.value is MISSING else self.value


@functools.cache
def _specs(cls: type) -> tuple[_Spec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for fd in dataclasses.fields(cls):
        tp, args = hints[fd.name], typing.get_args(hints[fd.name])
        optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args
        if optional:
            tp = next(a for a in args if a is not type(None))
        value = fd.metadata.get("missing", fd.default)
        specs.append(_Spec(fd.name, tp, optional, value, fd.default_factory, fd.metadata))
    return tuple(specs)


def decode(cls: type[T], f: Fields) -> T:
    """A dataclass from ``f``: each field read by its type (``meta`` says where not)."""
    return cls(**{s.name: _read(f, s) for s in _specs(cls)})


def _read(f: Fields, s: _Spec) -> Any:
    key, m, tp = s.key, s.meta, s.tp
    if "read" in m:
        return m["read"](f, key)
    if dataclasses.is_dataclass(tp):
        sub = f.obj(key, s.required)
        if sub is None:
            return s.default()
        return _decode_any(tp, _own(sub) if m.get("own_where") else sub)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (tuple, Mapping):
        if s.optional and key not in f.data:
            return None
        value = _read_tuple(f, key, args[0], m) if origin is tuple else _read_mapping(f, key, args[1], m)
        return value if value is not None or s.optional else ({} if origin is Mapping else ())
    if tp is str:
        if "choices" in m:
            return f.choice(key, m["choices"], s.required)
        return f.text(key, s.required, s.default())
    if tp is bool:
        return f.flag(key, s.default())
    reader = {int: f.integer, float: f.number}.get(tp)
    if reader is None:
        raise TypeError(f"the codec cannot read {s.name}: {tp}; give it meta(read=...)")
    return reader(key, s.required, s.default())


def _own(f: Fields) -> Fields:
    return Fields(f.data, f"{f.where}: {f.prefix}")


def _decode_any(cls: type[T], f: Fields) -> T:
    from_fields = getattr(cls, "from_fields", None)
    return from_fields(f) if from_fields is not None else decode(cls, f)


def _read_tuple(f: Fields, key: str, item: Any, m: Mapping[str, Any]) -> tuple[Any, ...] | None:
    if item is str:
        return f.texts(key)
    if item is float:
        return f.numbers(key)
    if dataclasses.is_dataclass(item):
        return tuple(_decode_any(item, _own(x) if m.get("own_where") else x) for x in f.objects(key))
    if typing.get_origin(item) is not Mapping:
        raise TypeError(f"the codec cannot read {key}: a tuple of {item}; give it meta(read=...)")
    items = f.objects(key)
    for x in items:
        m.get("check", _no_check)(x)
    return tuple(x.data for x in items)


def _no_check(f: Fields) -> None:
    pass


def _read_mapping(f: Fields, key: str, value: Any, m: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if value is str:  # values that may not be None: empty ones are left out
        return {k: v for k, v in f.text_map(key).items() if v}
    if value == str | None:
        return f.text_map(key)
    if value is float:
        return f.number_map(key)
    sub = f.obj(key)
    if sub is None:
        return None
    if dataclasses.is_dataclass(value):  # a mapping of records: each one read typed, its errors named
        return {k: _decode_any(value, sub.obj(k, True)) for k in sub.data}
    m.get("check", _no_check)(sub)
    return sub.data


def encode(record: Any) -> dict[str, Any]:
    """A dataclass as JSON: the names in its ``JSON_ORDER`` first (a property may be one), then
    its other fields in order; ``meta`` says where a field is named, written or left out otherwise."""
    specs = {s.name: s for s in _specs(type(record))}
    first = getattr(record, "JSON_ORDER", ())
    doc: dict[str, Any] = {}
    for name in (*first, *(n for n in specs if n not in first)):
        value, m = getattr(record, name), specs[name].meta if name in specs else {}
        if "omit" in m and m["omit"](value):
            continue
        doc[m.get("key", name)] = m["write"](value) if "write" in m else _write(value)
    return doc


def _write(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if dataclasses.is_dataclass(value):
        return encode(value)
    if isinstance(value, Mapping):  # a mapping of records (summary's variants[].memory) writes each one
        return {k: _write(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_write(v) for v in value]
    return value


R = TypeVar("R", bound="Record")


class Record:
    """A frozen dataclass's ``to_json()``, ``from_json(doc, where)`` and ``from_fields(f)``, made by
    the codec; ``WHERE`` names the document in errors when the caller does not."""

    WHERE = "document"
    JSON_ORDER: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return encode(self)

    @classmethod
    def from_json(cls: type[R], doc: Any, where: str | None = None) -> R:
        return cls.from_fields(Fields.of(doc, where or cls.WHERE))

    @classmethod
    def from_fields(cls: type[R], f: Fields) -> R:
        return decode(cls, f)
