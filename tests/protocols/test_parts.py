"""The parts: JSON extraction, BM25, inputs, options, the factory, prompts."""

from __future__ import annotations

import jinja2
import pytest

from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.errors import ConfigError, DocumentNotFoundError, EmptyDocumentError
from minions.protocols import (
    BM25,
    PROTOCOLS,
    InputError,
    LocalOnly,
    Minions,
    RunOptions,
    default_protocol,
    get_protocol,
    needs_remote,
)
from minions.protocols.evidence.citations import verify_citation
from minions.protocols.parsing import as_answer, extract_json
from minions.protocols.prompts import render


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure!\n```json\n{"a": "x}"}\n```', {"a": "x}"}),
        ('junk {not json} then {"b": [1, {"c": 2}]} tail {"d": 3}', {"b": [1, {"c": 2}]}),
        ('{"a": "line\nbreak"}', {"a": "line\nbreak"}),
    ],
)
def test_extract_json_finds_the_first_object(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2]", '{"a": '])
def test_extract_json_says_when_there_is_none(text):
    with pytest.raises(ValueError, match="no valid JSON object"):
        extract_json(text)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("null", None),
        ("None", None),
        ("", None),
        (" N/A ", None),
        (4.2, "4.2"),
        (7, "7"),
        ("$5", "$5"),
        (["a", None, "b"], "a; b"),
        (True, None),
    ],
)
def test_as_answer(value, expected):
    assert as_answer(value) == expected


def test_citations_match_near_verbatim_only():
    chunk = "Net   sales were\n$1,577 million in 2018, compared with $1,373 million."
    assert verify_citation("net sales were $1,577 million", chunk)
    assert verify_citation('"Net sales were $1,577 milion in 2018"', chunk)  # one typo
    assert not verify_citation("net income was $9 million", chunk)
    assert not verify_citation("2019", chunk)


def test_bm25_ranks_the_matching_text_first():
    texts = ["the cat sat", "capital expenditure was 1,577 million", "cash flow statement and capital expenditure"]
    bm = BM25(texts)
    assert bm.top("capital expenditure 1,577", 2) == [1, 2]
    assert bm.top("unrelated words", 2) == [0, 1]  # ties keep order


def test_empty_task_and_missing_documents_are_clear_errors(local, doc, tmp_path):
    m = Minions(local, local)
    with pytest.raises(InputError, match="task is empty"):
        m.run("  ", [doc])
    with pytest.raises(InputError, match="No documents"):
        m.run("q", [])
    with pytest.raises(DocumentNotFoundError, match=r"Document\.from_text"):
        m.run("q", "some text that is not a path")
    with pytest.raises(EmptyDocumentError):
        m.run("q", [Document(name="blank", text="  \n")])
    with pytest.raises(InputError, match="unique name"):
        m.run("q", [doc, doc])
    assert not local.history


def test_paths_are_loaded(local, tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("Revenue in fiscal 2023 was $4.2 billion.")
    result = LocalOnly(local).run("Revenue?", path)
    assert result.answer.startswith("$4.2 billion, according to a.txt, line 1") and result.jobs[0].document == "a.txt"
    assert LocalOnly(local).run("Revenue?", [str(path)]).citations[0].document == "a.txt"


def test_unknown_options_and_protocols_are_named():
    with pytest.raises(InputError, match="Unknown option"):
        Minions(ScriptedBackend(), max_roundz=3)
    with pytest.raises(InputError, match="Unknown protocol 'foo'"):
        get_protocol("foo", ScriptedBackend())
    with pytest.raises(InputError, match="max_rounds"):
        RunOptions(max_rounds=0)


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_get_protocol_builds_each_with_options(name):
    model = ScriptedBackend("scripted/l")
    p = get_protocol(name, model, model, max_rounds=2)
    assert p.name == name and p.options.max_rounds == 2 and p.remote is p.local


@pytest.mark.parametrize("name", sorted(set(PROTOCOLS) - {"local"}))
def test_a_protocol_that_needs_a_remote_model_refuses_to_start_without_one(name):
    with pytest.raises(ConfigError, match=rf"^The {name} protocol needs a remote model: .*MINIONS_REMOTE.*local"):
        get_protocol(name, ScriptedBackend("scripted/l"))
    with pytest.raises(ConfigError, match="needs a remote model"):
        PROTOCOLS[name](ScriptedBackend("scripted/l"), None)


def test_only_local_runs_without_a_remote_model_and_is_then_the_default():
    p = get_protocol("local", ScriptedBackend("scripted/l"))
    assert p.remote is p.local
    assert [n for n in PROTOCOLS if not needs_remote(n)] == ["local"]
    assert default_protocol(has_remote=False) == "local" and default_protocol(has_remote=True) == "minions"


def test_backends_resolve_from_strings(register_provider):
    register_provider("scriptedtest", lambda model: ScriptedBackend(f"scriptedtest/{model}"))
    p = get_protocol("minions", "scriptedtest/small", "scriptedtest/big")
    assert p.local.name == "scriptedtest/small" and p.remote.name == "scriptedtest/big"


def test_prompts_are_strict():
    with pytest.raises(jinja2.UndefinedError):
        render("job", instruction="x")


def test_a_reply_cut_short_still_gives_its_answer():
    from minions.protocols.parsing import salvage_fields

    text = '{ "answer": "Revenue was $4.2 billion, up 12 percent and the \\"board\\" approved'
    assert salvage_fields(text, ("answer", "citation")) == {
        "answer": 'Revenue was $4.2 billion, up 12 percent and the "board" approved'
    }
    assert salvage_fields("no json", ("answer",)) == {}


def test_blank_document_and_section_names_mean_no_restriction() -> None:
    from minions.protocols.schemas import JobSpec

    spec = JobSpec.model_validate({"instruction": "Find revenue.", "documents": [""], "sections": [" "]})
    assert spec.documents == [] and spec.sections == []
