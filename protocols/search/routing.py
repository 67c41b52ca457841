"""Which documents of a library a question is about: the first level of ranking a library.

Each document gets a ``profile`` when it is indexed, read off its first page, where a paper has its title, a
manual its command and a filing or report who it is about and when (the cover page of a 10-K: "FORM 10-K ... For
the fiscal year ended December 31, 2018 ... 3M COMPANY"; a press release's headline):

    terms     the words of its opening ``COVER_CHARS`` characters (ours, in its language: ``search.words``)
    language  the language of its text, and its ``kind`` (``search.profiles.describe``)
    form      for a filing only (``search.profiles``): 10-K, 10-Q, 8-K or earnings, when the cover says so
    year      for a filing only: the year its period ends in (fiscal year, quarter, or date of report)

``route`` scores each document for a question:

    name     the question's words found on the cover, each weighted by how few of the library's documents hold
             it anywhere (IDF): "3M" or "PepsiCo" name their filings, "sales" or "capital", in every filing, none;
             and two words of a name the question writes with capitals, side by side on the cover ("Best Buy":
             "best" and "buy" are in most filings, the two together in Best Buy's), weighted by how few documents
             hold them side by side, less what the words say alone (``name_pairs``)
    year     (filings) the year of the period the question asks about (its latest FY2018, FY18, fiscal 2018 or Q2
             2023, else its latest year) against the document's: the same year best, the year after next best (a later
             report covers it too), the year before a little, any other nothing; a day the question names on an
             8-K's cover (its date of report) counts as much again (``question_dates``)
    form     (filings) the form the question names (10-K, 10-Q, 8-K, earnings; a quarter it names: a 10-Q or an earnings
             release) against the document's

and keeps the documents whose name score is near the best (``NAME_SHARE``) or that hold the best one's rarest
naming word, best ``MAX_ROUTED`` by name, year and form together (and size: ``SIZE_WEIGHT``). A question whose
words are on no cover goes to the documents that alone hold one of its words anywhere ("AMEX" for American
Express, whose cover spells it out), and where there are none keeps every document. File names are not used: a
user's files are named anything.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from minions.documents import Document

from .profiles import FILINGS, describe, languages
from .words import tokenize

__all__ = [
    "COVER_CHARS",
    "MAX_ROUTED",
    "Route",
    "name_pairs",
    "period_year",
    "profile",
    "question_dates",
    "question_years",
    "route",
]

COVER_CHARS = 3000
"""How much of a document's opening text its profile reads (a filing's cover page fits)."""
MAX_ROUTED = 3
"""Most documents a question is routed to."""
NAME_SHARE = 0.6
"""A document is a candidate when its name score is at least this share of the best one's."""
NAMING_SHARE = 0.8
"""A word of the question names documents only if at most this share of the library's documents hold it."""
NAME_WORDS = 5
"""The most words a name written with capitals has ("Jones Lang LaSalle Incorporated"); a longer run is a heading."""
YEAR_WEIGHT = {0: 1.0, 1: 0.4, -1: 0.2}
"""Year score by (document's year - the question's latest year)."""
FORM_WEIGHT = 0.3
SIZE_WEIGHT = 0.2
"""Between documents that match alike, the longer one (an annual report over its quarter's press release)."""

_SPACE = re.compile(r"\s+")
_FORM = re.compile(r"\bform\s+(10-k|10-q|8-k)\b", re.IGNORECASE)
_EARNINGS = re.compile(
    r"\b(?:reports?|announces?)\b.{0,80}\b(?:quarter|fiscal|full[- ]year|results)\b|\bfor immediate release\b",
    re.IGNORECASE,
)
_ENDED = re.compile(
    r"(?:fiscal year|year|quarterly period|period|quarter)\s+ended\b(.{0,80}?)\b((?:19|20)\d\d)\b", re.IGNORECASE
)
_REPORT_DATE = re.compile(r"date of (?:report|earliest event)[^:]{0,60}:?\s*(.{0,40}?)\b((?:19|20)\d\d)\b", re.I)
_EARLY_JANUARY = re.compile(r"\bjanuary\s+[1-7],?\s*$", re.IGNORECASE)
_ANY_YEAR = re.compile(r"\b((?:19|20)\d\d)\b")
_Q_YEARS = re.compile(
    r"\b(?:fy|cy|fiscal(?: year)?|q[1-4]|[1-4]q|h[12]|[12]h)\s*'?((?:19|20)?\d\d)\b|\b((?:19|20)\d\d)\b", re.I
)
_DATE = re.compile(
    r"\b(?:january|february|march|april|may|june|july|august|september|october|november|december)\s+\d{1,2},?\s+"
    r"(?:19|20)\d\d\b",
    re.IGNORECASE,
)
_QUARTER = re.compile(
    r"\b(?:q[1-4]|[1-4]q|(?:first|second|third|fourth|1st|2nd|3rd|4th) quarter|three months)\b", re.IGNORECASE
)
_QUARTER_FORMS = frozenset({"10-Q", "earnings"})
_CAPITALISED = re.compile(r"\b[A-Z][\w&'.-]*(?:\s+(?:&\s+)?[A-Z][\w&'.-]*)+")
"""Words side by side that each begin with a capital: how a question writes a name ("Best Buy's", "General Mills")."""
_Q_FORMS = (
    (re.compile(r"\b10-?k\b|\bannual report\b", re.I), "10-K"),
    (re.compile(r"\b10-?q\b|\bquarterly report\b", re.I), "10-Q"),
    (re.compile(r"\b8-?k\b", re.I), "8-K"),
    (re.compile(r"\bearnings (?:release|report|call)\b|\bpress release\b", re.I), "earnings"),
)


def profile(doc: Document, chunks: int = 0) -> dict[str, Any]:
    """What routing knows of ``doc``: its language and kind (``profiles.describe``), its cover's terms, for a filing
    its form and year (None where not found, and for any other document), and its size in ``chunks``."""
    described = describe(doc)
    cover = _SPACE.sub(" ", doc.text[:COVER_CHARS])
    terms = sorted(set(tokenize(cover, (described["language"],))))
    if described["kind"] != FILINGS:
        return {**described, "terms": terms, "form": None, "year": None, "chunks": chunks}
    form_match = _FORM.search(cover)
    form = form_match.group(1).upper() if form_match else ("earnings" if _EARNINGS.search(cover[:600]) else None)
    year = None
    for pattern in (_ENDED, _REPORT_DATE):
        if (m := pattern.search(cover)) is not None:
            year = int(m.group(2))
            # a 52/53-week year that ends in the first days of January is the year before's (J&J's FY2022
            # ended January 1, 2023)
            if pattern is _ENDED and _EARLY_JANUARY.search(m.group(1)):
                year -= 1
            break
    if year is None and (m := _ANY_YEAR.search(cover[:600])) is not None:
        year = int(m.group(1))
    return {**described, "terms": terms, "form": form, "year": year, "chunks": chunks}


def question_years(question: str) -> list[int]:
    """The years ``question`` names (FY2018, FY18, fiscal 2018, Q2 2023, 2018), in order."""
    return [year for year, _ in _years(question)]


def _years(question: str) -> list[tuple[int, bool]]:
    """(year, whether it is marked as a period: FY, fiscal, a quarter) for each year ``question`` names."""
    out = []
    for m in _Q_YEARS.finditer(question):
        y = m.group(1) or m.group(2)
        out.append((int(y) if len(y) == 4 else 2000 + int(y), m.group(1) is not None))
    return out


def period_year(question: str) -> int | None:
    """The year of the period ``question`` asks about: its latest fiscal year or quarter (FY2021 in "as of FY
    2021, what will it pay in 2024"), else its latest year; None when it names none."""
    years = _years(question)
    marked = [y for y, is_period in years if is_period]
    return max(marked or [y for y, _ in years], default=None)


def _question_forms(question: str) -> frozenset[str]:
    """The forms ``question`` names (a 10-Q, an earnings release), or those that report the quarter it names."""
    named = next((form for pattern, form in _Q_FORMS if pattern.search(question)), None)
    if named is not None:
        return frozenset({named})
    return _QUARTER_FORMS if _QUARTER.search(question) else frozenset()


@dataclass(frozen=True)
class Route:
    """The documents a question was routed to, best first, and why."""

    documents: list[str]
    """Names, best first; every document when the question names none."""
    why: dict[str, str] = field(default_factory=dict)
    """Per routed document: what matched (cover words, year, form)."""
    considered: int = 0
    """Documents in the library."""
    routed: bool = False
    """Whether the question was narrowed to some documents (False: it names none; all are searched)."""
    names: tuple[str, ...] = ()
    """The question's terms that named the first document (its cover's words, a pair's words, a word it alone
    holds), or, among documents too few to route (a search within the ones a user named), the question's words on
    their covers that name documents in the library: they say which document, and weigh little where in it
    (``ChunkIndex.search``'s ``names``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"documents": self.documents, "why": self.why, "of": self.considered, "routed": self.routed}


def question_dates(question: str) -> list[str]:
    """The days ``question`` names ("as of August 30, 2023"), as our terms ("august 30 2023"), to look up on covers
    (an 8-K's date of report, a period's end; filings are English)."""
    return list(dict.fromkeys(" ".join(tokenize(m)) for m in _DATE.findall(question)))


def name_pairs(question: str, profiles: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Two words side by side in a name that ``question`` writes with capitals ("Best Buy's"), as our terms ("best
    buy"), both on one document's cover: the library looks up which documents hold each pair side by side, for
    ``route``'s ``pairs``. Each word alone may be in most documents ("best", "buy") where the two together are in
    one company's."""
    covers = [set(p.get("terms", ())) for p in profiles.values()]
    spoken = languages(profiles.values())
    out = []
    for name in _CAPITALISED.findall(question):
        if len(name.split()) > NAME_WORDS:  # a heading, or a question in capitals throughout: no name
            continue
        for a, b in pairwise(t for t in tokenize(name, spoken[:1]) if len(t) > 1):
            if any(a in c and b in c for c in covers):
                out.append(f"{a} {b}")
    return list(dict.fromkeys(out))


def route(
    question: str,
    profiles: Mapping[str, Mapping[str, Any]],
    document_frequency: Mapping[str, int] | None = None,
    *,
    pairs: Mapping[str, Collection[str]] | None = None,
    dates: Mapping[str, Collection[str]] | None = None,
    only_in: Mapping[str, Collection[str]] | None = None,
    limit: int = MAX_ROUTED,
    library: int | None = None,
) -> Route:
    """The documents of ``profiles`` (name -> ``profile``) that ``question`` is about (see the module doc).
    ``document_frequency``: in how many documents each term of the question occurs anywhere (default: on how many
    covers); a word found in every document's text ("sales", "capital") names none of them. ``pairs``: the
    documents whose covers hold each of ``name_pairs`` side by side; a pair names them as a word would, weighted by
    how few documents hold it anywhere (its count in ``document_frequency``). ``dates``: the documents whose covers
    hold each of ``question_dates``: a day the question names on an 8-K's cover is its date, as its year is.
    ``only_in``: the document that alone holds each of the question's words that one document holds anywhere;
    where no cover names a document, such a word does ("AMEX", said in American Express's filing alone).
    ``library``: the documents in the library (default: those of ``profiles``); with no more than ``limit``
    documents to choose from, all are kept, and the question's words on their covers that name documents among
    the library's are the route's ``names``."""
    names = list(profiles)
    if len(names) <= limit:
        return Route(names, {}, len(names), False, _cover_names(question, profiles, document_frequency, library))
    on_cover = _cover_holders(profiles)
    n_docs = len(names)
    q_terms = set(tokenize(question, languages(profiles.values())))
    holders = {pair: set(docs) for pair, docs in (pairs or {}).items() if docs}
    df = Counter({t: len(on_cover.get(t, ())) for t in q_terms | set(holders)})
    for t, f in (document_frequency or {}).items():
        df[t] = max(df[t], f)
    for pair, docs in holders.items():
        df[pair] = max(df[pair], len(docs))
    weight = {t: math.log(n_docs / df[t]) for t in q_terms if _naming(df[t], n_docs)}
    for pair in holders:  # what the pair says beyond its words (a name's words may name something alone)
        weight[pair] = max(0.0, math.log(n_docs / df[pair]) - sum(weight.get(t, 0.0) for t in pair.split()))
    on_covers: dict[str, list[str]] = {}
    for t in q_terms & weight.keys():
        for n in on_cover.get(t, ()):
            on_covers.setdefault(n, []).append(t)
    name_score, matched = {}, {}
    for n in names:
        hits = on_covers.get(n, []) + [p for p, docs in holders.items() if n in docs]
        matched[n] = sorted(t for t in hits if weight[t] > 0)
        name_score[n] = sum(weight[t] for t in matched[n])
    top = max(names, key=lambda n: name_score[n])
    best = name_score[top]
    if best <= 0:
        return _only_in(q_terms, names, only_in or {}, limit)
    # the best document's rarest word names the others that hold it too, however their covers spell the rest
    # (a cover whose text came out as "MGM R ESORTS I NTERNATIONAL" still says MGM, not "MGM Resorts")
    rarest = min(matched[top], key=lambda t: (" " in t, df[t], t))
    forms, latest = _question_forms(question), period_year(question)
    most_chunks = max(1, *(int(p.get("chunks", 0)) for p in profiles.values()))

    # a day on an 8-K's cover is its date of report; on an annual or quarterly report's, a period's end it shares
    dated = {n: day for day, docs in (dates or {}).items() for n in docs if profiles.get(n, {}).get("form") == "8-K"}

    def score(n: str) -> tuple[float, float]:
        p = profiles[n]
        year = YEAR_WEIGHT.get(p["year"] - latest, 0.0) if latest is not None and p.get("year") else 0.0
        same_form = FORM_WEIGHT if p.get("form") in forms else 0.0
        day = YEAR_WEIGHT[0] if n in dated else 0.0
        size = SIZE_WEIGHT * math.log1p(p.get("chunks", 0)) / math.log1p(most_chunks)
        return name_score[n] / best + year + day + same_form + size, name_score[n]

    candidates = [n for n in names if name_score[n] >= NAME_SHARE * best or rarest in matched[n]]
    if latest is None:  # a question that names no period asks about the latest period its reports cover
        periodic = [profiles[n] for n in candidates if profiles[n].get("form")]
        periodic = [p for p in periodic if p["form"] in forms] or periodic  # "this 10-K": the latest 10-K
        latest = max((int(p["year"]) for p in periodic if p.get("year")), default=None)
    chosen = sorted(candidates, key=lambda n: (-score(n)[0], -score(n)[1], names.index(n)))[:limit]
    why = {n: _why(matched[n], profiles[n], latest, forms, dated.get(n)) for n in chosen}
    named = tuple(dict.fromkeys(w for t in matched[chosen[0]] for w in t.split()))
    return Route(chosen, why, n_docs, True, named)


def _cover_holders(profiles: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Sequence[str]]:
    """Each term on the covers of ``profiles``' documents, with the documents whose covers hold it. Kept for the
    next question while its profiles are the same objects (an index reads its documents again only after a
    change): a question looks up its own terms, and does not read every document's cover."""
    entries = list(profiles.items())
    kept = _COVERS[0]
    if (
        kept is not None
        and len(kept[0]) == len(entries)
        and all(a == b and p is q for (a, p), (b, q) in zip(kept[0], entries, strict=True))
    ):
        return kept[1]
    held: dict[str, list[str]] = {}
    for name, profile in entries:
        for term in dict.fromkeys(profile.get("terms", ())):
            held.setdefault(term, []).append(name)
    _COVERS[0] = (entries, held)
    return held


_COVERS: list[tuple[list[tuple[str, Mapping[str, Any]]], dict[str, list[str]]] | None] = [None]
"""The last ``_cover_holders``: the profiles it was made of (held, so that they are the same objects), and it."""


def _cover_names(
    question: str,
    profiles: Mapping[str, Mapping[str, Any]],
    document_frequency: Mapping[str, int] | None,
    library: int | None,
) -> tuple[str, ...]:
    """The question's words on the covers of ``profiles``' documents that name documents: held by at most
    ``NAMING_SHARE`` of the ``library``'s documents (a search within one 10-K: "3M", not "sales")."""
    covers = {t for p in profiles.values() for t in p.get("terms", ())}
    frequency = document_frequency or {}
    documents = library if library is not None else len(profiles)
    asked = dict.fromkeys(tokenize(question, languages(profiles.values())))
    return tuple(t for t in asked if t in covers and _naming(frequency.get(t, 0), documents))


def _naming(frequency: int, documents: int) -> bool:
    """Whether a word held by ``frequency`` of ``documents`` documents can name some of them (``NAMING_SHARE``)."""
    return 0 < frequency <= NAMING_SHARE * documents


def _only_in(asked: Collection[str], names: Sequence[str], only_in: Mapping[str, Collection[str]], limit: int) -> Route:
    """The route of a question no cover names (``asked``: its terms): the documents that alone hold one of its
    words, else every one."""
    words = {t: [n for n in docs if n in names] for t, docs in only_in.items() if t in asked}
    held = Counter(n for docs in words.values() if len(docs) == 1 for n in docs)
    if not held:
        return Route(list(names), {}, len(names), False)
    chosen = sorted(held, key=lambda n: (-held[n], names.index(n)))[:limit]
    alone = {n: sorted(t for t, docs in words.items() if docs == [n]) for n in chosen}
    why = {n: f"only its text says {', '.join(alone[n][:5])}" for n in chosen}
    return Route(chosen, why, len(names), True, tuple(alone[chosen[0]]))


def _why(words: Sequence[str], p: Mapping[str, Any], latest: int | None, forms: frozenset[str], day: str | None) -> str:
    parts = [f"cover names {', '.join(words[:5])}"]
    if latest is not None and p.get("year") == latest:
        parts.append(f"period {latest}")
    elif p.get("year"):
        parts.append(f"period {p['year']}")
    if day is not None:
        parts.append(f"dated {day}")
    if p.get("form") in forms:
        parts.append(f"form {p['form']}")
    return "; ".join(parts)
