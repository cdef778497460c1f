"""The seed workload's shared values (numpy only)."""

from __future__ import annotations

import numpy as np

from tfprof_towers.capture.seed_values import reference_steps, seed_values


def test_values_are_deterministic_and_shaped() -> None:
    a, b = seed_values(4, 16, 6), seed_values(4, 16, 6)
    assert a.x.shape == (4, 16, 16) and a.x.dtype == np.float32
    assert len(a.params) == 12 and a.params[0].shape == (16, 16) and a.params[1].shape == (16,)
    assert all(np.array_equal(p, q) for p, q in zip(a.params, b.params)) and np.array_equal(a.x, b.x)
    limit = np.sqrt(6.0 / 32)
    assert all(np.abs(w).max() <= limit for w in a.weights) and not any(b.any() for b in a.biases)
    assert not np.array_equal(seed_values(4, 16, 6, seed=1).x, a.x)


def test_reference_gradient_norm_matches_finite_differences() -> None:
    """The oracle's step-1 gradient norm, checked against central differences of its loss."""
    v = seed_values(2, 4, 2)
    math = reference_steps(v, steps=1)
    base = [p.astype(np.float64) for p in v.params]

    def loss(params: list[np.ndarray]) -> float:
        h = v.x.astype(np.float64).reshape(-1, 4)
        for i in range(2):
            h = 1.0 / (1.0 + np.exp(-(h @ params[2 * i] + params[2 * i + 1])))
        return float(h.mean())

    assert math.losses[0] == loss(base)
    sq = 0.0
    eps = 1e-6
    for k, p in enumerate(base):
        for idx in np.ndindex(p.shape):
            hi = [q.copy() for q in base]
            lo = [q.copy() for q in base]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            sq += ((loss(hi) - loss(lo)) / (2 * eps)) ** 2
    assert abs(np.sqrt(sq) - math.grad_norm) < 1e-6 * max(1.0, math.grad_norm)


def test_shared_values_are_made_once_and_read_only() -> None:
    from tfprof_towers.capture.seed_values import shared_seed_values

    a = shared_seed_values(4, 16, 6)
    assert a is shared_seed_values(4, 16, 6)
    assert np.array_equal(a.x, seed_values(4, 16, 6).x)
    assert not a.x.flags.writeable and not any(p.flags.writeable for p in a.params)


def test_stand_ins_have_the_shapes_and_no_memory() -> None:
    from tfprof_towers.capture.seed_values import stand_in_values

    v = stand_in_values(64, 1000, 6)
    assert v.x.shape == (64, 1000, 1000) and v.x.dtype == np.float32 and v.x.strides == (0, 0, 0)
    assert [p.shape for p in v.params[:2]] == [(1000, 1000), (1000,)] and not v.x.any()
