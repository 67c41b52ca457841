"""Token trees' pure parts (``backends.speculation``): context drafts as a trie, the tree's shape and size, the
acceptance measured by depth and rank, a draft model's calibration. No model; milliseconds each."""

from __future__ import annotations

import pytest

from minions.backends.speculation.depth import Acceptance, Calibration, CostCurve, best_first, shape_tree
from minions.backends.speculation.drafters import ContextIndex, ContextLookup
from minions.backends.speculation.tree import TokenTree

FLAT = CostCurve((1, 8, 32, 64), (1.0, 1.1, 1.3, 1.8))
"""A cost curve like PyTorch's on a CPU: verifying many tokens costs little more than one."""


def test_context_drafts_rank_continuations_by_their_support() -> None:
    index = ContextIndex()
    # "9 1 2" is followed by 3 twice, "8 1 2" by 4 once: 3 has more support, both were matched on 2+ tokens
    tokens = [9, 1, 2, 3, 5, 8, 1, 2, 4, 6, 9, 1, 2, 3, 7, 0, 9, 1, 2]
    trie = index.drafts(tokens, depth=3)
    ranked = [t for t, _, _ in trie.ranked()]
    assert ranked == [3, 4]
    assert all(match >= 2 for _, match, _ in trie.ranked())
    weak = ContextIndex().drafts([5, 1, 7, 2, 1], depth=2)  # "1" matches alone: a one-token match
    assert [(t, m) for t, m, _ in weak.ranked()] == [(7, 1)]
    assert {t for t, _, _ in trie.children[3][2].ranked()} == {5, 7}
    assert ContextIndex().drafts([1, 2], depth=3).children == {}  # its own end is not a match


def test_the_tree_shape_grows_only_while_it_pays() -> None:
    trie = ContextIndex().drafts([1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2], depth=4)
    sure = Acceptance(8, 4, prior=lambda d, r: 0.9 if r == 0 else 0.3)
    tree, ranks, expected = shape_tree(0, trie, sure, FLAT, max_nodes=32, width=4)
    assert tree.tokens[:2] == (0, 3) and len(tree) > 4
    assert expected > 1.0
    assert ranks[0] == 0 and max(ranks) == 1  # both continuations after "3 4" are drafted
    chain, _, _ = shape_tree(0, trie, sure, FLAT, max_nodes=32, width=1)
    assert all(p == i - 1 for i, p in enumerate(chain.parents))
    linear = CostCurve((1, 64), (1.0, 64.0))  # every token costs a full step: no draft pays
    alone, _, _ = shape_tree(0, trie, sure, linear, max_nodes=32, width=4)
    assert alone.tokens == (0,)


def test_acceptance_counts_nodes_whose_parent_was_accepted() -> None:
    acceptance = Acceptance(4, 2, prior=lambda d, r: 0.5)
    tree = TokenTree((0, 1, 2, 3, 4), (-1, 0, 0, 1, 2))
    acceptance.record(tree, [0, 0, 1, 0, 0], [0, 1, 3])
    assert acceptance.tried[1] == [1, 1] and acceptance.accepted[1] == [1, 0]
    assert acceptance.tried[2] == [1, 0] and acceptance.accepted[2] == [1, 0]  # node 4's parent was rejected
    assert acceptance.p(1, 0) > 0.5 > acceptance.p(1, 1)


def test_a_tree_needs_parents_before_children() -> None:
    with pytest.raises(ValueError, match="earlier node"):
        TokenTree((1, 2, 3), (-1, 2, 0))


def test_the_context_lookup_and_the_trie_read_one_index() -> None:
    """The llama.cpp engine's chain (the most recent longest match) and the PyTorch backend's trie (every match,
    ranked by support) come from the same ``ContextIndex``: here the newest match of "1 2" is followed by 4,
    while 3, after two older matches, has the most support."""
    tokens = [9, 1, 2, 3, 5, 9, 1, 2, 3, 7, 8, 1, 2, 4, 6, 1, 2]
    index = ContextIndex()
    assert index.latest(tokens, 3) == [4, 6, 1]
    assert next(t for t, _, _ in index.drafts(tokens, depth=3).ranked()) == 3
    assert ContextLookup().propose(0, tokens, 3) == [4, 6, 1]


#  0 root; 1, 2 the first position's choices; 3, 4 the second position's, below 1
TOKENS = (10, 11, 12, 13, 14)
PARENTS = (-1, 0, 0, 1, 1)
VALUES = (1.0, 0.9, 0.05, 0.8, 0.1)


def test_the_best_first_tree_keeps_the_most_valued_nodes_with_their_parents() -> None:
    flat = CostCurve((1, 8), (1.0, 1.0))  # more nodes cost nothing: every node pays
    tree, kept = best_first(TOKENS, PARENTS, VALUES, flat, spent=0.0)
    assert kept == [0, 1, 3, 4, 2]  # by value; node 3 (0.8) after its parent (0.9)
    assert tree == TokenTree((10, 11, 13, 14, 12), (-1, 0, 1, 1, 0))


def test_the_best_first_tree_grows_only_while_it_pays() -> None:
    # each node costs a tenth of a forward: 0.9 and 0.8 pay, 0.1 and 0.05 do not
    linear = CostCurve((1, 2), (1.0, 1.1))
    tree, kept = best_first(TOKENS, PARENTS, VALUES, linear, spent=0.0)
    assert kept == [0, 1, 3]
    assert tree == TokenTree((10, 11, 13), (-1, 0, 1))
    # time spent drafting counts: the same nodes are worth more when the step already cost more
    steep = CostCurve((1, 2), (1.0, 2.5))
    assert best_first(TOKENS, PARENTS, VALUES, steep, spent=0.0)[1] == [0]
    assert best_first(TOKENS, PARENTS, VALUES, steep, spent=20.0)[1] == [0, 1, 3]


def test_the_calibration_learns_how_often_the_target_takes_a_node() -> None:
    calibration = Calibration()
    assert calibration.value(0, 0.3) == pytest.approx(0.3)  # nothing measured: the draft's own probability
    tree = TokenTree(TOKENS, PARENTS)
    ranks, probs = [0, 0, 1, 0, 1], [1.0, 0.3, 0.2, 0.35, 0.3]
    for _ in range(40):
        calibration.record(tree, ranks, probs, path=[0, 1, 3])
    assert calibration.value(0, 0.3) > 0.95  # the draft's first choice, unsure, yet always taken
    assert calibration.value(1, 0.2) < 0.05  # its second choices, never
    # a probability never seen borrows its rank's rate, not the draft's word
    assert calibration.value(0, 0.9) > 0.95
    assert calibration.value(1, 0.9) < 0.1
    # the target took node 2: nodes 1 and 2 were tried; 3 and 4, below the rejected 1, were not
    calibration.record(tree, ranks, probs, path=[0, 2])
    assert (calibration.tried[0][1], calibration.accepted[0][1]) == (81, 80)
    assert (calibration.tried[1][1], calibration.accepted[1][1]) == (81, 1)
