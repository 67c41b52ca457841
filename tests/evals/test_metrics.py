"""Metrics against values worked out by hand."""

from __future__ import annotations

import pytest

from minions.evals.items import EvalItem, eager
from minions.evals.metrics import (
    finance_score,
    max_f1,
    normalize_answer,
    numeric_match,
    parse_choice,
    parse_quantities,
    parse_yes_no_maybe,
    score,
    token_f1,
)

OPTIONS = ("MNLI, CoLA, MRPC", "ChemProt, RCT, IMDB, Amazon", "FEVER, Common-senseQA", "STS-B, WNLI, QNLI")


def test_normalize_answer_drops_case_punctuation_and_articles() -> None:
    assert normalize_answer("The  Cat, sat on a MAT!") == "cat sat on mat"


def test_token_f1_by_hand() -> None:
    # pred {cat, sat}, gold {cat, sat, down}: precision 2/2, recall 2/3 -> F1 = 2 * 1 * 2/3 / (1 + 2/3) = 0.8
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)
    # pred {revenue, grew, 12}, gold {revenue, grew, by, 12, percent}: P = 3/3, R = 3/5 -> F1 = 0.75
    assert token_f1("Revenue grew 12.", "revenue grew by 12 percent") == pytest.approx(0.75)
    assert token_f1("nothing shared", "cat") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("", "cat") == 0.0


def test_max_f1_takes_the_best_reference() -> None:
    assert max_f1("a vocabulary", ["using seed lexicon", "a vocabulary"]) == 1.0
    assert max_f1("seed lexicon", ["using seed lexicon", "a vocabulary"]) == pytest.approx(0.8)


def test_parse_quantities_reads_currency_scale_percent_and_negatives() -> None:
    q = parse_quantities("$1,577 million; (1,577); -5.2%; $2,018mn; FY 2023; COVID-19")
    assert [(x.value, x.scale, x.percent, x.year_like) for x in q] == [
        (1577.0, 1e6, False, False),
        (-1577.0, 1.0, False, False),
        (-5.2, 1.0, True, False),
        (2018.0, 1e6, False, False),
        (2023.0, 1.0, False, True),
        (19.0, 1.0, False, False),
    ]


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("$1,577 million", "1.577 billion"),
        ("1.577 billion", "$1577.00"),  # a gold in the question's unit (USD millions)
        ("Capex was $1.58 billion.", "$1577.00"),  # 0.2% off: within 1%
        ("It was 35.8%", "36%. The answer here assumes FY2023 ..."),
        ("0.36", "36%"),
        ("-1577", "(1,577)"),
        ("a decline of 1,577", "(1,577)"),
        ("EBITDA: 2.018 billion dollars", "AMCOR's Adj. EBITDA was $2,018mn in FY 2023"),
    ],
)
def test_numeric_match(prediction: str, gold: str) -> None:
    assert numeric_match(prediction, gold)


@pytest.mark.parametrize(
    ("prediction", "gold"),
    [
        ("1.577 million", "1.577 billion"),  # scale words on both sides are meant as written
        ("$1,600 million", "$1577.00"),  # 1.5% off
        ("In FY 2023 it grew", "36%"),
        ("no number at all", "1577"),
    ],
)
def test_numeric_mismatch(prediction: str, gold: str) -> None:
    assert not numeric_match(prediction, gold)


def test_finance_score_yes_no_then_number_then_f1() -> None:
    gold = "No, the company is managing its CAPEX efficiently: CAPEX/Revenue Ratio: 5.1%"
    assert finance_score("No. Its capex is modest.", gold) == 1.0
    assert finance_score("Yes, it is capital intensive (5.1%).", gold) == 0.0
    assert finance_score("$1,577 million", "$1577.00") == 1.0
    assert finance_score("flat growth", "The Real Growth was flat") == pytest.approx(2 * 1 * 0.5 / 1.5)


@pytest.mark.parametrize(
    ("reply", "letter"),
    [
        ("B", "B"),
        ("(b)", "B"),
        ("b.", "B"),
        ("Answer: B", "B"),
        ("The correct answer is (d) because of Table 2.", "D"),
        ("C. FEVER, Common-senseQA", "C"),
        ("I would say option D", "D"),
        ("They use FEVER, Common-senseQA.", "C"),  # the option's text itself
        ("the answer is a mystery", None),  # "a" is an article, not option A
        ("", None),
    ],
)
def test_parse_choice(reply: str, letter: str | None) -> None:
    assert parse_choice(reply, OPTIONS) == letter


@pytest.mark.parametrize(
    ("reply", "label"),
    [
        ("yes", "yes"),
        ("Maybe.", "maybe"),
        ("There is no clear evidence, so the answer is: yes", "yes"),
        ("No, mitochondria do not.", "no"),
        ("unclear", None),
    ],
)
def test_parse_yes_no_maybe(reply: str, label: str | None) -> None:
    assert parse_yes_no_maybe(reply) == label


def test_score_dispatches_on_the_items_metric() -> None:
    load = eager()
    assert score(EvalItem("1", "q", ("$1577.00",), "numeric", load), "1.577 billion") == 1.0
    assert score(EvalItem("2", "q", ("cat sat down",), "f1", load), "the cat sat") == pytest.approx(0.8)
    assert score(EvalItem("3", "q", ("C",), "choice", load, options=OPTIONS), "Answer: (c)") == 1.0
    assert score(EvalItem("4", "q", ("maybe",), "yes_no_maybe", load), "Yes.") == 0.0
