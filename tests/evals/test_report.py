"""Reports: per-configuration numbers, the ratios against remote-only on shared items, the table and the plot."""

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


def test_write_report_from_real_runs(longhealth, local, remote, tmp_path) -> None:
    paths = [tmp_path / f"{p}.jsonl" for p in ("remote", "local", "minions")]
    for protocol, path in zip(("remote", "local", "minions"), paths, strict=True):
        run_eval(longhealth, protocol, local, remote, path)
    md, png = write_report(paths, tmp_path / "report")
    text = md.read_text()
    assert png.read_bytes().startswith(b"\x89PNG") and png.stat().st_size > 5000
    assert "## longhealth" in text and "![cost against accuracy](cost_accuracy.png)" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and "`scripted/local`" in line]
    assert [line.split(" | ")[0] for line in table] == ["| remote", "| local", "| minions"]
    assert "| 0.800 |" in table[0] and "| 1.00x | 1.00x | 1.00x |" in table[0]
    assert "∞" in table[1]  # local-only sends nothing to the remote model


def test_report_of_nothing(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(EvalError, match="No results"):
        write_report([empty], tmp_path)
