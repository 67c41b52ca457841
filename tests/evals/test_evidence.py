"""Evidence metrics on hand-built runs: the matcher's rules, recall at k, citation recall, the best of several
annotators, QASPER's evidence F1 (by hand and on the shared sample), and items without gold evidence."""

from __future__ import annotations

import pytest

from minions.documents import Document
from minions.evals import GoldEvidence, covers, evidence_scores, load_dataset
from minions.evals.evidence import paragraph_f1
from minions.evals.gold import Locator
from minions.evals.items import EvalItem, eager
from minions.protocols import Citation, Evidence, RunResult

from .conftest import DATA, needs

DOC = Document.from_text("placeholder text", name="report.pdf")


def item(*sets: tuple[GoldEvidence, ...], paragraphs: tuple[GoldEvidence, ...] = ()) -> EvalItem:
    return EvalItem("q", "What?", ("x",), "f1", eager(DOC), evidence=sets, paragraphs=paragraphs)


def chunk(document: str, start: int, end: int, pages: tuple[int, ...] = ()) -> Evidence:
    return Evidence(document, "chunk text", start, end, pages)


# -- the matcher --------------------------------------------------------------------------------------------


def test_pages_decide_when_both_sides_have_them() -> None:
    gold = GoldEvidence("report.pdf", "Net income was $5,363 million", pages=(12,))
    assert covers(Evidence("report.pdf", "anything", pages=(11, 12)), gold)
    assert not covers(Evidence("report.pdf", "Net income was $5,363 million", pages=(13,)), gold)  # text ignored
    assert not covers(Evidence("other.pdf", "anything", pages=(12,)), gold)  # another filing's page 12


def test_spans_must_overlap_by_half_of_the_shorter() -> None:
    gold = GoldEvidence("letter.txt", start=100, end=200)
    assert covers(chunk("letter.txt", 0, 1000), gold)  # a chunk that holds it
    assert covers(chunk("letter.txt", 150, 400), gold)  # half of the gold
    assert covers(chunk("letter.txt", 120, 140), gold)  # a quote inside it
    assert not covers(chunk("letter.txt", 197, 900), gold)  # touches its last 3 characters
    assert not covers(chunk("letter.txt", 200, 300), gold)  # adjacent, no overlap
    assert not covers(Evidence("letter.txt", "x", 100, 100), GoldEvidence("letter.txt", "", 100, 100))


def test_text_decides_where_a_side_has_no_place() -> None:
    gold = GoldEvidence("paper.txt", "FEVER and CSQA, two knowledge-intensive tasks, have the greatest improvement.")
    holds_it = "Results. FEVER and CSQA, two knowledge intensive tasks, have the greatest improvement: 10.3% for FEVER."
    assert covers(Evidence("paper.txt", holds_it), gold)  # case, punctuation and hyphens do not matter
    assert covers(Evidence("paper.txt", "two knowledge-intensive tasks, have the greatest improvement"), gold)
    assert not covers(Evidence("paper.txt", "the greatest improvement"), gold)  # too short to be a quote of it
    assert not covers(Evidence("paper.txt", "We train on MNLI and report accuracy on CoLA and MRPC."), gold)
    assert not covers(Evidence("paper.txt", "anything"), GoldEvidence("paper.txt", ""))  # nothing to compare


def test_locator_finds_edited_quotes_and_refuses_tiny_ones() -> None:
    text = "Datasets\nWe conduct experiments on knowledgeintensive (KI) tasks.  Then more."
    start, end = Locator(text).find("We conduct experiments on knowledge-intensive (KI) tasks.") or (0, 0)
    assert text[start:end] == "We conduct experiments on knowledgeintensive (KI) tasks"  # letter to letter
    assert Locator(text).find("Then more.") == (text.index("Then"), len(text))  # verbatim
    assert Locator(text).find("KI tasks") is None  # not verbatim, and too short to look up loosely


# -- recall at k ----------------------------------------------------------------------------------------------

A = GoldEvidence("report.pdf", "revenue table", pages=(40,))
B = GoldEvidence("report.pdf", "segment note", pages=(77,))


def ranked_run(pages: list[int], citations: tuple[Citation, ...] = ()) -> RunResult:
    evidence = tuple(Evidence("report.pdf", f"page {p}", pages=(p,), kind="chunk") for p in pages)
    return RunResult(answer="x", protocol="rag", evidence=evidence, citations=citations)


def test_recall_at_k_counts_the_gold_places_the_first_k_passages_cover() -> None:
    # page 40 (A) is the 3rd passage, page 77 (B) the 7th: R@1 = 0, R@5 = 1/2, R@10 = R@20 = 1
    run = ranked_run([1, 2, 40, 3, 4, 5, 77, 8], citations=(Citation("q", "report.pdf", 2, pages=(40,)),))
    scores = evidence_scores(item((A, B)), run.evidence, run.citations)
    assert scores.recall_at == {1: 0.0, 5: 0.5, 10: 1.0, 20: 1.0}
    assert scores.citation_recall == 0.5  # the answer cites A only
    assert (scores.first_hit, scores.passages, scores.citations, scores.gold) == (3, 8, 1, 2)
    assert scores.evidence_f1 is None  # not a paragraph-scored benchmark
    assert scores.to_dict()["recall_at_5"] == 0.5 and scores.to_dict()["citation_recall"] == 0.5


def test_passages_beside_the_gold_score_zero() -> None:
    run = ranked_run([39, 41, 76, 78], citations=(Citation("q", "other.pdf", 0, pages=(40,)),))
    scores = evidence_scores(item((A, B)), run.evidence, run.citations)
    assert scores.recall_at == {1: 0.0, 5: 0.0, 10: 0.0, 20: 0.0}
    assert scores.citation_recall == 0.0 and scores.first_hit is None


def test_no_gold_evidence_gives_nulls_not_zeros() -> None:
    scores = evidence_scores(item(), ranked_run([40]).evidence)
    assert scores.recall_at == {1: None, 5: None, 10: None, 20: None}
    assert (scores.citation_recall, scores.evidence_f1, scores.gold, scores.annotators) == (None, None, 0, 0)
    assert (scores.passages, scores.first_hit) == (1, None)


def test_several_annotators_take_the_best_and_empty_sets_do_not_count() -> None:
    # annotator 1 marked A and B, annotator 2 marked B alone, annotator 3 nothing: a run that finds B has
    # recall 1/2 for the first, 1 for the second, and the best counts.
    scores = evidence_scores(item((A, B), (B,), ()), ranked_run([77]).evidence)
    assert scores.recall_at[1] == 1.0 and (scores.gold, scores.annotators) == (2, 2)
    only_empty = evidence_scores(
        item(
            (),
        ),
        ranked_run([77]).evidence,
    )
    assert only_empty.recall_at[1] is None and only_empty.citation_recall is None


# -- QASPER's evidence F1 -------------------------------------------------------------------------------------

P = tuple(GoldEvidence("paper.md", f"paragraph {n}", 100 * n, 100 * n + 50) for n in range(5))


def test_paragraph_f1_is_the_official_one() -> None:
    assert paragraph_f1(set(), set()) == 1.0  # unanswerable, and no evidence predicted
    assert paragraph_f1({"a"}, set()) == 0.0 and paragraph_f1(set(), {"a"}) == 0.0
    # predicted {a, b}, gold {b, c, d}: P = 1/2, R = 1/3, F1 = 2 * 1/6 / (5/6) = 0.4
    assert paragraph_f1({"a", "b"}, {"b", "c", "d"}) == pytest.approx(0.4)


def test_evidence_f1_by_hand() -> None:
    qasper = item((P[1], P[2]), (P[3],), (), paragraphs=P)
    # one passage covers paragraphs 3 and 4 (spans 300-350, 400-450): predicted {3, 4}
    run = (chunk("paper.md", 290, 460),)
    # annotator 1 {1, 2}: 0; annotator 2 {3}: P = 1/2, R = 1 -> 2/3; annotator 3 {}: 0 (evidence was predicted)
    assert evidence_scores(qasper, run).evidence_f1 == pytest.approx(2 / 3)
    # predicted {2}: annotator 1 {1, 2}: P = 1, R = 1/2 -> 2/3
    assert evidence_scores(qasper, (chunk("paper.md", 200, 250),)).evidence_f1 == pytest.approx(2 / 3)
    unanswerable = item((), paragraphs=P)
    assert evidence_scores(unanswerable, ()).evidence_f1 == 1.0  # no evidence, as the annotator said
    assert evidence_scores(unanswerable, run).evidence_f1 == 0.0


@needs("qasper/qasper_sample_small.json")
def test_qasper_sample_against_passages_placed_in_the_paper() -> None:
    seed, _, four, _ = load_dataset("qasper", DATA / "qasper" / "qasper_sample_small.json").items
    # passages placed where the paper's method and conclusion paragraphs are (test_loaders checks those places)
    found, elsewhere = (
        Evidence(p.document, p.text, p.start, p.end) for p in seed.paragraphs if p.text.startswith(("Method", "Concl"))
    )
    hit = evidence_scores(seed, (elsewhere, found))
    assert (hit.recall_at[1], hit.recall_at[5], hit.first_hit) == (0.0, 1.0, 2)
    assert hit.evidence_f1 == pytest.approx(2 / 3)  # predicted {method, conclusion}, gold {method}
    assert evidence_scores(seed, (found,)).evidence_f1 == 1.0
    assert evidence_scores(seed, (elsewhere,)).recall_at[20] == 0.0
    # "Are there four?" is unanswerable: no recall to measure; F1 rewards passing on nothing
    assert evidence_scores(four, (found,)).recall_at[1] is None
    assert evidence_scores(four, ()).evidence_f1 == 1.0 and evidence_scores(four, (found,)).evidence_f1 == 0.0
