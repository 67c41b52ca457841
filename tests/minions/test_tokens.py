from __future__ import annotations

import pytest

from minions import tokens


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    tokens.token_counter.cache_clear()
    yield
    tokens.token_counter.cache_clear()


def test_tiktoken_counts_exactly_offline_from_the_shipped_files(tmp_path) -> None:
    counter = tokens.token_counter("o200k_base")
    assert counter.exact
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    # The decompressed file sits where tiktoken looks for it: the sha1 of its download URL.
    assert len(list((tmp_path / "tiktoken").iterdir())) == 1


def test_model_names_pick_their_encoding() -> None:
    assert tokens.encoding_for_model("openai/gpt-4o-mini") == "o200k_base"
    assert tokens.encoding_for_model("gpt-4-turbo") == "cl100k_base"
    assert tokens.encoding_for_model(None) == "o200k_base"


def test_falls_back_to_a_marked_estimate(monkeypatch) -> None:
    def broken(name: str) -> None:
        raise OSError("no network")

    monkeypatch.setattr(tokens, "_install_bpe_file", broken)
    counter = tokens.token_counter("cl100k_base")
    assert not counter.exact
    assert counter.count("x" * 10) == 3
