"""Evidence-first local jobs: the local model picks a quote, it does not write one.

A small model copies its prompt or rambles when asked for free JSON. Choosing is within its reach, so a job
offers the chunk's own sentences as the only things it may reply, through a JSON schema whose alternatives are
those sentences (llama.cpp turns it into a grammar; an OpenAI-compatible server enforces it the same way):

    {"quote": "<one of the chunk's candidate sentences>" | "none", "answer": "<a figure of that sentence>" | null}

So the quote is verbatim by construction, and the short answer is taken from the quote: it may only be one of
the figures the chosen sentence contains (or null). Candidates are the sentences (or table rows) of the chunk
that share most with the question, at most ``MAX_CANDIDATES``, in document order.

With an embedding model on this device, the candidates are ordered by their closeness in meaning to the question
too (``search.meaning.SentenceMeaning``): a sentence that answers in other words shares few of the question's.
The quotes the jobs picked are then ordered by how well they alone match the question, beside their chunks' place in
the ranking (``best_quotes``), and the local answer is the best of them with its place (``local_answer``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from minions.chunking import Chunk

from ..search.figures import figure_share, figures
from ..search.meaning import SentenceMeaning, scaled
from ..search.profiles import GENERAL, Knowledge
from ..search.ranking import word_order
from ..search.sentences import WRAPPED_LINE, Span, spans
from .citations import Finding, place

__all__ = ["LABELS", "NONE", "answer_spans", "best_quotes", "candidates", "labeled", "local_answer", "quote_schema"]

NONE = "none"
"""What a job replies when no candidate answers."""
MAX_CANDIDATES = 8
MIN_QUOTE_WORDS = 4
"""Shorter spans ("Mr.") and headings are offered only when a chunk has nothing else: they answer nothing."""
MAX_ANSWERS = 6
QUOTE_RANK_WEIGHT = 0.5
"""The weight of a quote's chunk's place in the ranking (1 / (1 + place)) beside how well the quote alone matches
the question (``best_quotes``)."""
NO_VALUE_WEIGHT = 0.2
"""For a question that asks for a quantity, the weight of a span that states no value: it cannot hold the amount.
On FinanceBench's read chunks that hold the answer's figure (``minions bench evidence``, ``picks``), the best
span by words held it in 23 of 79; weighing header rows and prose without figures down lifts that (see the
README's evidence section)."""
_YEAR = re.compile(r"(?:19|20)\d\d")
LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""The labels of a chunk's spans in a job's excerpt, in document order: one token each, so a model's choice of a
sentence is its first reply token (spans past the last label are shown without one)."""

_LIST_NUMBER = re.compile(r"\(?\d{1,2}[.)](?:\s|$)")


def labeled(text: str) -> list[tuple[str, Span]]:
    """``text``'s spans with their labels (``LABELS``, then "" for spans past the last label)."""
    return [(LABELS[i] if i < len(LABELS) else "", s) for i, s in enumerate(spans(text))]


def candidates(
    chunk: Chunk,
    question: str,
    k: int = MAX_CANDIDATES,
    knowledge: Knowledge = GENERAL,
    meaning: SentenceMeaning | None = None,
) -> list[Span]:
    """The ``k`` spans of ``chunk`` that rank best for ``question`` by words (``ranking.word_order``, terms in
    ``knowledge``'s languages), with ``meaning`` by their closeness too (``SentenceMeaning.order``), best first;
    ties in document order. For a question that asks for a quantity, a span that states no value (no figure, or
    only years and list numbers: a table's header row) weighs ``NO_VALUE_WEIGHT`` of its score."""
    found = spans(chunk.text)
    all_spans = [s for s in found if _statement(s.text)] or [s for s in found if len(s.text) >= 3]
    texts = [s.text for s in all_spans]
    order = word_order(texts, question, knowledge=knowledge)
    if knowledge.asks_for_quantity(question):
        weighed = [(i, score if states_value(texts[i]) else score * NO_VALUE_WEIGHT) for i, score in order]
        order = sorted(weighed, key=lambda item: (-item[1], item[0]))
    order = meaning.order(texts, order) if meaning is not None else order
    return [all_spans[i] for i, _ in order[:k]]


def states_value(text: str) -> bool:
    """Whether ``text`` holds a value: a figure with a unit, a currency sign, a decimal point or a thousands
    separator, or of three digits or more that is not a year ("2018" in a header row is a label, not a value)."""
    for figure in answer_spans(text):
        digits = "".join(ch for ch in figure if ch.isdigit())
        if any(ch in figure for ch in "$€£%.,") or any(w in figure.lower() for w in ("million", "billion", "thousand")):
            return True
        if len(digits) >= 3 and not _YEAR.fullmatch(digits):
            return True
    return False


def _statement(text: str) -> bool:
    """Whether a span can state a fact: a sentence, a table row or a long line of at least ``MIN_QUOTE_WORDS``
    words; not a heading ("**CT Spine scan (09/30/2018): **", "Evaluation", "# Annual Report 2025")."""
    words = text.split()
    sentence = text.rstrip("*_ ").endswith((".", "!", "?", '"', "”", ")"))
    if text.lstrip().startswith("#") and not sentence:  # a Markdown heading alone ("# Annual Report 2025")
        return False
    return len(words) >= MIN_QUOTE_WORDS and (sentence or figure_share(text) > 0 or len(text) >= WRAPPED_LINE)


def answer_spans(quote: str) -> list[str]:
    """The figures of ``quote`` that may stand as its short answer ("$31.8 million", "12%", "(1,577)"); not the
    number of a list item ("2. Secure financing ...")."""
    found = [f.text for f in figures(quote) if not (f.start == 0 and _LIST_NUMBER.match(quote))]
    return list(dict.fromkeys(found))[:MAX_ANSWERS]


def quote_schema(options: Sequence[Span]) -> dict[str, Any]:
    """The JSON schema whose only replies are one of ``options`` (with a figure of it, or null) or "none"."""

    def alternative(quote: str, answers: Sequence[str | None]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"quote": {"const": quote}, "answer": {"enum": list(answers)}},
            "required": ["quote", "answer"],
        }

    alternatives = [alternative(s.text, [*answer_spans(s.text), None]) for s in options]
    return {"anyOf": [*alternatives, alternative(NONE, [None])]}


def best_quotes(
    findings: Sequence[Finding],
    question: str,
    knowledge: Knowledge = GENERAL,
    meaning: SentenceMeaning | None = None,
    *,
    rank_weight: float = QUOTE_RANK_WEIGHT,
) -> list[Finding]:
    """``findings`` (in their chunks' rank order) re-ordered by how well their quotes alone match ``question``
    (``search.ranking.word_order`` over the quotes, with what the documents' profile adds, and with ``meaning`` by
    their closeness too: ``SentenceMeaning.order``; scaled to 0..1) plus ``rank_weight`` over their chunk's place
    in the ranking (1 for the first, 1/2 for the second, ...): the chunk the ranking put first answers unless a
    quote of another says it much better."""
    if not findings:
        return []
    texts = [f.citation.text if f.citation is not None else "" for f in findings]
    by_words = word_order(texts, question, knowledge=knowledge)
    if meaning is not None:
        matched = meaning.order(texts, by_words)
    else:
        matched = list(zip([i for i, _ in by_words], scaled([s for _, s in by_words]), strict=True))
    score = {i: s + rank_weight / (1 + i) for i, s in matched}
    return [findings[i] for i in sorted(score, key=lambda i: (-score[i], i))]


def local_answer(findings: Sequence[Finding], *, read: int, chunks: int, failed: int = 0) -> str:
    """The best-ranked finding as a sentence, then its quote and its place; or that nothing was found (in the
    ``read`` passages the local model read; ``failed`` more it could not, which the run's notes explain)."""
    if not findings and failed:
        read_part = f"it read {read} of them and none says it" if read else "it read none of them"
        return (
            f"The local model failed on {failed} of the {read + failed} passages that match the question best "
            f"(see the notes); {read_part}."
        )
    if not findings:
        return (
            f"The documents do not seem to answer this: the local model read the {read} passages (of {chunks}) "
            "that match the question best, and none of them says it."
        )
    best, c = findings[0], findings[0].citation
    assert c is not None
    if best.answer != c.text:
        return f"{best.answer}, according to {place(c)}:\n\u201c{c.text}\u201d"
    return f"According to {place(c)}:\n\u201c{c.text}\u201d"
