"""The library: its SQLite index (real SQLite FTS5), routing by covers, and ``Library`` adding, refreshing and
asking (the scripted backend for protocol logic; the real model in ``test_library_real.py``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from minions.backends.scripted import ScriptedBackend
from minions.chunking import Chunk, chunk_documents
from minions.documents import Document, Page
from minions.errors import ConfigError
from minions.protocols.library import INDEX_FILE, Library
from minions.protocols.search.index import SqliteIndex
from minions.protocols.search.rank import _route_doubted, search_library
from minions.protocols.search.ranking import Ranked, lexical_rank
from minions.protocols.search.routing import (
    COVER_CHARS,
    Route,
    name_pairs,
    period_year,
    profile,
    question_dates,
    question_years,
    route,
)
from minions.protocols.search.words import tokenize

from .helpers import quote_reply


def cover(company: str, form: str, ended: str, body: str) -> str:
    return (
        f"UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nWashington, D.C. 20549\nFORM {form}\n"
        f"ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d)\nFor the fiscal year ended {ended}\n{company}\n"
        "(Exact name of registrant as specified in its charter)\n\n" + body
    )


FILLER = "The company sells products to customers through retail stores and online channels in many countries. "
ACME_2018 = cover(
    "ACME WIDGETS INC.",
    "10-K",
    "December 31, 2018",
    FILLER * 30 + "\n\nCapital expenditures were $412 million in 2018, against $380 million in 2017.\n\n" + FILLER * 8,
)
ACME_2020 = cover(
    "ACME WIDGETS INC.",
    "10-K",
    "December 31, 2020",
    FILLER * 30 + "\n\nCapital expenditures were $515 million in 2020, against $440 million in 2019.\n\n" + FILLER * 8,
)
ZENITH_2018 = cover(
    "ZENITH FOODS CORPORATION",
    "10-K",
    "December 29, 2018",
    FILLER * 30 + "\n\nCapital expenditures were $97 million in 2018.\n\n" + FILLER * 8,
)
DOCS = {
    "acme-2018.txt": ACME_2018,
    "acme-2020.txt": ACME_2020,
    "zenith-2018.txt": ZENITH_2018,
    "notes.md": "# Notes\n\nThe meeting moved to Thursday. " + FILLER * 3,
}


def doc(name: str) -> Document:
    return Document.from_text(DOCS[name], name=name)


def index_of(texts: dict[str, str]) -> SqliteIndex:
    """A new index of ``texts`` (name -> text), profiled as the library profiles them."""
    index = SqliteIndex()
    for name, text in texts.items():
        d = Document.from_text(text, name=name)
        chunks = chunk_documents([d], size=400)
        index.add(d, chunks, key=name, sha256=name, size=1, profile=profile(d, len(chunks)))
    return index


def filled(index: SqliteIndex, *names: str, size: int = 400) -> SqliteIndex:
    for n in names:
        d = doc(n)
        chunks = chunk_documents([d], size=size)
        index.add(d, chunks, key=n, sha256=n, size=len(d.text), profile=profile(d, len(chunks)))
    return index


# -- the index ----------------------------------------------------------------------------------------------------
def test_search_finds_chunks_with_their_document_and_place_and_ranks_as_bm25_does() -> None:
    index = filled(SqliteIndex(), *DOCS)
    hits = index.search("capital expenditures 2020", k=3)
    assert hits[0].chunk.document == "acme-2020.txt" and "$515 million" in hits[0].chunk.text
    first = hits[0].chunk
    assert DOCS[first.document][first.start : first.end] == first.text
    # restricted to one document, the best chunk is the one the in-memory BM25 ranks first
    only = index.search("capital expenditures", documents=["zenith-2018.txt"], k=5)
    assert {h.chunk.document for h in only} == {"zenith-2018.txt"}
    memory = lexical_rank(chunk_documents([doc("zenith-2018.txt")], size=400), "capital expenditures")
    assert only[0].chunk.text == memory[0].chunk.text
    assert index.search("the of and", k=5) == []  # stop words only: nothing to match
    assert index.search("expenditures", documents=["no-such.txt"], k=5) == []


def test_the_figure_prior_lifts_chunks_dense_in_figures_for_quantity_questions() -> None:
    words = Document.from_text("Customers, customers, customers: loyal customers came back.", name="words.txt")
    table = Document.from_text("Customers 2018 $1,200 $1,100 $950 12% 8% 3,400 2,900", name="table.txt")
    index = SqliteIndex()
    for d in (words, table):
        index.add(d, chunk_documents([d]), key=d.name, sha256=d.name, size=1, profile={})
    assert index.search("customers", question="who are the customers", k=2)[0].chunk.document == "words.txt"
    assert index.search("customers", question="how many customers", k=2)[0].chunk.document == "table.txt"


def test_removing_or_replacing_a_document_leaves_no_trace_in_the_search(tmp_path: Path) -> None:
    index = filled(SqliteIndex(tmp_path / "i.sqlite"), "acme-2018.txt", "zenith-2018.txt")
    assert index.remove("zenith-2018.txt") and not index.remove("zenith-2018.txt")
    assert all(h.chunk.document != "zenith-2018.txt" for h in index.search("capital expenditures", k=20))
    changed = Document.from_text(ACME_2018.replace("$412 million", "$999 million"), name="acme-2018.txt")
    index.add(changed, chunk_documents([changed], size=400), key="acme-2018.txt", sha256="new", size=1, profile={})
    texts = " ".join(h.chunk.text for h in index.search("capital expenditures", k=20))
    assert "$999 million" in texts and "$412 million" not in texts
    assert [d.name for d in index.documents()] == ["acme-2018.txt"]
    assert index.document_frequency(["zenith", "acme", "widget"]) == {"acme": 1, "widget": 1}
    index.close()
    again = SqliteIndex(tmp_path / "i.sqlite")  # persists, and the document comes back whole
    restored = again.document("acme-2018.txt")
    assert restored.text == changed.text and restored.sections == changed.sections
    assert [d.name for d in again.documents()] == ["acme-2018.txt"]
    filled(SqliteIndex(tmp_path / "i.sqlite"), "notes.md")  # another connection (another process) adds one
    assert [d.name for d in again.documents()] == ["acme-2018.txt", "notes.md"]


def test_a_failure_while_adding_leaves_no_half_written_document(monkeypatch: pytest.MonkeyPatch) -> None:
    index = filled(SqliteIndex(), "acme-2018.txt")
    d = doc("zenith-2018.txt")
    chunks = chunk_documents([d], size=400)
    broken = [*chunks[:2], None]  # the third chunk fails after two are written
    with pytest.raises(AttributeError):
        index.add(d, broken, key="z", sha256="z", size=1, profile={})  # type: ignore[list-item]
    assert [x.name for x in index.documents()] == ["acme-2018.txt"]
    assert all(h.chunk.document == "acme-2018.txt" for h in index.search("capital expenditures", k=50))


def test_an_index_of_another_format_is_rebuilt_and_a_file_that_is_not_one_says_so(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    filled(SqliteIndex(path), "acme-2018.txt").close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'format'")
    index = SqliteIndex(path)
    assert index.documents() == []
    assert [o.name for o in index.outdated()] == ["acme-2018.txt"]
    index.close()
    assert [o.name for o in SqliteIndex(path).outdated()] == ["acme-2018.txt"]  # kept until indexed again
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ConfigError, match="not a library index"):
        SqliteIndex(junk)


def test_a_library_of_an_older_format_indexes_its_documents_again_without_their_files(tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    for name in ("acme-2018.txt", "zenith-2018.txt"):
        (files / name).write_text(DOCS[name])
    with Library(tmp_path / "lib") as library:
        library.add(files)
        before = library.search("Zenith capital expenditures").ranking.ranked[0].chunk
    with sqlite3.connect(tmp_path / "lib" / INDEX_FILE) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'format'")
        # the second document's stored text is of a layout this version cannot read
        db.execute("UPDATE documents SET body = ? WHERE name = 'zenith-2018.txt'", (b"old layout",))
    (files / "acme-2018.txt").unlink()  # its stored text is all there is of the first
    with Library(tmp_path / "lib") as library:
        assert sorted(d.name for d in library.carried.added) == ["acme-2018.txt", "zenith-2018.txt"]
        assert sorted(d.name for d in library.documents) == ["acme-2018.txt", "zenith-2018.txt"]
        assert library.search("Zenith capital expenditures").ranking.ranked[0].chunk == before
    with sqlite3.connect(tmp_path / "lib" / INDEX_FILE) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'format'")
        db.execute("UPDATE documents SET body = ? WHERE name = 'acme-2018.txt'", (b"old layout",))
    with Library(tmp_path / "lib") as library:  # no stored text and no file: listed, with the reason
        assert [name for name, _ in library.carried.skipped] == ["acme-2018.txt"]
        assert "is gone or has changed" in library.carried.skipped[0][1]
        assert [d.name for d in library.documents] == ["zenith-2018.txt"]


# -- routing ------------------------------------------------------------------------------------------------------
def test_a_profile_reads_form_and_period_off_the_cover() -> None:
    p = profile(doc("acme-2018.txt"))
    assert (p["form"], p["year"]) == ("10-K", 2018) and "acme" in p["terms"]
    jnj = Document.from_text(cover("JOHNSON & JOHNSON", "10-K", "January 1, 2023", FILLER), name="j.txt")
    assert profile(jnj)["year"] == 2022  # a 52/53-week year that ends in early January is the year before's
    release = Document.from_text(
        "Acme reports fourth quarter and full year 2022 results\nNet sales of $3.2 billion.\n" + FILLER, name="r.txt"
    )
    assert (profile(release)["form"], profile(release)["year"]) == ("earnings", 2022)
    assert question_years("FY2018 vs FY17, fiscal 2016 and Q2 2023") == [2018, 2017, 2016, 2023]
    assert period_year("As of FY 2021, how much will it pay for retirees in 2024?") == 2021  # the period asked
    assert period_year("What was revenue in 2019 and 2020?") == 2020 and period_year("What is it?") is None


def test_route_picks_the_company_then_the_year_and_keeps_all_when_the_question_names_none() -> None:
    index = filled(SqliteIndex(), *DOCS)
    profiles = {d.name: d.profile for d in index.documents()}

    def routed(q: str) -> list[str]:
        from minions.protocols.search.words import tokenize

        r = route(q, profiles, index.document_frequency(tokenize(q)), limit=2)
        return r.documents if r.routed else []

    assert routed("What were Acme's capital expenditures in FY2020?") == ["acme-2020.txt", "acme-2018.txt"]
    assert routed("What were Acme's capital expenditures in FY2018?")[0] == "acme-2018.txt"
    assert routed("What were Zenith Foods' capital expenditures?")[0] == "zenith-2018.txt"
    assert routed("What were capital expenditures?") == []  # no document named: all are searched
    found = search_library(index, "What were Zenith Foods' capital expenditures in 2018?", k=5)
    assert found.route.routed and found.ranking.ranked[0].chunk.document == "zenith-2018.txt"
    assert "zenith" in found.route.why["zenith-2018.txt"]


# -- Library ------------------------------------------------------------------------------------------------------
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    for name, text in DOCS.items():
        (root / ("sub" if name == "notes.md" else "") / name).write_text(text)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (root / ".hidden.txt").write_text("hidden")
    return root


def test_a_library_adds_a_folder_goes_on_past_a_bad_file_and_persists(tmp_path: Path) -> None:
    root = folder(tmp_path)
    seen = []
    with Library(tmp_path / "lib") as library:
        report = library.add(root, on_progress=seen.append)
    assert sorted(d.name for d in report.added) == sorted(DOCS)
    assert [f for f, _ in report.skipped] == [str(root / "broken.pdf")] and report.skipped[0][1]
    assert [p.files for p in seen] == [1, 2, 3, 4, 5] and {p.files_total for p in seen} == {5}
    assert seen[-1].status == "added" and seen[-1].chunks == sum(d.chunks for d in report.added)
    with Library(tmp_path / "lib") as again:  # another process's view: the same documents, nothing re-read
        assert sorted(d.name for d in again.documents) == sorted(DOCS)
        second = again.add(root)
        assert second.added == [] and len(second.unchanged) == 4


def test_refresh_reads_changed_files_again_and_forgets_removed_ones(tmp_path: Path) -> None:
    root = folder(tmp_path)
    library = Library(tmp_path / "lib.sqlite")
    library.add(root)
    (root / "zenith-2018.txt").write_text(ZENITH_2018.replace("$97 million", "$123 million"))
    (root / "acme-2020.txt").unlink()
    report = library.refresh()
    assert [d.name for d in report.added] == ["zenith-2018.txt"] and report.removed == ["acme-2020.txt"]
    assert "$123 million" in library.document("zenith-2018.txt").text
    with pytest.raises(ConfigError, match=r"No document 'acme-2020\.txt'"):
        library.document("acme-2020.txt")


def test_files_of_the_same_name_in_two_folders_get_two_names(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "report.txt").write_text(f"Report of team {sub}. " + FILLER)
    library = Library()
    library.add(tmp_path / "a", tmp_path / "b")
    assert sorted(d.name for d in library.documents) == ["report (2).txt", "report.txt"]


def test_ask_routes_ranks_and_names_document_and_place_of_the_evidence() -> None:
    def reply(messages, params):  # type: ignore[no-untyped-def]
        return quote_reply(params, "$515 million", "$515 million")

    library = Library(local=ScriptedBackend(responder=reply), read_chunks=2)
    for name in DOCS:
        library.add(doc(name))
    result = library.ask("What were Acme's capital expenditures in FY2020?")
    assert "$515 million" in result.answer
    assert result.citations[0].document == "acme-2020.txt"
    assert result.evidence and all(e.document in DOCS for e in result.evidence)
    routed = result.reading["library"]
    assert routed["routed"] and routed["documents"][0] == "acme-2020.txt" and routed["of"] == 4
    # the route lifts its documents; every chunk of the library is still searched
    assert result.reading["chunks"] == sum(d.chunks for d in library.documents)
    only = library.ask("What were capital expenditures?", documents=["zenith-2018.txt"])
    assert {e.document for e in only.evidence} == {"zenith-2018.txt"}
    with pytest.raises(ConfigError, match=r"No document 'nope\.txt'"):
        library.ask("What?", documents=["nope.txt"])
    with pytest.raises(ConfigError, match="empty"):
        Library(local=ScriptedBackend(responder=reply)).ask("What?")


def test_a_librarys_question_weighs_the_sentences_it_reads_with_the_librarys_own_model(tmp_path: Path) -> None:
    """The run weighs the sentences it offers and the quotes it answers with by the model that ranked the chunks
    (the library's, pinned to its vectors), not the one the run's options would name; words alone without one."""
    from .search.test_meaning import KeywordEmbedder

    def reply(messages, params):  # type: ignore[no-untyped-def]
        return quote_reply(params, "$515 million", "$515 million")

    for model, by in ((KeywordEmbedder(), "test/keywords"), ("none", "words")):
        local = ScriptedBackend(responder=reply)
        with Library(tmp_path / by.replace("/", "-"), local=local, read_chunks=2, embeddings=model) as library:
            for name in DOCS:
                library.add(doc(name))
            result = library.ask("What were Acme's capital expenditures in FY2020?")
            assert result.reading["sentences"] == by and "$515 million" in result.answer


def test_the_index_cli_adds_folders_and_reports_each_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from minions.apps.cli.main import main

    root = folder(tmp_path)
    assert main(["index", str(root), "--library", str(tmp_path / "lib"), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["status"] for line in lines[:-1]].count("added") == 4
    assert lines[-1]["documents"] == 4 and lines[-1]["skipped"][0][0].endswith("broken.pdf")
    assert lines[-1]["disk_bytes"] > 0


def test_a_cover_whose_name_came_out_broken_is_still_found_by_its_rarest_word() -> None:
    """PDF text can split a name ("MGM R ESORTS I NTERNATIONAL"): the document that holds the question's rarest
    naming word stays a candidate, and its year then puts it first."""
    texts = {
        "mgm-2018.txt": cover("MGM R ESORTS I NTERNATIONAL", "10-K", "December 31, 2018", FILLER * 30),
        "mgm-2020.txt": cover("MGM RESORTS INTERNATIONAL", "10-K", "December 31, 2020", FILLER * 30),
        "mgm-2022.txt": cover("MGM RESORTS INTERNATIONAL", "10-K", "December 31, 2022", FILLER * 30),
        "hotel.txt": cover("HOTEL RESORTS INTERNATIONAL TRUST", "10-K", "December 31, 2018", FILLER * 30),
        "acme.txt": cover("ACME RESORTS INTERNATIONAL", "10-K", "December 31, 2018", FILLER * 30),
        "zenith-2018.txt": ZENITH_2018,
    }
    index = index_of(texts)
    found = search_library(index, "What were MGM Resorts International's accounts payable at the end of FY2018?")
    assert found.route.documents[0] == "mgm-2018.txt"


def test_two_common_words_side_by_side_name_the_company_they_name_together() -> None:
    """ "Best Buy": "best" and "buy" are in every document and name none (or hardly); side by side on a cover they
    name Best Buy's filings, as a rare word would; merely both present, or the other way round, they do not. A
    question that names a quarter then prefers the quarter's report, one that names no period the latest."""
    prose = "We buy the best materials and sell the best products that customers buy. "
    covers = [
        ("bestbuy-2019", "BEST BUY CO., INC.", "10-K", "February 2, 2019"),
        ("bestbuy-2023", "BEST BUY CO., INC.", "10-K", "January 28, 2023"),
        ("bestbuy-q2", "BEST BUY CO., INC.", "10-Q", "July 29, 2023"),
        ("goodfood-2023", "GOOD FOOD CORPORATION", "10-K", "December 31, 2023"),
        ("acme-2023", "ACME WIDGETS INC.", "10-K", "December 31, 2023"),
        ("zenith-2023", "ZENITH BUY BEST TRUST", "10-K", "December 31, 2023"),
    ]
    texts = {f"{name}.txt": cover(company, form, ended, prose * 20) for name, company, form, ended in covers} | {
        "retail-2023.txt": cover("RETAIL TRUST", "10-K", "December 31, 2023", FILLER * 40 + "Best Buy is a tenant."),
    }
    index = index_of(texts)
    found = search_library(index, "Are Best Buy's gross margins consistent from year to year?")
    assert found.route.routed and found.route.documents == ["bestbuy-2023.txt", "bestbuy-q2.txt", "bestbuy-2019.txt"]
    assert "best buy" in found.route.why["bestbuy-2023.txt"]
    quarter = search_library(index, "What were Best Buy's gross margins in Q2 of FY2024?").route
    assert (
        quarter.documents[:2] == ["bestbuy-q2.txt", "bestbuy-2023.txt"] and "form 10-Q" in quarter.why["bestbuy-q2.txt"]
    )
    older = search_library(index, "What were Best Buy's gross margins in fiscal 2019?").route
    assert older.documents[0] == "bestbuy-2019.txt"
    profiles = {d.name: d.profile for d in index.documents()}
    heading = "What Were Best Buy's Gross Margins In Each Year"  # in capitals throughout: no name in particular
    assert name_pairs(heading, profiles) == [] and name_pairs("What were Best Buy's margins?", profiles) == ["best buy"]
    words = route("Are Best Buy's gross margins?", profiles, index.document_frequency(["best", "buy"]))
    assert not words.routed  # the words alone name none
    # terms side by side as the index keeps them ("buy the best" is "buy best"); a phrase in none is left out
    assert index.phrase_documents(["best buy", "buy best", "gross zzz"]) == {
        "best buy": ["bestbuy-2019.txt", "bestbuy-2023.txt", "bestbuy-q2.txt", "retail-2023.txt"],
        "buy best": sorted(set(texts) - {"retail-2023.txt"}),
    }
    on_covers = index.phrase_documents(["best buy"], before=COVER_CHARS)  # the tenant is deep in the text
    assert on_covers == {"best buy": ["bestbuy-2019.txt", "bestbuy-2023.txt", "bestbuy-q2.txt"]}


def test_a_day_the_question_names_picks_the_8k_of_that_day() -> None:
    """An 8-K's cover dates it ("Date of Report ... August 30, 2023"): a question that names the day asks for that
    one among the company's filings of the year; a 10-K's cover day (its year's end) is shared, and adds nothing."""

    def current_report(day: str, event: str) -> str:
        return (
            "UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nFORM 8-K\nCURRENT REPORT\n"
            f"Date of Report (Date of earliest event reported): {day}\nACME WIDGETS INC.\n\n{event}\n" + FILLER * 30
        )

    texts = {
        "acme-8k-may.txt": current_report("May 3, 2023", "The annual meeting elected the directors."),
        "acme-8k-aug.txt": current_report("August 30, 2023", "The separation of the tools business completed."),
        "acme-10k.txt": cover("ACME WIDGETS INC.", "10-K", "December 31, 2023", FILLER * 60),
        "zenith-2023.txt": cover("ZENITH FOODS CORPORATION", "10-K", "December 31, 2023", FILLER * 30),
    }
    index = index_of(texts)
    assert question_dates("What did Acme complete on August 30, 2023?") == ["august 30 2023"]
    found = search_library(index, "What did Acme complete on August 30, 2023?").route
    assert found.documents[0] == "acme-8k-aug.txt" and "dated august 30 2023" in found.why["acme-8k-aug.txt"]
    assert search_library(index, "What did Acme complete on May 3, 2023?").route.documents[0] == "acme-8k-may.txt"
    # the day alone decides between two 8-Ks whose covers hold the same words
    twins = {n: {"terms": ["acme", "august", "30", "2023"], "form": "8-K", "year": 2023} for n in ("a", "b", "c", "d")}
    twins["e"] = {"terms": ["zenith"], "form": "10-K", "year": 2023}
    q = "What did Acme complete on August 30, 2023?"
    assert route(q, twins, limit=2).documents == ["a", "b"]
    assert route(q, twins, dates={"august 30 2023": ["c"]}, limit=2).documents[0] == "c"
    q = "What did Acme report for the year ended December 31, 2023?"
    days = index.phrase_documents(question_dates(q), before=COVER_CHARS)
    assert days == {"december 31 2023": ["acme-10k.txt", "zenith-2023.txt"]}
    profiles = {d.name: d.profile for d in index.documents()}
    frequency = index.document_frequency(tokenize(q))
    assert route(q, profiles, frequency, dates=days) == route(q, profiles, frequency)  # a year's end: shared


def test_the_covers_words_kept_between_questions_follow_a_changed_library() -> None:
    """The cover words are looked up by word, kept while the profiles are the same objects: a document added, or a
    profile read again with other words, routes the next question by what the covers say now."""
    profiles = {n: {"terms": [n, "widgets"], "chunks": 10} for n in ("acme", "zenith", "orbit", "nova")}
    assert route("What does Acme sell?", profiles, limit=1).documents == ["acme"]
    assert route("What does Zenith sell?", profiles, limit=1).documents == ["zenith"]  # the words kept
    profiles["apex"] = {"terms": ["apex", "widgets"], "chunks": 10}
    assert route("What does Apex sell?", profiles, limit=1).documents == ["apex"]
    profiles["orbit"] = {"terms": ["orbit", "acme", "widgets"], "chunks": 10}  # read again: the same name, new words
    assert route("What does Acme sell?", profiles, limit=2).documents == ["acme", "orbit"]


def test_a_question_that_names_no_period_asks_for_the_latest_report_of_the_form_it_names() -> None:
    acme = {"terms": ["acme"], "chunks": 100}
    profiles = {
        "acme-10k-2021": acme | {"form": "10-K", "year": 2021},
        "acme-10q-2023": acme | {"form": "10-Q", "year": 2023},
        "acme-paper": acme | {"form": None, "year": 2024},  # no form: a paper's year says nothing of a period
        "zenith": {"terms": ["zenith"], "form": "10-K", "year": 2023},
    }
    assert route("Which companies did Acme acquire?", profiles, limit=1).documents == ["acme-10q-2023"]
    assert route("Which companies did Acme acquire, says its 10-K?", profiles, limit=1).documents == ["acme-10k-2021"]


def test_a_word_only_one_document_says_names_it_when_no_cover_names_any() -> None:
    """ "AMEX" is on no cover (American Express's spells its name out) but in its filing alone: a question that no
    cover word names goes there; one whose words are everywhere still searches every document."""
    texts = {
        "amex-2022.txt": cover("AMERICAN EXPRESS COMPANY", "10-K", "December 31, 2022", FILLER * 30 + "Amex cards."),
        "acme-2022.txt": cover("ACME WIDGETS INC.", "10-K", "December 31, 2022", FILLER * 30),
        "zenith-2022.txt": cover("ZENITH FOODS CORPORATION", "10-K", "December 31, 2022", FILLER * 30),
        "good-2022.txt": cover("GOOD FOOD CORPORATION", "10-K", "December 31, 2022", FILLER * 30),
    }
    index = index_of(texts)
    found = search_library(index, "Does AMEX have an improving operating margin profile?").route
    assert found.routed and found.documents == ["amex-2022.txt"] and "amex" in found.why["amex-2022.txt"]
    assert not search_library(index, "Does it have an improving operating margin profile?").route.routed


def _zenith_and_others() -> SqliteIndex:
    """Four 10-Ks: Zenith's, whose exhibit list says its name five times and whose tax rate is in one sentence, and
    three others that speak of tax rates in general."""
    tax = "Our effective tax rate and income tax expense reflect the tax rate of each country where we sell. "
    others = (tax + FILLER * 4) * 2 + FILLER * 30
    zenith = (
        ("Zenith sells food to customers in stores. " + FILLER)
        * 12
        + "\n\nExhibits: 10.1 Zenith Foods stock plan; 10.2 Zenith Foods rate agreement; 10.3 Zenith Foods Europe; "
        "10.4 Zenith Foods Asia; 10.5 Zenith Foods Canada.\n\n"
        + FILLER * 3
        + "\n\nThe effective tax rate was 21.0 percent in 2022 against 19.5 percent in 2021.\n\n"
        + FILLER * 3
    )
    return index_of(
        {
            "zenith-2022.txt": cover("ZENITH FOODS CORPORATION", "10-K", "December 31, 2022", zenith),
            "acme-2022.txt": cover("ACME WIDGETS INC.", "10-K", "December 31, 2022", others),
            "good-2022.txt": cover("GOOD DRINKS CORPORATION", "10-K", "December 31, 2022", others),
            "bold-2022.txt": cover("BOLD TOOLS CORPORATION", "10-K", "December 31, 2022", others),
        }
    )


def test_the_name_that_routed_a_question_weighs_what_it_says_within_the_documents_it_named() -> None:
    """A company's name is rare in a library and in most chunks of its own filing: weighed by the library, it ranks
    first the chunks that say it most (an exhibit list). Weighed within the routed filing, the passage that answers
    comes first, as a search of that filing alone ranks it."""
    index = _zenith_and_others()
    question = "What was the effective tax rate of Zenith?"
    found = search_library(index, question)
    assert found.route.documents == ["zenith-2022.txt"] and found.route.names == ("zenith",)
    assert "21.0 percent" in found.ranking.ranked[0].chunk.text
    by_library = index.search(question, documents=["zenith-2022.txt"], k=3)
    assert "21.0 percent" not in by_library[0].chunk.text and "Zenith" in by_library[0].chunk.text


def test_a_search_within_the_documents_a_user_names_weighs_their_name_within_them() -> None:
    """Asked of Zenith's filing alone (the app's one file, ``documents=``), the question's word on its cover that
    names it in the library ("Zenith", not "tax") weighs what it says within that filing, as a routed name does."""
    index = _zenith_and_others()
    question = "What was the effective tax rate of Zenith?"
    within = search_library(index, question, documents=["zenith-2022.txt"])
    assert not within.route.routed and within.route.names == ("zenith",)
    assert "21.0 percent" in within.ranking.ranked[0].chunk.text
    everywhere = search_library(index, "What is an effective tax rate?")
    assert everywhere.route.names == ()


def test_the_cli_says_which_documents_a_library_question_searched_and_why() -> None:
    from rich.console import Console

    from minions.apps.cli.render import print_result

    library = Library(local=ScriptedBackend(responder=lambda m, p: quote_reply(p, "$515 million", "$515 million")))
    for name in DOCS:
        library.add(doc(name))
    console = Console(record=True, width=200)
    print_result(library.ask("What were Acme's capital expenditures in FY2020?"), local_name="l", remote_name=None,
                 console=console)  # fmt: skip
    shown = console.export_text()
    assert (
        "searched acme-2020.txt (cover names acme; period 2020), acme-2018.txt" in shown and "of 4 documents" in shown
    )


def test_the_index_spreads_pages_as_the_in_memory_ranking_does() -> None:
    first, second = "Revenue grew. Revenue, revenue, revenue: 1,200.", "Revenue rose again; revenue of 1,300."
    text = f"{first}\n\n{second}"
    pages = (Page(1, 0, len(first)), Page(2, len(first) + 2, len(text)))
    d = Document(name="filing.pdf", text=text, pages=pages)
    chunks = chunk_documents([d], size=20)  # several chunks a page
    assert len(chunks) > 2
    index = SqliteIndex()
    index.add(d, chunks, key=d.name, sha256=d.name, size=1, profile={})
    hits = index.search("revenue", k=4)
    memory = lexical_rank(chunks, "revenue")[:4]
    assert [h.chunk.pages for h in hits][:2] in ([(1,), (2,)], [(2,), (1,)])  # one of each page first
    assert [(h.chunk.index, h.chunk.pages) for h in hits] == [(m.chunk.index, m.chunk.pages) for m in memory]


def _ranked(*documents: str) -> list[Ranked]:
    return [Ranked(Chunk(d, i, "text", 0, 4), 1.0 - i / 100) for i, d in enumerate(documents)]


def test_meaning_doubts_a_route_whose_documents_hold_few_of_the_closest_chunks() -> None:
    to_a = Route(["a.md"], {}, 12, True)
    assert not _route_doubted(to_a, _ranked("a.md", "b.md", "a.md", *["c.md"] * 7))  # 2 of the 10 closest
    assert _route_doubted(to_a, _ranked("b.md", "a.md", *["c.md"] * 8))  # 1 of 10


def test_a_route_meaning_doubts_gives_way_to_every_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The question's rare word is on one report's cover, its subject in another report's text: by words alone the
    route lifts the first, and the other's chunk still ranks beside it (a route is evidence, not a wall); with
    meaning, the closest chunks lie elsewhere, the route gives way, and the other's chunk ranks first."""
    from minions.protocols.search import routing

    from .search.test_meaning import KeywordEmbedder

    monkeypatch.setattr(routing, "COVER_CHARS", 40)  # a cover is the title line here
    names = ["Harbor Logistics", "Northwind Solar", "Borealis Mining", "Cascade Foods", "Delta Freight", "Evergreen",
             "Fjord Energy", "Granite Homes", "Helix Labs", "Iris Media", "Juniper Farms", "Kestrel Air"]  # fmt: skip
    bodies = {0: "The bank cut the harbor fees.", 1: "The red car was sold in March to a dealer."}
    docs = [
        Document(f"r{i}.md", f"# {name} annual report\n\n{bodies.get(i, 'The year went as planned.')}\n")
        for i, name in enumerate(names)
    ]
    question = "What does the Harbor report say about the car?"
    with Library(tmp_path / "words", embeddings="none") as words:
        words.add(*docs)
        found = words.search(question)
        ranked = [r.chunk.document for r in found.ranking.ranked]
        assert found.route.documents == ["r0.md"] and {"r0.md", "r1.md"} <= set(ranked[:2])
    with Library(tmp_path / "meaning", embeddings=KeywordEmbedder()) as meaning:
        meaning.add(*docs)
        found = meaning.search(question)
        assert found.ranking.about["route_doubted"] == ["r0.md"] and not found.route.routed
        assert found.ranking.ranked[0].chunk.document == "r1.md"


def test_a_note_the_next_filing_repeats_gives_its_place_to_a_passage_that_says_more(tmp_path: Path) -> None:
    """Two years of one company's reports repeat their lease note word for word; the older one also says what the
    rent was. The repeat goes after that passage, not before it (``ranking.spread_repeats``), and is still there.
    The same report added twice under two names: a copy's chunk goes after the chunks that say something else."""
    note = (
        "Leases of warehouses are recognised as right-of-use assets over the lease term, at the present value of "
        "the payments. A warehouse lease that can be extended is recognised over the extended term where the "
        "extension is reasonably certain. Short warehouse leases are expensed as paid. "
    )
    rent = "Rent for the Ohio warehouse was $4 million, under a lease ending in 2027. "
    newer = cover("ACME WIDGETS INC.", "10-K", "December 31, 2020", FILLER * 12 + note + FILLER * 12)
    body = FILLER * 12 + note + FILLER * 12 + rent + FILLER * 12
    older = cover("ACME WIDGETS INC.", "10-K", "December 31, 2019", body)
    question = "How are warehouse leases recognised?"
    with Library(tmp_path / "years", embeddings="none") as library:
        library.add(Document.from_text(newer, name="acme-2020.txt"), Document.from_text(older, name="acme-2019.txt"))
        ranked = library.search(question).ranking.ranked
        said = [(r.chunk.document, "lease term" in r.chunk.text, "Rent" in r.chunk.text) for r in ranked]
        assert said == [("acme-2020.txt", True, False), ("acme-2019.txt", False, True), ("acme-2019.txt", True, False)]
    with Library(tmp_path / "copies", embeddings="none") as library:
        library.add(Document.from_text(older, name="acme.txt"), Document.from_text(older, name="acme-copy.txt"))
        ranked = library.search(question).ranking.ranked
        assert [r.chunk.document for r in ranked] == ["acme.txt", "acme.txt", "acme-copy.txt", "acme-copy.txt"]
        assert ranked[0].chunk.text == ranked[2].chunk.text and "lease term" in ranked[0].chunk.text
