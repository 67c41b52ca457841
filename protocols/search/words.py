"""Words of any language: how a text becomes the terms that words search ranks by.

A term is a word of the text as Unicode sees it: NFKC-normalised (a PDF's "ﬁ" ligature is "fi", full-width digits
are digits), case-folded ("Straße" and "STRASSE" meet), a run of letters and digits of any script with the marks
that belong to them ("Umsätze" is one word, not "ums" and "tze"), then

    stop words    dropped, per language (the ``stopwords`` package's lists; English keeps the short list that was
                  measured on FinanceBench: ``ENGLISH_STOP``)
    stemming      per language, by the Snowball stemmers (PyStemmer); English by Harman's S-stemmer, plurals to
                  singular and nothing more ("expenditures" and "expenditure" meet, "business" stays), which ranked
                  better than Snowball's English on FinanceBench (docs/library.md, "Words of any language")

A document's language is detected once, when it is indexed (``detect``: the share of its words that are each
language's stop words), and kept in its profile; a question is made terms in each language of the documents it
can reach (``tokenize(question, languages)``), so a German question meets German documents stemmed as they are.
A word that starts with a digit is kept as it is ("2018s", "10k").

    tokenize("Die Umsätze stiegen", ("de",))    ['umsatz', 'stieg']
    detect(text)                                'de'
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from functools import cache

import Stemmer
import stopwords as stopword_lists

__all__ = ["DEFAULT_LANGUAGE", "ENGLISH_STOP", "LANGUAGES", "detect", "term_set", "tokenize", "words"]

DEFAULT_LANGUAGE = "en"
"""The language of a text too short or too bare (a table of figures) to tell."""
LANGUAGES = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german", "el": "greek", "en": "english",
    "es": "spanish", "fi": "finnish", "fr": "french", "hi": "hindi", "hu": "hungarian", "id": "indonesian",
    "it": "italian", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese", "ro": "romanian",
    "ru": "russian", "sv": "swedish", "tr": "turkish",
}  # fmt: skip
"""The languages whose words are stemmed and stop words dropped (ISO 639-1 code: the Snowball stemmer's name, which
is also the stop-word list's)."""
DETECT_CHARS = 20_000
"""How much of a text ``detect`` reads, in ``DETECT_PIECES`` pieces spread over it (a cover page may be in another
language than the text)."""
DETECT_PIECES = 20
DETECT_SHARE = 0.03
"""The least share of a text's words that must be a language's stop words for ``detect`` to name it (a word that
several languages' lists hold counts a share to each)."""

ENGLISH_STOP = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "has", "have", "how", "in",
     "is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were", "what", "which", "who", "with"}
)  # fmt: skip
"""English's stop words: the short list measured on FinanceBench (a longer one drops words a question needs:
"above", "before", "more", "most")."""


_PLANES_WITH_MARKS = 0x20000
"""Every combining mark lies in the first two planes, but for the variation selectors of plane 14."""
_VARIATION_SELECTORS = range(0xE0100, 0xE01F0)


def _marks() -> str:
    """A regular-expression class body of every combining mark (categories Mn, Mc, Me): part of the word they
    follow (Devanagari's vowel signs), which ``\\w`` does not match."""
    ranges: list[tuple[int, int]] = []
    for code in [*range(_PLANES_WITH_MARKS), *_VARIATION_SELECTORS]:
        if unicodedata.category(chr(code)).startswith("M"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


_WORD = re.compile(rf"[^\W_](?:[^\W_]|[{_marks()}])*")
_local = threading.local()


def words(text: str) -> list[str]:
    """``text``'s words: NFKC-normalised, case-folded runs of letters, digits and their marks."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


@cache
def _stop(language: str) -> frozenset[str]:
    if language == "en":
        return ENGLISH_STOP
    listed = stopword_lists.get_stopwords(LANGUAGES[language]) if language in LANGUAGES else []
    return frozenset(w for s in listed for w in words(s))


def _stemmer(language: str) -> Stemmer.Stemmer:
    """This thread's Snowball stemmer for ``language`` (a stemmer object is not safe to share between threads)."""
    stemmers = _local.__dict__.setdefault("stemmers", {})
    if language not in stemmers:
        stemmers[language] = Stemmer.Stemmer(LANGUAGES[language])
    return stemmers[language]


def _plural(word: str) -> str:
    """Harman's S-stemmer (1991): English plurals to singular, nothing else ("companies" and "company" meet)."""
    if len(word) <= 3:
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def _terms(found: Sequence[str], language: str) -> list[str]:
    """``found`` (words) as ``language``'s terms: stop words dropped, the others stemmed (a word that starts with a
    digit as it is)."""
    stop = _stop(language)
    kept = [w for w in found if w not in stop]
    if language == "en":
        return [w if w[0].isdigit() else _plural(w) for w in kept]
    if language not in LANGUAGES:
        return kept
    stemmed = _stemmer(language).stemWords(kept)
    return [w if w[0].isdigit() else s for w, s in zip(kept, stemmed, strict=True)]


def tokenize(text: str, languages: Iterable[str] = (DEFAULT_LANGUAGE,)) -> list[str]:
    """``text``'s terms in each of ``languages`` (a document's: one; a question's: those of the documents it can
    reach), in order. In several languages, a text whose stop words say which of them it is in is made terms in
    that one alone: each stemmer drops only its own language's stop words, so a German question made terms in
    English too kept "und", "ich", "wie", and an English one in French or Polish kept "the", "what", "is" as rare
    terms that lift those documents. A text they do not tell (names and figures) is made terms in each language;
    a word that is the same term in several counts once."""
    found = words(text)
    langs = list(dict.fromkeys(languages)) or [DEFAULT_LANGUAGE]
    if len(langs) == 1:
        return _terms(found, langs[0])
    own = _language_among(found, langs)
    if own is not None:
        return _terms(found, own)
    return [t for word in found for t in dict.fromkeys(t for lang in langs for t in _terms([word], lang))]


def _language_among(found: Sequence[str], languages: Sequence[str]) -> str | None:
    """Which of ``languages`` the words ``found`` are in: the one whose (whole) stop-word list holds most of them;
    None where no list holds any (a question of names and figures) or two hold as many."""
    held = _stop_languages()
    counts = {lang: sum(lang in held.get(w, ()) for w in found) for lang in languages}
    ranked = sorted(counts.values(), reverse=True)
    if ranked[0] == 0 or (len(ranked) > 1 and ranked[0] == ranked[1]):
        return None
    return max(counts, key=lambda lang: counts[lang])


def term_set(text: str, languages: Iterable[str] = (DEFAULT_LANGUAGE,)) -> set[str]:
    """``set(tokenize(text, languages))``."""
    return set(tokenize(text, languages))


def detect(text: str) -> str:
    """The language of ``text``: the one whose stop words make the largest share of its words (read in pieces
    spread over it: ``DETECT_CHARS``), ``DEFAULT_LANGUAGE`` where none reaches ``DETECT_SHARE``."""
    if len(text) > DETECT_CHARS:
        size, step = DETECT_CHARS // DETECT_PIECES, len(text) // DETECT_PIECES
        text = " ".join(text[i * step : i * step + size] for i in range(DETECT_PIECES))
    found = words(text)
    if not found:
        return DEFAULT_LANGUAGE
    held = _stop_languages()
    shares = dict.fromkeys(LANGUAGES, 0.0)
    for w in found:
        for lang in held.get(w, ()):
            shares[lang] += 1 / len(held[w]) / len(found)  # a word several lists hold says less of each
    best = max(shares, key=lambda lang: (shares[lang], lang == DEFAULT_LANGUAGE))
    return best if shares[best] >= DETECT_SHARE else DEFAULT_LANGUAGE


@cache
def _stop_languages() -> dict[str, tuple[str, ...]]:
    """Each stop word of every language's whole list (English's too: detection needs the long one), with the
    languages whose lists hold it."""
    held: dict[str, list[str]] = {}
    for lang, name in LANGUAGES.items():
        for w in {w for s in stopword_lists.get_stopwords(name) for w in words(s)}:
            held.setdefault(w, []).append(lang)
    return {w: tuple(langs) for w, langs in held.items()}
