"""The one figure parser: what the ranking's prior, a job's short answers and the written answer's check read."""

from __future__ import annotations

from decimal import Decimal

import pytest

from minions.protocols.search.figures import figure_share, figures, is_figure


def test_a_figure_keeps_its_text_number_and_scale() -> None:
    found = figures("Revenue was $31.8 million, up 12% from (1,577) and €4.2bn; 29 per cent of sales.")
    assert [f.text for f in found] == ["$31.8 million", "12%", "(1,577)", "€4.2bn", "29 per cent"]
    assert [f.value for f in found] == [Decimal(31800000), Decimal(12), Decimal(1577), Decimal(4200000000), Decimal(29)]
    assert found[0].start == len("Revenue was ")


@pytest.mark.parametrize("text", ["Q3", "FY2018", "v1.2", "3rd", "10x", "a1"])
def test_numbers_run_into_words_are_not_figures(text: str) -> None:
    assert figures(text) == [] and not is_figure(text)


@pytest.mark.parametrize("token", ["1,577", "(305)", "$31.8", "12%", "2018.", "-5", "1,577,"])
def test_a_token_is_a_figure_with_a_sentences_punctuation_after_it(token: str) -> None:
    assert is_figure(token)


def test_the_share_of_a_passages_tokens_that_are_figures() -> None:
    assert figure_share("Net sales 1,577 (305) 12%") == 0.6
    assert figure_share("") == 0.0 and figure_share("no figures here") == 0.0
