"""``minions bench evidence`` on the shared FinanceBench checkout: recall curves from the benchmark's own gold."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from minions.evals.bench.evidence import EvidenceBenchConfig, answered, evidence_bench, quoted_gold
from minions.evals.errors import EvalError

from ..conftest import DATA, needs

FB = DATA / "financebench"
CAPEX = "financebench_id_03029"  # 3M 2018 capital expenditure: the cash flow statement, page 60


@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_lexical_curves_per_item_and_in_the_summary():
    lines = list(evidence_bench(FB, EvidenceBenchConfig(ids=(CAPEX,), lexical_only=True)))
    item, summary = lines
    assert item["item_id"] == CAPEX and item["gold_pages"] == [60] and item["pages"] == 160
    for curve in ("pages_bm25", "rag"):
        values = [item[curve][f"@{k}"] for k in (1, 5, 10, 20)]
        assert values == sorted(values) and all(v in (0.0, 1.0) for v in values)  # one gold page: found or not
    assert item["rag"]["@20"] == 1.0  # the cash flow statement is among the 20 chunks that rank best
    assert "shown" not in item and summary["summary"] and summary["items"] == 1
    assert summary["rag"] == item["rag"] and summary["shown"] is None and not summary["scored"]


@pytest.mark.slow
@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_the_local_side_passes_on_what_it_read_with_its_pages(benchmark_data):
    # no --data: the command finds the checkout through $MINIONS_DATA, as a user's would
    out = subprocess.run(
        [sys.executable, "-m", "minions", "bench", "evidence", "--id", CAPEX, "--items", "--read-chunks", "3"],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    item, summary = (json.loads(line) for line in out.stdout.splitlines())
    # the model reads the best chunk and those within its budget of prompt tokens; it quotes the others by words
    read = item["read"]
    assert len(read) == 3 and read[0]["score"] is not None and not read[0]["by_words"]
    assert all((r["score"] is None) == r["by_words"] for r in read)
    assert all(set(r["quote_pages"]) <= set(r["pages"]) for r in item["read"])  # a quote lies in its chunk
    assert set(item["shown"]) == {"@1", "@5", "@10", "@20"} and item["shown"]["@5"] == item["shown"]["@20"]
    assert item["ranking"]["@1"] == item["rag"]["@1"]  # the model picks sentences, it leaves the ranking alone
    assert len(item["cited_pages"]) <= 3 and item["rank_s"] >= 0 and item["wall_s"] > 0
    assert summary["shown"] == item["shown"] and summary["scored"]
    assert summary["answered"] == {"yes": int(item["answered"]), "of": 1}  # "$1577.00": a fact the answer may hold
    assert summary["quoted_gold"] == {"yes": int(item["quoted_gold"]), "of": 1}


def test_a_short_gold_answer_is_answered_where_the_answer_holds_it_as_written() -> None:
    assert answered("According to call.txt, line 9: \u201cNet revenues were $96.6 million.\u201d", ["$96.6 million"])
    assert answered("Cisco represented 15% of total revenues.", ["cisco"])
    assert not answered("Net revenues were $96.7 million.", ["$96.6 million"])
    explained = "The quick ratio has slightly improved from 0.67 times to 0.69 times between FY2022 and FY2023."
    assert answered("0.69", [explained]) is None  # an explanation, not a fact an answer holds as written


def test_the_answers_quote_is_in_the_gold_where_it_covers_a_gold_page_or_most_of_a_gold_span() -> None:
    from minions.evals.gold import GoldEvidence
    from minions.evals.items import EvalItem
    from minions.protocols.result import Citation

    paged = EvalItem(
        id="p", question="q", gold=("x",), metric="f1", load=list, evidence=((GoldEvidence("r.pdf", pages=(60,)),),)
    )
    assert quoted_gold(paged, Citation("...", "r.pdf", 3, pages=(60,)))
    assert not quoted_gold(paged, Citation("...", "r.pdf", 2, pages=(59,)))
    assert quoted_gold(paged, None) is None
    spans = EvalItem(
        id="s",
        question="q",
        gold=("x",),
        metric="f1",
        load=list,
        evidence=((GoldEvidence("c.txt", start=100, end=180),),),
    )
    assert quoted_gold(spans, Citation("...", "c.txt", 0, start=120, end=300))  # 60 of the gold's 80 characters
    assert not quoted_gold(spans, Citation("...", "c.txt", 0, start=150, end=300))  # 30 of 80: a neighbour's tail
    assert not quoted_gold(spans, Citation("...", "c.txt", 0, start=180, end=300))
    assert not quoted_gold(spans, Citation("...", "other.txt", 0, start=120, end=300))


@pytest.mark.slow
@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/3M_2018_10K.pdf")
def test_meaning_curves_words_meaning_and_fused_in_the_library_and_the_filing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library of one filing, embedded by the real model (the test extra's wheel): every curve is there, the
    fused one per weight, and the summary says what embedding cost."""
    monkeypatch.delenv("MINIONS_EMBEDDINGS")  # the default, "auto"
    root = tmp_path / "financebench"
    (root / "pdfs").mkdir(parents=True)
    (root / "data").symlink_to(FB / "data")
    (root / "pdfs" / "3M_2018_10K.pdf").symlink_to(FB / "pdfs" / "3M_2018_10K.pdf")
    config = EvidenceBenchConfig(ids=(CAPEX,), lexical_only=True, library=True, meaning=True, meaning_weights=(0.5, 1))
    item, summary = evidence_bench(root, config)
    curves = [item[f"{where}_{kind}"] for where in ("library", "filing") for kind in ("words", "meaning")]
    curves += [c for where in ("library", "filing") for c in item[f"{where}_fused"].values()]
    assert set(item["library_fused"]) == {"0.5", "1"} and len(curves) == 8
    for curve in curves:
        values = list(curve.values())
        assert values == sorted(values) and all(v in (0.0, 1.0) for v in values)
    assert item["library_words"] == item["filing_words"]  # one filing: the library is the filing
    assert summary["library_fused"] == item["library_fused"] and summary["meaning_weights"] == [0.5, 1.0]
    assert summary["embedded"] > 500 and summary["embed_per_s"] > 0 and summary["index_mb"] > 0


@needs("pubmedqa/ori_pqal.json")
def test_a_set_that_marks_no_evidence_is_measured_by_its_documents_in_one_library() -> None:
    """PubMedQA marks no evidence: each question's own abstract is its gold, found (or not) among the chunks of
    every abstract of the set's questions."""
    with pytest.raises(EvalError, match="add --library"):
        list(evidence_bench(DATA / "pubmedqa", EvidenceBenchConfig(dataset="pubmedqa", lexical_only=True, limit=5)))
    config = EvidenceBenchConfig(dataset="pubmedqa", lexical_only=True, library=True, limit=40)
    *items, summary = evidence_bench(DATA / "pubmedqa", config)
    assert len(items) == 40 and summary["gold"] == "document" and summary["index_mb"] > 0
    assert all("filing_words" not in item and set(item["library"]) == {"@1", "@5", "@10", "@20"} for item in items)
    # words find a question's own abstract among 40 for nearly every question (0.97 @10 over all 1,000)
    assert summary["library"]["@10"] >= 0.9 and summary["library"]["@1"] <= summary["library"]["@10"]


@needs("leval/scientific_qa.jsonl")
def test_questions_of_ones_own_are_measured_on_their_own_evidence(tmp_path: Path) -> None:
    """``--questions``: the 20 science questions written for the library's check, asked of L-Eval's papers in one
    library instead of L-Eval's own questions (which mark no evidence): each is scored on its own paragraph."""
    written = Path(__file__).resolve().parents[3] / "evals" / "bench" / "written" / "leval-scientific.jsonl"
    config = EvidenceBenchConfig(
        dataset="leval-scientific", questions=str(written), lexical_only=True, library=True, library_dir=str(tmp_path)
    )
    *items, summary = evidence_bench(DATA / "leval", config)
    assert len(items) == 20 and summary["gold"] == "evidence" and summary["routed_first"] >= 10
    for curve in (summary["rag"], summary["library"]):  # within its paper, and among all 20 papers
        values = list(curve.values())
        assert values == sorted(values) and values[-1] >= 0.8  # measured 1.0 and 0.9 @20 by words


def test_a_folder_of_ones_own_is_one_library_with_a_curve_per_kind(tmp_path: Path) -> None:
    """``--dataset folder``: the library holds every document of the folder (one no question names too), each
    question is scored on its quoted passage, the summary has a curve per kind, and the two halves split the
    questions between them."""
    from ..test_folder import COLUMNS, FEE, write_set

    asked = [dict(FEE, question="Can I charge a fee for copies?"), dict(COLUMNS, question="remove columns of a line")]
    questions = str(write_set(tmp_path, asked))
    config = EvidenceBenchConfig(dataset="folder", questions=questions, lexical_only=True, library=True)
    *items, summary = evidence_bench(tmp_path, config)
    assert [i["item_id"] for i in items] == ["q1", "q2"] and [i["kind"] for i in items] == ["legal", "manuals"]
    assert all(i["library"] == {"@1": 1.0, "@5": 1.0, "@10": 1.0, "@20": 1.0} for i in items)  # found first of 3
    assert summary["gold"] == "evidence" and summary["library"]["@1"] == 1.0
    assert summary["by_kind"]["legal"] == {"items": 1, "rag": items[0]["rag"], "library": items[0]["library"]} | {
        k: None for k in ("ranking", "shown", "library_shown")
    }
    library = EvidenceBenchConfig(dataset="folder", questions=questions, lexical_only=True, library=True,
                                  library_dir=str(tmp_path / "index"))  # fmt: skip
    list(evidence_bench(tmp_path, library))
    from minions.protocols.library import Library

    assert sorted(d.name for d in Library(tmp_path / "index", embeddings="none").documents) == [
        "fee.txt", "noise.txt", "shorten.1.txt"
    ]  # fmt: skip
    halves = [[i["item_id"] for i in evidence_bench(tmp_path, replace(config, half=h)) if "item_id" in i] for h in "AB"]
    assert sorted(halves[0] + halves[1]) == ["q1", "q2"]
    with pytest.raises(EvalError, match="use A or B"):
        list(evidence_bench(tmp_path, replace(config, half="C")))
