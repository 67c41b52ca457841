"""``minions eval``: runs and reports through the real CLI, and one-line errors (exit 2) for bad input."""

from __future__ import annotations

import json

import pytest

from minions.apps.cli.main import main
from minions.backends import registry
from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.cost import Price

from ...evals.conftest import LONGHEALTH_MINI, local_reply, remote_reply


@pytest.fixture(autouse=True)
def scripted_provider(monkeypatch) -> None:
    """``fake/local`` and ``fake/remote`` resolve, through the real registry, to scripted models."""

    def make(model: str) -> ScriptedBackend:
        if model == "local":
            return ScriptedBackend("fake/local", responder=local_reply)
        caps = Capabilities(json_schema=True, local=False, context_window=128_000)
        return ScriptedBackend(f"fake/{model}", responder=remote_reply, capabilities=caps, price=Price(1, 1, 1))

    monkeypatch.setitem(registry._FACTORIES, "fake", make)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.strip().splitlines() if line.startswith("minions: error: ")]
    assert code == 2 and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0]


MODELS = ("--local", "fake/local", "--remote", "fake/remote")


def test_run_resume_and_report(capsys, tmp_path) -> None:
    out = tmp_path / "lh-remote.jsonl"
    base = ("eval", "run", "longhealth", "--data", str(LONGHEALTH_MINI), *MODELS)
    code, stdout, err = run(capsys, *base, "--protocol", "remote", "--limit", "2", "--out", str(out))
    assert code == 0, err
    assert "[2/2] remote patient_01/q2: score 1.00" in err and "2 ran (0 failed), 0 already done" in stdout
    code, stdout, _ = run(capsys, *base, "--protocol", "remote", "--out", str(out), "--quiet")
    assert code == 0 and "3 ran (0 failed), 2 already done; mean score 0.800 over 5 items" in stdout

    grid = tmp_path / "grid"
    code, stdout, _ = run(capsys, *base, "--protocol", "local,minions", "--sample", "2", "--seed", "1",
                          "--out", str(grid), "--quiet")  # fmt: skip
    assert code == 0 and len(list(grid.glob("*.jsonl"))) == 2

    report = tmp_path / "report"
    code, stdout, _ = run(capsys, "eval", "report", str(out), *map(str, grid.glob("*.jsonl")), "--out", str(report))
    assert code == 0 and (report / "report.md").is_file() and (report / "cost_accuracy.png").is_file()
    assert "| remote | `fake/local` | `fake/remote` | 5 | 0 | 0 | 0.800 |" in stdout


def test_protocol_and_dataset_options(capsys, tmp_path) -> None:
    out = tmp_path / "o.jsonl"
    code, _, err = run(capsys, "eval", "run", "longhealth", "--data", str(LONGHEALTH_MINI), *MODELS,
                       "--protocol", "remote", "--item", "patient_03/q1", "--dataset-option", "pad_with_others=1",
                       "--option", "remote_max_tokens=300", "--out", str(out), "--quiet")  # fmt: skip
    assert code == 0, err
    (line,) = (json.loads(x) for x in out.read_text().splitlines())
    assert line["config"]["dataset_options"] == {"pad_with_others": 1}
    assert line["config"]["protocol_options"] == {"remote_max_tokens": 300} and len(line["documents"]) == 4


def test_a_protocol_that_needs_a_remote_model_without_one_stops_before_any_item(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    out = tmp_path / "o.jsonl"
    code, _, err = run(capsys, "eval", "run", "longhealth", "--data", str(LONGHEALTH_MINI), "--local", "fake/local",
                       "--protocol", "minions", "--out", str(out))  # fmt: skip
    one_line_error(code, err, "The minions protocol needs a remote model", "--remote", "MINIONS_REMOTE", "local")
    assert not out.exists() and "[1/" not in err


def test_unknown_dataset_lists_the_valid_ones(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "eval", "run", "finance", "--data", ".", "--out", str(tmp_path / "x.jsonl"))
    one_line_error(code, err, "Unknown dataset 'finance'", "financebench, longhealth, qasper")


def test_wrong_layout_names_the_expected_files(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "eval", "run", "financebench", "--data", str(tmp_path), *MODELS,
                       "--out", str(tmp_path / "x.jsonl"))  # fmt: skip
    one_line_error(code, err, "data/financebench_open_source.jsonl", "pdfs/")


def test_results_of_another_configuration(capsys, tmp_path) -> None:
    out = tmp_path / "r.jsonl"
    base = ("eval", "run", "longhealth", "--data", str(LONGHEALTH_MINI), *MODELS, "--limit", "1", "--quiet")
    assert run(capsys, *base, "--protocol", "remote", "--out", str(out))[0] == 0
    code, _, err = run(capsys, *base, "--protocol", "local", "--out", str(out))
    one_line_error(code, err, "another configuration", "protocol: 'remote' there, 'local' now", "new --out")


def test_bad_option_and_unknown_protocol(capsys, tmp_path) -> None:
    base = ("eval", "run", "longhealth", "--data", str(LONGHEALTH_MINI), *MODELS, "--out", str(tmp_path / "x.jsonl"))
    code, _, err = run(capsys, *base, "--option", "max_rounds")
    one_line_error(code, err, "--option takes KEY=VALUE")
    code, _, err = run(capsys, *base, "--protocol", "telepathy")
    one_line_error(code, err, "Unknown protocol 'telepathy'")


def test_report_of_a_missing_file(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "eval", "report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path))
    one_line_error(code, err, "No such results file")
