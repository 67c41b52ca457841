"""The general core of search: words of any language, and the filings profile only where documents are filings."""

from __future__ import annotations

from pathlib import Path

import pytest

from minions.chunking import Chunk
from minions.documents import Document
from minions.errors import ConfigError
from minions.protocols.library import Library
from minions.protocols.search.profiles import GENERAL, Glossary, describe, is_filing, knowledge_of
from minions.protocols.search.ranking import lexical_rank
from minions.protocols.search.routing import profile, route
from minions.protocols.search.words import detect, tokenize, words

GERMAN = (
    "Im Geschäftsjahr stiegen die Umsätze des Unternehmens um zwölf Prozent. Die Kosten für Material und Personal "
    "sind dagegen nur leicht gewachsen, und der Vorstand schlägt der Hauptversammlung eine höhere Dividende vor."
)
PAPER = (
    "Attention Is All You Need\n\nAbstract. We report results of a new network architecture, the Transformer, "
    "based solely on attention mechanisms. Out of 2000 sentences in the test set, 1800 were translated well. "
    "Our model achieves 28.4 BLEU on the WMT 2014 English-to-German translation task. Leverage of pretrained "
    "weights is not needed; the working capital of compute is small.\n"
)
LICENCE = (
    "GNU GENERAL PUBLIC LICENSE\nVersion 3, 29 June 2007\n\nEveryone is permitted to copy and distribute verbatim "
    "copies of this license document, but changing it is not allowed. The licenses for most software are designed "
    "to take away your freedom to share and change it.\n"
)
MANUAL = (
    "MOUNTPOINT(1)\n\nNAME\n    mountpoint - see if a directory or file is a mountpoint\n\nDESCRIPTION\n    "
    "mountpoint checks whether the given directory or file is mentioned in the /proc/self/mountinfo file.\n"
)
FILING = (
    "UNITED STATES SECURITIES AND EXCHANGE COMMISSION\nWashington, D.C. 20549\nFORM 10-K\nANNUAL REPORT PURSUANT "
    "TO SECTION 13 OR 15(d)\nFor the fiscal year ended December 31, 2018\nACME WIDGETS INC.\n"
)


def test_words_are_unicode_words_of_any_script_case_folded_and_normalised() -> None:
    assert words("Umsätze STRASSE Straße ﬁnance Ｆｕｌｌ １２３ snake_case") == [
        "umsätze", "strasse", "strasse", "finance", "full", "123", "snake", "case",
    ]  # fmt: skip
    assert words("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # a vowel sign is part of its word
    # the German stemmer meets "Umsätze" and "Umsatz"; English keeps its plural rule
    assert tokenize("Die Umsätze", ("de",)) == tokenize("der Umsatz", ("de",)) == ["umsatz"]
    assert tokenize("Expenditures were purchases") == ["expenditure", "purchase"]
    # a question is made terms in each language of the documents it reaches, a word once per distinct term
    assert tokenize("Umsätze", ("de", "en")) == ["umsatz", "umsätze"]


def test_a_documents_language_is_told_by_its_stop_words() -> None:
    assert detect(GERMAN) == "de" and detect(PAPER) == "en" and detect("1,577 1,373 (305)") == "en"
    assert detect("Le chiffre d'affaires de la société a augmenté de dix pour cent pendant l'année.") == "fr"


def test_the_filings_profile_is_for_filings_and_fires_on_nothing_else() -> None:
    assert is_filing(FILING)
    # a company's annual report is a financial report too ("Did revenue grow?" asks for a figure there)
    report = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"
    assert is_filing(report.read_text()) and not is_filing("# Annual report of the chess club\nWe played 40 games.")
    for text in (PAPER, LICENCE, MANUAL, GERMAN):
        doc = Document.from_text(text, name="d.txt")
        described = profile(doc)
        assert described["kind"] == "document" and (described["form"], described["year"]) == (None, None)
        known = knowledge_of([describe(doc)])
        # the glossary and the finance words of the filings profile add nothing
        assert known.expand("What is the leverage, the working capital and the EPS?") == ""
        assert not known.asks_for_quantity("What was the revenue?")
    assert knowledge_of([describe(Document.from_text(FILING, name="f.txt"))]).expand("working capital") != ""
    # "out of 2000 patients" names no period of a paper: no year routes it
    papers = {f"p{i}.txt": profile(Document.from_text(PAPER.replace("Transformer", f"Model{i}"), name="p.txt"))
              for i in range(5)}  # fmt: skip
    assert all(p["year"] is None for p in papers.values())
    assert route("Out of 2000 sentences, how many were translated well by Model3?", papers).documents[0] == "p3.txt"


def test_a_users_glossary_adds_its_words_to_the_questions_that_name_its_terms(tmp_path: Path) -> None:
    chunks = [
        Chunk("m.txt", 0, "Staging area: git stash saves uncommitted changes and sets them aside.", 0, 70),
        Chunk("m.txt", 1, "Put the kettle aside before you change the filter of the coffee machine.", 70, 140),
    ]
    question = "How do I put my uncommitted changes aside?"
    mine = Glossary.load({r"put .* aside|shelve": "git stash"})
    assert lexical_rank(chunks, question, knowledge=knowledge_of([], mine))[0].chunk.index == 0
    (tmp_path / "glossary.json").write_text('{"shelve": "git stash"}')
    with Library(tmp_path, embeddings="none") as library:
        assert library.glossary.expand("shelve my work") == "git stash"
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        Glossary.load(tmp_path / "bad.json")
    assert GENERAL.expand(question) == ""


def test_a_german_question_finds_german_documents_as_an_english_one_finds_english(tmp_path: Path) -> None:
    german = Document.from_text(GERMAN, name="bericht.txt")
    other = Document.from_text(
        "Die Kantine bleibt im August geschlossen. Das Personal macht Urlaub am See und kehrt im September zurück.",
        name="kantine.txt",
    )
    english = Document.from_text(PAPER, name="paper.txt")
    with Library(tmp_path, embeddings="none") as library:
        library.add(german, other, english)
        assert {d.name: d.profile["language"] for d in library.documents} == {
            "bericht.txt": "de", "kantine.txt": "de", "paper.txt": "en",
        }  # fmt: skip
        # "Umsatz" (singular) meets the document's "Umsätze" only through the German stemmer
        found = library.search("Wie stark ist der Umsatz gestiegen?").ranking.ranked
        assert found[0].chunk.document == "bericht.txt"
        assert library.search("Which architecture is based on attention?").ranking.ranked[0].chunk.document == (
            "paper.txt"
        )


def test_in_a_library_of_several_languages_a_question_is_made_terms_in_its_own() -> None:
    """Each stemmer drops its own language's stop words only: asked of German and English documents, a German
    question's "und", "ich", "wie" would be English terms, and an English question's "the" and "what", or its
    "revenue" stemmed the French way, rare French terms that lift French documents."""
    german = tokenize("Wie schneide ich jede Zeile ab und speichere sie?", ["de", "en"])
    assert german == tokenize("Wie schneide ich jede Zeile ab und speichere sie?", ["de"])
    assert {"wie", "ich", "und", "sie"}.isdisjoint(german) and {"zeil", "schneid"} <= set(german)
    english = tokenize("What was the company's revenue, and how did it grow?", ["en", "fr", "pl"])
    assert english == tokenize("What was the company's revenue, and how did it grow?", ["en"])
    assert "revenu" not in english and {"revenue", "grow"} <= set(english)
    assert set(tokenize("Umsätze 2023", ["de", "en"])) == {"umsatz", "umsätze", "2023"}  # no stop word: both
