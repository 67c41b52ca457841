"""Ranking chunks: BM25 with the figure prior, and the fusion with the local model's scores."""

from __future__ import annotations

from minions.chunking import Chunk
from minions.protocols.ranking import fused_order, lexical_rank
from minions.protocols.retrieval import asks_for_quantity, figure_share, tokenize

WORDS = Chunk("r", 0, "Capital expenditure plans are discussed by the board every year in capital meetings.", 0, 80)
TABLE = Chunk("r", 1, "Capital expenditure 1,577 1,373 1,420 (305) 12% $4.2", 80, 140)
OTHER = Chunk("r", 2, "The company sells widgets.", 140, 170)


def test_plurals_are_made_singular():
    assert tokenize("Expenditures were purchases") == tokenize("expenditure purchase") == ["expenditure", "purchase"]
    assert tokenize("companies sales status business") == ["company", "sale", "status", "business"]
    assert tokenize("The 2018s figures") == ["2018s", "figure"]


def test_figures_and_quantity_questions():
    assert figure_share("1,577 (305) 12% $4.2 words") == 0.8
    assert asks_for_quantity("What is the FY2018 capital expenditure amount (in USD millions)?")
    assert not asks_for_quantity("Who chairs the audit committee?")


def test_the_figure_prior_lifts_tables_for_quantity_questions_only():
    quantity = lexical_rank([WORDS, TABLE, OTHER], "How much was capital expenditure?")
    assert [r.chunk.index for r in quantity][:2] == [1, 0]
    words = lexical_rank([WORDS, TABLE, OTHER], "Who discusses the capital expenditure plans at board meetings?")
    assert words[0].chunk.index == 0
    assert quantity[-1].chunk.index == 2 and quantity[-1].score == 0


def test_fusion_lets_the_model_reorder_close_calls_only():
    # items in their order by words (0 best); the model prefers the second
    assert [i for i, _ in fused_order([-2.0, 3.0, -1.0])] == [1, 0, 2]
    # with half the weight, the model cannot lift the third over the first
    assert fused_order([-2.0, -1.0, 3.0], weight=0.5)[0][0] == 0
    # ties in the fused score keep the order by words
    assert [i for i, _ in fused_order([1.0, 1.0, 1.0])] == [0, 1, 2]
