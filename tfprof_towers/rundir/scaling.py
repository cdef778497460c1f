"""``scaling.json`` and the folders of a scaling sweep (``profile --scaling COUNTS``).

A sweep runs each selected variant at each accelerator count in its own capture child, as
the run's own variants are run; a point's files are those of a variant, in folders named
``<name>@<count>``: ``variants/<name>@<count>/{spec,record}.json, stderr.txt`` and
``tensorboard/<name>@<count>/``.  :class:`PointRunDir` is a :class:`RunDir` whose variant
folders are those of one count, so the capture runner writes there unchanged.

``scaling.json`` (:class:`ScalingDoc`) says what the sweep asked for: the mode, the counts,
the batch (per replica in ``weak`` mode, global in ``strong``), every planned point (its
global batch, and why it was skipped where it was not run) and the projected curves.  The
measurements themselves are in the points' records; ``summary.json`` -> ``scaling`` puts
both together (:mod:`tfprof_towers.analysis.scaling_run`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfprof_towers.rundir.fields import Fields, Record, if_none, meta
from tfprof_towers.rundir.paths import RunDir

SCALING_JSON = "scaling.json"
SCALING_SCHEMA = 1
#: Separates a variant's name from its count in a sweep point's folder names.
AT = "@"


def point_name(variant: str, count: int) -> str:
    """``replicated@4``: the folder name of a variant's point at ``count`` accelerators."""
    return f"{variant}{AT}{count}"


def _counts(f: Fields, key: str) -> tuple[int, ...]:
    return tuple(int(c) for c in (f.numbers(key) or ()))


def _ints(counts: tuple[int, ...]) -> list[int]:
    return list(counts)


# ------------------------------------------------------------------------------------------
# summary.json -> scaling: the sweep's curves (analysis.scaling builds them, the report reads them)


@dataclass(frozen=True)
class StepSpread(Record):
    """A measured point's step time: the median and the p10-p90 spread (seconds)."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None


@dataclass(frozen=True)
class ScalingPoint(Record):
    """``scaling.variants[].points[]``: one variant measured at one count, with its speedups."""

    count: int
    status: str = "ok"
    step_time_s: StepSpread = meta(factory=StepSpread)
    global_batch: int | None = None
    examples_per_s: float | None = None
    speedup: float | None = None  # over the variant's own smallest count
    speedup_vs_baseline: float | None = None  # over the family's 1-accelerator baseline
    efficiency: float | None = None
    efficiency_basis: str | None = None  # "baseline" | "own"
    efficiency_vs_baseline: float | None = None
    wall_per_step: Mapping[str, float] | None = None  # analysis.scaling.GROUPS -> seconds per step
    reason: str | None = meta(None, omit=if_none)  # failed or skipped: why

    @property
    def headline_efficiency(self) -> float | None:
        """The efficiency against the baseline where there is one, else against its own smallest count."""
        return self.efficiency if self.efficiency_vs_baseline is None else self.efficiency_vs_baseline


@dataclass(frozen=True)
class ProjectedPoint(Record):
    """``scaling.projected.variants[].points[]``: one variant projected at one count."""

    count: int
    step_time_s: float | None = None
    global_batch: int | None = None
    examples_per_s: float | None = None
    speedup: float | None = None
    speedup_vs_baseline: float | None = None
    efficiency: float | None = None
    efficiency_basis: str | None = None
    efficiency_vs_baseline: float | None = None
    bottleneck: str | None = None
    bottleneck_kind: str | None = None
    error: str | None = meta(None, omit=if_none)

    @property
    def headline_efficiency(self) -> float | None:
        return self.efficiency if self.efficiency_vs_baseline is None else self.efficiency_vs_baseline


@dataclass(frozen=True)
class ScalingVariant(Record):
    """``scaling.variants[]``: one variant's measured curve, what grew, and its headline."""

    variant: str
    family: str = ""
    baseline: bool = False
    points: tuple[ScalingPoint, ...] = ()
    growth: tuple[str, ...] = ()
    headline: str | None = None


@dataclass(frozen=True)
class ProjectedVariant(Record):
    """``scaling.projected.variants[]``: one variant's projected curve and its headline."""

    variant: str
    family: str = ""
    baseline: bool = False
    points: tuple[ProjectedPoint, ...] = ()
    headline: str | None = None


@dataclass(frozen=True)
class BestPick(Record):
    """At one count, the variant with the highest throughput there."""

    count: int
    variant: str


@dataclass(frozen=True)
class ProjectedScaling(Record):
    """``scaling.json`` -> ``projected`` (and ``summary.json`` -> ``scaling.projected``): the projected
    curves on a hardware profile, or only ``hardware``, ``preset`` and ``error`` when it failed."""

    hardware: str | None = None
    preset: str | None = None
    mode: str | None = None
    label: str | None = None
    variants: tuple[ProjectedVariant, ...] = ()
    best_by_count: tuple[BestPick, ...] = ()
    recommendation: str | None = None
    notes: tuple[str, ...] = ()
    error: str | None = meta(None, omit=if_none)
    WHERE = "scaling.json: projected"

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"hardware": self.hardware, "preset": self.preset, "error": self.error}
        return super().to_json()


@dataclass(frozen=True)
class RecommendationFor(Record):
    """The count the run's recommendation is for, and what the sweep says of the other counts."""

    variant: str
    count: int
    unit: str
    basis: str
    text: str


@dataclass(frozen=True)
class ScalingSection(Record):
    """``summary.json`` -> ``scaling``: the measured curves, the projected ones beside them, and the
    count-dependent pick; only ``error`` when ``scaling.json`` could not be read."""

    mode: str | None = None
    counts: tuple[int, ...] = meta((), read=_counts, write=_ints)
    batch: int | None = None
    batch_is: str | None = None  # "per replica" (weak) or "global" (strong)
    label: str | None = None  # "measured here" or the CPU stand-in's
    variants: tuple[ScalingVariant, ...] = ()
    best_by_count: tuple[BestPick, ...] = ()
    recommendation: str | None = None  # analysis.scaling.count_recommendation
    notes: tuple[str, ...] = ()
    stand_in: bool = False  # measured on logical CPU devices
    projected: ProjectedScaling | None = None
    headline: str = "measured"  # which curve is the headline: "measured" or "projected"
    recommendation_for: RecommendationFor | None = None
    error: str | None = meta(None, omit=if_none)
    WHERE = "summary.json: scaling"

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error} if self.error is not None else super().to_json()

    @property
    def projected_ok(self) -> ProjectedScaling | None:
        """The projected curves, None where there are none or they failed."""
        return self.projected if self.projected is not None and self.projected.error is None else None


@dataclass(frozen=True)
class PointRunDir(RunDir):
    """The run directory as seen by the sweep's children at one count: ``variants/<name>@<count>/``."""

    count: int = 1

    def variant_dir(self, name: str) -> Path:
        return self.root / "variants" / point_name(name, self.count)

    def logdir(self, name: str) -> Path:
        return self.tensorboard / point_name(name, self.count)


@dataclass(frozen=True)
class PlannedPoint:
    """One variant at one count, as the sweep planned it."""

    variant: str
    count: int
    family: str
    baseline: bool = False
    global_batch: int | None = None
    skipped: str | None = None  # why it was not run (it then has a skipped record too)

    @property
    def folder(self) -> str:
        return f"variants/{point_name(self.variant, self.count)}"

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "count": self.count, "family": self.family,
                "baseline": self.baseline, "global_batch": self.global_batch, "skipped": self.skipped,
                "folder": self.folder}

    @classmethod
    def from_fields(cls, f: Fields) -> PlannedPoint:
        return cls(variant=f.text("variant", required=True), count=f.integer("count", required=True),
                   family=f.text("family", default="") or "", baseline=f.flag("baseline"),
                   global_batch=f.integer("global_batch"), skipped=f.text("skipped"))


@dataclass(frozen=True)
class ScalingDoc:
    """``scaling.json``: what the sweep asked for, and its projected curves."""

    mode: str
    counts: tuple[int, ...]
    batch: int
    points: tuple[PlannedPoint, ...] = ()
    projected: ProjectedScaling | None = None  # analysis.scaling.projected_section, or its error
    notes: tuple[str, ...] = ()
    finished: bool = False
    schema: int = SCALING_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "mode": self.mode, "counts": list(self.counts), "batch": self.batch,
                "points": [p.to_json() for p in self.points],
                "projected": None if self.projected is None else self.projected.to_json(),
                "notes": list(self.notes), "finished": self.finished}

    @classmethod
    def from_json(cls, doc: Any, where: str = SCALING_JSON) -> ScalingDoc:
        f = Fields.of(doc, where)
        counts = tuple(int(c) for c in (f.numbers("counts") or ()))
        return cls(mode=f.choice("mode", ("weak", "strong"), required=True) or "weak", counts=counts,
                   batch=f.integer("batch", required=True) or 0,
                   points=tuple(PlannedPoint.from_fields(p) for p in f.objects("points")),
                   projected=f.obj_as("projected", ProjectedScaling.from_fields), notes=f.texts("notes"),
                   finished=f.flag("finished"),
                   schema=f.integer("schema", default=SCALING_SCHEMA) or SCALING_SCHEMA)


def scaling_json(run_dir: RunDir) -> Path:
    return run_dir.root / SCALING_JSON
