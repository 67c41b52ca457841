"""Loaders on the real benchmark files in ../shared/data (skipped where absent) and on a LongHealth fixture."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from minions.evals import DatasetLayoutError, EvalError, GoldEvidence, UnknownDatasetError, load_dataset
from minions.evals.gold import Locator

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


# Questions whose evidence lies on an early page of a small filing (evidence_page_num 0, 1, 2 and 3).
EVIDENCE_CHECKED = {
    "financebench_id_00651": ("JOHNSON_JOHNSON_2022Q4_EARNINGS.pdf", 1),
    "financebench_id_00822": ("FOOTLOCKER_2022_8K_dated-2022-05-20.pdf", 2),
    "financebench_id_00603": ("ULTABEAUTY_2023Q4_EARNINGS.pdf", 3),
    "financebench_id_01482": ("PEPSICO_2023_8K_dated-2023-05-05.pdf", 4),
}


@needs(
    "financebench/data/financebench_open_source.jsonl",
    *(f"financebench/pdfs/{f}" for f, _ in EVIDENCE_CHECKED.values()),
)
def test_financebench_evidence_pages_are_the_pages_that_hold_the_evidence_text() -> None:
    ds = load_dataset("financebench", DATA / "financebench")
    by_id = {i.id: i for i in ds}
    for item_id, (filing, page) in EVIDENCE_CHECKED.items():
        item = by_id[item_id]
        ((gold,),) = item.evidence
        assert (gold.document, gold.pages) == (filing, (page,))  # evidence_page_num is 0-based: page + 1
        (doc,) = item.documents()
        on = {p.number: Locator(doc.text[p.start : p.end]) for p in doc.pages}
        probe = gold.text[:150]
        assert on[page].find(probe) is not None, item_id
        assert all(on[n].find(probe) is None for n in on if n != page), item_id
    assert sum(len(i.evidence[0]) for i in ds) > len(ds)  # some questions have evidence on several pages


@needs("financebench/data/financebench_open_source.jsonl", "financebench/pdfs")
def test_financebench_every_question_has_its_evidence() -> None:
    ds = load_dataset("financebench", DATA / "financebench")
    assert all(len(i.evidence) == 1 and i.evidence[0] for i in ds)
    places = [g for i in ds for g in i.evidence[0]]
    assert all(g.pages and g.pages[0] >= 1 and g.text and g.start is None for g in places)
    assert all(g.document == f"{i.metadata['doc_name']}.pdf" for i in ds for g in i.evidence[0])


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


def test_longhealth_answer_location_becomes_a_span_of_the_named_letter() -> None:
    ds = load_dataset("longhealth", LONGHEALTH_MINI)
    first = ds.items[0]
    ((gold,),) = first.evidence
    docs = {d.name: d for d in first.documents()}
    # text_0 with start 0.711, end 1.0: LongHealth reads text[int(start * len):int(end * len)]
    assert gold.document == "letter_01.txt" and docs[gold.document].text[gold.start : gold.end] == gold.text
    assert gold.text.startswith("Treatment: ampicillin/sulbactam") and gold.end == len(docs[gold.document].text)
    assert all(len(i.evidence) == 1 for i in ds)


def test_longhealth_evidence_follows_its_letter_into_the_padded_context() -> None:
    ds = load_dataset("longhealth", LONGHEALTH_MINI, pad_with_others=2)
    for item in ds:
        ((gold,),) = item.evidence
        docs = {d.name: d for d in item.documents()}
        assert docs[gold.document].text[gold.start : gold.end] == gold.text
    assert "Ramipril 5 mg" in ds.items[1].evidence[0][0].text


def test_longhealth_answer_location_outside_its_letter_is_dropped(tmp_path, caplog) -> None:
    data = json.loads(LONGHEALTH_MINI.read_text())
    question = data["patient_01"]["questions"][0]
    question["answer_location"] = {"text_0": {"start": [180], "end": [230]}, "text_9": {"start": [0.1], "end": [0.2]}}
    path = tmp_path / "benchmark_v5.json"
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING, logger="minions.evals"):
        ds = load_dataset("longhealth", path)
    assert ds.items[0].evidence == () and ds.items[1].evidence != ()
    assert "answer_location text_0 180-230 is not a place in a letter" in caplog.text and "text_9" in caplog.text


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


@needs("qasper/qasper_sample_small.json")
def test_qasper_evidence_paragraphs_one_set_per_annotator() -> None:
    ds = load_dataset("qasper", DATA / "qasper" / "qasper_sample_small.json")
    seed, three, four, extractive = ds.items
    (paper,) = seed.documents()
    method = paper.text.index("Method paragraph using seed lexicon")
    gold = GoldEvidence(paper.name, "Method paragraph using seed lexicon", method, method + 35)
    assert seed.evidence == ((gold,), (gold,))  # two annotators, each marked the method paragraph
    assert three.evidence == ((gold,),) and extractive.evidence == ((gold,),)
    assert four.evidence == ((),)  # unanswerable: the official evaluator gives it no evidence
    # the paragraphs evidence F1 counts in: abstract and non-empty paragraphs, placed in the paper's text
    assert [p.text for p in seed.paragraphs] == [
        "This is the abstract of the paper", "A short paragraph", "Another intro paragraph", "Shorter paragraph",
        "Method paragraph using seed lexicon", "Conclusion paragraph",
    ]  # fmt: skip
    assert all(paper.text[p.start : p.end] == p.text for p in seed.paragraphs)


def test_qasper_float_evidence_is_dropped_as_the_official_evaluator_does(tmp_path) -> None:
    paragraph = "We report BLEU scores on the test set."
    evidence = [
        ["FLOAT SELECTED: Table 2: BLEU", paragraph],
        ["FLOAT SELECTED: Figure 1"],
        [paragraph.replace(" ", "\n")],
    ]
    answer = {"unanswerable": False, "extractive_spans": ["BLEU"], "yes_no": None, "free_form_answer": ""}
    paper = {
        "title": "T",
        "abstract": "An abstract.",
        "full_text": [{"section_name": "Results", "paragraphs": [paragraph]}],
        "qas": [{"question": "Which metric?", "question_id": "q1", "answers": [
            {"answer": {**answer, "evidence": e}} for e in evidence
        ]}],
    }  # fmt: skip
    path = tmp_path / "qasper-dev-v0.3.json"
    path.write_text(json.dumps({"p1": paper}))
    (item,) = load_dataset("qasper", tmp_path)
    first, second, third = item.evidence
    assert [g.text for g in first] == [paragraph] and first[0].start is not None
    assert second == ()  # only a table: no text evidence
    # not the paragraph verbatim (line breaks for spaces): found in the text all the same, letter to letter
    (loose,) = third
    assert "\n" in loose.text and (loose.start, loose.end) == (first[0].start, first[0].end - 1)


@needs("leval/scientific_qa.jsonl", "leval/financial_qa.jsonl")
def test_leval_tasks() -> None:
    sci = load_dataset("leval-scientific", DATA / "leval")
    fin = load_dataset("leval-financial", DATA / "leval" / "financial_qa.jsonl")
    assert (len(sci), len(fin)) == (184, 68)
    assert sci.items[0].id == "scientific_qa:1:0" and sci.items[0].question == "How did they obtain the dataset?"
    assert sci.items[0].metric == "f1" and len(sci.items[0].documents()[0].text) > 10_000
    assert fin.name == "leval-financial" and fin.items[0].gold[0].startswith("Oclaro has been implementing")
    assert all(i.evidence == () for i in (*sci, *fin))  # L-Eval marks no evidence


@needs("pubmedqa/ori_pqal.json", "pubmedqa/test_ground_truth.json")
def test_pubmedqa_test_dev_and_all_splits() -> None:
    test = load_dataset("pubmedqa", DATA / "pubmedqa")
    dev = load_dataset("pubmedqa", DATA / "pubmedqa", split="dev")
    every = load_dataset("pubmedqa", DATA / "pubmedqa" / "ori_pqal.json", split="all")
    assert (len(test), len(dev), len(every)) == (500, 500, 1000)
    assert {i.id for i in test} | {i.id for i in dev} == {i.id for i in every}  # dev: every labelled one not tested
    assert not {i.id for i in test} & {i.id for i in dev}
    first = test.items[0]
    assert (first.id, first.gold, first.metric) == ("12377809", ("yes",), "yes_no_maybe")
    assert {g for i in every for g in i.gold} == {"yes", "no", "maybe"}
    assert "Answer yes, no or maybe." in first.task
    assert all(i.evidence == () for i in every)  # the whole abstract is the context: no evidence is marked


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


@needs("bamboo/paperqa_16k.jsonl")
def test_bamboo_evidence_sentences_are_placed_in_the_paper() -> None:
    ds = load_dataset("bamboo-paperqa", DATA / "bamboo")
    ((first, second),) = ds.items[0].evidence
    (paper,) = ds.items[0].documents()
    # the first sentence differs from the paper by a hyphen ("knowledgeintensive" there): found all the same
    assert first.text.startswith("We conduct experiments on three types of datasets")
    assert paper.text[first.start : first.end].startswith("We conduct experiments on three types of datasets")
    assert "knowledgeintensive" in paper.text[first.start : first.end]
    assert second.text.startswith("FEVER and CSQA") and paper.text[second.start : second.end].startswith("FEVER")
    places = [g for i in ds for s in i.evidence for g in s]
    assert sum(g.start is not None for g in places) / len(places) > 0.85
    # sentences from the abstract, which the content lacks, are not evidence the paper can show
    assert sum(1 for i in ds if not i.evidence) < 10


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


# -- Questions of one's own over a set's documents (evals/bench/written/) ------------------------------------------

WRITTEN = Path(__file__).resolve().parents[2] / "evals" / "bench" / "written"


@needs("financebench/pdfs")
def test_written_finance_questions_are_asked_over_the_checkouts_filings() -> None:
    """The 30 questions written from ten filings load over the checkout's filings, and each one's evidence text is
    on the page it names: the set measures what it says it does."""
    ds = load_dataset("financebench", DATA / "financebench", questions=str(WRITTEN / "financebench.jsonl"))
    assert len(ds) == 30 and not ds.skipped and ds.options["questions"].endswith("financebench.jsonl")
    assert {i.metadata["question_type"] for i in ds.items} == {"figure", "fact", "paraphrase"}
    for item in ds.items:
        (doc,) = item.documents()
        (place,) = item.evidence[0]
        (page,) = [p for p in doc.pages if p.number == place.pages[0]]
        assert Locator(doc.text[page.start : page.end]).find(place.text) is not None, item.id


def test_own_finance_questions_need_no_checkout_questions_file(tmp_path) -> None:
    (tmp_path / "pdfs").mkdir()
    with pytest.raises(DatasetLayoutError, match="No questions file at"):
        load_dataset("financebench", tmp_path, questions=str(tmp_path / "mine.jsonl"))
    with pytest.raises(DatasetLayoutError, match=r"data/financebench_open_source\.jsonl"):
        load_dataset("financebench", tmp_path)  # without questions of one's own, the checkout's are needed


@needs("leval/scientific_qa.jsonl")
def test_written_science_questions_place_their_evidence_in_the_papers() -> None:
    ds = load_dataset("leval-scientific", DATA / "leval", questions=str(WRITTEN / "leval-scientific.jsonl"))
    assert len(ds) == 20 and len({i.metadata["line"] for i in ds.items}) == 20
    for item in ds.items:
        (doc,) = item.documents()
        (place,) = item.evidence[0]
        assert doc.name == f"scientific_qa_{item.metadata['line']}.txt" and place.document == doc.name
        assert doc.text[place.start : place.end] == place.text, item.id


def test_own_leval_questions_name_a_document_that_is_there(tmp_path) -> None:
    task = tmp_path / "scientific_qa.jsonl"
    task.write_text(json.dumps({"input": "Intro.\nWe train for 3 epochs.", "instructions": [], "outputs": []}) + "\n")
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"document": 1, "question": "How long?", "answer": "3", "evidence": ["3 epochs"]}))
    (item,) = load_dataset("leval-scientific", task, questions=str(mine)).items
    place, text = item.evidence[0][0], item.documents()[0].text
    assert (place.start, place.end) == (text.index("3 epochs"), text.index("3 epochs") + 8)
    mine.write_text(json.dumps({"document": 2, "question": "q", "answer": "a"}))
    with pytest.raises(DatasetLayoutError, match="no document on line 2"):
        load_dataset("leval-scientific", task, questions=str(mine))
