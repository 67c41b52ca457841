"""Quotable spans of a chunk, the candidates a job may quote, and the schema that allows only them."""

from __future__ import annotations

import json

from minions.chunking import Chunk
from minions.protocols.evidence.quotes import NONE, answer_spans, candidates, quote_schema, states_value
from minions.protocols.search.meaning import VectorCache, sentence_meaning
from minions.protocols.search.sentences import spans

from ..helpers import WordsEmbedder

PROSE = (
    "## Financial Highlights\n\n"
    "Total revenue for 2025 was $31.8 million, compared with $24.6 million in 2024, an increase of 29 percent.\n"
    "Electricity sales to members accounted for $27.2 million of revenue; the remaining $4.6 million came from\n"
    "installation services and certificates. Operating expenses were $25.1 million (2024: $20.3 million).\n"
)
TABLE = "Cash flows\nPurchases of property, plant and equipment (PP&E)\n(1,577)\n(1,373)\n(1,420)\nOther, net\n12\n"


def chunk(text: str) -> Chunk:
    return Chunk("report.md", 0, text, 100, 100 + len(text))


def test_spans_are_sentences_of_wrapped_prose_with_their_offsets():
    found = spans(PROSE)
    texts = [s.text for s in found]
    # a heading introduces the sentence after it
    assert texts[0] == (
        "## Financial Highlights "
        "Total revenue for 2025 was $31.8 million, compared with $24.6 million in 2024, an increase of 29 percent."
    )
    # a sentence wrapped over two lines is one span, its whitespace collapsed
    assert texts[1].startswith("Electricity sales") and texts[1].endswith("certificates.")
    assert texts[2] == "Operating expenses were $25.1 million (2024: $20.3 million)."
    for s in found:
        assert " ".join(PROSE[s.start : s.end].split()) == s.text


def test_table_cells_join_into_rows_and_long_text_is_cut():
    texts = [s.text for s in spans(TABLE)]
    row = "Purchases of property, plant and equipment (PP&E) (1,577) (1,373) (1,420)"
    assert texts == [f"Cash flows {row}", "Other, net 12"]
    long = "word " * 200
    cut = spans(long)
    assert len(cut) > 1 and all(len(s.text) <= 280 for s in cut)
    assert " ".join(s.text for s in cut) == long.strip()


def test_abbreviations_do_not_end_sentences_and_short_sentences_stand_alone():
    texts = [
        s.text
        for s in spans("Mr. Williams had a CT scan. Dr. J. Smith read it.\n\n**CT Spine scan:**\nNo contrast was used.")
    ]
    assert texts == ["Mr. Williams had a CT scan.", "Dr. J. Smith read it.", "**CT Spine scan:** No contrast was used."]


def test_sentences_joined_without_a_space_are_told_apart():
    """A transcript's or a PDF's lines joined with no space after the full stop: a capitalised word right after it
    starts a sentence; after an initial or an abbreviation ("U.S.", "e.g.") and inside a figure it does not."""
    text = "Sales to OEMs rose.We can't change the mix.The U.S.Bank loan, e.g.The bond, cost $7.84 per share."
    assert [s.text for s in spans(text)] == [
        "Sales to OEMs rose.",
        "We can't change the mix.",
        "The U.S.Bank loan, e.g.The bond, cost $7.84 per share.",
    ]


def test_candidates_are_the_best_matching_sentences_first():
    best = candidates(chunk(PROSE), "What was total revenue in 2025?", k=2)
    assert len(best) == 2 and "Total revenue" in best[0].text
    # a question about a quantity prefers the row of figures over a line of words
    rows = candidates(chunk(TABLE), "How much were purchases of property and equipment?", k=1)
    assert "(1,577)" in rows[0].text


def test_for_a_quantity_a_header_row_of_years_gives_way_to_the_row_with_the_value():
    statement = (
        "Consolidated Balance Sheets\n$ in millions, except per share amounts February 2, 2019 February 3, 2018\n\n"
        "Merchandise inventories 5,409 5,209\n\nOther current assets 466 438\n"
    )
    header = "Consolidated Balance Sheets $ in millions, except per share amounts February 2, 2019 February 3, 2018"
    question = "What is the year end FY2019 total amount of inventories? Answer in USD millions."
    texts = [s.text for s in candidates(chunk(statement), question)]
    assert texts[0].startswith("Merchandise inventories 5,409 5,209") and texts[1] == header  # still offered
    # a question that asks for no quantity keeps the order by words
    about = candidates(chunk(statement), "Which dates do the balance sheets of inventories cover?")
    assert about[0].text == header


def test_states_value_tells_values_from_labels():
    assert states_value("Net income $ 3,033") and states_value("Actual tax rates 21.6 %")
    assert states_value("We had 350 stores in 2019") and states_value("Revenue grew 12% in 2018")
    assert not states_value("Years ended December 31 (Millions) 2018 2017 2016")
    assert not states_value("1. Business overview with twelve items")


def test_the_schema_allows_only_the_offered_sentences_or_none():
    offered = candidates(chunk(PROSE), "revenue", k=3)
    schema = quote_schema(offered)
    quotes = [a["properties"]["quote"]["const"] for a in schema["anyOf"]]
    assert quotes == [*(s.text for s in offered), NONE]
    revenue = next(a for a in schema["anyOf"] if "Total revenue" in a["properties"]["quote"]["const"])
    assert revenue["properties"]["answer"]["enum"][1:3] == ["$31.8 million", "$24.6 million"]
    assert revenue["properties"]["answer"]["enum"][-1] is None
    json.dumps(schema)  # plain JSON, as a server takes it


def test_answer_spans_are_figures_of_the_quote_not_list_numbers():
    assert answer_spans("2. Secure financing for the battery.") == []
    assert answer_spans("Capex was (1,577) in 2018, 12% of sales.") == ["(1,577)", "2018", "12%"]
    assert answer_spans("Revenue was $4.2 billion.") == ["$4.2 billion"]


def test_a_markdown_heading_alone_is_no_candidate_but_one_joined_to_its_sentence_is():
    text = "# Northwind Solar Cooperative — Annual Report 2025\n\n" + PROSE
    found = candidates(chunk(text), "What was total revenue in 2025?", k=8)
    assert found and not any(c.text.startswith("# Northwind") for c in found)
    assert any(c.text.startswith("## Financial Highlights Total revenue") for c in found)


REVENUE = "Revenue for the year was $12.4 million."


def best_by_words_first(text: str, question: str) -> list:
    options = candidates(chunk(text), question)
    assert options[0].text == REVENUE
    return options


def test_the_model_reorders_sentences_that_match_the_question_but_never_lifts_one_that_matches_none():
    from minions.protocols.evidence.jobs import SENTENCE_MODEL_WEIGHT, pick_sentence
    from minions.protocols.search.ranking import fused_order

    others = "The board met four times. Our offices moved in March. Staff numbers were stable at forty."
    options = best_by_words_first(f"{REVENUE} {others}", "What was the revenue?")
    # a model that favours another label most and the matching sentence least: the match is still quoted,
    # where the plain fusion of ranks quoted the unrelated sentence the model favoured
    scores = [-9.0, -0.1, -0.2, -0.3]
    assert pick_sentence(options, scores, "What was the revenue?") == 0
    assert fused_order(scores, weight=SENTENCE_MODEL_WEIGHT)[0][0] == 1

    # among sentences that match, the model re-orders close calls: the best by words, last by the model, gives way
    question = "What was the revenue for the year?"
    regions = f"Revenue rose in the north. {REVENUE} Revenue fell in the south. Revenue was flat in the west."
    options = best_by_words_first(regions, question)
    assert all("Revenue" in o.text for o in options)
    assert pick_sentence(options, [-5.0, -0.1, -0.2, -0.3], question) == 1
    # and when no sentence shares a word with the question, the fusion weighs them all
    assert pick_sentence(options, [-9.0, -0.1, -0.2, -0.3], "Who audits it?") == 1


BUYERS = (
    "The company's products shipped from its two plants this year. "
    "Products of the company were also sold online this year. "
    "Cisco represented 15 percent of sales."
)


def test_with_meaning_a_sentence_that_answers_in_other_words_is_offered_first():
    """ "Which buyer ..." shares no word with "Cisco represented 15 percent of sales", and two sentences share
    "company" and "products" with it: by words the answer comes last; the sentences' closeness in meaning (a
    stand-in model that reads "buyer" and "Cisco" as a customer) puts it first."""
    question = "Which buyer took most of the company's products this year?"
    by_words = candidates(chunk(BUYERS), question)
    assert by_words[-1].text.startswith("Cisco")
    embedder = WordsEmbedder(("customer", "plant", "online"), alike={"buyer": "customer", "cisco": "customer"})
    meaning = sentence_meaning(embedder, question=question, cache=VectorCache(":memory:"))
    assert meaning is not None
    offered = candidates(chunk(BUYERS), question, meaning=meaning)
    assert offered[0].text.startswith("Cisco")
    # offered first, it stays among the sentences the model may pick though it shares no word with the question
    from minions.protocols.evidence.jobs import pick_sentence

    assert pick_sentence(offered, [-0.1, -2.0, -3.0], question) == 0


def test_the_answer_is_the_first_chunks_quote_unless_another_says_it_much_better():
    """``best_quotes``: a quote's match to the question alone (by words here), scaled, plus its chunk's place in
    the ranking (1, 1/2, 1/3, ...): on FinanceBench the chunk ranked first held the answer's page far more often
    than the quote that matched best by words (docs/local-reading.md)."""
    from minions.protocols.evidence.citations import Finding
    from minions.protocols.evidence.quotes import best_quotes
    from minions.protocols.result import Citation

    def found(texts: list[str]) -> list[Finding]:
        return [Finding(i, "q", t, "", "local", Citation(t, "report.md", i), i) for i, t in enumerate(texts)]

    question = "What was the revenue in 2025?"
    filler = ["The board met four times.", "Staff numbers were stable.", "Our offices moved in March."]
    # the fourth chunk's quote says it best, the first chunk's a little: at weight 1 the ranking's first stands
    first = found(["The chair spoke of 2025 at length.", *filler[:2], "Revenue in 2025 was $4.2 billion."])
    assert best_quotes(first, question, rank_weight=1.0)[0].citation.chunk == 0
    assert best_quotes(first, question, rank_weight=0.0)[0].citation.chunk == 3  # by its match alone
    # the second chunk's quote says it, the first chunk's says nothing of it: the second comes first
    second = found([filler[0], "Revenue in 2025 was $4.2 billion.", *filler[1:]])
    assert best_quotes(second, question)[0].citation.chunk == 1
    assert best_quotes([], question) == []
