"""Speculative decoding's pure parts (``backends.speculation``): the acceptance rule on toy distributions
(chi-square), the drafters, the adaptive-depth arithmetic. No model; milliseconds each."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from minions.backends.speculation import (
    AcceptanceTracker,
    CallCost,
    ContextLookup,
    CostCurve,
    CostTable,
    ScriptedDrafter,
    Speculator,
    TokenTree,
    TraceCache,
    accept,
    choose_depths,
    expected_tokens,
)
from minions.backends.speculation.depth import fillers
from minions.backends.speculation.speculator import PROBE_EVERY, PROBE_TOKENS
from minions.errors import ConfigError

from .chi_square import chi_square, chi_square_critical

# -- greedy and sample-and-compare ---------------------------------------------------------------------------


def sample_compare(
    draft: list[int], sample: Callable[[int], int], emit: Callable[[int], bool] | None = None
) -> tuple[int, list[int]]:
    """The rule on a chain (a tree one wide): drafts accepted, and the emitted tokens."""
    path, emitted = accept(TokenTree.chain(-1, draft), sample, emit)
    return len(path) - 1, emitted


@pytest.mark.parametrize(
    ("draft", "argmaxes", "m", "emitted"),
    [
        ([5, 6, 7], [5, 6, 7, 8], 3, [5, 6, 7, 8]),  # always right: all accepted, plus the bonus token
        ([1, 2, 3], [5, 6, 7, 8], 0, [5]),  # always wrong: the target's own token
        ([5, 6, 9], [5, 6, 7, 8], 2, [5, 6, 7]),  # right then wrong
        ([], [4], 0, [4]),  # no draft: plain decoding
    ],
)
def test_greedy_verification(draft: list[int], argmaxes: list[int], m: int, emitted: list[int]) -> None:
    # at temperature 0 the sequence's sampler is the argmax: sample-and-compare is greedy verification
    assert sample_compare(draft, lambda i: argmaxes[i]) == (m, emitted)


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


def test_the_rule_on_a_tree_follows_the_child_the_target_draws() -> None:
    # root 0; children 1 (token 5) and 2 (token 6); below 2: node 3 (token 7) and node 4 (token 8)
    tree = TokenTree((9, 5, 6, 7, 8), (-1, 0, 0, 2, 2))
    target = {0: 6, 2: 8, 4: 1}  # the draw after each node on the path
    draws: list[int] = []

    def sample(node: int) -> int:
        draws.append(node)
        return target[node]

    assert accept(tree, sample) == ([0, 2, 4], [6, 8, 1])  # two accepted, then the bonus token after the leaf
    assert draws == [0, 2, 4]
    assert accept(tree, lambda node: 7) == ([0], [7])  # 7 is a grandchild, not a child: rejected at the root


# -- the acceptance rule on a toy target: chi-square over whole sequences ------------------------------------

V = 4  # vocabulary
L = 3  # tokens per sequence: V**L = 64 categories
START = V  # the row of the distribution of the first token


def _markov(seed: int, sharp: float = 1.5) -> np.ndarray:
    """[V + 1, V]: next-token distribution given the previous token (row ``START``: the first token)."""
    logits = np.random.default_rng(seed).normal(size=(V + 1, V)) * sharp
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


P = _markov(1)  # the target
Q = _markov(2)  # another model, whose greedy choices make wrong drafts often


def _speculative_sequences(n: int, k: int, drafter: np.ndarray, *, seed: int, lossy: bool = False) -> np.ndarray:
    """``n`` sequences of ``L`` tokens decoded speculatively: each step ``drafter`` proposes ``k`` tokens greedily
    (a deterministic draft, as every drafter of the engine makes), ``sample_compare`` verifies them with a sampler
    that draws from the target after the draft's prefix, and decoding goes on from what it emitted. ``lossy``:
    the sampler takes the draft token whenever the target gives it 25% or more, a plausible-looking bug.
    Returns the count of each sequence."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(V**L, dtype=np.int64)
    for _ in range(n):
        seq: list[int] = []
        while len(seq) < L:
            prev, draft = seq[-1] if seq else START, []
            for _ in range(k):
                prev = int(np.argmax(drafter[prev]))
                draft.append(prev)
            ctx = [seq[-1] if seq else START, *draft]  # the target's row after each draft prefix: p[0..k]

            def sample(i: int, ctx: list[int] = ctx, draft: list[int] = draft) -> int:
                if lossy and i < len(draft) and P[ctx[i], draft[i]] >= 0.25:
                    return draft[i]
                return int(rng.choice(V, p=P[ctx[i]]))

            seq.extend(sample_compare(draft, sample)[1])
        counts[sum(t * V**i for i, t in enumerate(seq[:L]))] += 1
    return counts


def _target_sequence_probs() -> np.ndarray:
    """Plain decoding's probability of each sequence of ``L`` tokens."""
    probs = np.zeros(V**L)
    for seq in itertools.product(range(V), repeat=L):
        prob, prev = 1.0, START
        for t in seq:
            prob *= P[prev, t]
            prev = t
        probs[sum(t * V**i for i, t in enumerate(seq))] = prob
    return probs


@pytest.mark.parametrize(("k", "drafter"), [(1, Q), (3, Q), (2, P)], ids=["k1-wrong", "k3-wrong", "k2-right"])
def test_speculative_sequences_have_the_target_distribution(k: int, drafter: np.ndarray) -> None:
    # Sequences of 3 tokens span steps: their later tokens follow accepted drafts, rejected ones and bonus
    # tokens, so the rule's every branch is in the count. Drafts from P's own argmax are mostly accepted.
    stat, dof = chi_square(_speculative_sequences(6000, k, drafter, seed=k), _target_sequence_probs())
    assert stat < chi_square_critical(dof, alpha=0.001), (stat, dof)


def test_chi_square_catches_a_lossy_acceptance() -> None:
    counts = _speculative_sequences(6000, 3, Q, seed=7, lossy=True)
    stat, dof = chi_square(counts, _target_sequence_probs())
    assert stat > chi_square_critical(dof, alpha=0.001), (stat, dof)


def test_the_token_after_an_accepted_or_a_rejected_draft_has_the_target_distribution() -> None:
    """One step with the draft ``[a, b]``: when ``a`` is accepted the next token follows the target after ``a``
    (``b`` or the target's own choice there); when it is rejected, the token emitted in its place follows the
    target without ``a``, renormalised (what rejection sampling of a point-mass draft gives)."""
    rng = np.random.default_rng(11)
    a, b = 2, 0
    ctx = [START, a, b]
    after_accept = np.zeros(V, dtype=np.int64)
    on_reject = np.zeros(V, dtype=np.int64)
    for _ in range(12000):
        m, emitted = sample_compare([a, b], lambda i: int(rng.choice(V, p=P[ctx[i]])))
        if m >= 1:
            after_accept[emitted[1]] += 1
        else:
            on_reject[emitted[0]] += 1
    without_a = P[START] * (np.arange(V) != a)
    for counts, expected in ((after_accept, P[a]), (on_reject, without_a / without_a.sum())):
        assert counts.sum() > 1000  # both branches ran often enough to test
        stat, dof = chi_square(counts, expected)
        assert stat < chi_square_critical(dof, alpha=0.001), (counts, expected)


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


def test_an_uncertain_rate_is_worth_more_to_a_long_draft() -> None:
    """``expected_tokens(a, k, outcomes)``: the mean of ``sum a^i`` over a Beta belief with mean ``a`` worth
    ``outcomes``. One drafted token is worth ``a`` either way; longer drafts gain from the uncertainty (``a^i`` is
    convex), less the more outcomes the estimate counts. On the 1B target's curve on 2 cores, with a draft model
    at 0.06 of a target token, an estimate of 0.78 from 16 outcomes drafts 8, not the point estimate's 4."""
    assert expected_tokens(0.8, 1, 10.0) == pytest.approx(expected_tokens(0.8, 1))
    assert expected_tokens(0.8, 8, 10.0) > expected_tokens(0.8, 8, 100.0) > expected_tokens(0.8, 8)
    assert expected_tokens(0.8, 8, 1e9) == pytest.approx(expected_tokens(0.8, 8))
    assert expected_tokens(0.5, 3, 2.0) == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4)  # uniform: E[a^i] = 1/(i+1)
    calls = CallCost(CostCurve((1, 2, 3, 4, 5, 7, 9), (1.0, 1.335, 1.551, 1.762, 1.889, 2.287, 2.295)))

    def cost(lengths: Sequence[float]) -> float:
        return calls(lengths) + 0.06 * (lengths[0] - 1)

    assert choose_depths([0.78], [8], cost) == [4]
    assert choose_depths([0.78], [8], cost, outcomes=[16.0]) == [8]
    assert choose_depths([0.78], [8], cost, outcomes=[30.0]) == [4]  # a surer estimate: as the point estimate


def test_choose_depths_follows_cost_and_acceptance() -> None:
    cpu = CallCost(CostCurve((1, 2, 4, 8, 16, 64), (1.0, 1.5, 1.75, 2.64, 4.5, 15.0)))
    assert choose_depths([0.0], [8], cpu) == [0]  # drafts that never land: plain decoding
    assert choose_depths([0.3], [8], cpu) == [0]  # E = 1.3 for 1.5x the time
    k = choose_depths([0.95], [8], cpu)[0]
    assert k >= 3
    assert choose_depths([0.95], [2], cpu) == [2]  # never past the draft on offer
    # a batch of 8 already fills the call: drafting for all of them costs more than it brings
    eight = choose_depths([0.6] * 8, [8] * 8, cpu)
    assert sum(eight) <= 2
    # free extra tokens (a GPU-like flat curve): draft the whole offer, the same length for both, as two
    # lengths would run as two passes
    flat = CallCost(CostCurve((1, 64), (1.0, 1.0)))
    assert choose_depths([0.5, 0.9], [4, 4], flat) == [4, 4]
    assert choose_depths([0.5, 0.9], [4, 8], flat) == [4, 4]


def test_a_call_costs_the_passes_llama_cpp_splits_it_into() -> None:
    """A call over several KV streams runs as ubatches in which every sequence carries as many tokens as the
    others (measured on SmolLM2 at 8 sequences: 9 + 7 x 1 tokens 73 ms, 8 x 1 then 1 x 8 measured apart 39 + 33
    ms; 8 x 2, the same 16 tokens in one pass, 67 ms)."""
    one = CostCurve((1, 8, 9), (0.010, 0.033, 0.039))
    eight = CostCurve((8, 16, 24), (0.039, 0.067, 0.093))
    calls = CallCost(CostTable((1, 8), (one, eight)))
    assert calls([1] * 8) == pytest.approx(0.039)
    assert calls([2] * 8) == pytest.approx(0.067)
    assert calls([9, *[1] * 7]) == pytest.approx(0.039 + 0.033)  # 8 x 1, then the one left: 1 x 8
    assert calls([1, 9, *[1] * 6]) == calls([9, *[1] * 7])  # order does not matter
    five = calls.curve(5)(5 * 2)  # 3 of 8 x 1 tokens, then 5 x 2
    assert calls([3] * 5 + [1] * 3) == pytest.approx(0.039 + five)
    # at 8 sequences a lone long draft pays for its own pass; drafts of 2 for all of them share one
    assert choose_depths([0.9, *[0.0] * 7], [8] * 8, calls) == [0] * 8
    assert choose_depths([0.95] * 8, [2] * 8, calls) == [2] * 8


def test_a_ubatch_holds_only_sequences_with_consecutive_ids() -> None:
    """With a KV stream per sequence llama.cpp splits a call sequentially: a ubatch is a run of consecutive ids,
    so lengths that rise and fall along the ids and ids missing between others cost passes of their own
    (measured on the 1B target at 8 sequences: 3, 1, 3, 1, ... tokens 1036 ms, 3, 3, 3, 3, 1, 1, 1, 1 609 ms;
    sequences 0, 2, 3, 5 and 7 with a token each 524 ms, 0 to 4 244 ms); depths are chosen by that price."""
    one = CostCurve((1, 8, 9), (0.010, 0.033, 0.039))
    eight = CostCurve((8, 16, 24), (0.039, 0.067, 0.093))
    calls = CallCost(CostTable((1, 8), (one, eight)))
    # 8 x 1, then sequences 0, 2, 4 and 6 apart (2 tokens each): five passes, where grouped they are two
    assert calls([3, 1] * 4) == pytest.approx(0.039 + 4 * one(2))
    assert calls([3] * 4 + [1] * 4) == pytest.approx(0.039 + calls.curve(4)(8))
    assert calls([3, 1] * 4) > 1.2 * calls([3] * 4 + [1] * 4)
    linear = CallCost(CostCurve.linear(0.1))
    assert linear([1] * 5, [0, 1, 2, 3, 4]) == linear([1] * 5)
    assert linear([2, 1, 1, 1, 1], [0, 2, 3, 5, 7]) == pytest.approx(linear([2]) + linear([1, 1]) + 2 * linear([1]))
    # drafts on offer of 3 and 1 tokens in turn: every sequence drafts one, not 3, 1, 3, 1, ...
    assert choose_depths([0.95] * 8, [3, 1] * 4, calls) == [1] * 8


def test_the_gaps_between_sequences_that_carry_as_many_tokens_are_filled() -> None:
    """A job that ends before the others leaves its id missing between theirs; the engine fills it (a free
    sequence carries a copy of a neighbour's tokens, dropped after the call), so that the call is one ubatch, and
    ``CallCost`` prices it so. Not where the sequences carry different numbers of tokens (the call splits
    anyway), nor where the missing ids outnumber the present ones (a filler costs a sequence's share of a pass)."""
    assert fillers([1] * 5, [0, 2, 3, 5, 7]) == [1, 4, 6]
    assert fillers([3] * 3, [4, 5, 7]) == [6]
    assert fillers([1, 1], [0, 7]) == [] and fillers([2, 1], [0, 2]) == [] and fillers([1.5, 1.5], [0, 2]) == []
    assert fillers([1] * 3, [0, 1, 2]) == [] and fillers([1] * 2, [2, 0]) == []
    linear = CallCost(CostCurve.linear(0.1))
    assert linear([1] * 5, [0, 2, 3, 5, 7]) == linear([1] * 8)  # one pass over 8, not four
    assert linear([1, 1], [0, 7]) == 2 * linear([1])


def test_a_call_is_priced_continuously_in_expected_lengths() -> None:
    """A recurrent model's expected tokens computed again (``rollback_tokens``) make lengths fractional and a
    little different for every sequence: those are not passes of their own. (Priced as passes, four sequences
    with acceptance 0.71-0.73 drafted nothing on a curve where 4 x 9 tokens cost 1.16x 4 x 1.)"""
    calls = CallCost(CostCurve.linear(0.005))
    assert calls([1.0, 1.01, 1.02, 1.03]) == pytest.approx(calls([1.0] * 4), rel=0.05)
    assert calls([1.0, 2.0, 2.0, 3.0]) > 2.9  # whole tokens apart: three passes, as llama.cpp runs them
    acceptance = [0.7097, 0.7215, 0.7269, 0.7299]
    assert min(choose_depths(acceptance, [8] * 4, calls, rollback_s=0.0)) >= 4


def test_acceptance_tracker_counts_per_sequence_and_drafter() -> None:
    t = AcceptanceTracker(decay=0.5, prior=0.5, weight=2.0)
    t.update(0, "context", k=4, m=4)
    assert t.get(0, "context") == pytest.approx((4 + 1) / (4 + 2))
    t.update(0, "context", k=4, m=1)  # two outcomes (a success, a failure) halve the old counts twice
    assert t.get(0, "context") == pytest.approx((1 + 1 + 1) / (1 + 2 + 2))
    t.update(1, "context", k=4, m=0)  # sequence 1 starts from what the drafter learnt on sequence 0
    assert t.get(1, "context") < t.get(0, "context")
    assert t.get(2, "trace") == 0.5
    t.forget(0)
    assert t.get(0, "context") == t.get(5, "context")  # the drafter's own
    t.set("model", 0.8)
    assert t.get(3, "model") == pytest.approx(0.8)


def test_a_steady_acceptance_is_estimated_without_bias_whatever_the_draft_length() -> None:
    """Drafts that each fail once after ``m`` successes: the estimate at each step, when the next depth is
    chosen, is near the true rate, not pulled down by the failure that always comes last."""
    t = AcceptanceTracker()
    for _ in range(30):
        t.update(0, "model", k=8, m=7)  # 7 accepted, then a rejection: a rate of 7/8
    assert t.get(0, "model") == pytest.approx(7 / 8, abs=0.02)


def test_short_drafts_are_estimated_as_well_as_long_ones() -> None:
    """The counts decay by outcome, so drafts of 1 or 2 tokens remember as many tokens as drafts of 8. Decayed by
    update, a draft model right 95% of the time on drafts of 1 was estimated at most 0.86 (five outcomes against
    the prior's two), its drafts stayed short because the estimate was low, and the estimate stayed low."""
    for k in (1, 2, 8):
        t = AcceptanceTracker()
        for step in range(200):
            m = k if step % 20 else 0  # one rejected draft in 20: a rate of 19/20 by draft, not by token
            t.update(0, "model", k=k, m=m)
        tested = sum(k if s % 20 else 1 for s in range(200))
        rate = sum(k for s in range(200) if s % 20) / tested
        assert t.get(0, "model") == pytest.approx(rate, abs=0.035), k


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
    scoped = TraceCache(orders=(2,), span=2, per_schema=True)
    scoped.start(0, "schema-a")
    scoped.finish(0, [1, 2, 3, 4], 0)
    assert scoped.propose(1, [1, 2], 2) == []  # another scope (the default)
    scoped.start(1, "schema-a")
    assert scoped.propose(1, [1, 2], 2) == [3, 4]
    shared = TraceCache(orders=(2,), span=2)  # not per schema: every job's replies teach every job
    shared.start(0, "schema-a")
    shared.finish(0, [1, 2, 3, 4], 0)
    assert shared.propose(1, [1, 2], 2) == [3, 4]


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
    assert choose_depths([0.6] * 8, [4] * 8, CallCost(eight)) == [0] * 8
    assert choose_depths([0.8], [4], CallCost(one)) != [0]
    # at 0.6 one sequence's draft of 2 gains 0.5% under the model: a close call goes to plain decoding
    assert choose_depths([0.6], [4], CallCost(one), min_gain=0.0) == [2]
    assert choose_depths([0.6], [4], CallCost(one)) == [0]


def test_speculator_corrects_the_table_by_what_drafted_calls_cost() -> None:
    """Drafted calls that take twice their measured time (relative to plain calls) double the draft part of the
    cost, and a draft that paid on the table stops paying."""
    curve = CostCurve((1, 2, 4, 8), (1.0, 1.3, 1.9, 3.1))
    spec = Speculator([ScriptedDrafter(lambda seq, tokens, k: [7] * k)], lambda: curve, k_max=3)
    spec.tracker.set("scripted", 0.55)
    assert len(spec.propose([(0, [1, 2, 3], 3)])[0].tokens) > 0
    for _ in range(50):
        spec.observe_call([1], 0.010)  # plain calls: as measured (1 unit = 10 ms)
        spec.observe_call([4], 0.038)  # drafted calls: T(4) measured 19 ms, observed 38
    assert spec.draft_cost_scale == pytest.approx(2.0, rel=0.05)
    assert spec.propose([(0, [1, 2, 3], 3)])[0].tokens == ()
    spec.reset()
    assert spec.draft_cost_scale == 1.0


class CostlyDrafter(ScriptedDrafter):
    """A scripted draft model: ``seconds`` a drafted position; records what it was asked."""

    costly = True

    def __init__(self, seconds: float) -> None:
        super().__init__(lambda seq, tokens, k: [7] * k, name="model")
        self.seconds = seconds
        self.asked: list[list[tuple[int, int]]] = []

    def propose_many(self, requests):  # type: ignore[no-untyped-def]
        self.asked.append([(seq, k) for seq, _, k in requests])
        return super().propose_many(requests)

    def draft_seconds(self, seqs: int) -> float:
        return self.seconds


def test_a_costly_drafter_is_asked_for_the_drafts_that_pay_for_its_time() -> None:
    """A draft model is asked once a step for all sequences, for the lengths that pay counting its seconds a
    position; where they cannot pay it is not asked (but for a short probe one step in ``PROBE_EVERY``), and where
    a lookup offers more it is not asked for that sequence."""
    curve = CostCurve((1, 2, 4, 8, 16, 32), (1.0, 1.05, 1.1, 1.2, 1.3, 1.4))  # verifying is nearly free: drafts pay
    jobs = [(0, [1, 2, 3], 8), (1, [4, 5, 6], 8)]
    free = CostlyDrafter(0.0)
    spec = Speculator([free], lambda: curve)
    spec.tracker.set("model", 0.8)
    drafts = spec.propose(jobs)
    assert free.asked == [[(0, 8), (1, 8)]] and all(len(d.tokens) == 8 for d in drafts)

    slow = CostlyDrafter(0.4)  # a position costs 40% of a target step: only short drafts pay
    spec = Speculator([slow], lambda: curve)
    spec.tracker.set("model", 0.8)
    spec.propose(jobs)
    assert slow.asked and 0 < max(k for _, k in slow.asked[0]) < 8

    hopeless = CostlyDrafter(5.0)
    spec = Speculator([hopeless], lambda: curve)
    spec.tracker.set("model", 0.8)
    for _ in range(PROBE_EVERY):
        spec.propose(jobs)
    assert hopeless.asked == [[(0, PROBE_TOKENS), (1, PROBE_TOKENS)]]  # the probe, once

    lookup = ScriptedDrafter(lambda seq, tokens, k: [9] * k if seq == 0 else [], name="lookup")
    rival = CostlyDrafter(0.0)
    spec = Speculator([rival, lookup], lambda: curve)
    spec.tracker.set("model", 0.6)
    spec.tracker.set("lookup", 0.95)
    drafts = spec.propose(jobs)
    assert rival.asked == [[(1, 8)]]  # sequence 0's lookup offer is worth more than the model's
    assert drafts[0].drafter == "lookup" and drafts[1].drafter == "model"


def test_a_fixed_depth_asks_a_draft_model_for_that_many_tokens() -> None:
    """With a fixed depth the draft model drafts that many tokens, not ``k_max`` of which the rest would be cut
    (each is a call over every sequence); a depth or ``k_max`` under 1 is refused."""
    model = CostlyDrafter(0.0)
    spec = Speculator([model], lambda: CostCurve.linear(0.5), k_max=8, depth=3)
    drafts = spec.propose([(0, [1, 2, 3], 8), (1, [4, 5, 6], 2)])
    assert model.asked == [[(0, 3), (1, 2)]]
    assert [len(d.tokens) for d in drafts] == [3, 2]
    for bad in ({"depth": 0}, {"k_max": 0}):
        with pytest.raises(ConfigError, match="at least one token"):
            Speculator([model], lambda: CostCurve.linear(0.5), **bad)


def test_only_a_draft_models_estimate_gains_from_its_uncertainty() -> None:
    """The same acceptance estimate from the same few outcomes: a draft model's tokens are accepted independently
    of each other, and its draft is cut as its Beta belief says (8 tokens on the 1B target's curve); a lookup's
    copied span is right or wrong as a whole, and its draft is cut as the point estimate says (4)."""
    calls = CallCost(CostCurve((1, 2, 3, 4, 5, 7, 9), (1.0, 1.335, 1.551, 1.762, 1.889, 2.287, 2.295)))
    curve = CostCurve(tuple(range(1, 10)), tuple(calls([n]) + 0.06 * (n - 1) for n in range(1, 10)))
    jobs = [(0, [1, 2, 3], 8)]
    for drafter, depth in ((CostlyDrafter(0.0), 8), (ScriptedDrafter(lambda seq, tokens, k: [7] * k, "lookup"), 4)):
        spec = Speculator([drafter], lambda: curve)
        spec.gate = None
        spec.tracker.set(drafter.name, 0.78, outcomes=14.0)  # worth 16 with the prior's weight
        assert len(spec.propose(jobs)[0].tokens) == depth, drafter.name
