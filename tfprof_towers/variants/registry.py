"""The one registry of variant families and built-in variants (pure data).

A **family** is a dialect in which a training step is written and run:
``tf1-graph`` (``build_variant(devices)`` -> ``(fetches, feed_dict)`` in a
``tf.compat.v1.Session``), ``tf2-strategy`` (a ``tf.distribute`` strategy and
``build_step(strategy, devices)`` -> a ``tf.function`` step, or a Keras model
under ``model.fit``) and ``cluster`` (task processes of TensorFlow's distributed
runtime, each with its ``TF_CONFIG``; design.md, "Variant families").
Each family names the module that runs one of its variants inside the capture
child (``capture/families/<family>.py``, a ``run(spec, draft)`` function) and the
function a user's variant file of that family defines.

A **built-in variant** belongs to one family and says what it is (description,
known-as), how simple it is (the recommender prefers the simpler of two
variants within noise: :mod:`tfprof_towers.advice.recommend`), whether it is its
family's baseline (speedups are "vs" it), what it needs to run, and where its
builder is (``"module:function"``, imported only in the child).  Nothing else branches on
variant names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TF1_GRAPH = "tf1-graph"
TF2_STRATEGY = "tf2-strategy"
CLUSTER = "cluster"

#: What a variant may need from the machine, and how to say it.
NEEDS: dict[str, str] = {
    "gpu": "real GPUs (not logical CPU devices)",
    "nccl": "NCCL, which has kernels only on GPUs",
    "multi-process": "several task processes (a cluster)",
}

#: Simplicity of a user's variant file: as much machinery as the towers variants.
USER_SIMPLICITY = 2


@dataclass(frozen=True)
class Family:
    """A dialect of variants and the child-side runner that runs them."""

    key: str
    title: str
    runner: str  # module with ``run(spec, draft)``, imported only in the capture child
    file_function: str  # what a variant file of this family defines
    file_signature: str

    def load_runner(self) -> Any:
        return importlib.import_module(self.runner)


@dataclass(frozen=True)
class Variant:
    """One built-in variant."""

    name: str
    family: str
    description: str
    known_as: str
    simplicity: int  # lower is simpler; the recommender prefers simpler within noise
    builder: str  # "module:function", resolved lazily (the module imports TensorFlow)
    baseline: bool = False  # the family's reference: speedups and scaling are measured against it
    needs: tuple[str, ...] = ()  # keys of NEEDS

    def load_builder(self) -> Any:
        return resolve(self.builder)


FAMILIES: dict[str, Family] = {
    f.key: f
    for f in (
        Family(TF1_GRAPH, "a tf.compat.v1 graph run in a Session, placed with tf.device",
               runner="tfprof_towers.capture.families.tf1_graph", file_function="build_variant",
               file_signature="build_variant(devices) -> (fetches, feed_dict)"),
        Family(TF2_STRATEGY, "a tf.function step under a tf.distribute strategy",
               runner="tfprof_towers.capture.families.tf2_strategy", file_function="build_step",
               file_signature="build_step(strategy, devices) -> tf.function (+ build_strategy(devices))"),
        # A build_step file is a tf2-strategy variant; with --workers it runs as a cluster one.
        Family(CLUSTER, "task processes of TensorFlow's distributed runtime (TF_CONFIG), every task "
                        "captured; run with profile --workers N [--ps M] or --cluster FILE",
               runner="tfprof_towers.capture.cluster.driver", file_function="build_step",
               file_signature="build_step(strategy, devices) -> tf.function, run under "
                              "MultiWorkerMirroredStrategy (with --workers)"),
    )
}

_TF1 = "tfprof_towers.capture.tf1.builders"

TF1_BUILTINS: tuple[Variant, ...] = (
    Variant("single", TF1_GRAPH, "everything on accelerator 0", "the 'default version'",
            simplicity=0, builder=f"{_TF1}:build_single", baseline=True),
    Variant("towers_host_vars", TF1_GRAPH,
            "variables + optimizer on the host, one tower per accelerator, gradients averaged on the host",
            "inception multi-GPU tutorial; parameter_server with local_parameter_device=cpu; "
            "CentralStorageStrategy",
            simplicity=1, builder=f"{_TF1}:build_towers_host_vars"),
    Variant("towers_accel0_vars", TF1_GRAPH, "as towers_host_vars, but variables + update on accelerator 0",
            "parameter_server with local_parameter_device=gpu",
            simplicity=1, builder=f"{_TF1}:build_towers_accel0_vars"),
    Variant("towers_bug", TF1_GRAPH,
            "towers_host_vars with a stray host tf.device scope around the tower loss "
            "(forward on the host, gradients on the accelerators)",
            "the five-times-slower case",
            simplicity=9, builder=f"{_TF1}:build_towers_bug"),  # never preferred as "simpler"
    Variant("replicated", TF1_GRAPH,
            "a variable copy per accelerator, gradients all-reduced "
            "(NCCL on GPUs, add_n across devices otherwise)",
            "replicated / MirroredStrategy",
            simplicity=2, builder=f"{_TF1}:build_replicated"),
)

_TF2 = "tfprof_towers.capture.tf2.strategies"

#: The tf2-strategy built-ins: the seed step (capture/seed_step.py) under each strategy.
#: Simplicity: one device; the default MirroredStrategy (one line); an explicit
#: cross_device_ops argument or the experimental CentralStorageStrategy.
TF2_BUILTINS: tuple[Variant, ...] = (
    Variant("one_device", TF2_STRATEGY, "OneDeviceStrategy on accelerator 0",
            "tf.distribute.OneDeviceStrategy; the single-GPU Keras default",
            simplicity=0, builder=f"{_TF2}:one_device", baseline=True),
    Variant("mirrored", TF2_STRATEGY,
            "MirroredStrategy with TensorFlow's default cross-device ops for the machine "
            "(collective all-reduce: NCCL on GPUs, a ring on CPUs)",
            "tf.distribute.MirroredStrategy()", simplicity=1, builder=f"{_TF2}:mirrored"),
    Variant("mirrored_nccl", TF2_STRATEGY, "MirroredStrategy with NcclAllReduce",
            "MirroredStrategy(cross_device_ops=NcclAllReduce())",
            simplicity=2, builder=f"{_TF2}:mirrored_nccl", needs=("nccl",)),
    Variant("mirrored_hierarchical", TF2_STRATEGY,
            "MirroredStrategy with HierarchicalCopyAllReduce (made for DGX-1's NVLink topology)",
            "MirroredStrategy(cross_device_ops=HierarchicalCopyAllReduce())",
            simplicity=2, builder=f"{_TF2}:mirrored_hierarchical"),
    Variant("mirrored_reduce_host", TF2_STRATEGY,
            "MirroredStrategy with ReductionToOneDevice on the host: gradients summed on the host, "
            "sent back to every replica",
            "MirroredStrategy(cross_device_ops=ReductionToOneDevice(host))",
            simplicity=2, builder=f"{_TF2}:mirrored_reduce_host"),
    Variant("central_storage", TF2_STRATEGY,
            "CentralStorageStrategy: variables and their update on the host, compute on every accelerator",
            "tf.distribute.experimental.CentralStorageStrategy; towers_host_vars in TF2",
            simplicity=2, builder=f"{_TF2}:central_storage"),
)

_CLUSTER = "tfprof_towers.capture.cluster.task"

#: The cluster built-ins: the seed step in task processes on TensorFlow's gRPC runtime, one
#: process per task with its TF_CONFIG (capture/families/cluster.py).  They run only when asked
#: for (profile --workers N [--ps M], or --cluster FILE): never in the default profile.
CLUSTER_BUILTINS: tuple[Variant, ...] = (
    Variant("multi_worker", CLUSTER,
            "MultiWorkerMirroredStrategy: one replica per worker task, gradients all-reduced across tasks "
            "(a ring on CPUs, NCCL where the tasks have GPUs)",
            "tf.distribute.MultiWorkerMirroredStrategy", simplicity=1, builder=f"{_CLUSTER}:run_multi_worker",
            baseline=True, needs=("multi-process",)),
    Variant("parameter_server", CLUSTER,
            "ParameterServerStrategy: variables on the ps tasks, the chief's ClusterCoordinator schedules "
            "one step closure per worker (each on its shard of the batch)",
            "tf.distribute.experimental.ParameterServerStrategy + ClusterCoordinator",
            simplicity=2, builder=f"{_CLUSTER}:run_chief", needs=("multi-process",)),
)

#: Every single-machine built-in, families in registry order: what a profile runs by default.
BUILTINS: tuple[Variant, ...] = TF1_BUILTINS + TF2_BUILTINS
#: Every built-in, the cluster's too.
ALL_BUILTINS: tuple[Variant, ...] = BUILTINS + CLUSTER_BUILTINS

BY_NAME: dict[str, Variant] = {v.name: v for v in ALL_BUILTINS}
BUILTIN_NAMES: tuple[str, ...] = tuple(v.name for v in BUILTINS)
CLUSTER_NAMES: tuple[str, ...] = tuple(v.name for v in CLUSTER_BUILTINS)


def names(family_key: str) -> tuple[str, ...]:
    """The built-ins of one family, in registry order."""
    return tuple(v.name for v in ALL_BUILTINS if v.family == family_key)


def resolve(ref: str) -> Any:
    """``"package.module:attr"`` -> the object (imports the module)."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise ValueError(f"not a 'module:attribute' reference: {ref!r}")
    return getattr(importlib.import_module(module), attr)


def builtin(name: str) -> Variant | None:
    return BY_NAME.get(name)


def builtin_of(name: str, family_key: str) -> Variant:
    """The built-in variant ``name`` of the family ``family_key`` (a runner's or builder's lookup)."""
    known = BY_NAME.get(name)
    if known is None or known.family != family_key:
        raise KeyError(f"{name!r} is not a built-in {family_key} variant")
    return known


def family(key: str) -> Family:
    try:
        return FAMILIES[key]
    except KeyError:
        raise KeyError(f"unknown variant family {key!r}; known: {', '.join(FAMILIES)}") from None


def is_builtin_source(source: str | None) -> bool:
    return source in (None, "builtin")


def lookup(name: str, source: str | None = "builtin") -> Variant | None:
    """The built-in behind a run's variant: only when it came from the registry, not a file."""
    return BY_NAME.get(name) if is_builtin_source(source) else None


def simplicity(name: str, source: str | None = "builtin") -> int:
    v = lookup(name, source)
    return v.simplicity if v is not None else USER_SIMPLICITY


def is_baseline(name: str, source: str | None = "builtin") -> bool:
    v = lookup(name, source)
    return bool(v and v.baseline)


def baseline(family_key: str = TF1_GRAPH) -> Variant:
    """The baseline variant of a family (its single-device reference)."""
    found = [v for v in ALL_BUILTINS if v.family == family_key and v.baseline]
    if len(found) != 1:
        raise LookupError(f"family {family_key!r} has {len(found)} baselines")
    return found[0]


def baseline_name(family_key: str = TF1_GRAPH) -> str:
    return baseline(family_key).name


def family_of(entry: Mapping[str, Any] | None) -> str:
    """A summary entry's family (tf1-graph where it names none: records from before families)."""
    return (entry or {}).get("family") or TF1_GRAPH


def baseline_of(entry: Mapping[str, Any] | None) -> str:
    """The name of the baseline that ``entry``'s speedups are over (its family's)."""
    return baseline_name(family_of(entry))


def by_family(variants: Iterable[Variant] = BUILTINS) -> dict[str, tuple[Variant, ...]]:
    """Built-ins grouped by family, families in registry order."""
    variants = tuple(variants)
    return {k: tuple(v for v in variants if v.family == k) for k in FAMILIES
            if any(v.family == k for v in variants)}


def unmet_needs(needs: Iterable[str], available: Iterable[str]) -> tuple[str, ...]:
    """What of ``needs`` (a variant's) the machine lacks (``available``: keys of NEEDS)."""
    have = set(available)
    return tuple(n for n in needs if n not in have)


def skip_reason(needs: Iterable[str], offers: Iterable[str], kind: str | None,
                accelerators: Sequence[str]) -> str | None:
    """Why a variant that ``needs`` these cannot run where the machine ``offers`` those (one line), or None.

    ``kind`` and ``accelerators`` are the run's topology (``"gpu"`` or ``"logical-cpu"``, canonical names).
    """
    missing = unmet_needs(needs, offers)
    if not missing:
        return None
    what = "; ".join(f"needs {NEEDS[n]}" for n in missing)
    listed = ", ".join(accelerators)
    if kind == "logical-cpu":
        here = f"the accelerators here are logical CPU devices ({listed})"
    elif "nccl" in missing and len(accelerators) < 2:
        here = f"NCCL needs at least two GPUs; this run has {len(accelerators)} ({listed})"
    elif "nccl" in missing:
        here = "this TensorFlow build registers no GPU kernel for NcclAllReduce"
    else:
        here = f"the accelerators here are {listed}"
    return f"{what}; {here}"


def _check() -> None:
    for v in ALL_BUILTINS:
        if v.family not in FAMILIES:
            raise AssertionError(f"{v.name}: unknown family {v.family!r}")
        if not set(v.needs) <= set(NEEDS):
            raise AssertionError(f"{v.name}: unknown needs {sorted(set(v.needs) - set(NEEDS))}")
    for key in {v.family for v in ALL_BUILTINS}:
        baseline(key)


_check()
