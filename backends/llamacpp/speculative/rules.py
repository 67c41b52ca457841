"""The acceptance rule of speculative decoding, as a pure function of token ids.

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

from collections.abc import Callable, Sequence

__all__ = ["sample_compare"]


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
