"""Typed documents of the run directory: ``run.json`` and ``variants/<name>/record.json``.

Each document is a frozen dataclass with ``to_json()`` and ``from_json(doc, where)``
and a ``schema`` version.  ``from_json`` checks the type of every field the
code reads and raises :class:`RecordError` -- one line naming the file and the
field (``variants/x/record.json: timings.step_time_s.median must be a number,
not the string "fast"``) -- so a wrongly typed document is named and skipped
instead of crashing ``report``.  Large, open-ended payloads (a record's
placement nodes and edges) stay mappings, checked where the code reads them.

The summary's documents are in :mod:`tfprof_towers.rundir.summary`; the recommendation's
in :mod:`tfprof_towers.advice.recommend`.  Nothing here imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfprof_towers.rundir import nonfinite
from tfprof_towers.rundir.fields import Fields, RecordError, describe, drop_none
from tfprof_towers.rundir.paths import RunDir, read_json
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
class StepStats:
    """Median, p10, p90, min, max (seconds) and count of a list of step times."""

    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None
    n: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"median": self.median, "p10": self.p10, "p90": self.p90, "min": self.min, "max": self.max,
                "n": self.n}

    @classmethod
    def from_fields(cls, f: Fields) -> StepStats:
        return cls(step_seconds(f, "median"), step_seconds(f, "p10"), step_seconds(f, "p90"),
                   step_seconds(f, "min"), step_seconds(f, "max"), f.integer("n", default=0))


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
class Topology:
    """The devices a run used: ``kind`` is "gpu" or "logical-cpu"; names are canonical."""

    kind: str | None
    host: str | None
    accelerators: tuple[str, ...] = ()
    tensorflow: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "host": self.host, "accelerators": list(self.accelerators)}
        if self.tensorflow is not None:
            doc["tensorflow"] = self.tensorflow
        return doc

    @classmethod
    def from_fields(cls, f: Fields) -> Topology:
        return cls(f.text("kind"), f.text("host"), f.texts("accelerators"), f.text("tensorflow"))

    @classmethod
    def from_json(cls, doc: Any, where: str = "topology") -> Topology:
        return cls.from_fields(Fields.of(doc, where))




@dataclass(frozen=True)
class Timings:
    """A variant's measured step times: the raw lists and their statistics."""

    step_time_s: StepStats | None = None  # un-profiled: the ranking's basis
    profiled_step_time_s: StepStats | None = None
    step_times_s: tuple[float, ...] | None = None
    profiled_step_times_s: tuple[float, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {
            "step_times_s": None if self.step_times_s is None else list(self.step_times_s),
            "step_time_s": None if self.step_time_s is None else self.step_time_s.to_json(),
            "profiled_step_times_s": None if self.profiled_step_times_s is None
            else list(self.profiled_step_times_s),
            "profiled_step_time_s": None if self.profiled_step_time_s is None
            else self.profiled_step_time_s.to_json(),
        }
        return {k: v for k, v in doc.items() if v is not None}

    @classmethod
    def from_fields(cls, f: Fields | None) -> Timings:
        if f is None:
            return cls()
        return cls(f.obj_as("step_time_s", StepStats.from_fields),
                   f.obj_as("profiled_step_time_s", StepStats.from_fields),
                   step_seconds_list(f, "step_times_s"), step_seconds_list(f, "profiled_step_times_s"))


# ------------------------------------------------------------------------------------------
# Placement: an open-ended mapping (see capture.placement), checked where the code reads it


def check_devices(f: Fields) -> None:
    """``devices``: per device its op count and FLOPs per step (a placement's, or a summary entry's)."""
    devices = f.obj("devices")
    if devices is not None:
        for dev in devices.data:
            d = devices.obj(dev, required=True)
            d.integer("ops", required=True)
            d.number("flops_per_step", required=True)


def check_placement(f: Fields) -> Mapping[str, Any]:
    """The fields of a record's ``placement`` that the analysis reads, type-checked; the mapping itself."""
    check_devices(f)
    for t in f.objects("transfers"):
        t.text("src", required=True)
        t.text("dst", required=True)
        t.number("bytes_per_step", required=True)
        t.integer("tensors")
    for n in f.objects("nodes"):
        n.text("name", required=True)
        n.text("device", required=True)
        n.number("flops")
    for e in f.objects("edges"):
        e.text("src", required=True)
        e.text("dst", required=True)
        e.number("bytes")
    return f.data


@dataclass(frozen=True)
class MathCheck:
    """What the variant computed in its first training steps, to compare across variants:
    the loss of each step (before its update) and the step-1 global gradient norm
    (before clipping; see :mod:`tfprof_towers.capture.seed_values` for why both)."""

    losses: tuple[float, ...] = ()
    grad_norm: float | None = None

    def to_json(self) -> dict[str, Any]:
        # A diverging model's NaN loss: null plus a "not_finite" flag (strict JSON; see rundir.nonfinite)
        return nonfinite.strict({"losses": list(self.losses), "grad_norm": self.grad_norm},
                                ("losses", "grad_norm"))

    @classmethod
    def from_fields(cls, f: Fields) -> MathCheck:
        return cls(nonfinite.read_numbers(f, "losses") or (), nonfinite.read_number(f, "grad_norm"))


# ------------------------------------------------------------------------------------------
# variants/<name>/record.json


#: Record fields the parent adds after the child exits (absent from the child's own record).
_RUNNER_FIELDS = ("returncode", "wall_s", "process_s", "stderr_tail", "xplane_files")
_OPTIONAL = ("pid", "phases_s", "profiler_options", "clock_unix", "family", "math", "cluster", "host_tasks",
             *_RUNNER_FIELDS)


def check_cluster(f: Fields) -> Mapping[str, Any]:
    """The fields of a cluster variant's ``cluster`` document that the analysis reads, type-checked."""
    f.text("family", required=True)
    f.flag("loopback")
    f.text("failed_task")
    for t in f.objects("tasks"):
        t.text("task", required=True)
        t.text("address")
        t.text("status", required=True)
        t.text("error")
        t.text("stage")
        t.integer("pid")
    for a in f.objects("attempts"):
        a.integer("attempt", required=True)
        a.text("status", required=True)
        a.text("error")
    return f.data


@dataclass(frozen=True)
class VariantRecord:
    """What one variant's run produced: written by the capture child, completed by the runner."""

    name: str
    status: str  # STATUSES
    source: str = "builtin"  # "builtin" or "file:PATH"
    family: str | None = None
    error: str | None = None
    stage: str | None = None  # the phase reached (or failed in)
    versions: Mapping[str, str | None] = field(default_factory=dict)
    topology: Topology | None = None
    timings: Timings = field(default_factory=Timings)
    placement: Mapping[str, Any] | None = None
    math: MathCheck | None = None
    pid: int | None = None
    phases_s: Mapping[str, float] | None = None
    profiler_options: Mapping[str, Any] | None = None
    clock_unix: Mapping[str, float] | None = None
    returncode: int | None = None
    wall_s: float | None = None
    process_s: Mapping[str, float] | None = None
    stderr_tail: str | None = None
    xplane_files: tuple[str, ...] | None = None
    cluster: Mapping[str, Any] | None = None  # a cluster variant: its tasks, attempts and capture
    host_tasks: Mapping[str, str] | None = None  # trace host file name -> task (a cluster variant's)
    schema: int = RECORD_SCHEMA

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def median_step_s(self) -> float | None:
        st = self.timings.step_time_s
        return None if st is None else st.median

    def to_json(self) -> dict[str, Any]:
        doc = {
            "schema": self.schema, "name": self.name, "source": self.source, "family": self.family,
            "status": self.status, "error": self.error, "stage": self.stage, "versions": dict(self.versions),
            "topology": None if self.topology is None else self.topology.to_json(),
            "timings": self.timings.to_json(), "placement": self.placement,
            "math": None if self.math is None else self.math.to_json(), "pid": self.pid,
            "phases_s": None if self.phases_s is None else dict(self.phases_s),
            "profiler_options": None if self.profiler_options is None else dict(self.profiler_options),
            "clock_unix": None if self.clock_unix is None else dict(self.clock_unix),
            "returncode": self.returncode, "wall_s": self.wall_s,
            "process_s": None if self.process_s is None else dict(self.process_s),
            "stderr_tail": self.stderr_tail,
            "xplane_files": None if self.xplane_files is None else list(self.xplane_files),
            "cluster": None if self.cluster is None else dict(self.cluster),
            "host_tasks": None if self.host_tasks is None else dict(self.host_tasks),
        }
        return drop_none(doc, _OPTIONAL)

    @classmethod
    def from_json(cls, doc: Any, where: str = "record.json") -> VariantRecord:
        f = Fields.of(doc, where)
        placement = f.obj("placement")
        cluster = f.obj("cluster")
        host_tasks = f.text_map("host_tasks")
        return cls(
            name=f.text("name", required=True),
            status=f.choice("status", STATUSES, required=True),
            source=f.text("source", default="builtin"),
            family=f.text("family"),
            error=f.text("error"),
            stage=f.text("stage"),
            versions=f.text_map("versions"),
            topology=f.obj_as("topology", Topology.from_fields),
            timings=Timings.from_fields(f.obj("timings")),
            placement=None if placement is None else check_placement(placement),
            math=f.obj_as("math", MathCheck.from_fields),
            pid=f.integer("pid"),
            phases_s=f.number_map("phases_s"),
            profiler_options=f.mapping("profiler_options"),
            clock_unix=f.number_map("clock_unix"),
            returncode=f.integer("returncode"),
            wall_s=f.number("wall_s"),
            process_s=f.number_map("process_s"),
            stderr_tail=f.text("stderr_tail"),
            xplane_files=f.texts("xplane_files") if "xplane_files" in f.data else None,
            cluster=None if cluster is None else check_cluster(cluster),
            host_tasks={k: v for k, v in host_tasks.items() if v} if "host_tasks" in f.data else None,
            schema=f.integer("schema", default=RECORD_SCHEMA),
        )

    @classmethod
    def failed(cls, name: str, error: str, source: str = "builtin", family: str | None = None,
               stage: str | None = None, **extra: Any) -> VariantRecord:
        """A record for a variant that produced none of its own (crashed, timed out, missing, corrupt)."""
        return cls(name=name, status=FAILED, source=source, family=family, error=error, stage=stage, **extra)


# ------------------------------------------------------------------------------------------
# run.json


@dataclass(frozen=True)
class RunConfig:
    """What the run was asked to do (``run.json`` -> ``config``)."""

    preset: Preset | None = None
    variants: tuple[VariantSpec, ...] = ()
    accelerators: int | None = None
    warmup: int | None = None
    steps: int | None = None
    profile_steps: int | None = None
    variant_timeout_s: float | None = None
    out_dir: str | None = None
    keras_model: str | None = None  # --keras-model: the user's Keras file every variant trains
    cluster: ClusterOptions | None = None  # --workers/--ps/--cluster

    @classmethod
    def from_options(cls, o: ProfileOptions) -> RunConfig:
        return cls(o.preset, tuple(o.variants), o.accelerators, o.warmup, o.steps, o.profile_steps,
                   o.variant_timeout_s, str(o.out_dir), o.keras_model, o.cluster)

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "preset": None if self.preset is None else asdict(self.preset),
            "variants": [v.to_json() for v in self.variants],
            "accelerators": self.accelerators, "warmup": self.warmup, "steps": self.steps,
            "profile_steps": self.profile_steps, "variant_timeout_s": self.variant_timeout_s,
            "out_dir": self.out_dir, **({"keras_model": self.keras_model} if self.keras_model else {}),
            **({"cluster": self.cluster.to_json()} if self.cluster else {}),
        }

    @classmethod
    def from_fields(cls, f: Fields) -> RunConfig:
        preset = f.obj("preset")
        variants = []
        for v in f.objects("variants"):
            variants.append(VariantSpec.from_source(v.text("name", required=True),
                                                    v.text("source", default="builtin"), v.text("family")))
        return cls(
            preset=None if preset is None else preset_from_fields(preset),
            variants=tuple(variants),
            accelerators=f.integer("accelerators"),
            warmup=f.integer("warmup"), steps=f.integer("steps"), profile_steps=f.integer("profile_steps"),
            variant_timeout_s=f.number("variant_timeout_s"), out_dir=f.text("out_dir"),
            keras_model=f.text("keras_model"), cluster=cluster_options(f.obj("cluster")),
        )


def cluster_options(f: Fields | None) -> ClusterOptions | None:
    """``--workers/--ps/--cluster`` as saved in run.json or a child's spec.json."""
    if f is None:
        return None
    return ClusterOptions(workers=f.integer("workers", default=0), ps=f.integer("ps", default=0),
                          file=f.text("file"), attempts=f.integer("attempts", default=3))


def preset_from_fields(f: Fields) -> Preset:
    """A preset as saved in run.json; sizes required, the rest defaulting to :class:`Preset`'s."""
    base = Preset("", 0, 0)
    return Preset(
        name=f.text("name", required=True), batch=f.integer("batch", required=True),
        dim=f.integer("dim", required=True), blocks=f.integer("blocks", default=base.blocks),
        warmup=f.integer("warmup", default=base.warmup), steps=f.integer("steps", default=base.steps),
        profile_steps=f.integer("profile_steps", default=base.profile_steps),
        variant_timeout_s=f.number("variant_timeout_s", default=base.variant_timeout_s),
        description=f.text("description", default=""),
    )


@dataclass(frozen=True)
class RunDoc:
    """``run.json``: the run's config, machine and versions, and how it ended."""

    started: str | None = None
    finished: str | None = None
    interrupted: bool = False
    interrupted_by: str | None = None
    config: RunConfig | None = None
    topology: Topology | None = None
    versions: Mapping[str, str | None] = field(default_factory=dict)
    host: Mapping[str, str | None] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    started_local: str | None = None
    nvidia_smi_topo: str | None = None
    harness_s: Mapping[str, float] | None = None
    stopped: str | None = None  # "no space left on device while writing X": why files are missing
    tool: str = "tfprof-towers"
    schema: int = RUN_SCHEMA

    def to_json(self) -> dict[str, Any]:
        doc = {
            "schema": self.schema, "tool": self.tool, "started": self.started,
            "started_local": self.started_local, "finished": self.finished, "interrupted": self.interrupted,
            "interrupted_by": self.interrupted_by, "command": list(self.command),
            "config": None if self.config is None else self.config.to_json(),
            "versions": dict(self.versions), "host": dict(self.host),
            "topology": None if self.topology is None else self.topology.to_json(),
            "nvidia_smi_topo": self.nvidia_smi_topo,
            "harness_s": None if self.harness_s is None else dict(self.harness_s),
            "stopped": self.stopped,
        }
        return drop_none(doc, ("interrupted_by", "harness_s", "stopped"))

    @classmethod
    def from_json(cls, doc: Any, where: str = "run.json") -> RunDoc:
        f = Fields.of(doc, where)
        config = f.obj("config")
        return cls(
            started=f.text("started"), finished=f.text("finished"), interrupted=f.flag("interrupted"),
            interrupted_by=f.text("interrupted_by"),
            config=None if config is None else RunConfig.from_fields(config),
            topology=f.obj_as("topology", Topology.from_fields), versions=f.text_map("versions"),
            host=f.text_map("host"),
            command=f.texts("command"), started_local=f.text("started_local"),
            nvidia_smi_topo=f.text("nvidia_smi_topo"), harness_s=f.number_map("harness_s"),
            stopped=f.text("stopped"),
            tool=f.text("tool", default="tfprof-towers"), schema=f.integer("schema", default=RUN_SCHEMA),
        )

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
class ChildSpec:
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

    @property
    def source(self) -> str:
        return f"file:{self.file}" if self.file else "builtin"

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"schema": self.schema, "name": self.name, "family": self.family, "file": self.file,
                "preset": asdict(self.preset), "accelerators": self.accelerators, "warmup": self.warmup,
                "steps": self.steps, "profile_steps": self.profile_steps, "logdir": self.logdir,
                "record": self.record, "keras_model": self.keras_model,
                "cluster": None if self.cluster is None else self.cluster.to_json(),
                "timeout_s": self.timeout_s}

    @classmethod
    def from_json(cls, doc: Any, where: str = "spec.json") -> ChildSpec:
        f = Fields.of(doc, where)
        return cls(
            name=f.text("name", required=True), family=f.text("family", required=True), file=f.text("file"),
            preset=preset_from_fields(f.obj("preset", required=True)), accelerators=f.integer("accelerators"),
            warmup=f.integer("warmup", required=True), steps=f.integer("steps", required=True),
            profile_steps=f.integer("profile_steps", required=True), logdir=f.text("logdir", required=True),
            record=f.text("record", required=True), keras_model=f.text("keras_model"),
            cluster=cluster_options(f.obj("cluster")), timeout_s=f.number("timeout_s"),
            schema=f.integer("schema", default=SPEC_SCHEMA),
        )


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
