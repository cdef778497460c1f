"""The ``precision`` rule: compute runs mostly in 32-bit kernels, told from the kernels' names."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tfprof_towers.advice.findings import Finding, Rule
from tfprof_towers.advice.trace_rules.suggestions import suggestion
from tfprof_towers.trace.facts import _PS, TraceFacts
from tfprof_towers.vocab.fmt import fmt_percent, fmt_seconds

# float32: 32-bit.  ``s884``/``s1688``/``s16816`` are tensor-core GEMMs with 16-bit inputs and
# float32 accumulation (``volta_fp16_s884gemm_fp16_...``), ``h884``/``h1688`` the same accumulating
# in 16 bits: both count as 16-bit compute.
_TF32 = re.compile(r"tf32", re.IGNORECASE)
_16 = re.compile(r"hgemm|hcudnn|h884|h1688|h16816|s884|s1688|s16816|fp16|bf16|float16|f16|half|hmma",
                 re.IGNORECASE)
_32 = re.compile(r"sgemm|scudnn|fp32|f32|float", re.IGNORECASE)


def kernel_precision(name: str) -> str:
    """``"16"``, ``"32"`` or ``""`` (the name does not tell) for one kernel name."""
    if _TF32.search(name):
        return "32"
    if _16.search(name):
        return "16"
    if _32.search(name):
        return "32"
    return ""


@dataclass(frozen=True)
class Precision:
    compute_s: float
    by_bits: dict[str, float]  # "16" / "32" / "" -> seconds of compute kernels
    examples: dict[str, list[str]]  # a few kernel names of each kind (most time first)

    @property
    def known_share(self) -> float:
        return (self.by_bits["16"] + self.by_bits["32"]) / self.compute_s if self.compute_s else 0.0


def precision_of(f: TraceFacts) -> Precision:
    """The compute kernels' time by the precision their names tell (``f.kernel_ps``: most time first)."""
    bits = np.array([kernel_precision(n) for n, _ in f.kernel_ps], dtype=object)
    ps = np.array([v for _, v in f.kernel_ps], dtype=np.int64)
    by_bits = {b: float(int(ps[bits == b].sum()) / _PS) if ps.size else 0.0 for b in ("16", "32", "")}
    examples = {b: [n for (n, _), k in zip(f.kernel_ps, bits.tolist()) if k == b][:3] for b in ("16", "32")}
    return Precision(int(ps.sum()) / _PS, by_bits, examples)


def check_precision(rule: Rule, f: TraceFacts) -> Finding | None:
    p = precision_of(f)
    known = p.by_bits["16"] + p.by_bits["32"]
    if known <= 0:
        return None
    fp32 = p.by_bits["32"] / known
    if fp32 < rule.param("min_fp32_share"):
        return None
    examples = ", ".join(_short(n) for n in p.examples["32"])
    msg = (f"{fmt_percent(fp32)} of the compute time whose kernel names tell their precision ran in 32-bit "
           f"kernels ({fmt_seconds(p.by_bits['32'])}, e.g. {examples}), "
           f"{fmt_percent(1 - fp32)} in 16-bit; the names tell for {fmt_percent(p.known_share)} of "
           f"{fmt_seconds(p.compute_s)} of kernel time")
    text = suggestion("precision", f.producer)
    evidence = {"fp32_share_of_known": fp32, "seconds": {"16": p.by_bits["16"], "32": p.by_bits["32"],
                                                          "unknown": p.by_bits[""]},
                "compute_s": p.compute_s, "known_share": p.known_share, "examples": p.examples}
    return Finding(rule.name, rule.severity, f.name, msg, text, evidence, (), f.working)


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"

