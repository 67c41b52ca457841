"""The meaning signal: its order alone, its fusion with words, and the real embeddings."""

from __future__ import annotations

import sys

import pytest

from minions.chunking import Chunk
from minions.errors import ConfigError
from minions.protocols.search import meaning
from minions.protocols.search.meaning import meaning_fused, meaning_order, meaning_scores
from minions.protocols.search.ranking import Ranked, lexical_rank

BANK = Chunk("d", 0, "The bank raised its interest rates twice this year.", 0, 50)
BUDGET = Chunk("d", 1, "The committee approved the budget for the next year.", 50, 100)
CAR = Chunk("d", 2, "A red car was parked outside the office every morning.", 100, 150)


def test_fusion_reorders_words_by_meaning_at_its_weight():
    by_words = [Ranked(BANK, 3.0), Ranked(BUDGET, 2.0), Ranked(CAR, 1.0)]
    scores = [0.1, 0.9, 0.2]  # meaning prefers the second, then the third
    assert [r.chunk.index for r in meaning_order(by_words, scores)] == [1, 2, 0]
    # equal weight: 1/12 + 1/11 for the second beats 1/11 + 1/13 for the first
    fused = meaning_fused(by_words, scores, weight=1.0)
    assert [r.chunk.index for r in fused] == [1, 0, 2] and [r.score for r in fused] == [2.0, 3.0, 1.0]
    # at half weight meaning cannot lift the second over the first
    assert [r.chunk.index for r in meaning_fused(by_words, scores, weight=0.5)] == [0, 1, 2]
    assert meaning_fused([], [], weight=1.0) == [] and meaning_scores("anything", []) == []


def test_without_wordllama_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wordllama", None)  # import wordllama raises ImportError
    meaning._model.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"pip install 'minions\[meaning\]'"):
            meaning_scores("Which automobile?", ["a car"])
    finally:
        meaning._model.cache_clear()


@pytest.mark.slow
def test_real_embeddings_find_a_match_that_shares_no_word():
    """wordllama's weights, loaded from its wheel offline: "automobile" finds "car", which words cannot."""
    question = "Which automobile was bought?"
    chunks = [BANK, BUDGET, CAR]
    by_words = lexical_rank(chunks, question)
    assert all(r.score == 0 for r in by_words)  # no word of the question is in any chunk
    scores = meaning_scores(question, [r.chunk.text for r in by_words])
    assert meaning_order(by_words, scores)[0].chunk is CAR
    assert max(scores) < 1.0 and len(scores) == 3
