from __future__ import annotations

import json

import pytest

from minions.cost import Price, PriceTable, _table_from_env, default_price_table
from minions.errors import ConfigError
from minions.types import Usage


def test_price_counts_cached_input_at_its_own_rate() -> None:
    price = Price(input=2.0, cached_input=0.5, output=8.0)
    usage = Usage(prompt_tokens=1_000_000, cached_prompt_tokens=400_000, completion_tokens=100_000)
    assert price.cost(usage) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)


def test_lookup_by_exact_name_then_longest_prefix_ignoring_provider() -> None:
    table = PriceTable()
    assert table.lookup("openai/gpt-4o-mini-2024-07-18") == table.prices["gpt-4o-mini"]
    assert table.lookup("gpt-4o-2024-11-20") == table.prices["gpt-4o"]
    assert table.lookup("llamacpp/default") is None
    assert table.cost("some-local-model", Usage(prompt_tokens=10**6)) == 0.0


def test_overrides_from_code_and_from_a_file(tmp_path, monkeypatch) -> None:
    table = PriceTable().with_overrides({"my-model": (1.0, 0.1, 3.0)})
    assert table.cost("my-model", Usage(prompt_tokens=10**6, completion_tokens=10**6)) == pytest.approx(4.0)

    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gpt-4o": [9, 9, 9]}))
    monkeypatch.setenv("MINIONS_PRICES", str(path))
    _table_from_env.cache_clear()
    assert default_price_table().lookup("gpt-4o") == Price(9, 9, 9)
    assert default_price_table().lookup("gpt-4o-mini") == PriceTable().prices["gpt-4o-mini"]


def test_a_bad_price_file_says_how_to_write_one(tmp_path) -> None:
    path = tmp_path / "prices.json"
    path.write_text('{"m": [1, 2]}')
    with pytest.raises(ConfigError, match="USD per million"):
        PriceTable.from_file(path)
