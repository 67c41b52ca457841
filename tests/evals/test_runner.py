"""The runner against scripted models: lines per item, resume after an interruption, a torn last line,
configuration mismatches, failed items (the model's, and our own bugs apart), evidence metrics in the line,
sampling and concurrency."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.errors import BackendTimeoutError, ModelOutputError
from minions.evals import Dataset, EvalConfig, ResultsFileError, read_results, run_eval, run_grid, select_items
from minions.evals.items import EvalItem, eager
from minions.evals.runner import run_item
from minions.protocols import Citation, Evidence, RunResult
from minions.types import Message, SamplingParams

from .conftest import remote_reply


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_line_per_item_with_everything_a_report_needs(longhealth, local, remote, tmp_path) -> None:
    out = tmp_path / "remote.jsonl"
    summary = run_eval(longhealth, "remote", local, remote, out)
    records = lines(out)
    assert [r["item_id"] for r in records] == [i.id for i in longhealth]
    assert (summary.ran, summary.failed, summary.already_done) == (5, 0, 0)
    assert summary.mean_score == pytest.approx(0.8)  # patient_02/q2 is answered wrongly
    first = records[0]
    assert first["prediction"] == "B" and first["score"] == 1.0 and first["gold"] == ["B"]
    assert (first["dataset"], first["protocol"], first["local"], first["remote"]) == (
        "longhealth", "remote", "scripted/local", "scripted/gpt-4o-mini"
    )  # fmt: skip
    assert first["usage"]["remote"]["total_tokens"] > 0 and first["cost_usd"]["remote"] > 0
    assert first["cost_usd"]["run"] == pytest.approx(first["cost_usd"]["local"] + first["cost_usd"]["remote"])
    # bytes to the remote model: the UTF-8 length of everything it was sent
    sent = sum(len(m.content.encode("utf-8")) for call in remote.history[:1] for m in call.messages)
    assert first["egress_bytes"] == sent
    assert first["timings"]["wall_s"] > 0 and first["error"] is None
    assert first["config"]["protocol"] == "remote" and len(first["fingerprint"]) == 16
    assert len({r["fingerprint"] for r in records}) == 1


def test_resume_after_an_interruption_runs_only_the_rest(longhealth, local, remote, tmp_path) -> None:
    out = tmp_path / "remote.jsonl"
    calls = {"n": 0}

    def dies_on_the_third_item(messages: list[Message], params: SamplingParams) -> str:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C (or a crash) in the middle of the run
        return remote_reply(messages, params)

    remote.responder = dies_on_the_third_item
    with pytest.raises(KeyboardInterrupt):
        run_eval(longhealth, "remote", local, remote, out)
    assert [r["item_id"] for r in lines(out)] == ["patient_01/q1", "patient_01/q2"]

    remote.responder = remote_reply
    remote.history.clear()
    summary = run_eval(longhealth, "remote", local, remote, out)
    assert (summary.already_done, summary.ran) == (2, 3)
    assert len(remote.history) == 3  # the finished items were not sent again
    assert [r["item_id"] for r in lines(out)] == [i.id for i in longhealth]
    assert summary.mean_score == pytest.approx(0.8)

    again = run_eval(longhealth, "remote", local, remote, out)
    assert (again.already_done, again.ran) == (5, 0) and len(lines(out)) == 5


def test_a_torn_last_line_is_cut_and_its_item_runs_again(longhealth, local, remote, tmp_path) -> None:
    out = tmp_path / "remote.jsonl"
    run_eval(longhealth, "remote", local, remote, out, limit=2)
    text = out.read_text()
    out.write_text(text + text.splitlines()[1][:40])  # a crash while the third line was being written
    summary = run_eval(longhealth, "remote", local, remote, out, limit=3)
    assert (summary.already_done, summary.ran) == (2, 1)
    assert [r["item_id"] for r in lines(out)] == ["patient_01/q1", "patient_01/q2", "patient_02/q1"]


def test_resuming_under_another_configuration_is_an_error(longhealth, local, remote, tmp_path) -> None:
    out = tmp_path / "results.jsonl"
    run_eval(longhealth, "remote", local, remote, out, limit=1)
    before = out.read_bytes()
    with pytest.raises(ResultsFileError, match=r"another configuration \(protocol: 'remote' there, 'local' now"):
        run_eval(longhealth, "local", local, remote, out)
    with pytest.raises(ResultsFileError, match="protocol_options"):
        run_eval(longhealth, "remote", local, remote, out, protocol_options={"remote_max_tokens": 256})
    other_remote = ScriptedBackend("scripted/other", responder=remote_reply, capabilities=remote.capabilities)
    with pytest.raises(ResultsFileError, match="remote: 'scripted/gpt-4o-mini' there, 'scripted/other' now"):
        run_eval(longhealth, "remote", local, other_remote, out)
    assert out.read_bytes() == before  # nothing was mixed in


def test_not_a_results_file(longhealth, local, remote, tmp_path) -> None:
    out = tmp_path / "notes.jsonl"
    out.write_text('{"hello": 1}\n{"fingerprint": "x", "item_id": "y"}\n')
    with pytest.raises(ResultsFileError, match="line 1 is not a results record"):
        run_eval(longhealth, "remote", local, remote, out)


def test_a_failed_item_is_recorded_and_the_run_goes_on(longhealth, local, remote, tmp_path) -> None:
    def fails_on_ejection_fraction(messages: list[Message], params: SamplingParams) -> str:
        if "Which chemotherapy" in messages[-1].content:
            raise RuntimeError("the server fell over")
        return remote_reply(messages, params)

    remote.responder = fails_on_ejection_fraction
    out = tmp_path / "remote.jsonl"
    summary = run_eval(longhealth, "remote", local, remote, out)
    records = {r["item_id"]: r for r in lines(out)}
    assert (summary.ran, summary.failed) == (5, 1)
    failed = records["patient_02/q1"]
    assert failed["error"] == "RuntimeError: the server fell over" and failed["score"] == 0.0
    assert failed["prediction"] == ""
    # a RuntimeError is no BackendError: a backend let it through untranslated, a bug of ours
    assert failed["error_kind"] == "harness" and summary.harness_errors == 1
    assert "in fails_on_ejection_fraction" in failed["traceback"]
    assert failed["traceback"].rstrip().endswith("RuntimeError: the server fell over")
    assert failed["evidence"]["recall_at_1"] == 0.0 and failed["evidence"]["passages"] == 0
    assert summary.mean_score == pytest.approx(3 / 5)

    remote.responder = remote_reply
    skipped = run_eval(longhealth, "remote", local, remote, out)
    assert skipped.ran == 0  # a failed item is a finished item...
    retried = run_eval(longhealth, "remote", local, remote, out, retry_errors=True)
    assert (retried.ran, retried.failed) == (1, 0)  # ...unless asked to retry errors
    assert retried.mean_score == pytest.approx(0.8)  # the latest record of each item counts
    assert len(read_results(out)) == 6


class Stub:
    """A protocol that returns a prepared result, or raises."""

    name = "stub"

    def __init__(self, outcome: RunResult | Exception) -> None:
        self.outcome = outcome

    def run(self, task: str, documents: list[Document], ranking: object = None, choices: object = None) -> RunResult:
        self.asked = (task, choices)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


CONFIG = EvalConfig("longhealth", "/data", "stub", "scripted/local", None)


def test_the_line_carries_the_evidence_metrics(longhealth: Dataset) -> None:
    item = longhealth.items[0]  # its answer lies in letter_01.txt, from character 204 to its end (287)
    ((gold,),) = item.evidence
    assert (gold.document, gold.start, gold.end) == ("letter_01.txt", 204, 287)
    evidence = (
        Evidence("letter_02.txt", "Follow-up letter.", 0, 100),
        Evidence("letter_01.txt", "Discharge letter.", 0, 120),
        Evidence("letter_01.txt", "Treatment: ampicillin/sulbactam", 200, 287),
    )
    cited = (Citation("Treatment: ampicillin/sulbactam intravenously", "letter_01.txt", 0, start=204, end=250),)
    result = RunResult(answer="B", protocol="stub", evidence=evidence, citations=cited)
    line = run_item(item, Stub(result), CONFIG)
    assert line["score"] == 1.0 and line["error"] is None and line["error_kind"] is None
    assert line["evidence"] == {
        "recall_at_1": 0.0, "recall_at_5": 1.0, "recall_at_10": 1.0, "recall_at_20": 1.0,
        "citation_recall": 1.0, "evidence_f1": None,
        "passages": 3, "citations": 1, "gold": 1, "annotators": 1, "first_hit": 3,
    }  # fmt: skip


def test_an_item_without_gold_evidence_has_null_metrics() -> None:
    doc = Document.from_text("An abstract about lace plants.", name="pubmed_1.txt")
    item = EvalItem("1", "Do mitochondria matter?", ("yes",), "yes_no_maybe", eager(doc))
    result = RunResult(answer="yes", protocol="stub", evidence=(Evidence("pubmed_1.txt", "An abstract", 0, 11),))
    evidence = run_item(item, Stub(result), CONFIG)["evidence"]
    assert [evidence[f"recall_at_{k}"] for k in (1, 5, 10, 20)] == [None] * 4
    assert (evidence["citation_recall"], evidence["gold"], evidence["passages"]) == (None, 0, 1)


def test_model_failures_and_harness_errors_are_told_apart(longhealth: Dataset) -> None:
    item = longhealth.items[0]
    model = run_item(item, Stub(BackendTimeoutError("no reply in 60 s")), CONFIG)
    assert (model["error_kind"], model["traceback"], model["score"]) == ("model", None, 0.0)
    assert model["error"] == "BackendTimeoutError: no reply in 60 s"
    unusable = run_item(item, Stub(ModelOutputError("the plan did not validate")), CONFIG)
    assert (unusable["error_kind"], unusable["traceback"]) == ("model", None)  # the model's failure, not ours
    bug = run_item(item, Stub(TypeError("unsupported operand")), CONFIG)
    assert (bug["error_kind"], bug["score"]) == ("harness", 0.0)
    assert "Traceback" in bug["traceback"] and "in run" in bug["traceback"]  # where it was raised
    assert bug["traceback"].rstrip().endswith("TypeError: unsupported operand")


def test_selection_ids_sample_seed_limit(longhealth: Dataset) -> None:
    items = longhealth.items
    a = select_items(items, sample=3, seed=7)
    assert [i.id for i in a] == [i.id for i in select_items(items, sample=3, seed=7)]
    assert [i.id for i in select_items(items, sample=4, seed=7)][:3] == [i.id for i in a]
    assert [i.id for i in select_items(items, limit=2)] == ["patient_01/q1", "patient_01/q2"]
    assert [i.id for i in select_items(items, ids=["patient_02/q2"])] == ["patient_02/q2"]
    with pytest.raises(Exception, match="No item with id nope"):
        select_items(items, ids=["nope"])


def test_concurrency_writes_every_item_once(longhealth, local, remote, tmp_path) -> None:
    remote.max_concurrency = 4
    out = tmp_path / "remote.jsonl"
    summary = run_eval(longhealth, "remote", local, remote, out, concurrency=3)
    assert summary.ran == 5
    assert sorted(r["item_id"] for r in lines(out)) == sorted(i.id for i in longhealth)


def test_minions_protocol_runs_under_the_harness(longhealth, local, remote, tmp_path) -> None:
    summary = run_eval(longhealth, "minions", local, remote, tmp_path / "minions.jsonl", limit=2)
    records = lines(tmp_path / "minions.jsonl")
    assert summary.failed == 0 and [r["prediction"] for r in records] == ["B", "C"]
    assert all(r["usage"]["local"]["calls"] > 0 and r["usage"]["remote"]["calls"] > 0 for r in records)


def test_grid_writes_one_file_per_configuration(longhealth, local, remote, tmp_path) -> None:
    summaries = run_grid([longhealth], ["remote", "local"], [(local, remote)], tmp_path, limit=2)
    names = sorted(p.name for p in tmp_path.glob("*.jsonl"))
    assert len(names) == 2 and names[0].startswith("longhealth__local__scripted-local__scripted-gpt-4o-mini__")
    assert [s.ran for s in summaries] == [2, 2]
    assert [s.ran for s in run_grid([longhealth], ["remote", "local"], [(local, remote)], tmp_path, limit=2)] == [0, 0]


def test_a_library_run_in_a_grid_has_its_own_file(longhealth, local, remote, tmp_path) -> None:
    """A grid run over one library and one over each item's own documents never share (nor resume) a file."""
    alone = run_grid([longhealth], ["local"], [(local, remote)], tmp_path, limit=1)
    shared = run_grid([longhealth], ["local"], [(local, remote)], tmp_path, limit=1, library=tmp_path / "lib")
    assert alone[0].path != shared[0].path and shared[0].path.name.startswith("longhealth-library__local__")
    assert [alone[0].ran, shared[0].ran] == [1, 1]
    assert read_results(shared[0].path)[0]["config"]["dataset_options"]["library"] is True
    again = run_grid([longhealth], ["local"], [(local, remote)], tmp_path, limit=1, library=tmp_path / "lib")
    assert (again[0].path, again[0].ran, again[0].already_done) == (shared[0].path, 0, 1)


def test_concurrent_lines_come_in_finish_order_and_resume_reads_them_by_id(longhealth, local, remote, tmp_path) -> None:
    first_question = longhealth.items[0].question
    others_written = threading.Event()

    def first_item_finishes_last(messages: list[Message], params: SamplingParams) -> str:
        if first_question in "\n".join(m.content for m in messages):
            others_written.wait(timeout=10)
        return remote_reply(messages, params)

    def count(record: dict, done: int, total: int) -> None:
        if done == total - 1:
            others_written.set()

    remote.responder = first_item_finishes_last
    out = tmp_path / "remote.jsonl"
    summary = run_eval(longhealth, "remote", local, remote, out, concurrency=3, on_record=count)
    ids = [r["item_id"] for r in lines(out)]
    assert ids[-1] == longhealth.items[0].id and sorted(ids) == sorted(i.id for i in longhealth)
    sequential = run_eval(longhealth, "remote", local, remote, tmp_path / "sequential.jsonl")
    assert summary.mean_score == sequential.mean_score == pytest.approx(0.8)
    by_id = {r["item_id"]: r["score"] for r in lines(tmp_path / "sequential.jsonl")}
    assert {r["item_id"]: r["score"] for r in lines(out)} == by_id
    again = run_eval(longhealth, "remote", local, remote, out, concurrency=3)
    assert (again.already_done, again.ran) == (5, 0) and len(lines(out)) == 5


def test_ctrl_c_in_a_concurrent_run_keeps_the_running_items_and_resume_runs_the_rest(
    longhealth, local, remote, tmp_path
) -> None:
    started: set[str] = set()
    lock = threading.Lock()
    interrupted = threading.Event()

    def track(messages: list[Message], params: SamplingParams) -> str:
        text = "\n".join(m.content for m in messages)
        with lock:
            started.update(i.id for i in longhealth if i.question in text)
        if longhealth.items[0].question not in text:
            interrupted.wait(timeout=10)  # still running when Ctrl-C comes
        return remote_reply(messages, params)

    def ctrl_c_after_the_first_line(record: dict, done: int, total: int) -> None:
        if done == 1:
            interrupted.set()
            raise KeyboardInterrupt

    remote.responder = track
    out = tmp_path / "remote.jsonl"
    with pytest.raises(KeyboardInterrupt):
        run_eval(longhealth, "remote", local, remote, out, concurrency=2, on_record=ctrl_c_after_the_first_line)
    written = [r["item_id"] for r in lines(out)]
    assert sorted(written) == sorted(started)  # every item that ran was written, none twice
    assert len(written) == 3  # the first, and the two running when Ctrl-C came; the others never started

    summary = run_eval(longhealth, "remote", local, remote, out, concurrency=2)
    assert (summary.already_done, summary.ran) == (len(written), len(longhealth.items) - len(written))
    assert sorted(r["item_id"] for r in lines(out)) == sorted(i.id for i in longhealth)


def test_library_mode_asks_every_item_of_all_the_datasets_documents(tmp_path) -> None:
    """``--library``: the documents of every item in one library, each question routed among all of them to the
    one that names its company; the results say the run was a library run."""
    cover = "FORM 10-K\nFor the fiscal year ended December 31, 2022\n{}\n(Exact name of registrant)\n\n"
    filler = "The company sells goods in many markets through many channels every year. " * 40
    names = ("alder", "birch", "cedar", "dogwood")
    docs = {
        n: Document.from_text(cover.format(n.upper() + " CORP") + filler + f" Revenue was ${i} million.", f"{n}.txt")
        for i, n in enumerate(names, start=1)
    }
    items = [EvalItem(n, f"What was {n.title()}'s revenue?", (f"${i} million",), "numeric", eager(docs[n]))
             for i, n in enumerate(names, start=1)]  # fmt: skip
    asked: list[str] = []

    def local_reply(messages: list[Message], params: SamplingParams) -> str:
        asked.append(messages[-1].content)
        for alternative in (params.json_schema or {}).get("anyOf", []):
            quote = alternative["properties"]["quote"]["const"]
            if "Revenue was" in quote:
                return json.dumps({"quote": quote, "answer": quote.split(" was ")[1].rstrip(".")})
        return json.dumps({"quote": "none", "answer": None})

    out = tmp_path / "library.jsonl"
    local = ScriptedBackend("scripted/local", responder=local_reply)
    options = {"read_chunks": 2}
    run_eval(Dataset("toy", str(tmp_path), tuple(items)), "local", local, None, out, library=tmp_path / "lib",
             protocol_options=options)  # fmt: skip
    records = lines(out)
    assert all(r["config"]["dataset_options"]["library"] for r in records)
    assert [r["score"] for r in records] == [1.0, 1.0, 1.0, 1.0]
    assert all(r["prediction"].startswith(f"${i} million") for i, r in enumerate(records, start=1))
    assert len(asked) == 8  # two chunks read per question: the routed document's best two


def test_an_abstention_scores_zero_and_is_counted_apart(longhealth: Dataset) -> None:
    """A model that says it is not sure: its answer names options ("cannot tell 'B' from 'C'") that a parser would
    read as a pick; the line scores it 0 and says it abstained. The protocol gets the question and its options
    apart, and lists them itself."""
    item = longhealth.items[0]
    choice = {"options": list(item.options), "picked": None, "abstained": True}
    unsure = "Not sure: cannot tell 'B: x' from 'C: y'"
    stub = Stub(RunResult(answer=unsure, protocol="stub", reading={"choice": choice}))
    line = run_item(item, stub, CONFIG)
    assert (line["score"], line["auto_score"], line["abstained"], line["choice"]) == (0.0, 0.0, True, choice)
    assert line["choices"] == list(item.options)
    assert stub.asked == (item.question, item.choices)
    picked = run_item(item, Stub(RunResult(answer="B: Ampicillin/sulbactam", protocol="stub")), CONFIG)
    assert (picked["score"], picked["abstained"]) == (1.0, False)


def test_a_summary_puts_chance_and_the_majority_class_beside_the_score(longhealth, local, remote, tmp_path) -> None:
    summary = run_eval(longhealth, "remote", local, remote, tmp_path / "r.jsonl")
    golds = [i.gold[0] for i in longhealth]
    top = max(dict.fromkeys(golds), key=golds.count)  # a tie goes to the answer met first, as Counter's does
    b = summary.baselines
    assert b is not None and b.items == len(golds) and b.majority_answer == top
    assert b.majority == pytest.approx(golds.count(top) / len(golds))
    assert b.chance == pytest.approx(sum(1 / len(i.options) for i in longhealth) / len(golds))
    assert summary.abstained == 0
