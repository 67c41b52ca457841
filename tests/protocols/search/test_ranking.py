"""Ranking chunks: BM25 with the figure prior, and the fusion with the local model's scores."""

from __future__ import annotations

from minions.chunking import Chunk
from minions.protocols.search.figures import figure_share
from minions.protocols.search.profiles import FILINGS_GLOSSARY, GENERAL, Knowledge
from minions.protocols.search.ranking import (
    Ranked,
    fused_order,
    lexical_rank,
    page_spread,
    search_terms,
    spread_pages,
    spread_repeats,
)
from minions.protocols.search.words import tokenize

WORDS = Chunk("r", 0, "Capital expenditure plans are discussed by the board every year in capital meetings.", 0, 80)
TABLE = Chunk("r", 1, "Capital expenditure 1,577 1,373 1,420 (305) 12% $4.2", 80, 140)
OTHER = Chunk("r", 2, "The company sells widgets.", 140, 170)
FILINGS = Knowledge(glossary=FILINGS_GLOSSARY, filings=True)


def test_plurals_are_made_singular():
    assert tokenize("Expenditures were purchases") == tokenize("expenditure purchase") == ["expenditure", "purchase"]
    assert tokenize("companies sales status business") == ["company", "sale", "status", "business"]
    assert tokenize("The 2018s figures") == ["2018s", "figure"]


def test_figures_and_quantity_questions():
    assert figure_share("1,577 (305) 12% $4.2 words") == 0.8
    assert GENERAL.asks_for_quantity("What is the FY2018 capital expenditure amount (in USD millions)?")
    assert not GENERAL.asks_for_quantity("Who chairs the audit committee?")
    assert GENERAL.asks_for_quantity("Wie viele Patienten wurden behandelt?")
    # finance words ask for a figure in filings only
    assert FILINGS.asks_for_quantity("What was 3M's capex?") and not GENERAL.asks_for_quantity("What was 3M's capex?")


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


def test_a_measure_the_question_names_brings_the_lines_it_is_computed_from() -> None:
    assert "total current assets" in FILINGS.expand("Does Corning have positive working capital based on FY2022 data?")
    assert "statement of cash flows" in FILINGS.expand("What is the FY2018 capital expenditure amount for 3M?")
    assert FILINGS.expand("Who chairs the audit committee?") == ""
    assert GENERAL.expand("Does Corning have positive working capital based on FY2022 data?") == ""
    sheet = Chunk(
        "r", 0, "Consolidated Balance Sheets. Total current assets 8,123. Total current liabilities 6,500.", 0, 90
    )
    prose = Chunk("r", 1, "Our capital allocation is disciplined and we work hard for our capital base.", 90, 170)
    # the question's own words favour the prose; the measure's lines find the balance sheet
    assert lexical_rank([prose, sheet], "Is working capital positive?", knowledge=FILINGS)[0].chunk is sheet
    assert search_terms("Is working capital positive?", knowledge=FILINGS).startswith("Is working capital positive?\n")
    # outside filings the glossary adds nothing: the prose, which says the question's words, ranks first
    assert lexical_rank([prose, sheet], "Is working capital positive?")[0].chunk is prose


def test_pages_are_spread_best_chunk_of_each_page_first() -> None:
    def on(page: int, index: int) -> Ranked:
        return Ranked(Chunk("10k.pdf", index, "text", 0, 4, (page,)), 1.0)

    ranked = [on(7, 0), on(7, 1), on(9, 2), on(7, 3), on(4, 4)]
    assert [r.chunk.index for r in spread_pages(ranked)] == [0, 2, 4, 1, 3]
    # chunks without pages (a text file) keep their places
    plain = [Ranked(Chunk("notes.md", i, "text", 0, 4), 1.0) for i in range(3)]
    assert spread_pages(plain) == plain
    assert page_spread([None, ("a", 1), ("a", 1), None, ("b", 1)]) == [0, 1, 3, 4, 2]


def test_a_chunk_that_repeats_a_better_one_comes_after_the_others() -> None:
    """The same note in the next year's filing says nothing new: it goes after the chunks that do, in its order;
    nothing is dropped. A copy of the same file says nothing new either."""
    note = "Leases of warehouses are recognised as right-of-use assets over the lease term, at present value"

    def chunk(document: str, index: int, text: str) -> Ranked:
        return Ranked(Chunk(document, index, text, 0, len(text)), 1.0)

    ranked = [
        chunk("2020.pdf", 0, note + " in 2020."),
        chunk("2019.pdf", 0, note + " in 2019."),  # the same note, a year on: a repeat
        chunk("2019.pdf", 1, "Rent paid for the Ohio warehouse was $4 million, under a lease ending in 2027."),
        chunk("2020.pdf", 1, note + ", discounted at rates that the company sets for each lease in each year."),
    ]
    assert [(r.chunk.document, r.chunk.index) for r in spread_repeats(ranked)] == [
        ("2020.pdf", 0),
        ("2019.pdf", 1),
        ("2020.pdf", 1),  # the note's words and words of its own (10 of 17 alike, under 0.6): not a repeat
        ("2019.pdf", 0),
    ]
    assert spread_repeats(ranked, share=1.0) == ranked  # nothing says exactly what a better one said
    # within one document a paragraph said twice is a repeat, and so is a copy's chunk
    twice = [chunk("a.pdf", 0, note), chunk("a.pdf", 5, note), chunk("a.pdf", 2, "Rent was $4 million.")]
    assert [r.chunk.index for r in spread_repeats(twice)] == [0, 2, 5]
    copy = [chunk("a.pdf", 0, note), chunk("a (2).pdf", 0, note), chunk("a.pdf", 2, "Rent was $4 million.")]
    assert [r.chunk.document for r in spread_repeats(copy)] == ["a.pdf", "a.pdf", "a (2).pdf"]
