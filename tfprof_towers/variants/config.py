"""Presets, the variants one run asks for, and the options of one profile run (pure data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tfprof_towers.variants import registry
from tfprof_towers.variants.registry import BUILTIN_NAMES
from tfprof_towers.vocab.errors import TowersError, VariantError


@dataclass(frozen=True)
class Preset:
    """Sizes of the seed workload (design.md): input [batch, dim, dim], `blocks` layers."""

    name: str
    batch: int
    dim: int
    blocks: int = 6
    warmup: int = 2
    steps: int = 10
    profile_steps: int = 3
    variant_timeout_s: float = 300.0
    description: str = ""

    def flops_per_step(self) -> float:
        """MatMul FLOPs one step executes (2 FLOPs per multiply-add).

        Per block a forward matmul and the weight gradient, plus the input gradient
        for every block but the first (``tf.gradients`` prunes that one): 3*blocks - 1
        matmuls of [batch*dim, dim] x [dim, dim].  For ``seed`` that is 2.18 TFLOP
        (the projection, which counts the element-wise ops too, 2.178: docs/projection.md).
        """
        rows = self.batch * self.dim
        return (3 * self.blocks - 1) * 2.0 * rows * self.dim * self.dim


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("tiny", batch=4, dim=16, warmup=1, steps=3, profile_steps=2, variant_timeout_s=120.0,
               description="for tests: seconds per variant"),
        Preset("cpu", batch=16, dim=256, warmup=3, steps=20, profile_steps=3, variant_timeout_s=240.0,
               description="default without GPUs: every built-in (TF1 and TF2); how long it takes: "
                           "docs/benchmarks.md"),
        Preset("seed", batch=64, dim=1000, warmup=3, steps=20, profile_steps=3, variant_timeout_s=1800.0,
               description="the original sizes, a GPU job (its FLOPs per step: docs/projection.md)"),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise TowersError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None


@dataclass(frozen=True)
class VariantSpec:
    """One variant to run: a built-in name, or a user's variant file, and its family."""

    name: str
    file: str | None = None  # absolute path of a variant file; None for built-ins
    family: str = registry.TF1_GRAPH

    @classmethod
    def builtin(cls, name: str) -> VariantSpec:
        v = registry.builtin(name)
        if v is None:
            raise unknown_variant(name)
        return cls(name, None, v.family)

    @classmethod
    def from_source(cls, name: str, source: str, family: str | None = None) -> VariantSpec:
        """From run.json's ``{"name", "source", "family"}`` (``source``: "builtin" or "file:PATH")."""
        file = source[len("file:"):] if source.startswith("file:") else None
        if family is None:
            known = registry.lookup(name, source)
            family = known.family if known else registry.TF1_GRAPH
        return cls(name, file, family)

    @property
    def source(self) -> str:
        return f"file:{self.file}" if self.file else "builtin"

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "source": self.source, "family": self.family}


def unknown_variant(name: str) -> VariantError:
    """The one-line error for a name that is no built-in variant (the built-ins listed)."""
    return VariantError(f"unknown variant {name!r}; built-in variants are: {', '.join(BUILTIN_NAMES)}")


def parse_variant_names(text: str | None, family: str | None = None) -> tuple[str, ...]:
    """``"a,b"`` -> ("a", "b"), each checked against the built-ins (of ``family`` when given).

    ``None`` means every built-in (of ``family``): the TF1 and TF2 families side by side.
    """
    if family is not None:
        allowed = registry.names(family)
        names = allowed if text is None else _split_names(text)
        unknown = [n for n in names if registry.builtin(n) is None]
        if unknown:
            raise unknown_variant(unknown[0])
        others = [n for n in names if n not in allowed]
        if others:
            fam = registry.builtin(others[0]).family  # type: ignore[union-attr]
            raise VariantError(f"{others[0]} is a {fam} variant; with this option choose among the "
                               f"{family} variants: {', '.join(allowed)}")
        return names
    if text is None:
        return BUILTIN_NAMES
    names = _split_names(text)
    for n in names:
        if n in registry.CLUSTER_NAMES:
            raise VariantError(f"{n} is a cluster variant: it runs with --workers N [--ps M] (tasks on this "
                               "machine) or --cluster FILE (tasks you start on each machine)")
        if n not in BUILTIN_NAMES:
            raise unknown_variant(n)
    if len(set(names)) != len(names):
        raise VariantError(f"--variants names a variant twice: {text}")
    return names


#: Most task processes of a loopback cluster (each imports TensorFlow on this machine).
MAX_LOOPBACK_TASKS = 16


@dataclass(frozen=True)
class ClusterOptions:
    """A cluster run: ``--workers N [--ps M]`` on this machine's loopback, or ``--cluster FILE``
    (tasks started on each machine with ``tfprof-towers worker``; ``file`` is absolute)."""

    workers: int = 0
    ps: int = 0
    file: str | None = None
    attempts: int = 3  # attempts when another may succeed (loopback: fresh ports each)

    @property
    def attached(self) -> bool:
        return self.file is not None


def _split_names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise VariantError("--variants is empty; choose from: " + ", ".join(BUILTIN_NAMES))
    return names


@dataclass(frozen=True)
class ProfileOptions:
    """Everything one `profile` run needs; saved into run.json as `config` (``records.RunConfig``)."""

    preset: Preset
    variants: tuple[VariantSpec, ...]
    accelerators: int | None = 2  # None: every GPU, or 2 logical CPU devices without GPUs
    warmup: int = 2
    steps: int = 10
    profile_steps: int = 3
    variant_timeout_s: float | None = 300.0  # None: no limit
    out_dir: Path = field(default_factory=lambda: Path("reports"))
    keras_model: str | None = None  # absolute path of a --keras-model file (tf2-strategy variants only)
    cluster: ClusterOptions | None = None  # --workers/--ps/--cluster: the cluster variants


# ---------------------------------------------------------------------------------------------
# What `profile` projects on when the accelerators are stand-ins (tfprof_towers/project)

#: The profile a run on logical CPU devices is projected on when ``--project-on`` names none:
#: two mid-range GPUs on PCIe 3.0 x8 each without peer access, the machine of the classic
#: "two GPUs are slower than one" report (docs/recommendation.md).
CPU_ONLY_HARDWARE = "2x-gtx1060-pcie3"
#: The multi-host profile a cluster run without GPUs is projected on unless ``--project-on``
#: says otherwise: hosts of 8 A100s on 100 Gb/s Ethernet (the built-in multi-host profile).
CPU_ONLY_CLUSTER_HARDWARE = "8x-a100-100gbe"
#: The preset ``profile`` projects at unless ``--project-preset`` says otherwise: the seed's sizes.
PROJECT_PRESET = "seed"
