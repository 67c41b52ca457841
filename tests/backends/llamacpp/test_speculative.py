"""Speculative decoding's pure parts: the acceptance rules on toy distributions (chi-square), the drafters, the
adaptive-depth arithmetic. No model; milliseconds each."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from minions.backends.llamacpp.speculative import (
    AcceptanceTracker,
    ContextLookup,
    CostCurve,
    CostTable,
    ScriptedDrafter,
    Speculator,
    TraceCache,
    chi_square,
    chi_square_critical,
    choose_depths,
    expected_tokens,
    greedy_accept,
    rejection_sample,
    residual,
    sample_compare,
)

# -- greedy and sample-and-compare ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("draft", "argmaxes", "m", "emitted"),
    [
        ([5, 6, 7], [5, 6, 7, 8], 3, [5, 6, 7, 8]),  # always right: all accepted, plus the bonus token
        ([1, 2, 3], [5, 6, 7, 8], 0, [5]),  # always wrong: the target's own token
        ([5, 6, 9], [5, 6, 7, 8], 2, [5, 6, 7]),  # right then wrong
        ([], [4], 0, [4]),  # no draft: plain decoding
    ],
)
def test_greedy_accept(draft: list[int], argmaxes: list[int], m: int, emitted: list[int]) -> None:
    assert greedy_accept(draft, argmaxes) == (m, emitted)


def test_sample_compare_draws_once_per_emitted_token_and_stops_when_the_reply_ends() -> None:
    draws: list[int] = []
    target = [5, 6, 7, 8]

    def sample(i: int) -> int:
        draws.append(i)
        return target[i]

    assert sample_compare([5, 6, 0], sample) == (2, [5, 6, 7])
    assert draws == [0, 1, 2]
    draws.clear()
    # the reply ends on the second (accepted) token: nothing more is drawn
    assert sample_compare([5, 6, 7], sample, emit=lambda x: x != 6) == (2, [5, 6])
    assert draws == [0, 1]


# -- the rejection rule on a toy target: chi-square over whole sequences --------------------------------------

V = 4  # vocabulary
L = 3  # tokens per sequence: V**L = 64 categories


def _markov(rng: np.random.Generator, sharp: float) -> np.ndarray:
    """[V + 1, V]: next-token distribution given the previous token (row V: the start)."""
    logits = rng.normal(size=(V + 1, V)) * sharp
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def _speculative_sequences(n: int, k: int, *, wrong_residual: bool, seed: int) -> np.ndarray:
    """``n`` sequences of ``L`` tokens decoded speculatively: a draft chain ``Q`` proposes ``k`` tokens, the
    rejection rule verifies them against the target chain ``P``. Returns the count of each sequence."""
    rng = np.random.default_rng(seed)
    P, Q = _markov(np.random.default_rng(1), 1.5), _markov(np.random.default_rng(2), 1.5)
    res = (lambda p, q: p) if wrong_residual else residual  # "resample from p": a classic bug, biased
    counts = np.zeros(V**L, dtype=np.int64)
    for _ in range(n):
        seq: list[int] = []
        while len(seq) < L:
            prev = seq[-1] if seq else V
            draft, q = [], []
            for _ in range(k):  # the draft model samples d_i ~ Q(. | d_{i-1})
                q.append(Q[prev])
                prev = int(rng.choice(V, p=Q[prev]))
                draft.append(prev)
            # the target's distributions after each draft prefix: [k + 1, V]
            ctx = [seq[-1] if seq else V, *draft]
            p = np.stack([P[t] for t in ctx])
            _, emitted = rejection_sample(p, np.stack(q), draft, rng, residual_fn=res)
            seq.extend(emitted)
        seq = seq[:L]
        counts[sum(t * V**i for i, t in enumerate(seq))] += 1
    return counts


def _target_sequence_probs() -> np.ndarray:
    P = _markov(np.random.default_rng(1), 1.5)
    probs = np.zeros(V**L)
    for seq in itertools.product(range(V), repeat=L):
        prob, prev = 1.0, V
        for t in seq:
            prob *= P[prev, t]
            prev = t
        probs[sum(t * V**i for i, t in enumerate(seq))] = prob
    return probs


@pytest.mark.parametrize("k", [1, 3])
def test_rejection_rule_samples_the_target_distribution(k: int) -> None:
    stat, dof = chi_square(_speculative_sequences(6000, k, wrong_residual=False, seed=k), _target_sequence_probs())
    assert stat < chi_square_critical(dof, alpha=0.001), (stat, dof)


def test_chi_square_catches_a_wrong_residual() -> None:
    stat, dof = chi_square(_speculative_sequences(6000, 3, wrong_residual=True, seed=7), _target_sequence_probs())
    assert stat > chi_square_critical(dof, alpha=0.001), (stat, dof)


def test_sample_compare_with_a_fixed_draft_samples_the_target() -> None:
    """A deterministic draft (a point mass) verified by drawing from the target and comparing: every emitted
    token is a draw of the target, whatever the draft says."""
    rng = np.random.default_rng(3)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    counts = np.zeros(V, dtype=np.int64)
    for _ in range(8000):
        _, emitted = sample_compare([1, 1], lambda i: int(rng.choice(V, p=p)))
        counts[emitted[0]] += 1
    stat, dof = chi_square(counts, p)
    assert stat < chi_square_critical(dof, alpha=0.001)


def test_chi_square_critical_values() -> None:
    # tables: chi2(10) 0.999 quantile 29.588; chi2(63) 0.999 quantile 103.44; chi2(3) 0.95 quantile 7.815
    assert chi_square_critical(10, 0.001) == pytest.approx(29.588, rel=0.01)
    assert chi_square_critical(63, 0.001) == pytest.approx(103.44, rel=0.01)
    assert chi_square_critical(3, 0.05) == pytest.approx(7.815, rel=0.01)


# -- adaptive depth --------------------------------------------------------------------------------------------


def test_expected_tokens() -> None:
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_choose_depths_follows_cost_and_acceptance() -> None:
    cpu = CostCurve((1, 2, 4, 8, 16, 64), (1.0, 1.5, 1.75, 2.64, 4.5, 15.0))
    assert choose_depths([0.0], [8], cpu) == [0]  # drafts that never land: plain decoding
    assert choose_depths([0.3], [8], cpu) == [0]  # E = 1.3 for 1.5x the time
    k = choose_depths([0.95], [8], cpu)[0]
    assert k >= 3
    assert choose_depths([0.95], [2], cpu) == [2]  # never past the draft on offer
    # a batch of 8 already fills the call: drafting for all of them costs more than it brings
    eight = choose_depths([0.6] * 8, [8] * 8, cpu)
    assert sum(eight) <= 2
    # free extra tokens (a GPU-like flat curve): draft the whole offer
    flat = CostCurve((1, 64), (1.0, 1.0))
    assert choose_depths([0.5, 0.9], [4, 8], flat) == [4, 8]


def test_acceptance_tracker_is_an_ema_per_sequence_and_drafter() -> None:
    t = AcceptanceTracker(alpha=0.5, prior=0.5)
    t.update(0, "context", k=4, m=4)
    assert t.get(0, "context") == pytest.approx(1 - 0.5**5)
    t.update(1, "context", k=4, m=0)  # sequence 1 starts from what the drafter learnt on sequence 0
    assert t.get(1, "context") < t.get(0, "context")
    assert t.get(2, "trace") == 0.5
    t.forget(0)
    assert t.get(0, "context") == t.drafters["context"]


# -- drafters -------------------------------------------------------------------------------------------------


def test_context_lookup_proposes_what_followed_the_latest_match() -> None:
    d = ContextLookup(min_n=2, max_n=3)
    tokens = [1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 7, 1, 2, 3]
    assert d.propose(0, tokens, 3) == [5, 6, 7]  # the most recent [1, 2, 3] continues with 5, not 4
    assert d.propose(0, [*tokens, 5, 6], 2) == [7, 1]  # incremental: only new positions are indexed
    assert d.propose(1, [8, 9, 10], 4) == []  # no earlier match, and no self-match
    d.finish(0, tokens, 5)
    assert d.propose(0, [7, 7], 3) == []


def test_trace_cache_learns_across_jobs_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "speculator" / "trace-m.json"
    cache = TraceCache(orders=(3, 2), span=4, path=path)
    prompt = [100, 101, 102, 103]
    cache.finish(0, [*prompt, 7, 8, 9, 10, 11], len(prompt))
    assert cache.propose(3, [55, 101, 102, 103], 4) == [7, 8, 9, 10]  # the assistant header starts it
    assert cache.propose(3, [5, 8, 9], 2) == [10, 11]
    cache.save()
    assert not list(path.parent.glob("*.tmp"))  # written atomically
    again = TraceCache(orders=(3, 2), span=4, path=path)
    assert again.propose(0, [8, 9], 3) == [10, 11]


def test_trace_cache_is_bounded_and_scoped() -> None:
    cache = TraceCache(orders=(2,), span=2, max_entries=10)
    cache.learn(list(range(100)))
    assert len(cache.table) == 10
    assert cache.propose(0, [97, 98], 2) == [99]
    scoped = TraceCache(orders=(2,), span=2)
    scoped.set_scope(0, "schema-a")
    scoped.finish(0, [1, 2, 3, 4], 0)
    assert scoped.propose(1, [1, 2], 2) == []  # another scope (the default)
    scoped.set_scope(1, "schema-a")
    assert scoped.propose(1, [1, 2], 2) == [3, 4]


def test_cost_curve_interpolates() -> None:
    c = CostCurve((1, 4, 8), (1.0, 2.0, 3.0))
    assert c(2) == pytest.approx(1 + 1 / 3)
    assert c(16) == pytest.approx(5.0)
    assert CostCurve.from_dict(c.to_dict()) == c


def test_cost_table_interpolates_between_sequence_counts() -> None:
    one = CostCurve((1, 2, 4), (1.0, 1.6, 2.3))
    eight = CostCurve((8, 16, 32), (4.7, 8.5, 13.0))
    table = CostTable((1, 8), (one, eight))
    assert table.at(1) is one and table.at(8) is eight and table.at(64) is eight
    four = table.at(4)  # 3/7 of the way from one sequence to eight
    assert four(8) == pytest.approx(one(8) + (eight(8) - one(8)) * 3 / 7)
    assert CostTable.from_dict(table.to_dict()) == table
    # a call shared by 8 sequences costs more per draft token than one sequence's: fewer drafts pay there
    assert choose_depths([0.6] * 8, [4] * 8, eight) == [0] * 8
    assert choose_depths([0.6], [4], one) != [0]


def test_speculator_corrects_the_table_by_what_drafted_calls_cost() -> None:
    """Drafted calls that take twice their measured time (relative to plain calls) double the draft part of the
    cost, and a draft that paid on the table stops paying."""
    curve = CostCurve((1, 2, 4, 8), (1.0, 1.3, 1.9, 3.1))
    spec = Speculator([ScriptedDrafter(lambda seq, tokens, k: [7] * k)], lambda: curve, k_max=3)
    spec.tracker.drafters["scripted"] = 0.55
    assert len(spec.propose([(0, [1, 2, 3], 3)])[0].tokens) > 0
    for _ in range(50):
        spec.observe_call(1, 1, 0.010)  # plain calls: as measured (1 unit = 10 ms)
        spec.observe_call(1, 4, 0.038)  # drafted calls: T(4) measured 19 ms, observed 38
    assert spec.draft_cost_scale == pytest.approx(2.0, rel=0.05)
    assert spec.propose([(0, [1, 2, 3], 3)])[0].tokens == ()
    spec.reset()
    assert spec.draft_cost_scale == 1.0
