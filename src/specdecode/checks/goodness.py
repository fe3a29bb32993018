"""Goodness-of-fit statistics for checking that two samplers give the same distribution.

Chi-square on cells merged until every expected count is at least 5 (the usual validity rule),
and a total-variation distance with a bound from the Bretagnolle-Huber-Carol inequality: for an
empirical distribution of n draws over m cells, P(||p_hat - p||_1 >= eps) <= 2^m exp(-n eps^2 / 2),
so with probability >= 1 - delta, TV(p_hat, p) <= sqrt(2 (m ln 2 + ln(1/delta)) / n) / 2.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass
class FitResult:
    samples: int
    cells: int  # after merging
    chi2: float
    p_value: float
    tv_distance: float
    tv_bound: float
    alpha: float
    passed: bool

    def as_dict(self) -> dict:
        return asdict(self)


def tv_bound(n: int, cells: int, delta: float) -> float:
    """TV(empirical, true) stays below this with probability >= 1 - delta (n draws, `cells` cells)."""
    if n <= 0:
        return 1.0
    return min(1.0, math.sqrt(2.0 * (cells * math.log(2.0) + math.log(1.0 / delta)) / n) / 2.0)


def merge_cells(expected: np.ndarray, minimum: float = 5.0) -> list[np.ndarray]:
    """Group cell indices (smallest expected first) so every group's expected count >= minimum."""
    order = np.argsort(expected, kind="stable")
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0.0
    for idx in order:
        current.append(int(idx))
        total += float(expected[idx])
        if total >= minimum:
            groups.append(current)
            current, total = [], 0.0
    if current:  # leftovers too small on their own join the last full group
        if groups:
            groups[-1].extend(current)
        else:
            groups.append(current)
    return [np.asarray(g) for g in groups]


def one_sample(observed: Mapping[Hashable, int], probs: Mapping[Hashable, float], alpha: float = 1e-3) -> FitResult:
    """Do `observed` counts follow the exact distribution `probs`? Cells missing from `probs` have p = 0."""
    keys = list({*probs.keys(), *observed.keys()})
    n = int(sum(observed.values()))
    obs = np.array([observed.get(k, 0) for k in keys], dtype=float)
    p = np.array([probs.get(k, 0.0) for k in keys], dtype=float)
    impossible = obs[p <= 0].sum()
    exp = p * n
    groups = merge_cells(exp)
    o = np.array([obs[g].sum() for g in groups])
    e = np.array([exp[g].sum() for g in groups])
    if impossible > 0:  # a draw the true distribution can never produce: certain failure
        chi2, p_value = math.inf, 0.0
    elif len(groups) < 2:
        chi2, p_value = 0.0, 1.0
    else:
        e = e * (o.sum() / e.sum())  # rounding in probs must not bias the statistic
        chi2, p_value = (float(x) for x in stats.chisquare(o, e))
    tv = 0.5 * float(np.abs(obs / max(n, 1) - p).sum())
    bound = tv_bound(n, len(groups), alpha)
    return FitResult(n, len(groups), chi2, p_value, tv, bound, alpha, p_value >= alpha)


def two_sample(a: Mapping[Hashable, int], b: Mapping[Hashable, int], alpha: float = 1e-3) -> FitResult:
    """Were the two samples drawn from the same distribution? (chi-square test of homogeneity)

    The TV distance is between the two empirical distributions on the merged cells; its bound is
    the sum of each side's bound (both within it of the common distribution).
    """
    keys = list({*a.keys(), *b.keys()})
    na, nb = int(sum(a.values())), int(sum(b.values()))
    ca = np.array([a.get(k, 0) for k in keys], dtype=float)
    cb = np.array([b.get(k, 0) for k in keys], dtype=float)
    pooled = (ca + cb) * min(na, nb) / max(na + nb, 1)  # the smaller side's expected counts
    groups = merge_cells(pooled)
    ga = np.array([ca[g].sum() for g in groups])
    gb = np.array([cb[g].sum() for g in groups])
    if len(groups) < 2:
        chi2, p_value = 0.0, 1.0
    else:
        res = stats.chi2_contingency(np.vstack([ga, gb]), correction=False)
        chi2, p_value = float(res.statistic), float(res.pvalue)
    tv = 0.5 * float(np.abs(ga / max(na, 1) - gb / max(nb, 1)).sum())
    bound = tv_bound(na, len(groups), alpha / 2) + tv_bound(nb, len(groups), alpha / 2)
    return FitResult(min(na, nb), len(groups), chi2, p_value, tv, bound, alpha, p_value >= alpha)
