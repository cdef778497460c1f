"""Runners of the variant families, one module per family (named in :mod:`tfprof_towers.variants.registry`).

A runner module defines ``run(spec, draft)``: inside the capture child it builds, warms up,
records placement, then runs :func:`timed_then_profiled`, filling ``draft`` as each phase
completes -- so that a failure keeps what was done -- and ends with ``draft.status = "ok"``.
A variant the machine cannot run (NCCL without GPUs) ends early with ``draft.skip(reason)``:
status ``skipped``, the reason in the record's ``error``, exit code 0.

This package's ``__init__`` never imports TensorFlow; the runner modules do.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from tfprof_towers.capture.stats import step_stats
from tfprof_towers.rundir.records import (
    FAILED,
    SKIPPED,
    ChildSpec,
    MathCheck,
    Timings,
    Topology,
    VariantRecord,
)
from tfprof_towers.vocab import phase

#: Profiler settings: host ops (level 2: TF ops, which the analysis needs to attribute
#: CPU-device ops; not every runtime detail), no Python tracer, device (CUDA) tracer on.
#: `make bench` measures them against the alternatives: on the cpu preset every
#: variant's profiled / un-profiled median step time stays within 1.05 (about 1.01).
PROFILER_OPTIONS = {"host_tracer_level": 2, "python_tracer_level": 0, "device_tracer_level": 1}

T = TypeVar("T")


class Phases:
    """Wall time of each named phase, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def run(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


@dataclass
class Draft:
    """The record under construction in the child (mutable on purpose: see the module docstring)."""

    stage: str = "start"
    status: str = FAILED
    versions: dict[str, str | None] = field(default_factory=lambda: {"python": platform.python_version()})
    topology: Topology | None = None
    timings: Timings = field(default_factory=Timings)
    placement: Mapping[str, Any] | None = None
    math: MathCheck | None = None
    profiler_options: Mapping[str, Any] | None = None
    phases: Phases = field(default_factory=Phases)
    skip_reason: str | None = None
    cluster: Mapping[str, Any] | None = None  # the cluster family: tasks, attempts, capture
    host_tasks: Mapping[str, str] | None = None  # the cluster family: trace host file -> task

    def skip(self, reason: str) -> None:
        """The machine lacks what the variant needs: it is skipped (not failed), saying why."""
        self.status, self.skip_reason, self.stage = SKIPPED, reason, "skipped"

    def record(self, spec: ChildSpec, error: str | None, pid: int,
               clock_unix: Mapping[str, float] | None = None) -> VariantRecord:
        return VariantRecord(
            name=spec.name, status=self.status, source=spec.source, family=spec.family,
            error=error if error is not None else self.skip_reason,
            stage=self.stage, versions=dict(self.versions), topology=self.topology, timings=self.timings,
            placement=self.placement, math=self.math, pid=pid, phases_s=dict(self.phases.seconds),
            profiler_options=None if self.profiler_options is None else dict(self.profiler_options),
            clock_unix=None if clock_unix is None else dict(clock_unix),
            cluster=None if self.cluster is None else dict(self.cluster),
            host_tasks=None if self.host_tasks is None else dict(self.host_tasks),
        )


def import_tensorflow() -> Any:
    """TensorFlow, its INFO and WARNING logs off unless the user's environment says otherwise."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def timed_calls(call: Callable[[], Any], n: int, marker: Any = None) -> list[float]:
    """Each wall time of ``n`` calls of ``call`` (one step, its result waited for); with ``marker``
    (``tf.profiler.experimental.Trace``) each inside a ``train`` step marker."""
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        if marker is None:
            call()
        else:
            with marker("train", step_num=i, _r=1):
                call()
        times.append(time.perf_counter() - t0)
    return times


def timed_then_profiled(tf: Any, spec: ChildSpec, draft: Draft, call: Callable[[], Any]) -> None:
    """A runner's last phases: timed calls without the profiler, then profiled ones with step markers."""
    phases = draft.phases
    draft.stage = "timed"
    times = phases.run(phase.TIMED, timed_calls, call, spec.steps)
    draft.timings = replace(draft.timings, step_times_s=tuple(times), step_time_s=step_stats(times))

    draft.stage = "profiled"
    profiler = tf.profiler.experimental
    options = profiler.ProfilerOptions(**PROFILER_OPTIONS)
    phases.run(phase.PROFILER_START, profiler.start, spec.logdir, options=options)
    try:
        ptimes = phases.run(phase.PROFILED, timed_calls, call, spec.profile_steps, profiler.Trace)
    finally:
        phases.run(phase.COLLECT, profiler.stop)
    draft.timings = replace(draft.timings, profiled_step_times_s=tuple(ptimes),
                            profiled_step_time_s=step_stats(ptimes))
    draft.profiler_options = dict(PROFILER_OPTIONS)
