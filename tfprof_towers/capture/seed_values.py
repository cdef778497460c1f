"""The seed workload's initial values and input batch, generated once with numpy.

Every variant of a run starts from these values and trains on this batch, so their losses
must agree: a placement that changes what is computed is a finding, not a speed-up.
Variables are *loaded* with them after initialisation (never baked into the graph as
constants: at the ``seed`` preset they are 24 MB).  Numpy only, so the parent, tests and any
child can make them.  :func:`reference_steps` is an independent float64 numpy version of the
seed step, the oracle the tests compare every family against.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: The seed of the input batch; the weights use ``SEED + 1``.
SEED = 0
LEARNING_RATE = 1e-4
BETA1 = 0.5
BETA2 = 0.9
EPSILON = 1e-8  # tf.compat.v1.train.AdamOptimizer's default
CLIP_NORM = 5.0


@dataclass(frozen=True)
class SeedValues:
    """Input batch and initial parameters of the seed workload."""

    x: np.ndarray  # [batch, dim, dim] float32
    weights: tuple[np.ndarray, ...]  # blocks x [dim, dim] float32, glorot-uniform
    biases: tuple[np.ndarray, ...]  # blocks x [dim] float32, zeros

    @property
    def params(self) -> list[np.ndarray]:
        """(W, b) per block, in block order (the order of ``workload.Params.all``)."""
        return [a for pair in zip(self.weights, self.biases) for a in pair]


def glorot_uniform(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


def seed_values(batch: int, dim: int, blocks: int, seed: int = SEED) -> SeedValues:
    """The batch from ``default_rng(seed)`` (standard normal); glorot-uniform weights from ``seed + 1``."""
    x = np.random.default_rng(seed).standard_normal((batch, dim, dim), dtype=np.float32)
    rng = np.random.default_rng(seed + 1)
    weights = tuple(glorot_uniform(rng, dim, dim) for _ in range(blocks))
    biases = tuple(np.zeros(dim, np.float32) for _ in range(blocks))
    return SeedValues(x, weights, biases)


@lru_cache(maxsize=2)
def shared_seed_values(batch: int, dim: int, blocks: int) -> SeedValues:
    """:func:`seed_values` made once per process and sizes (read-only arrays): every variant
    builder of a child shares them.  At the ``seed`` preset the batch alone is 256 MB and
    takes seconds to draw."""
    v = seed_values(batch, dim, blocks)
    for a in (v.x, *v.params):
        a.setflags(write=False)
    return v


def stand_in_values(batch: int, dim: int, blocks: int) -> SeedValues:
    """Zeros of the right shapes that take no memory (broadcast views), for graphs that are
    built but never run (the projection): a builder can put them in its feed or hand them
    to ``load_after_init`` without anyone drawing 256 MB of random numbers."""
    zero = np.zeros((), np.float32)
    x = np.broadcast_to(zero, (batch, dim, dim))
    weights = tuple(np.broadcast_to(zero, (dim, dim)) for _ in range(blocks))
    biases = tuple(np.broadcast_to(zero, (dim,)) for _ in range(blocks))
    return SeedValues(x, weights, biases)


@dataclass(frozen=True)
class StepMath:
    """What the first training steps computed: the loss of each (before its update) and the
    step-1 global gradient norm (before clipping).

    The losses alone cannot catch every change of the math: Adam's first steps barely
    depend on the gradient's size, so a placement that drops one tower's gradient moves
    the step-2 loss by about 1e-8.  The gradient norm doubles or halves instead.
    """

    losses: tuple[float, ...]
    grad_norm: float


def reference_steps(v: SeedValues, steps: int = 2) -> StepMath:
    """The seed step in float64 numpy: forward, backward, clip, TF1 Adam (an independent oracle)."""
    params = [p.astype(np.float64) for p in v.params]
    m = [np.zeros_like(p) for p in params]
    s = [np.zeros_like(p) for p in params]
    dim = v.x.shape[-1]
    losses: list[float] = []
    first_norm = 0.0
    for t in range(1, steps + 1):
        h = v.x.astype(np.float64).reshape(-1, dim)
        acts = [h]
        for i in range(len(v.weights)):
            h = 1.0 / (1.0 + np.exp(-(h @ params[2 * i] + params[2 * i + 1])))
            acts.append(h)
        losses.append(float(h.mean()))
        g_h = np.full_like(h, 1.0 / h.size)
        grads: list[np.ndarray] = [np.zeros(0)] * len(params)
        for i in reversed(range(len(v.weights))):
            out = acts[i + 1]
            g_z = g_h * out * (1 - out)
            grads[2 * i] = acts[i].T @ g_z
            grads[2 * i + 1] = g_z.sum(0)
            g_h = g_z @ params[2 * i].T
        norm = float(np.sqrt(sum((g * g).sum() for g in grads)))
        if t == 1:
            first_norm = norm
        scale = CLIP_NORM / max(norm, CLIP_NORM)
        lr_t = LEARNING_RATE * np.sqrt(1 - BETA2**t) / (1 - BETA1**t)
        for k, g in enumerate(grads):
            g = g * scale
            m[k] = BETA1 * m[k] + (1 - BETA1) * g
            s[k] = BETA2 * s[k] + (1 - BETA2) * g * g
            params[k] = params[k] - lr_t * m[k] / (np.sqrt(s[k]) + EPSILON)
    return StepMath(tuple(losses), first_norm)


def relative_difference(a: float, b: float) -> float:
    """``|a - b| / max(|b|, tiny)``."""
    return abs(a - b) / max(abs(b), 1e-30)
