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

from tfprof_towers.rundir.fields import Fields
from tfprof_towers.rundir.paths import RunDir

SCALING_JSON = "scaling.json"
SCALING_SCHEMA = 1
#: Separates a variant's name from its count in a sweep point's folder names.
AT = "@"


def point_name(variant: str, count: int) -> str:
    """``replicated@4``: the folder name of a variant's point at ``count`` accelerators."""
    return f"{variant}{AT}{count}"





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
    projected: Mapping[str, Any] | None = None  # analysis.scaling.projected_section, or {"error": ...}
    notes: tuple[str, ...] = ()
    finished: bool = False
    schema: int = SCALING_SCHEMA

    def to_json(self) -> dict[str, Any]:
        return {"schema": self.schema, "mode": self.mode, "counts": list(self.counts), "batch": self.batch,
                "points": [p.to_json() for p in self.points],
                "projected": None if self.projected is None else dict(self.projected),
                "notes": list(self.notes), "finished": self.finished}

    @classmethod
    def from_json(cls, doc: Any, where: str = SCALING_JSON) -> ScalingDoc:
        f = Fields.of(doc, where)
        counts = tuple(int(c) for c in (f.numbers("counts") or ()))
        projected = f.obj("projected")
        return cls(mode=f.choice("mode", ("weak", "strong"), required=True) or "weak", counts=counts,
                   batch=f.integer("batch", required=True) or 0,
                   points=tuple(PlannedPoint.from_fields(p) for p in f.objects("points")),
                   projected=None if projected is None else dict(projected.data), notes=f.texts("notes"),
                   finished=f.flag("finished"),
                   schema=f.integer("schema", default=SCALING_SCHEMA) or SCALING_SCHEMA)


def scaling_json(run_dir: RunDir) -> Path:
    return run_dir.root / SCALING_JSON
