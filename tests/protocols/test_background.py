"""The library's background embedding: one at a time (``EmbeddingLock``), its status, and what a search says while
the vectors are partial. The process itself runs on the real model in ``test_library_real``."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from minions.documents import Document
from minions.protocols.background import embedding_status, resume_embedding
from minions.protocols.embed_lock import EmbeddingLock, lock_path
from minions.protocols.library import Library

from .search.test_meaning import KeywordEmbedder


def test_the_lock_is_one_holders_at_a_time_and_reentrant_within_its_thread(tmp_path: Path) -> None:
    index = str(tmp_path / "library.sqlite")
    held = EmbeddingLock(index)
    assert held.holder() is None and held.acquire(wait=False)
    inner = EmbeddingLock(index)
    assert inner.acquire(wait=False)  # the same thread again: Library.embed inside the background process's run
    inner.release()
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.extend([EmbeddingLock(index).acquire(wait=False),
                                                           EmbeddingLock(index).holder()]))  # fmt: skip
    thread.start()
    thread.join()
    assert other == [False, os.getpid()]  # another thread (as another process) waits its turn, and sees who holds it
    held.release()
    assert EmbeddingLock(index).holder() is None and lock_path(index).is_file()


def test_a_search_while_vectors_are_missing_says_the_rest_is_found_by_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MINIONS_CACHE_DIR", str(tmp_path / "cache"))
    with Library(tmp_path / "lib", embeddings=KeywordEmbedder()) as library:  # type: ignore[arg-type]
        library.add(Document("bank.md", "The bank raised its interest rates twice this year."), embed=False)
        assert library.search("interest rates").ranking.about["meaning"] == "test/keywords: no vectors yet, words alone"
        library.embed()
        library.add(Document("car.md", "A red car was parked outside the office every morning."), embed=False)
        partial = library.search("a car").ranking.about["meaning"]
        assert partial == "test/keywords: 1 of 2 chunks so far, the rest by words"
        status = embedding_status(library)
        assert (status.embedded, status.total, status.running, status.complete) == (1, 2, False, False)
        assert resume_embedding(library) is None  # an embedder object: no process can make it again
        library.embed()
        assert library.search("a car").ranking.about["meaning"] == "test/keywords"
        assert not embedding_status(library).complete  # the sentences are still to be embedded ahead of questions
        library.keep_sentences()
        assert embedding_status(library).complete


def test_nothing_is_started_for_a_library_in_memory_or_without_a_model(tmp_path: Path) -> None:
    with Library(None, embeddings="none") as library:
        library.add(Document("a.md", "Some words."))
        assert resume_embedding(library) is None
    with Library(tmp_path / "lib", embeddings="none") as library:
        library.add(Document("a.md", "Some words."))
        assert resume_embedding(library) is None and not lock_path(library.index.path).exists()
