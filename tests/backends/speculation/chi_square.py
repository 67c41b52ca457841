"""Pearson's chi-square test, for the tests that show speculative decoding keeps the target's distribution."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def chi_square(observed: Sequence[int] | npt.NDArray[np.int64], expected_p: FloatArray) -> tuple[float, int]:
    """Pearson's statistic ``sum (O - E)^2 / E`` over the categories with ``E > 0``, and its degrees of freedom.

    Observations in a category of probability 0 make the statistic infinite."""
    obs = np.asarray(observed, dtype=np.float64)
    n = obs.sum()
    exp = n * np.asarray(expected_p, dtype=np.float64)
    live = exp > 0
    if np.any(obs[~live] > 0):
        return math.inf, int(live.sum()) - 1
    return float(((obs[live] - exp[live]) ** 2 / exp[live]).sum()), int(live.sum()) - 1


def chi_square_critical(dof: int, alpha: float = 0.001) -> float:
    """The ``1 - alpha`` quantile of chi-square with ``dof`` degrees of freedom (Wilson-Hilferty: within 1% for
    dof >= 3 at the usual alphas; no scipy needed)."""
    z = _normal_quantile(1.0 - alpha)
    c = 2.0 / (9.0 * dof)
    return float(dof * (1.0 - c + z * math.sqrt(c)) ** 3)


def _normal_quantile(p: float) -> float:
    """Inverse of the standard normal CDF by bisection on ``erf`` (exact to 1e-10, fast enough for a test)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
