"""The LLM judge: it replaces the automatic score of free-text answers, and its usage is counted apart."""

from __future__ import annotations

import json

from minions.backends.scripted import ScriptedBackend
from minions.cost import Price
from minions.documents import Document
from minions.evals import Dataset, EvalItem, run_eval
from minions.evals.items import eager

DOC = Document.from_text("The seed lexicon is a small vocabulary of positive and negative words.", name="p.md")


def test_judge_overrides_free_text_scores_and_is_billed_apart(local, remote, tmp_path) -> None:
    items = (
        EvalItem("q1", "What is the seed lexicon?", ("a vocabulary",), "f1", eager(DOC)),
        EvalItem("q2", "Pick one", ("B",), "choice", eager(DOC), options=("x", "y")),
    )
    dataset = Dataset("qasper", str(tmp_path), items)
    remote.responder = lambda messages, params: json.dumps({"answer": "B: a small list of polar words"})
    judge = ScriptedBackend("scripted/judge", responder=lambda m, p: "Yes.", price=Price(1.0, 1.0, 1.0))
    out = tmp_path / "judged.jsonl"
    run_eval(dataset, "remote", local, remote, out, judge=judge)
    free, choice = (json.loads(line) for line in out.read_text().splitlines())
    assert free["auto_score"] < 0.5 and free["score"] == 1.0 and free["judge"]["correct"] is True
    assert free["usage"]["judge"]["calls"] == 1 and free["cost_usd"]["judge"] > 0
    assert free["cost_usd"]["run"] == free["cost_usd"]["remote"]  # the judge is not the protocol's cost
    assert "a vocabulary" in judge.history[0].prompt and "polar words" in judge.history[0].prompt
    assert choice["judge"] is None and choice["score"] == 1.0  # letters are scored exactly
    assert free["config"]["judge"] == "scripted/judge"


def test_an_unclear_verdict_keeps_the_automatic_score(local, remote, tmp_path) -> None:
    dataset = Dataset("qasper", str(tmp_path), (EvalItem("q1", "What?", ("a vocabulary",), "f1", eager(DOC)),))
    remote.responder = lambda messages, params: json.dumps({"answer": "a vocabulary"})
    judge = ScriptedBackend("scripted/judge", responder=lambda m, p: "I cannot tell")
    run_eval(dataset, "remote", local, remote, tmp_path / "j.jsonl", judge=judge)
    (line,) = (json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines())
    assert line["judge"]["correct"] is None and line["score"] == line["auto_score"] == 1.0
