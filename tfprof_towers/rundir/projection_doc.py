"""The projection documents: ``projection.json`` (what ``project --json`` prints) and the compact form
``summary.json`` -> ``projection`` keeps of it.

:class:`ProjectionDoc` reads ``projection.json`` in both of its schemas (schema 2 adds each variant's
``memory``, ``memory_fit`` and ``memory_at_run``; schema 1 has none) for the readers that print it;
:class:`ProjectionSummary` is the compact form the report, the advice and the scaling section read
(``analysis.pipeline.compact_projection`` makes it).  Both are projected, never measured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfprof_towers.rundir.fields import Record, if_none, meta
from tfprof_towers.vocab.fmt import fmt_workload


@dataclass(frozen=True)
class StepBounds(Record):
    """A projected step time's two bounds (seconds): copies overlapped with compute, and serialised."""

    overlapped: float
    serial: float


@dataclass(frozen=True)
class ProjectionPreset(Record):
    """The workload size a projection was built at (a Keras model: its file's name and global batch)."""

    name: str | None = meta(None, omit=if_none)
    batch: int | None = meta(None, omit=if_none)
    dim: int | None = meta(None, omit=if_none)
    blocks: int | None = meta(None, omit=if_none)
    keras_model: str | None = meta(None, omit=if_none)  # the model file

    @property
    def workload(self) -> str:
        """Where the projection was made, after "projected" (:func:`.fmt.fmt_workload`)."""
        return fmt_workload({"name": self.name, "batch": self.batch, "dim": self.dim,
                             "keras_model": self.keras_model})


@dataclass(frozen=True)
class ProjectionPick(Record):
    """The projection's own recommendation."""

    variant: str | None = None
    reason: str = ""


# ------------------------------------------------------------------------------------------
# summary.json -> projection


@dataclass(frozen=True)
class ProjectionRow(Record):
    """One variant of the compact projection: its rank, bounds and bottleneck, or why it was not
    projected (then only ``name`` and ``error``)."""

    name: str
    rank: int | None = None
    projected_step_s: StepBounds | None = None
    bottleneck: str = ""  # the bottleneck's sentence
    # projection.json schema 2: per device of the target, the estimated peak (projection.memory)
    memory: Mapping[str, Mapping[str, Any]] | None = meta(None, omit=if_none)
    memory_fit: Mapping[str, Any] | None = meta(None, omit=if_none)  # the verdict on the target
    memory_at_run: Mapping[str, Any] | None = meta(None, omit=if_none)  # the estimate at the run's size
    error: str | None = meta(None, omit=if_none)

    @property
    def projected(self) -> bool:
        return self.projected_step_s is not None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "error": self.error} if self.error is not None else super().to_json()


@dataclass(frozen=True)
class ProjectionSummary(Record):
    """``summary.json`` -> ``projection``: what the report shows of a projection, or why there is none
    (then ``label``, ``hardware``, ``preset`` and ``error``; only ``label`` and ``error`` where the
    file could not be read at all)."""

    label: str = "projected"
    hardware: str | None = None
    preset: ProjectionPreset | None = None
    tensorflow: str | None = None
    assumptions: tuple[str, ...] = ()
    profile: Mapping[str, Any] = meta(factory=dict)  # the hardware profile, as projection.json has it
    calibrated: tuple[str, ...] = ()  # the rates the run's measurements calibrated
    calibration_notes: tuple[str, ...] = ()
    variants: tuple[ProjectionRow, ...] = ()
    memory: Mapping[str, Any] | None = meta(None, omit=if_none)  # basis, headroom, ... of the estimates
    ranking: tuple[str, ...] = ()
    recommendation: ProjectionPick = meta(factory=ProjectionPick)
    error: str | None = meta(None, omit=if_none)
    WHERE = "summary.json: projection"

    def to_json(self) -> dict[str, Any]:
        if self.error is None:
            return super().to_json()
        if self.hardware is None and self.preset is None:  # the file itself could not be read
            return {"label": self.label, "error": self.error}
        return {"label": self.label, "hardware": self.hardware,
                "preset": None if self.preset is None else self.preset.to_json(), "error": self.error}

    def row(self, name: str) -> ProjectionRow | None:
        return next((r for r in self.variants if r.name == name), None)

    @property
    def accelerator(self) -> Mapping[str, Any]:
        """The target's accelerator part of the hardware profile (empty where there is none)."""
        part = self.profile.get("accelerator")  # a free mapping: the profile's own TOML
        return part if isinstance(part, Mapping) else {}

    @property
    def accelerator_count(self) -> int | None:
        count = self.accelerator.get("count")
        return count if isinstance(count, int) else None

    @property
    def headroom(self) -> float:
        """The share of each device's memory kept free (0 without memory estimates)."""
        return float((self.memory or {}).get("headroom") or 0.0)


# ------------------------------------------------------------------------------------------
# Typed reads of the memory parts, which the pipeline still builds and rewrites as mappings


@dataclass(frozen=True)
class MemoryFit(Record):
    """A variant's memory verdict on the projection's target (``variants[].memory_fit``)."""

    fits: bool | None = meta(None, read=lambda f, key: None if f.data.get(key) is None else f.flag(key))
    verdict: str = ""
    why: str = ""  # does not fit: why
    may_not_fit: bool = False  # only the low end of the range over the executor's orders fits
    WHERE = "projection: variants[].memory_fit"

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> MemoryFit:
        """The verdict of ``doc``; no verdict (``fits`` None) without one."""
        return cls.from_json(doc) if doc else cls()


@dataclass(frozen=True)
class ProjectionMemory(Record):
    """How a projection estimated memory (``projection.memory``): the basis, the headroom kept free."""

    basis: str | None = None
    headroom: float = 0.0
    headroom_why: str | None = None
    note: str | None = None
    WHERE = "projection: memory"

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None) -> ProjectionMemory:
        return cls.from_json(doc) if doc else cls()


# ------------------------------------------------------------------------------------------
# projection.json, as `project --json` prints it


@dataclass(frozen=True)
class Bottleneck(Record):
    """What limits a projected step: the busiest resource, its share of the step, in a sentence."""

    kind: str = ""
    resource: str | None = None
    share: float = 0.0
    text: str = ""


@dataclass(frozen=True)
class ProjectionEntry(Record):
    """One variant of ``projection.json``: its bounds, rank, bottleneck and memory (schema 2), or why it
    could not be projected."""

    name: str
    projected_step_s: StepBounds | None = None
    rank: int | None = None
    bottleneck: Bottleneck | None = None
    memory: Mapping[str, Mapping[str, Any]] | None = None  # schema 2: per device of the target
    memory_fit: Mapping[str, Any] | None = None  # schema 2: the verdict on the target
    memory_at_run: Mapping[str, Any] | None = None  # the estimate at the run's own size
    error: str | None = None

    @property
    def fit(self) -> MemoryFit:
        return MemoryFit.of(self.memory_fit)


@dataclass(frozen=True)
class PlacementCheck(Record):
    """The static placement of one variant against its run's partition graphs."""

    ops_same_device: int = 0
    ops_compared: int = 0
    links_agree: bool = False
    max_link_difference_bytes: int | None = None


@dataclass(frozen=True)
class Calibration(Record):
    """What the run's measurements calibrated, and how the static placement compared with the run's."""

    notes: tuple[str, ...] = ()
    placement_checks: Mapping[str, PlacementCheck] = meta(factory=dict)


@dataclass(frozen=True)
class ProjectionDoc(Record):
    """``projection.json`` (schema 1 or 2; ``project --json``), read for what prints it and what the
    report keeps of it; ``error`` alone where the run could not be projected."""

    label: str = "projected"
    hardware: str | None = None
    profile: Mapping[str, Any] = meta(factory=dict)  # the hardware profile (its TOML's numbers)
    preset: Mapping[str, Any] | None = None  # the preset's sizes (a Keras model: name, batch, keras_model)
    assumptions: tuple[str, ...] = ()
    rates: Mapping[str, Any] | None = None
    variants: tuple[ProjectionEntry, ...] = ()
    memory: ProjectionMemory | None = None
    ranking: tuple[str, ...] = ()
    recommendation: ProjectionPick = meta(factory=ProjectionPick)
    calibration: Calibration | None = None
    tensorflow: str | None = None
    cluster: Mapping[str, Any] | None = None  # project --workers: the hosts and their network
    keras_model: Mapping[str, Any] | None = None  # project --keras-model: the model's own sizes
    error: str | None = None
    schema: int | None = None
    WHERE = "projection.json"

    def entry(self, name: str) -> ProjectionEntry | None:
        return next((e for e in self.variants if e.name == name), None)
