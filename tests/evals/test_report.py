"""Reports: per-configuration numbers, the ratios against remote-only on shared items, harness errors apart,
evidence metrics beside accuracy and cost, the tables and the plot."""

from __future__ import annotations

import json

import pytest

from minions.evals import EvalError, run_eval, summarize, write_report
from minions.evals.report import load_records, markdown_report


def record(fp: str, protocol: str, item: str, score: float, cost: float, remote_tokens: int, **extra) -> dict:
    config = {"dataset": "d", "data_path": "/d", "dataset_options": {}, "remote": "r", "judge": None}
    return {
        "fingerprint": fp, "item_id": item, "dataset": "d", "protocol": protocol, "local": "l", "remote": "r",
        "config": {**config, "protocol": protocol}, "score": score, "error": extra.get("error"),
        "error_kind": extra.get("error_kind"), "evidence": extra.get("evidence"),
        "usage": {"remote": {"total_tokens": remote_tokens}, "local": {"total_tokens": 100}},
        "cost_usd": {"run": cost}, "timings": {"wall_s": 2.0}, "egress_bytes": remote_tokens * 4,
    }  # fmt: skip


def test_ratios_are_computed_on_the_items_both_ran() -> None:
    records = [
        record("R", "remote", "a", 1.0, 0.10, 1000),
        record("R", "remote", "b", 1.0, 0.10, 1000),
        record("R", "remote", "c", 0.0, 0.10, 1000),
        record("M", "minions", "a", 1.0, 0.02, 200),
        record("M", "minions", "b", 0.0, 0.03, 300),
    ]
    remote, minions = summarize(records)
    assert (remote.protocol, remote.items, remote.accuracy) == ("remote", 3, pytest.approx(2 / 3))
    assert remote.accuracy_recovered == 1.0 and remote.cost_reduction == 1.0
    assert minions.baseline_items == 2
    # on items a, b: remote 1.0 accuracy, $0.20; minions 0.5 accuracy, $0.05
    assert minions.accuracy_recovered == pytest.approx(0.5)
    assert minions.cost_reduction == pytest.approx(4.0)
    assert minions.remote_token_reduction == pytest.approx(4.0)
    assert minions.cost_usd == pytest.approx(0.05) and minions.remote_tokens == 250 and minions.latency_s == 2.0


def test_no_baseline_and_free_protocols() -> None:
    (alone,) = summarize([record("M", "minions", "a", 1.0, 0.02, 200)])
    assert alone.accuracy_recovered is None and alone.cost_reduction is None
    _, local = summarize([record("R", "remote", "a", 1.0, 0.1, 900), record("L", "local", "a", 1.0, 0.0, 0)])
    assert local.cost_reduction == float("inf")
    table = markdown_report([local])
    assert "| local | `l` | `r` | 1 | 0 | 0 | 1.000 |" in table and "| 1.00x | ∞ | ∞ |" in table


def test_the_latest_record_of_an_item_counts(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    rows = [record("R", "remote", "a", 0.0, 0.1, 10, error="boom"), record("R", "remote", "a", 1.0, 0.1, 10)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (row,) = summarize(load_records([path]))
    assert (row.items, row.errors, row.accuracy) == (1, 0, 1.0)


def evidence(r1: float | None, r5: float | None, cited: float | None, gold: int, f1: float | None = None) -> dict:
    return {"recall_at_1": r1, "recall_at_5": r5, "recall_at_10": r5, "recall_at_20": r5,
            "citation_recall": cited, "evidence_f1": f1, "passages": 5, "gold": gold}  # fmt: skip


def test_evidence_means_are_over_the_items_with_gold_evidence() -> None:
    records = [
        record("M", "minions", "a", 1.0, 0.02, 200, evidence=evidence(1.0, 1.0, 1.0, gold=2)),
        record("M", "minions", "b", 0.0, 0.02, 200, evidence=evidence(0.0, 0.5, 0.0, gold=1)),
        record("M", "minions", "c", 1.0, 0.02, 200, evidence=evidence(None, None, None, gold=0)),  # no gold
        record("M", "minions", "d", 1.0, 0.02, 200),  # a line from before evidence was measured
        record("R", "rag", "a", 1.0, 0.01, 100, evidence=evidence(0.5, 0.5, None, gold=2, f1=0.25)),
    ]
    minions, rag = summarize(records)
    assert (minions.evidence_items, minions.accuracy) == (2, 0.75)
    assert minions.recall_at == {1: 0.5, 5: 0.75, 10: 0.75, 20: 0.75} and minions.citation_recall == 0.5
    assert minions.evidence_f1 is None and rag.evidence_f1 == 0.25 and rag.citation_recall is None
    table = markdown_report([minions, rag], plot=None)
    assert "| recall@1 | recall@5 | recall@10 | recall@20 | citation recall | evidence F1 |" in table
    assert "| minions | `l` | `r` | 0.750 | $0.0200 | 2 | 0.500 | 0.750 | 0.750 | 0.750 | 0.500 | n/a |" in table
    assert "| rag | `l` | `r` | 1.000 | $0.0100 | 1 | 0.500 | 0.500 | 0.500 | 0.500 | n/a | 0.250 |" in table


def test_no_gold_evidence_reads_n_a() -> None:
    (row,) = summarize([record("P", "local", "a", 1.0, 0.0, 0, evidence=evidence(None, None, None, gold=0))])
    assert row.evidence_items == 0 and row.recall_at[1] is None
    assert "| local | `l` | `r` | 1.000 | $0.0000 | 0 | n/a | n/a | n/a | n/a | n/a | n/a |" in markdown_report([row])


def test_harness_errors_are_counted_apart() -> None:
    rows = [
        record("M", "minions", "a", 0.0, 0.0, 0, error="TypeError: x", error_kind="harness"),
        record("M", "minions", "b", 0.0, 0.0, 0, error="BackendTimeoutError: y", error_kind="model"),
        record("M", "minions", "c", 1.0, 0.0, 0),
    ]
    (row,) = summarize(rows)
    assert (row.errors, row.harness_errors) == (2, 1)
    assert "| minions | `l` | `r` | 3 | 2 (1 harness) | 0 | 0.333 |" in markdown_report([row])


def test_write_report_from_real_runs(longhealth, local, remote, tmp_path) -> None:
    paths = [tmp_path / f"{p}.jsonl" for p in ("remote", "local", "minions")]
    for protocol, path in zip(("remote", "local", "minions"), paths, strict=True):
        run_eval(longhealth, protocol, local, remote, path)
    md, png = write_report(paths, tmp_path / "report")
    text = md.read_text()
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5000
    assert "## longhealth" in text and "![cost against accuracy](cost_accuracy.png)" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and "`scripted/local`" in line]
    assert [line.split(" | ")[0] for line in table] == ["| remote", "| local", "| minions"] * 2  # and evidence
    assert "| 0.800 |" in table[0] and "| 1.00x | 1.00x | 1.00x |" in table[0]
    assert "∞" in table[1]  # local-only sends nothing to the remote model


def test_report_of_nothing(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(EvalError, match="No results"):
        write_report([empty], tmp_path)


def test_a_closed_form_row_shows_abstentions_chance_and_the_majority_class_beside_accuracy(tmp_path) -> None:
    closed = {"choices": ["Yes", "No", "Maybe"]}
    records = [
        {**record("L", "local", "a", 1.0, 0.0, 0), **closed, "gold": ["yes"], "abstained": False},
        {**record("L", "local", "b", 0.0, 0.0, 0), **closed, "gold": ["yes"], "abstained": True},
        {**record("L", "local", "c", 0.0, 0.0, 0), **closed, "gold": ["no"], "abstained": False},
        {**record("L", "local", "d", 1.0, 0.0, 0), **closed, "gold": ["yes"], "abstained": False},
    ]
    (row,) = summarize(records)
    assert row.abstained == 1 and row.baselines is not None
    assert (row.baselines.chance, row.baselines.majority, row.baselines.majority_answer) == (
        pytest.approx(1 / 3), 0.75, "yes"
    )  # fmt: skip
    assert "| local | `l` | `r` | 4 | 0 | 0 | 0.500 | 1 | 0.333 | 0.750 (yes) |" in markdown_report([row], plot=None)
    (open_row,) = summarize([record("M", "minions", "a", 1.0, 0.02, 200)])
    assert open_row.baselines is None and "| 1.000 | 0 | n/a | n/a |" in markdown_report([open_row], plot=None)
