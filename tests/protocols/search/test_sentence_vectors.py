"""A library's sentences embedded ahead of its questions (``search.sentence_vectors``): a question then embeds
only itself, the work goes on where it stopped, and a library built again, or another model, starts over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minions.documents import Document
from minions.protocols.background import embedding_status
from minions.protocols.library import Library
from minions.protocols.search.meaning import user_cache
from minions.protocols.search.sentence_vectors import keep_sentences, sentences_kept

from .test_meaning import KeywordEmbedder

BANK = Document(
    "bank.md",
    "The bank raised its interest rates twice this year. Savers were pleased with the bank's new accounts. "
    "Its budget for branches fell by a tenth.",
)
CAR = Document("car.md", "A red car was parked outside the office every morning. Nobody knew whose automobile it was.")


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's vector cache is its own: what it finds there is what it put there."""
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))


def test_a_question_embeds_only_itself_once_the_librarys_sentences_are_kept(tmp_path: Path) -> None:
    embedder = KeywordEmbedder()
    with Library(tmp_path / "lib", embeddings=embedder) as library:  # type: ignore[arg-type]
        library.add(BANK, CAR)
        embedder.calls.clear()
        library.search("Which bank raised its rates?")
        assert embedder.calls[0] == 1 and sum(embedder.calls[1:]) > 1  # the question, then its chunks' sentences
        assert library.keep_sentences() == 2
        embedder.calls.clear()
        library.search("Whose automobile was parked there?")
        assert embedder.calls == [1]  # the question alone: every sentence it weighs was embedded ahead


def test_keeping_goes_on_where_it_stopped_and_takes_chunks_added_later(tmp_path: Path) -> None:
    embedder = KeywordEmbedder()
    with Library(tmp_path / "lib", embeddings=embedder) as library:  # type: ignore[arg-type]
        library.add(BANK)
        status = embedding_status(library)
        assert (status.sentences, status.complete) == (0, False)
        assert "their sentences 0/1" in status.line()
        assert library.keep_sentences() == 1 and library.keep_sentences() == 0
        library.add(CAR)
        assert library.keep_sentences() == 1  # the new document's chunk only
        status = embedding_status(library)
        assert (status.sentences, status.total, status.complete) == (2, 2, True)


def test_a_library_built_again_another_model_or_another_cache_starts_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "lib"
    with Library(folder, embeddings=KeywordEmbedder()) as library:  # type: ignore[arg-type]
        library.add(BANK, CAR)
        assert library.keep_sentences() == 2
        key = f"sentences:{library.index.path}"
        assert json.loads(user_cache().mark(key) or "")["model"] == "test/keywords"
    for leftover in folder.iterdir():  # the library removed and built again at the same path; the cache kept
        leftover.unlink()
    other = Document("bank.md", "A different text, last this time: the chunk the mark names is another one now.")
    with Library(folder, embeddings=KeywordEmbedder()) as library:  # type: ignore[arg-type]
        library.add(CAR, other)
        assert sentences_kept(library.index, library.embedder) == 0
        assert library.keep_sentences() == 2
        user_cache().set_mark(key, json.dumps({**json.loads(user_cache().mark(key) or ""), "model": "test/other"}))
        assert sentences_kept(library.index, library.embedder) == 0
        user_cache().set_mark(key, "not json")
        assert library.keep_sentences() == 2
        monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "another cache"))
        assert sentences_kept(library.index, library.embedder) == 0 and library.keep_sentences() == 2


def test_nothing_is_kept_for_a_model_on_another_machine(tmp_path: Path) -> None:
    embedder = KeywordEmbedder()
    embedder.address = "http://192.0.2.7:8080"  # never called: its sentences would leave the device
    with Library(None, embeddings=KeywordEmbedder()) as library:  # type: ignore[arg-type]
        library.add(BANK)
        embedder.calls.clear()
        assert keep_sentences(library.index, embedder) == 0 and embedder.calls == []  # type: ignore[arg-type]
        assert sentences_kept(library.index, embedder) is None  # type: ignore[arg-type]
        assert sentences_kept(library.index, None) is None
