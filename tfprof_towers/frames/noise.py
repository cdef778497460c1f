"""Whether a change of step time is beyond noise: the Mann–Whitney U test on the per-step samples.

Two-sided, on every timed step's duration of each side (``record.json`` -> ``timings.step_times_s``;
a trace's step windows when there is no record).  The exact distribution of U (counted with the
recurrence of Mann and Whitney, 1947) when neither side has ties and ``m * n <= EXACT_MAX``; else
the normal approximation with the tie correction and a continuity correction.  numpy only (scipy
is not a dependency).  The unit tests check the exact counts against enumeration and both p-values
against hand computations (the exact one, 2 x 7/462 for U = 3 at 5 and 6 steps, is also what
``scipy.stats.mannwhitneyu(..., method="exact")`` gives).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
EXACT_MAX = 2500
EXACT, NORMAL = "exact", "normal approximation (tie and continuity corrected)"


@dataclass(frozen=True)
class Test:
    """The test's outcome: ``p`` None when a side has fewer than two samples."""

    u: float | None
    p: float | None
    method: str  # "Mann–Whitney U, two-sided, <EXACT | NORMAL>"; or why there is no test
    n_base: int
    n_new: int
    min_p: float | None = None  # the smallest p-value these sample sizes can give: 2 / C(m + n, m)

    def beyond_noise(self, alpha: float = ALPHA) -> bool | None:
        return None if self.p is None else self.p < alpha

    def can_reach(self, alpha: float = ALPHA) -> bool:
        """Whether these sample sizes can give p < ``alpha`` at all (3 and 3 steps never can: 0.1)."""
        return self.p is not None and (self.min_p is None or self.min_p < alpha)

    def to_json(self) -> dict[str, object]:
        return {"method": self.method, "u": self.u, "p": self.p, "n_base": self.n_base, "n_new": self.n_new,
                "min_p": self.min_p}


def rankdata(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the sizes of the groups of tied values."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    starts = np.flatnonzero(np.r_[True, v[1:] != v[:-1]])
    sizes = np.diff(np.r_[starts, v.size])
    avg = starts + (sizes + 1) / 2.0  # mean of ranks starts+1 .. starts+size
    ranks = np.empty(v.size, dtype=np.float64)
    ranks[order] = np.repeat(avg, sizes)
    return ranks, sizes


def u_counts(m: int, n: int) -> np.ndarray:
    """How many of the C(m+n, m) orderings give each U = 0 .. m*n (no ties)."""
    # c[j] for the current i: the counts for (i, j), as arrays over u
    prev = [np.ones(1)] * (n + 1)  # i = 0: U is 0 whatever j
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # j = 0
        for j in range(1, n + 1):
            a = np.zeros(i * j + 1)
            left = prev[j]  # (i-1, j), shifted by j: the i-th x is above all j y's
            a[j:j + left.size] += left
            a[: cur[j - 1].size] += cur[j - 1]  # (i, j-1)
            cur.append(a)
        prev = cur
    return prev[n]


def smallest_p(m: int, n: int) -> float:
    """The smallest two-sided p-value of the exact test at sizes ``m`` and ``n``: every BASE sample
    below every NEW one (U = 0), ``2 / C(m + n, m)``.  Ties only make a sample less extreme, so no
    outcome at these sizes can do better (the normal approximation is read against this bound too)."""
    log_comb = math.lgamma(m + n + 1) - math.lgamma(m + 1) - math.lgamma(n + 1)
    return min(1.0, 2.0 * math.exp(-log_comb))  # lgamma: C(m + n, m) overflows a float past ~1000 steps


def mann_whitney(base: Sequence[float], new: Sequence[float]) -> Test:
    x, y = np.asarray(base, dtype=np.float64), np.asarray(new, dtype=np.float64)
    m, n = x.size, y.size
    name = "Mann–Whitney U, two-sided"
    if m < 2 or n < 2:
        return Test(None, None, f"{name}: not tested (fewer than 2 steps on a side)", m, n)
    ranks, ties = rankdata(np.concatenate([x, y]))
    u = float(ranks[:m].sum() - m * (m + 1) / 2.0)
    if not (ties > 1).any() and m * n <= EXACT_MAX:
        counts = u_counts(m, n)
        total = counts.sum()
        k = round(u)
        lo, hi = float(counts[: k + 1].sum() / total), float(counts[k:].sum() / total)
        p = min(1.0, 2.0 * min(lo, hi))
        return Test(u, p, f"{name}, {EXACT}", m, n, smallest_p(m, n))
    big_n = m + n
    tie_term = float((ties.astype(np.float64) ** 3 - ties).sum()) / (big_n * (big_n - 1))
    var = m * n / 12.0 * ((big_n + 1) - tie_term)
    mu = m * n / 2.0
    if var <= 0:  # every value equal
        return Test(u, 1.0, f"{name}, {NORMAL}", m, n, smallest_p(m, n))
    z = max(abs(u - mu) - 0.5, 0.0) / math.sqrt(var)
    return Test(u, min(1.0, math.erfc(z / math.sqrt(2.0))), f"{name}, {NORMAL}", m, n, smallest_p(m, n))
