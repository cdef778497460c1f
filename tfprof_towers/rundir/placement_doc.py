"""A variant's placement (``record.json`` -> ``placement``) read as records, for the audit.

The capture writes the placement (:mod:`tfprof_towers.capture.placement`); the record keeps it as it
was written (:attr:`~tfprof_towers.rundir.records.VariantRecord.placement`), and :meth:`Placement.of`
reads the parts the audit and the trace join use.  A number keeps its JSON type (int or float), since
the audit writes some of them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.fields import Fields, Record, describe, if_none, meta


def _number(f: Fields, key: str) -> int | float | None:
    """A number as the JSON holds it (int or float); None where absent or null."""
    value = f.data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        f.fail(key, f"must be a number, not {describe(value)}")
    return value


def _required_number(f: Fields, key: str) -> int | float:
    value = _number(f, key)
    if value is None:
        f.fail(key, "is missing")
    return value


def _raw(f: Fields, key: str) -> Any:
    return f.data.get(key)


@dataclass(frozen=True)
class SourceLine(Record):
    """A ``with tf.device(...)`` scope (TF1) or the line that created an op (TF2)."""

    file: str | None = None
    line: int | None = meta(None, read=_raw)
    device: str = ""  # the device the scope names (TF1)

    @classmethod
    def from_fields(cls, f: Fields) -> SourceLine:  # read by hand: a graph has thousands of these
        return cls(f.text("file"), f.data.get("line"), f.text("device") or "")

    @property
    def label(self) -> str:
        """``"/a/b/train.py:57"``."""
        return f"{'?' if self.file is None else self.file}:{'?' if self.line is None else self.line}"


@dataclass(frozen=True)
class PlacedNode(Record):
    """One op of the step's partition graphs, on the device it was placed on."""

    name: str
    device: str = ""
    type: str | None = None
    kernel: str | None = None  # the kernel executed (Grappler may fuse or rewrite an op)
    requested: str | None = None  # the device the graph asked for
    flops: int | float = meta(0, read=lambda f, k: _number(f, k) or 0)
    sources: tuple[SourceLine, ...] = ()  # innermost first

    @classmethod
    def from_fields(cls, f: Fields) -> PlacedNode:  # read by hand: a graph has thousands of nodes
        return cls(f.text("name", required=True), f.text("device") or "", f.text("type"), f.text("kernel"),
                   f.text("requested"), _number(f, "flops") or 0,
                   tuple(SourceLine.from_fields(x) for x in f.objects("sources")))


@dataclass(frozen=True)
class PlacedEdge(Record):
    """A tensor sent from one device to another each step."""

    src: str
    dst: str
    bytes: int | float = meta(0, read=lambda f, k: _number(f, k) or 0)
    tensor: str = ""
    producer_type: str = ""
    edge: str | None = None  # the send/recv pair's tensor name (the trace's join)

    @classmethod
    def from_fields(cls, f: Fields) -> PlacedEdge:  # read by hand: a graph has thousands of edges
        return cls(f.text("src", required=True), f.text("dst", required=True), _number(f, "bytes") or 0,
                   f.text("tensor") or "", f.text("producer_type") or "", f.text("edge"))


@dataclass(frozen=True)
class PlacedTransfer(Record):
    """The edges of one (src, dst) link, summed."""

    src: str
    dst: str
    bytes_per_step: int | float = meta(0, read=lambda f, k: _number(f, k) or 0)
    tensors: int = 0
    kind: str | None = meta(None, omit=if_none)  # "collective" (all-reduce traffic) or "send_recv" (TF2)


@dataclass(frozen=True)
class PlacedCollective(Record):
    """A TF2 all-reduce op and the bytes each replica contributes per step."""

    name: str | None = None
    device: str | None = None
    kernel: str | None = None
    bytes: int | float | None = meta(None, read=_number)
    group_size: int | None = meta(None, read=_raw)
    communication_hint: str | None = None
    tensor: str | None = None


@dataclass(frozen=True)
class PlacedDevice(Record):
    """One device's op count and estimated FLOPs per step."""

    ops: int | float = meta(0, read=lambda f, k: _required_number(f, k))
    flops_per_step: int | float = meta(0, read=lambda f, k: _required_number(f, k))


@dataclass(frozen=True)
class Placement(Record):
    """The parts of a placement the audit reads."""

    devices: Mapping[str, PlacedDevice] = meta(factory=dict)
    nodes: tuple[PlacedNode, ...] = ()
    edges: tuple[PlacedEdge, ...] | None = None  # None: the capture recorded no edges
    transfers: tuple[PlacedTransfer, ...] = ()
    collectives: tuple[PlacedCollective, ...] = ()
    strategy: Mapping[str, Any] | None = None  # TF2: the tf.distribute strategy (the capture's document)
    variable_bytes: Mapping[str, int] = meta(factory=dict)  # device -> bytes of the variables it holds
    WHERE = "record.json: placement"

    @classmethod
    def of(cls, placement: Mapping[str, Any] | None) -> Placement | None:
        """The placement of a record (None without one)."""
        return None if not placement else cls.from_json(placement)
