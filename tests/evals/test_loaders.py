"""Loaders on the real benchmark files in ../shared/data (skipped where absent) and on a LongHealth fixture."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from minions.evals import DatasetLayoutError, EvalError, UnknownDatasetError, load_dataset

from .conftest import DATA, LONGHEALTH_MINI, needs

# -- FinanceBench -------------------------------------------------------------------------------------------


@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs")
def test_financebench_skips_and_reports_questions_without_their_filing(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="minions.evals"):
        ds = load_dataset("financebench", DATA / "financebench")
    # 150 questions; the 10 filings not in pdfs/ take 21 questions with them.
    assert (len(ds), len(ds.skipped)) == (129, 21)
    assert ds.skipped["financebench_id_00807"].startswith("filing 3M_2023Q2_10Q.pdf is not in")
    assert "skipped 21 of 150 questions" in caplog.text
    first = ds.items[0]
    assert (first.id, first.gold, first.metric) == ("financebench_id_03029", ("$1577.00",), "numeric")
    assert first.metadata["doc_name"] == "3M_2018_10K"


@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs")
def test_financebench_numerical_subset() -> None:
    ds = load_dataset("financebench", DATA / "financebench", subset="numerical")
    assert len(ds) + len(ds.skipped) == 67
    assert all("numerical reasoning" in item.metadata["question_reasoning"].lower() for item in ds)
    assert ds.options == {"subset": "numerical"}


@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs/PEPSICO_2023_8K_dated-2023-05-05.pdf")
def test_financebench_documents_load_lazily_from_the_pdf() -> None:
    ds = load_dataset("financebench", DATA / "financebench")
    item = next(i for i in ds if i.metadata["doc_name"] == "PEPSICO_2023_8K_dated-2023-05-05")
    (doc,) = item.documents()
    assert doc.name == "PEPSICO_2023_8K_dated-2023-05-05.pdf" and doc.pages and "PepsiCo" in doc.text


def test_financebench_wrong_layout_names_the_expected_files(tmp_path) -> None:
    with pytest.raises(DatasetLayoutError, match=r"data/financebench_open_source.jsonl and a pdfs/ folder"):
        load_dataset("financebench", tmp_path)


def test_financebench_missing_filing_in_a_user_checkout(tmp_path, caplog) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "pdfs").mkdir()
    rows = [
        {"financebench_id": "a", "doc_name": "HAVE_8K", "question": "q?", "answer": "$1", "question_reasoning": None},
        {"financebench_id": "b", "doc_name": "GONE_10K", "question": "q?", "answer": "$2", "question_reasoning": None},
    ]
    (tmp_path / "data" / "financebench_open_source.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "pdfs" / "HAVE_8K.pdf").write_bytes(b"%PDF-1.4")
    with caplog.at_level(logging.WARNING, logger="minions.evals"):
        ds = load_dataset("financebench", tmp_path / "data" / "financebench_open_source.jsonl")
    assert [i.id for i in ds] == ["a"] and list(ds.skipped) == ["b"]
    assert "GONE_10K.pdf" in caplog.text


# -- LongHealth (fixture in the official layout) -------------------------------------------------------------


def test_longhealth_fixture() -> None:
    ds = load_dataset("longhealth", LONGHEALTH_MINI)
    assert [i.id for i in ds] == ["patient_01/q1", "patient_01/q2", "patient_02/q1", "patient_02/q2", "patient_03/q1"]
    assert ds.skipped == {"patient_03/q2": "its correct answer is not one of its options"}
    first = ds.items[0]
    assert first.gold == ("B",) and first.options[1] == "Ampicillin/sulbactam" and first.metric == "choice"
    assert "B. Ampicillin/sulbactam" in first.task and "letter of the correct option" in first.task
    assert [d.name for d in first.documents()] == ["letter_01.txt", "letter_02.txt"]


def test_longhealth_pads_with_other_patients_deterministically() -> None:
    a = load_dataset("longhealth", LONGHEALTH_MINI, pad_with_others=2)
    b = load_dataset("longhealth", LONGHEALTH_MINI, pad_with_others=2)
    docs = a.items[0].documents()
    assert len(docs) == 6  # 2 own letters + 2 letters of each of 2 other patients
    assert [d.text for d in docs] == [d.text for d in b.items[0].documents()]
    assert sum("Marten" in d.text for d in docs) == 2


def test_longhealth_accepts_a_checkout_folder(tmp_path) -> None:
    (tmp_path / "data").mkdir()
    shutil.copy(LONGHEALTH_MINI, tmp_path / "data" / "benchmark_v5.json")
    assert len(load_dataset("longhealth", tmp_path)) == 5


def test_longhealth_wrong_layout(tmp_path) -> None:
    with pytest.raises(DatasetLayoutError, match=r"benchmark_v5\.json or data/benchmark_v5\.json"):
        load_dataset("longhealth", tmp_path)
    bad = tmp_path / "benchmark_v5.json"
    bad.write_text(json.dumps([1, 2]))
    with pytest.raises(DatasetLayoutError, match="object of patients"):
        load_dataset("longhealth", bad)


# -- QASPER, L-Eval, PubMedQA, BAMBOO (real files) ---------------------------------------------------------


@needs("qasper/qasper_sample_small.json")
def test_qasper_official_layout_and_gold_answers() -> None:
    ds = load_dataset("qasper", DATA / "qasper" / "qasper_sample_small.json")
    golds = {i.question: i.gold for i in ds}
    assert golds == {
        "What is the seed lexicon?": ("a vocabulary", "using seed lexicon"),  # free form, extractive span
        "Are there three?": ("Yes",),
        "Are there four?": ("Unanswerable",),
        "Is this extractive?": ("Conclusion paragraph",),
    }
    assert len({i.id for i in ds}) == 4  # the sample reuses one question id: ids are made unique
    text = ds.items[0].documents()[0].text
    assert text.startswith("# Minimally Supervised Learning") and "## Proposed Method ::: Polarity Function" in text


@needs("leval/scientific_qa.jsonl", "leval/financial_qa.jsonl")
def test_leval_tasks() -> None:
    sci = load_dataset("leval-scientific", DATA / "leval")
    fin = load_dataset("leval-financial", DATA / "leval" / "financial_qa.jsonl")
    assert (len(sci), len(fin)) == (184, 68)
    assert sci.items[0].id == "scientific_qa:1:0" and sci.items[0].question == "How did they obtain the dataset?"
    assert sci.items[0].metric == "f1" and len(sci.items[0].documents()[0].text) > 10_000
    assert fin.name == "leval-financial" and fin.items[0].gold[0].startswith("Oclaro has been implementing")


@needs("pubmedqa/ori_pqal.json", "pubmedqa/test_ground_truth.json")
def test_pubmedqa_test_split_and_all() -> None:
    test = load_dataset("pubmedqa", DATA / "pubmedqa")
    every = load_dataset("pubmedqa", DATA / "pubmedqa" / "ori_pqal.json", split="all")
    assert (len(test), len(every)) == (500, 1000)
    first = test.items[0]
    assert (first.id, first.gold, first.metric) == ("12377809", ("yes",), "yes_no_maybe")
    assert {g for i in every for g in i.gold} == {"yes", "no", "maybe"}
    assert "Answer yes, no or maybe." in first.task


@needs("pubmedqa/ori_pqal.json")
def test_pubmedqa_test_split_needs_the_ground_truth(tmp_path) -> None:
    shutil.copy(DATA / "pubmedqa" / "ori_pqal.json", tmp_path / "ori_pqal.json")
    with pytest.raises(DatasetLayoutError, match=r"test_ground_truth\.json"):
        load_dataset("pubmedqa", tmp_path)


@needs("bamboo/paperqa_16k.jsonl")
def test_bamboo_tolerates_malformed_lines(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="minions.evals"):
        ds = load_dataset("bamboo-paperqa", DATA / "bamboo")
    assert ds.skipped["paperqa_16k:26"] == "malformed JSON line"
    assert "line 26 is not valid JSON" in caplog.text
    first = ds.items[0]
    assert first.id == "paperqa_16k:1" and first.gold == ("C",)
    assert first.options == ("MNLI, CoLA, MRPC", "ChemProt, RCT, IMDB, Amazon", "FEVER, Common-senseQA",
                             "STS-B, WNLI, QNLI")  # fmt: skip
    assert len(ds) > 80


def test_bamboo_user_file_with_a_broken_line(tmp_path) -> None:
    good = {"question": "Which?", "options": ["A. x", "B. y"], "answer": "B", "content": "paper text"}
    path = tmp_path / "paperqa_4k.jsonl"
    path.write_text(json.dumps(good) + "\n" + '{"question": "broken' + "\n" + json.dumps(good) + "\n")
    ds = load_dataset("bamboo-paperqa", tmp_path)
    assert [i.id for i in ds] == ["paperqa_4k:1", "paperqa_4k:3"] and ds.items[0].options == ("x", "y")


# -- the registry -------------------------------------------------------------------------------------------


def test_unknown_dataset_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownDatasetError, match="financebench, longhealth, qasper, leval-scientific"):
        load_dataset("financebanch", ".")


def test_unknown_option_lists_the_loaders_options() -> None:
    with pytest.raises(EvalError, match=r"pad_with_others \(default 0\)"):
        load_dataset("longhealth", LONGHEALTH_MINI, pad=3)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetLayoutError, match="No such file or directory"):
        load_dataset("qasper", tmp_path / "nope.json")
