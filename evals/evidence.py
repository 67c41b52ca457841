"""Evidence metrics: did what a run passed on hold the benchmark's gold evidence?

A run's ``evidence`` (``RunResult.evidence``) is a ranked list of passages, best first: what reached the remote
model, or what the local answer step read; its ``citations`` are what the answer cites. A gold place is
*covered* by a passage when both name the same document and

1. the gold has pages and the passage has pages: they share a page (FinanceBench);
2. else both have character spans: the spans overlap by at least ``MIN_SHARE`` of the shorter one;
3. else by their text: the passage holds at least ``MIN_SHARE`` of the gold's word trigrams (it contains the
   gold), or it has at least ``MIN_QUOTE_WORDS`` words and the gold holds ``MIN_SHARE`` of its trigrams (a
   quote from it).

recall@k = the share of the gold places covered by the first k passages. With several annotators (QASPER)
it is the best annotator's share, as QASPER's evaluator takes the max over annotators; annotators who marked
no evidence are left out. Citation recall is the same over the citations. Both are None for an item without
gold evidence.

Evidence F1 (QASPER, as its official evaluator computes it with ``--text_evidence_only``): the paper's
paragraphs that the passages cover are the predicted evidence; F1 of that set against each annotator's set of
evidence paragraphs (both empty: 1; an unanswerable question has an empty set), max over annotators.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .gold import EvidenceSet, GoldEvidence, share_in, words
from .items import EvalItem

__all__ = [
    "MIN_QUOTE_WORDS",
    "MIN_SHARE",
    "RECALL_AT",
    "EvidenceScores",
    "Placed",
    "covers",
    "evidence_f1",
    "evidence_scores",
    "paragraph_f1",
]

MIN_SHARE = 0.5
RECALL_AT = (1, 5, 10, 20)
MIN_QUOTE_WORDS = 8
"""A passage shorter than this counts only by its place or by holding the gold, never as a quote of it: a few
words are found in any long text."""


class Placed(Protocol):
    """A passage with where it lies: ``protocols.Evidence``, ``protocols.Citation`` and ``GoldEvidence`` are."""

    @property
    def document(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def start(self) -> int | None: ...
    @property
    def end(self) -> int | None: ...
    @property
    def pages(self) -> tuple[int, ...]: ...


def _span(p: Placed) -> tuple[int, int] | None:
    return (p.start, p.end) if p.start is not None and p.end is not None and p.end > p.start else None


def _by_text(passage: str, gold: str) -> bool:
    if share_in(gold, passage) >= MIN_SHARE:
        return True
    return len(words(passage)) >= MIN_QUOTE_WORDS and share_in(passage, gold) >= MIN_SHARE


def covers(passage: Placed, gold: Placed) -> bool:
    """Whether ``passage`` covers the gold place (the rules in the module's docstring)."""
    if passage.document != gold.document:
        return False
    if gold.pages and passage.pages:
        return not set(gold.pages).isdisjoint(passage.pages)
    ours, theirs = _span(passage), _span(gold)
    if ours is not None and theirs is not None:
        overlap = min(ours[1], theirs[1]) - max(ours[0], theirs[0])
        return overlap > 0 and overlap >= MIN_SHARE * min(ours[1] - ours[0], theirs[1] - theirs[0])
    return bool(gold.text) and _by_text(passage.text, gold.text)


def _first_covering(gold: GoldEvidence, passages: Sequence[Placed]) -> int | None:
    """The 0-based rank of the first passage that covers ``gold``; None if none does."""
    return next((rank for rank, passage in enumerate(passages) if covers(passage, gold)), None)


def _recall(sets: Sequence[EvidenceSet], ranks: Mapping[GoldEvidence, int | None], k: int | None) -> float | None:
    """The best annotator's share of gold places covered within the first ``k`` passages (all: None)."""
    shares = [
        sum(1 for g in places if (r := ranks[g]) is not None and (k is None or r < k)) / len(places)
        for places in sets
        if places
    ]
    return max(shares) if shares else None


def paragraph_f1(predicted: set[str], gold: set[str]) -> float:
    """QASPER's ``paragraph_f1_score``: F1 of two sets of paragraphs; both empty is 1."""
    if not gold and not predicted:
        return 1.0
    same = len(gold & predicted)
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def evidence_f1(item: EvalItem, passages: Sequence[Placed]) -> float | None:
    """QASPER's evidence F1 of the paragraphs ``passages`` cover; None where the item has no paragraphs."""
    if not item.paragraphs or not item.evidence:
        return None
    predicted = {p.text for p in item.paragraphs if any(covers(x, p) for x in passages)}
    return max(paragraph_f1(predicted, {g.text for g in places}) for places in item.evidence)


@dataclass(frozen=True)
class EvidenceScores:
    """An item's evidence metrics; None where the item has no gold evidence to measure against."""

    recall_at: Mapping[int, float | None]
    citation_recall: float | None
    evidence_f1: float | None
    passages: int
    citations: int
    gold: int
    """Distinct gold places, over all annotators."""
    annotators: int
    """Annotators who marked evidence."""
    first_hit: int | None
    """1-based rank of the first passage that covers any gold place; None if none does (or no gold)."""

    def to_dict(self) -> dict[str, Any]:
        """The results line's ``evidence``: ``recall_at_1`` ... then the other fields by name."""
        fields = asdict(self)
        recall = fields.pop("recall_at")
        return {**{f"recall_at_{k}": value for k, value in recall.items()}, **fields}


def evidence_scores(
    item: EvalItem, passages: Sequence[Placed], citations: Sequence[Placed] = (), at: Sequence[int] = RECALL_AT
) -> EvidenceScores:
    """Recall at each k of ``at``, citation recall and evidence F1 of a run's ranked ``passages`` and
    ``citations`` against ``item.evidence``."""
    places = list(dict.fromkeys(g for s in item.evidence for g in s))
    ranks = {g: _first_covering(g, passages) for g in places}
    cited = {g: _first_covering(g, citations) for g in places}
    hits = [r for r in ranks.values() if r is not None]
    return EvidenceScores(
        recall_at={k: _recall(item.evidence, ranks, k) for k in at},
        citation_recall=_recall(item.evidence, cited, None),
        evidence_f1=evidence_f1(item, passages),
        passages=len(passages),
        citations=len(citations),
        gold=len(places),
        annotators=sum(1 for s in item.evidence if s),
        first_hit=min(hits) + 1 if hits else None,
    )
