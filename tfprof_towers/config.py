"""Presets, built-in variant names and the options of one profile run.

Pure data: importing this module never imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import TowersError, VariantError


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
        matmuls of [batch*dim, dim] x [dim, dim].  For ``seed`` that is 2.18 TFLOP;
        design.md's "about 2.3" counts the pruned matmul too.
        """
        rows = self.batch * self.dim
        return (3 * self.blocks - 1) * 2.0 * rows * self.dim * self.dim


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "tiny", batch=4, dim=16, warmup=1, steps=3, profile_steps=2,
            variant_timeout_s=120.0, description="for tests: seconds per variant",
        ),
        Preset(
            "cpu", batch=16, dim=256, warmup=3, steps=20, profile_steps=3,
            variant_timeout_s=240.0,
            description="default without GPUs: all five variants in about 2 minutes on 2 cores",
        ),
        Preset(
            "seed", batch=64, dim=1000, warmup=3, steps=20, profile_steps=3,
            variant_timeout_s=1800.0,
            description="the original sizes (about 2.3 TFLOP per step): a GPU job",
        ),
    )
}


@dataclass(frozen=True)
class VariantInfo:
    """A built-in placement variant: its name and one-line description."""

    name: str
    description: str
    known_as: str


BUILTIN_VARIANTS: tuple[VariantInfo, ...] = (
    VariantInfo("single", "everything on accelerator 0", "the 'default version'"),
    VariantInfo(
        "towers_host_vars",
        "variables + optimizer on the host, one tower per accelerator, gradients averaged on the host",
        "inception multi-GPU tutorial; parameter_server with local_parameter_device=cpu; "
        "CentralStorageStrategy",
    ),
    VariantInfo(
        "towers_accel0_vars",
        "as towers_host_vars, but variables + update on accelerator 0",
        "parameter_server with local_parameter_device=gpu",
    ),
    VariantInfo(
        "towers_bug",
        "towers_host_vars with a stray host tf.device scope around the tower loss "
        "(forward on the host, gradients on the accelerators)",
        "the five-times-slower case",
    ),
    VariantInfo(
        "replicated",
        "a variable copy per accelerator, gradients all-reduced "
        "(NCCL on GPUs, add_n across devices otherwise)",
        "replicated / MirroredStrategy",
    ),
)
BUILTIN_NAMES: tuple[str, ...] = tuple(v.name for v in BUILTIN_VARIANTS)
BASELINE_VARIANT = "single"


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise TowersError(
            f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}"
        ) from None


@dataclass(frozen=True)
class VariantSpec:
    """One variant to run: a built-in name, or a user's variant file."""

    name: str
    file: str | None = None  # absolute path of a variant file; None for built-ins

    @property
    def source(self) -> str:
        return f"file:{self.file}" if self.file else "builtin"


def parse_variant_names(text: str | None) -> tuple[str, ...]:
    """``"a,b"`` -> ("a", "b"), each checked against the built-ins."""
    if text is None:
        return BUILTIN_NAMES
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise VariantError("--variants is empty; choose from: " + ", ".join(BUILTIN_NAMES))
    for n in names:
        if n not in BUILTIN_NAMES:
            raise VariantError(
                f"unknown variant {n!r}; built-in variants are: {', '.join(BUILTIN_NAMES)}"
            )
    if len(set(names)) != len(names):
        raise VariantError(f"--variants names a variant twice: {text}")
    return names


@dataclass(frozen=True)
class ProfileOptions:
    """Everything one `profile` run needs; saved into run.json as `config`."""

    preset: Preset
    variants: tuple[VariantSpec, ...]
    accelerators: int = 2
    warmup: int = 2
    steps: int = 10
    profile_steps: int = 3
    variant_timeout_s: float = 300.0
    out_dir: Path = field(default_factory=lambda: Path("reports"))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        d["variants"] = [{"name": v.name, "source": v.source} for v in self.variants]
        return d
