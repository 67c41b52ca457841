"""BM25 over the postings gives FTS5's own ``bm25()`` ranking, score for score, over real text (this project's
docs as a library, and a German page), within some documents, and after a document is removed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from minions.chunking import chunk_documents
from minions.documents import Document
from minions.protocols.search.index import SqliteIndex
from minions.protocols.search.postings import Postings
from minions.protocols.search.routing import profile
from minions.protocols.search.words import tokenize

ROOT = Path(__file__).resolve().parents[3]
QUESTIONS = [
    "How do I build llama.cpp with the lean flags?",
    "what does the library keep of a document when it is added",
    "the remote model plans and the local model reads chunks",
    "search time over ten times the filings",
    "if not",
    "Umsätze im Geschäftsjahr",
]


GERMAN = (
    "Die Umsätze im Geschäftsjahr 2024 stiegen um zwölf Prozent auf 31,8 Millionen Euro. Der Vorstand erwartet für "
    "das nächste Geschäftsjahr einen Umsatz zwischen 36 und 38 Millionen Euro, wenn die neuen Anlagen rechtzeitig "
    "fertig werden und die Nachfrage der Kunden anhält.\n\n"
) * 3
LANGUAGES = ("en", "de")


@pytest.fixture(scope="module")
def index() -> SqliteIndex:
    index = SqliteIndex()
    texts = {p.name: p.read_text(encoding="utf-8") for p in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]}
    for name, text in {**texts, "bericht.txt": GERMAN}.items():
        d = Document.from_text(text, name=name)
        chunks = chunk_documents([d], size=600)
        index.add(d, chunks, key=d.name, sha256=d.name, size=len(d.text), profile=profile(d, len(chunks)))
    return index


def fts5(index: SqliteIndex, terms: list[str], documents: list[int] | None, k: int) -> list[tuple[int, float]]:
    match = "terms : (" + " OR ".join(f'"{t}"' for t in terms) + ")"
    if documents is not None:
        match += " AND doc : (" + " OR ".join(map(str, documents)) + ")"
    rows = index._db.execute(
        "SELECT rowid, -bm25(chunk_terms, 1.0, 0.0) AS score FROM chunk_terms WHERE chunk_terms MATCH ? "
        "ORDER BY score DESC, rowid LIMIT ?",
        (match, k),
    ).fetchall()
    return [(int(i), float(s)) for i, s in rows]


def ids(index: SqliteIndex, *names: str) -> list[int]:
    return index._ids(list(names))


@pytest.mark.parametrize("question", QUESTIONS)
def test_the_postings_rank_as_fts5_scores(index: SqliteIndex, question: str) -> None:
    terms = list(dict.fromkeys(tokenize(question, LANGUAGES)))
    for documents in (None, ids(index, "README.md", "library.md", "bericht.txt")):
        ours = Postings(index._db).scores(terms, documents=documents).best(40)
        theirs = fts5(index, terms, documents, 40)
        assert [i for i, _ in ours] == [i for i, _ in theirs]
        assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], rel=1e-12)
        assert ours  # every question here has terms in the docs


def test_a_removed_document_leaves_no_postings_and_the_rest_still_rank_as_fts5() -> None:
    index = SqliteIndex()
    for path in (ROOT / "README.md", ROOT / "docs" / "library.md", ROOT / "docs" / "install.md"):
        d = Document.from_text(path.read_text(encoding="utf-8"), name=path.name)
        chunks = chunk_documents([d], size=600)
        index.add(d, chunks, key=d.name, sha256=d.name, size=len(d.text), profile=profile(d, len(chunks)))
    gone = ids(index, "library.md")[0]
    assert index.remove("library.md")
    assert index._db.execute("SELECT count(*) FROM postings WHERE doc = ?", (gone,)).fetchone()[0] == 0
    held = dict(index._db.execute("SELECT term, chunks FROM term_chunks").fetchall())
    counted: dict[str, int] = {}
    for (terms,) in index._db.execute("SELECT terms FROM chunks"):
        for t in set(terms.split()):
            counted[t] = counted.get(t, 0) + 1
    assert held == counted
    terms = list(dict.fromkeys(tokenize(QUESTIONS[1])))
    ours = Postings(index._db).scores(terms).best(20)
    assert ours and [i for i, _ in ours] == [i for i, _ in fts5(index, terms, None, 20)]


def test_ties_are_broken_by_chunk_id_and_a_term_nowhere_scores_nothing() -> None:
    index = SqliteIndex()
    text = "alpha beta gamma.\n\n" * 3
    d = Document.from_text(text, name="same.txt")
    chunks = chunk_documents([d], size=20)
    index.add(d, chunks, key="same.txt", sha256="x", size=len(text), profile=profile(d, len(chunks)))
    best = Postings(index._db).scores(["alpha", "nowhere"]).best(10)
    assert [i for i, _ in best] == sorted(i for i, _ in best) and len({s for _, s in best}) == 1
    assert [i for i, _ in best] == [i for i, _ in fts5(index, ["alpha", "nowhere"], None, 10)]
    assert Postings(index._db).scores(["nowhere"]).best(10) == []


def test_an_index_of_format_2_gains_its_postings_in_place_and_keeps_its_chunks_and_vectors(tmp_path: Path) -> None:
    path = tmp_path / "library.sqlite"
    index = SqliteIndex(path)
    for name in ("README.md", "install.md"):
        source = ROOT / name if name == "README.md" else ROOT / "docs" / name
        d = Document.from_text(source.read_text(encoding="utf-8"), name=name)
        chunks = chunk_documents([d], size=600)
        index.add(d, chunks, key=name, sha256=name, size=len(d.text), profile=profile(d, len(chunks)))
    index.use_vector_model("stand-in")
    chunk_ids = [i for (i,) in index._db.execute("SELECT id FROM chunks ORDER BY id")]
    index.add_vectors(chunk_ids, np.eye(len(chunk_ids), 8, dtype=np.float32))
    before = [(r.chunk.document, r.chunk.index, r.score) for r in index.search(QUESTIONS[0], k=10)]
    # what format 2 was: no postings, no token counts
    index._db.executescript(
        "DROP TABLE postings; DROP TABLE term_chunks; ALTER TABLE documents DROP COLUMN tokens;"
        "UPDATE meta SET value = '2' WHERE key = 'format';"
    )
    index.close()
    again = SqliteIndex(path)
    assert again._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] == "3"
    assert [(r.chunk.document, r.chunk.index, r.score) for r in again.search(QUESTIONS[0], k=10)] == before
    assert [i for (i,) in again._db.execute("SELECT id FROM chunks ORDER BY id")] == chunk_ids
    assert again.vector_count() == len(chunk_ids) and again.outdated() == []
