"""``run.json``, ``variants/<name>/record.json`` and ``spec.json`` as frozen records, and their loading.

A wrongly typed document is named and skipped (a failed stand-in record) instead of crashing
``report``.  Large, open-ended payloads (a record's placement nodes and edges, its cluster
document) stay mappings; only the fields the analysis reads are type-checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.fields import (
    Fields,
    Record,
    RecordError,
    check_fields,
    check_items,
    decode,
    describe,
    if_empty,
    if_none,
    meta,
)
from tfprof_towers.rundir.paths import RunDir, read_json
from tfprof_towers.rundir.placement_doc import Placement
from tfprof_towers.variants.config import ClusterOptions, Preset, ProfileOptions, VariantSpec
from tfprof_towers.vocab import textcap
from tfprof_towers.vocab.errors import TowersError

RUN_SCHEMA = 1
RECORD_SCHEMA = 1
SPEC_SCHEMA = 1

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
#: A variant's status: it finished every phase; it did not (``error`` says why); or it was
#: not run because the machine lacks what it needs (``error`` says what, e.g. NCCL without
#: GPUs).  A skipped variant is not a failure: the run's exit code stays 0.
STATUSES: tuple[str, ...] = (OK, FAILED, SKIPPED)


# ------------------------------------------------------------------------------------------
# Shared parts


@dataclass(frozen=True)
class StepStats(Record):
    """Median, p10, p90, min, max (seconds) and count of a list of step times."""

    median: float | None = meta(None, read=lambda f, k: step_seconds(f, k))  # each a step time: > 0, finite
    p10: float | None = meta(None, read=lambda f, k: step_seconds(f, k))
    p90: float | None = meta(None, read=lambda f, k: step_seconds(f, k))
    min: float | None = meta(None, read=lambda f, k: step_seconds(f, k))
    max: float | None = meta(None, read=lambda f, k: step_seconds(f, k))
    n: int = 0


#: The longest step time a record may hold (a step of 116 days is a wrongly typed record, and 1e308
#: made every other variant's speedup infinite).
MAX_STEP_S = 1e7
_NOT_A_STEP = f"must be a positive number of seconds (at most {MAX_STEP_S:g}), not the number {{!r}}"


def step_seconds(f: Fields, key: str) -> float | None:
    """A step time: a finite number of seconds, above 0 and at most :data:`MAX_STEP_S` (None: absent)."""
    value = f.number(key)
    if value is not None and not 0 < value <= MAX_STEP_S:
        f.fail(key, _NOT_A_STEP.format(value))
    return value


def step_seconds_list(f: Fields, key: str) -> tuple[float, ...] | None:
    """A list of step times, each as :func:`step_seconds` checks it."""
    values = f.numbers(key)
    for i, v in enumerate(values or ()):
        if not 0 < v <= MAX_STEP_S:
            raise RecordError(f.where, f.item(key, i), _NOT_A_STEP.format(v))
    return values


@dataclass(frozen=True)
class Topology(Record):
    """The devices a run used: ``kind`` is "gpu" or "logical-cpu"; names are canonical."""

    kind: str | None
    host: str | None
    accelerators: tuple[str, ...] = ()
    tensorflow: str | None = meta(None, omit=if_none)
    WHERE = "topology"

    @property
    def roles(self) -> dict[str, Any]:
        """``{"kind", "host", "accelerators"}``: what :func:`tfprof_towers.vocab.device_names.device_role`
        and ``link_kind`` read to tell a host from an accelerator."""
        return {"kind": self.kind, "host": self.host, "accelerators": list(self.accelerators)}


@dataclass(frozen=True)
class Timings(Record):
    """A variant's measured step times: the raw lists and their statistics."""

    step_time_s: StepStats | None = meta(None, omit=if_none)  # un-profiled: the ranking's basis
    profiled_step_time_s: StepStats | None = meta(None, omit=if_none)
    step_times_s: tuple[float, ...] | None = meta(None, omit=if_none,
                                                  read=lambda f, k: step_seconds_list(f, k))
    profiled_step_times_s: tuple[float, ...] | None = meta(None, omit=if_none,
                                                           read=lambda f, k: step_seconds_list(f, k))
    JSON_ORDER = ("step_times_s", "step_time_s", "profiled_step_times_s")

    @classmethod
    def from_fields(cls, f: Fields) -> Timings:
        """The timings, refused where a summary disagrees with its own list of steps (a median of no
        steps, or a median, min, max or count that is not the list's): :func:`check_summary`."""
        t = decode(cls, f)
        check_summary(f, "step_time_s", t.step_time_s, t.step_times_s)
        check_summary(f, "profiled_step_time_s", t.profiled_step_time_s, t.profiled_step_times_s)
        return t


def check_summary(f: Fields, key: str, stats: StepStats | None, times: tuple[float, ...] | None) -> None:
    """Refuse ``stats`` (``f``'s ``key``) that is not the summary of ``times``, where both are given: each
    of its median, min, max and count that is given must be the list's; a record without the list (an
    older writer) keeps its summary unchecked."""
    if times is None or stats is None:
        return
    if not times:
        if stats.median is not None or stats.n:
            listed = f.name(key.replace("step_time_s", "step_times_s"))
            f.fail(f"{key}.median", f"is {stats.median!r} (of {stats.n} step(s)), but {listed} is empty: a "
                                    "summary of no steps")
        return
    import numpy as np

    arr = np.asarray(times, dtype=float)
    want = {"median": float(np.median(arr)), "min": float(arr.min()), "max": float(arr.max())}
    for name, value in want.items():
        got = getattr(stats, name)
        if got is not None and not math.isclose(got, value, rel_tol=1e-6):
            f.fail(f"{key}.{name}", f"is {got!r}, but the record's own steps give {value!r}: a summary "
                                    "that is not of its steps")
    if stats.n and stats.n != len(times):
        f.fail(f"{key}.n", f"is {stats.n}, but the record's own list holds {len(times)} steps")


# ------------------------------------------------------------------------------------------
# Placement: an open-ended mapping (see capture.placement), checked where the code reads it


def check_devices(devices: Fields) -> None:
    """``devices``: per device its op count and FLOPs per step (a placement's, or a summary entry's)."""
    for dev in devices.data:
        check_fields(devices.obj(dev, required=True), ops="integer!", flops_per_step="number!")


def check_placement(f: Fields) -> None:
    """The fields of a record's ``placement`` that the analysis reads, type-checked."""
    f.obj_as("devices", check_devices)
    check_items(f, "transfers", src="text!", dst="text!", bytes_per_step="number!", tensors="integer")
    check_items(f, "nodes", name="text!", device="text!", flops="number")
    check_items(f, "edges", src="text!", dst="text!", bytes="number")


@dataclass(frozen=True)
class MathCheck(Record):
    """What the variant computed in its first training steps, to compare across variants:
    the loss of each step (before its update) and the step-1 global gradient norm
    (before clipping; see :mod:`tfprof_towers.capture.seed_values` for why both)."""

    losses: tuple[float, ...] = ()
    grad_norm: float | None = None
    random_ops: tuple[str, ...] = ()  # ops of the step that draw random numbers (a few): not comparable

    def to_json(self) -> dict[str, Any]:
        # A diverging model's NaN loss: null plus a "not_finite" flag (strict JSON; see rundir.nonfinite)
        doc = nonfinite.strict({"losses": list(self.losses), "grad_norm": self.grad_norm},
                               ("losses", "grad_norm"))
        return {**doc, "random_ops": list(self.random_ops)} if self.random_ops else doc

    @classmethod
    def from_fields(cls, f: Fields) -> MathCheck:
        return cls(nonfinite.read_numbers(f, "losses") or (), nonfinite.read_number(f, "grad_norm"),
                   f.texts("random_ops") if "random_ops" in f.data else ())


# ------------------------------------------------------------------------------------------
# variants/<name>/record.json


def check_cluster(f: Fields) -> None:
    """The fields of a cluster variant's ``cluster`` document that the analysis reads, type-checked."""
    check_fields(f, family="text!", loopback="flag", failed_task="text")
    check_items(f, "tasks", task="text!", address="text", status="text!", error="text", stage="text",
                pid="integer")
    check_items(f, "attempts", attempt="integer!", status="text!", error="text")


@dataclass(frozen=True)
class VariantRecord(Record):
    """What one variant's run produced: written by the capture child, completed by the runner
    (``returncode`` to ``xplane_files``, absent from the child's own record)."""

    name: str
    status: str = meta(choices=STATUSES)
    source: str = "builtin"  # "builtin" or "file:PATH"
    family: str | None = meta(None, omit=if_none)
    error: str | None = None
    stage: str | None = None  # the phase reached (or failed in)
    versions: Mapping[str, str | None] = field(default_factory=dict)
    topology: Topology | None = None
    timings: Timings = field(default_factory=Timings)
    placement: Mapping[str, Any] | None = meta(None, check=check_placement)
    math: MathCheck | None = meta(None, omit=if_none)
    pid: int | None = meta(None, omit=if_none)
    phases_s: Mapping[str, float] | None = meta(None, omit=if_none)
    profiler_options: Mapping[str, Any] | None = meta(None, omit=if_none)
    clock_unix: Mapping[str, float] | None = meta(None, omit=if_none)
    returncode: int | None = meta(None, omit=if_none)
    wall_s: float | None = meta(None, omit=if_none)
    process_s: Mapping[str, float] | None = meta(None, omit=if_none)
    stderr_tail: str | None = meta(None, omit=if_none)
    xplane_files: tuple[str, ...] | None = meta(None, omit=if_none)
    # a cluster variant: its tasks, attempts and capture; trace host file name -> task
    cluster: Mapping[str, Any] | None = meta(None, omit=if_none, check=check_cluster)
    host_tasks: Mapping[str, str] | None = meta(None, omit=if_none)
    schema: int = RECORD_SCHEMA
    WHERE = "record.json"
    JSON_ORDER = ("schema", "name", "source", "family")

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def median_step_s(self) -> float | None:
        st = self.timings.step_time_s
        return None if st is None else st.median

    @cached_property
    def placed(self) -> Placement | None:
        """The placement read as records (:class:`~.placement_doc.Placement`; None without one)."""
        return Placement.of(self.placement)

    @classmethod
    def failed(cls, name: str, error: str, source: str = "builtin", family: str | None = None,
               stage: str | None = None, **extra: Any) -> VariantRecord:
        """A record for a variant that produced none of its own (crashed, timed out, missing, corrupt)."""
        return cls(name=name, status=FAILED, source=source, family=family, error=error, stage=stage, **extra)


# ------------------------------------------------------------------------------------------
# run.json


def _variant_specs(f: Fields, key: str) -> tuple[VariantSpec, ...]:
    """run.json's ``{"name", "source", "family"}`` per variant (an old one without family: the registry's)."""
    return tuple(VariantSpec.from_source(v.text("name", required=True), v.text("source", default="builtin"),
                                         v.text("family")) for v in f.objects(key))


@dataclass(frozen=True)
class RunConfig(Record):
    """What the run was asked to do (``run.json`` -> ``config``)."""

    preset: Preset | None = None
    variants: tuple[VariantSpec, ...] = meta((), read=_variant_specs)
    accelerators: int | None = None
    warmup: int | None = None
    steps: int | None = None
    profile_steps: int | None = None
    variant_timeout_s: float | None = None
    out_dir: str | None = None
    keras_model: str | None = meta(None, omit=if_empty)  # --keras-model: the Keras file every variant trains
    cluster: ClusterOptions | None = meta(None, omit=if_none)  # --workers/--ps/--cluster

    @classmethod
    def from_options(cls, o: ProfileOptions) -> RunConfig:
        return cls(o.preset, tuple(o.variants), o.accelerators, o.warmup, o.steps, o.profile_steps,
                   o.variant_timeout_s, str(o.out_dir), o.keras_model, o.cluster)


@dataclass(frozen=True)
class RunDoc(Record):
    """``run.json``: the run's config, machine and versions, and how it ended."""

    started: str | None = None
    finished: str | None = None
    interrupted: bool = False
    interrupted_by: str | None = meta(None, omit=if_none)
    config: RunConfig | None = None
    topology: Topology | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    host: Mapping[str, str | None] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    started_local: str | None = None
    nvidia_smi_topo: str | None = None
    harness_s: Mapping[str, float] | None = meta(None, omit=if_none)
    stopped: str | None = meta(None, omit=if_none)  # "no space left on device while writing X"
    # How the TensorFlow children started: {"mode": "fork-server"|"fresh", "imports", "import_s",
    # "forked", "fresh", "threads", "not_used"} (procs/forkserver.py); None before this existed.
    tensorflow_starts: Mapping[str, Any] | None = meta(None, omit=if_none)
    tool: str = "tfprof-towers"
    schema: int = RUN_SCHEMA
    WHERE = "run.json"
    JSON_ORDER = ("schema", "tool", "started", "started_local", "finished", "interrupted", "interrupted_by",
                  "command", "config", "versions", "host", "topology")

    @property
    def preset(self) -> Preset | None:
        return None if self.config is None else self.config.preset

    @property
    def unfinished(self) -> bool:
        """Started but never finished: the profile was killed (SIGKILL, a crash) or still runs."""
        return self.started is not None and self.finished is None

    @property
    def partial(self) -> bool:
        """Not every variant had its chance: interrupted, or never finished."""
        return self.interrupted or self.unfinished

    @property
    def variants(self) -> tuple[VariantSpec, ...]:
        return () if self.config is None else self.config.variants


# ------------------------------------------------------------------------------------------
# variants/<name>/spec.json: what the parent asks of one capture child


@dataclass(frozen=True)
class ChildSpec(Record):
    """One variant's instructions to its capture child (``variants/<name>/spec.json``)."""

    name: str
    family: str
    file: str | None
    preset: Preset
    accelerators: int | None
    warmup: int
    steps: int
    profile_steps: int
    logdir: str
    record: str
    keras_model: str | None = None  # a Keras model file to train with model.fit (tf2-strategy only)
    cluster: ClusterOptions | None = None  # the cluster family's tasks (--workers/--ps/--cluster)
    timeout_s: float | None = None  # the variant's timeout (the cluster driver ends its tasks before it)
    schema: int = SPEC_SCHEMA
    WHERE = "spec.json"
    JSON_ORDER = ("schema",)

    @property
    def source(self) -> str:
        return f"file:{self.file}" if self.file else "builtin"


# ------------------------------------------------------------------------------------------
# Reading them from a run directory


def load_run(run_dir: RunDir) -> RunDoc:
    """``run.json``, strictly: a one-line error naming what is wrong (for commands that need it)."""
    if not run_dir.root.is_dir():
        raise TowersError(f"{run_dir.root}: no such run directory")
    if not run_dir.run_json.is_file():
        raise TowersError(f"{run_dir.root}: not a tfprof-towers run directory (no run.json)")
    return RunDoc.from_json(read_json(run_dir.run_json), str(run_dir.run_json))


def load_run_or_skip(run_dir: RunDir) -> tuple[RunDoc, tuple[str, ...]]:
    """``run.json`` for a report: when it is corrupt or wrongly typed, an empty one and the problem.

    The rest of the report then comes from the variant records found on disk.
    A directory without ``run.json`` is still not a run directory (one-line error).
    """
    try:
        return load_run(run_dir), ()
    except RecordError as exc:
        return RunDoc(), (f"{exc}; run.json was skipped",)
    except TowersError as exc:
        if not run_dir.run_json.is_file():
            raise
        return RunDoc(), (f"{exc}; run.json was skipped",)


def variant_names(run: RunDoc, run_dir: RunDir) -> list[str]:
    """Variants in the order the run asked for them, then any others found on disk."""
    asked = [v.name for v in run.variants]
    return asked + [n for n in run_dir.variant_names() if n not in asked]


def load_record(
    run_dir: RunDir, name: str, interrupted: bool = False, unfinished: bool = False,
    stopped: str | None = None,
) -> VariantRecord:
    """A variant's record; a failed stand-in (saying why) when it is missing, corrupt or invalid.

    ``unfinished``: the run never finished (its parent was killed), so a variant
    without a record either was running then (its ``spec.json`` exists) or never started.
    """
    path = run_dir.record_json(name)
    if not path.is_file():
        why = f"stopped: {stopped}" if stopped else _missing_why(run_dir, name, interrupted, unfinished)
        tail = textcap.file_tail(run_dir.stderr_txt(name)) if unfinished else ""
        return stand_in(name, why) if not tail else VariantRecord.failed(name, why, source="unknown",
                                                                          stderr_tail=tail)
    try:
        doc = read_json(path)
    except TowersError as exc:
        return stand_in(name, f"record.json is unreadable: {exc}")
    if not isinstance(doc, Mapping) or "status" not in doc:
        return stand_in(name, "record.json is corrupt: not a variant record")
    try:
        record = VariantRecord.from_json(doc, str(path))
    except RecordError as exc:
        return stand_in(name, f"record.json is invalid: {exc.detail}")
    if record.name != name:
        return stand_in(name, f"record.json is invalid: name is {describe(record.name)}, not its folder's")
    return record


def _missing_why(run_dir: RunDir, name: str, interrupted: bool, unfinished: bool) -> str:
    if interrupted:
        return "not run: the profile was interrupted first"
    if not unfinished:
        return "record.json is missing"
    if (run_dir.variant_dir(name) / "spec.json").is_file():
        return "did not finish: the profile stopped while it ran (run.json has no end time; killed?)"
    return "not run: the profile stopped first (run.json has no end time; killed?)"


def stand_in(name: str, why: str) -> VariantRecord:
    """The failed record that takes the place of one that cannot be used."""
    return VariantRecord.failed(name, why, source="unknown")


def load_records(run_dir: RunDir, run: RunDoc) -> dict[str, VariantRecord]:
    """Every variant's record (or its failed stand-in), in the run's order."""
    return {n: load_record(run_dir, n, run.interrupted, run.unfinished, run.stopped)
            for n in variant_names(run, run_dir)}
