"""The acceptance rule of speculative decoding, as a pure function of token ids, and the chi-square test its
tests use.

A step verifies a draft ``d[0..k-1]`` for one sequence: the target model is run once over
``[last, d[0], ..., d[k-1]]`` and gives ``k + 1`` next-token distributions ``p[0..k]`` (``p[i]`` follows
``d[:i]``). The rule emits between 1 and ``k + 1`` tokens per step and is *lossless*: the emitted tokens have
exactly the distribution of plain decoding from ``p`` one token at a time.

Sample-and-compare (deterministic drafts, any sampler): draw ``x[i] ~ p[i]`` with the sequence's own sampler;
accept while ``x[i] == d[i]``; emit ``x[m]`` at the first mismatch ``m`` (or the bonus token ``x[k]`` when all
``k`` are accepted). Each emitted token is one draw of the sampler from the right distribution, in the same order
as plain decoding, so with the same seed the output is identical token for token; at temperature 0 the sampler is
the argmax, and this is greedy verification. Every drafter here drafts deterministically (lookups, traces, a draft
model decoding greedily), so this one rule serves them all. (A deterministic draft is the point mass
``q = delta(d)``: Leviathan/Chen rejection sampling with that ``q`` accepts with probability ``p(d)`` and otherwise
samples ``p`` without ``d`` renormalised, the same distribution as drawing ``x ~ p`` and comparing. A drafter that
sampled its drafts from a distribution ``q`` would need that rule and its residual ``norm(max(p - q, 0))``.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["chi_square", "chi_square_critical", "sample_compare"]

FloatArray = npt.NDArray[np.float64]


def sample_compare(
    draft: Sequence[int], sample: Callable[[int], int], emit: Callable[[int], bool] | None = None
) -> tuple[int, list[int]]:
    """Verification of a deterministic draft with the sequence's own sampler: ``sample(i)`` draws the token
    after ``draft[:i]`` from ``p[i]`` (and advances the sampler's state, as plain decoding would). ``emit(x)``
    takes each emitted token in turn and returns False when the reply ended with it (end of generation, a stop
    string, the length limit): then nothing more is drawn, as plain decoding would draw nothing more.

    Returns ``(m, emitted)``: ``m`` drafts accepted, and the emitted tokens (``m + 1`` of them unless the reply
    ended on an accepted draft token); ``sample`` is called once per emitted token."""
    emitted: list[int] = []
    for i in range(len(draft) + 1):
        x = sample(i)  # x ~ p[i]: one draw per emitted token, as in plain decoding
        emitted.append(x)
        accepted = i < len(draft) and x == draft[i]
        if (emit is not None and not emit(x)) or not accepted:
            # the reply ended, or a mismatch (or the bonus token): x is what plain decoding emits here
            return i + accepted, emitted
    raise AssertionError("unreachable")


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
