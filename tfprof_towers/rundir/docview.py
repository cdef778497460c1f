"""Read access by JSON key to a typed record, for the readers of a run's documents not yet typed.

A record that mixes in :class:`JsonView` is also a read-only ``Mapping`` of its own ``to_json()``:
``record["devices"]``, ``record.get("error")`` and ``{**record}`` read what the JSON holds.  New code
reads the record's fields; the view keeps older readers (and a record replaced by a plain document,
see :func:`coerce`) working while they move over.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cached_property
from typing import Any, TypeVar

R = TypeVar("R")


class JsonView(Mapping[str, Any]):
    """A record as a read-only mapping of its JSON document (computed once: records are frozen); it
    comes after :class:`~tfprof_towers.rundir.fields.Record` in the bases."""

    @cached_property
    def _json_view(self) -> dict[str, Any]:
        return self.to_json()  # type: ignore[attr-defined]  # the Record before it in the bases

    def __getitem__(self, key: str) -> Any:
        return self._json_view[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json_view)

    def __len__(self) -> int:
        return len(self._json_view)


def coerce(cls: type[R], value: Any, where: str) -> R | Any:
    """``value`` as a ``cls`` record where it is a plain mapping (a producer that still builds the
    document as a dict); a record or None as it is."""
    if value is None or isinstance(value, cls) or not isinstance(value, Mapping):
        return value
    return cls.from_json(value, where)  # type: ignore[attr-defined]
