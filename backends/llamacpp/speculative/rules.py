"""The acceptance rules of speculative decoding, as pure functions of token ids and distributions.

A step verifies a draft ``d[0..k-1]`` for one sequence: the target model is run once over
``[last, d[0], ..., d[k-1]]`` and gives ``k + 1`` next-token distributions ``p[0..k]`` (``p[i]`` follows
``d[:i]``). Every rule below emits between 1 and ``k + 1`` tokens per step and is *lossless*: the emitted
tokens have exactly the distribution of plain decoding from ``p`` one token at a time.

- greedy (temperature 0): accept ``d[i]`` while ``d[i] == argmax p[i]``; then emit ``argmax p[m]`` at the first
  mismatch ``m`` (or the bonus token ``argmax p[k]`` when all ``k`` are accepted). Plain greedy decoding would
  have emitted the same tokens, so the output is identical token for token.
- sample-and-compare (deterministic drafts, any sampler): draw ``x[i] ~ p[i]`` with the sequence's own
  sampler; accept while ``x[i] == d[i]``; emit ``x[m]`` at the first mismatch. Each emitted token is one draw of
  the sampler from the right distribution, in the same order as plain decoding, so with the same seed the output
  is identical too. (A deterministic draft is the point mass ``q = delta(d)``: the rule below with that ``q``
  accepts with probability ``p(d)`` and otherwise samples ``p`` without ``d`` renormalised, which is the
  same distribution as drawing ``x ~ p`` and comparing.)
- rejection (Leviathan et al. 2023, Chen et al. 2023), for a draft model that samples ``d[i] ~ q[i]``:
  accept ``d[i]`` with probability ``min(1, p[i](d[i]) / q[i](d[i]))``; at the first rejection emit a sample of
  the residual ``norm(max(p[i] - q[i], 0))``; if all are accepted emit a sample of ``p[k]``. The token emitted at
  position ``i`` then has probability ``q(x) min(1, p(x)/q(x)) + (1 - sum_y min(p(y), q(y))) r(x)``
  ``= min(p, q)(x) + max(p - q, 0)(x) = p(x)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "Residual",
    "chi_square",
    "chi_square_critical",
    "greedy_accept",
    "rejection_sample",
    "residual",
    "sample_compare",
]

FloatArray = npt.NDArray[np.float64]
Residual = Callable[[FloatArray, FloatArray], FloatArray]


def greedy_accept(draft: Sequence[int], argmaxes: Sequence[int]) -> tuple[int, list[int]]:
    """Greedy verification. ``argmaxes[i]`` is the target's choice after ``draft[:i]`` (``len(draft) + 1`` of them).

    Returns ``(m, emitted)``: ``m`` drafts accepted, and the ``m + 1`` tokens plain greedy decoding emits."""
    m = 0
    while m < len(draft) and draft[m] == argmaxes[m]:  # d[m] == argmax p[m]: accept
        m += 1
    return m, [*draft[:m], argmaxes[m]]  # the target's token at the first mismatch, or the bonus token


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


def residual(p: FloatArray, q: FloatArray) -> FloatArray:
    """``norm(max(p - q, 0))``: what rejection leaves of ``p`` once ``min(p, q)`` is accounted for."""
    r = np.maximum(p - q, 0.0)
    total = r.sum()
    # total == 0 only when p == q, where rejection has probability 0; return p to stay defined
    return r / total if total > 0 else p


def rejection_sample(
    p: FloatArray,
    q: FloatArray,
    draft: Sequence[int],
    rng: np.random.Generator,
    *,
    residual_fn: Residual = residual,
) -> tuple[int, list[int]]:
    """The Leviathan/Chen rule. ``p``: [k + 1, V] target distributions; ``q``: [k, V] draft distributions that
    ``draft`` (k tokens) was sampled from. Returns ``(m, emitted)``: ``m`` drafts accepted, ``m + 1`` emitted.

    ``residual_fn`` is a parameter so that a test can show a wrong residual breaks the distribution."""
    k = len(draft)
    for i, x in enumerate(draft):
        px, qx = float(p[i, x]), float(q[i, x])
        # q(x) <= p(x): always accept; else accept with probability p(x) / q(x)
        if qx <= px or rng.random() < px / qx:
            continue
        # rejected: sample the residual max(p - q, 0), renormalised
        r = residual_fn(p[i], q[i])
        return i, [*draft[:i], int(rng.choice(len(r), p=r))]
    return k, [*draft, int(rng.choice(p.shape[1], p=p[k]))]  # all accepted: a bonus token from p[k]


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
