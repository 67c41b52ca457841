"""What the models must write: the pydantic models, and the JSON schemas derived from them."""

from __future__ import annotations

import json

import pytest

from minions.protocols.schemas import JOB_OUTPUT_SCHEMA, JobOutput

# The local job's schema as it was written by hand beside JobOutput, before it was derived from it.
HAND_WRITTEN_JOB_SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": ["string", "null"]},
        "citation": {"type": ["string", "null"]},
        "explanation": {"type": "string"},
    },
    "required": ["answer", "citation", "explanation"],
}


def test_the_job_schema_asks_for_every_key_answer_first() -> None:
    assert list(JOB_OUTPUT_SCHEMA["properties"]) == ["answer", "citation", "explanation"]
    assert JOB_OUTPUT_SCHEMA["required"] == ["answer", "citation", "explanation"]
    assert JOB_OUTPUT_SCHEMA["additionalProperties"] is False
    assert JOB_OUTPUT_SCHEMA["properties"]["explanation"]["type"] == "string"  # never null


def test_the_derived_job_schema_constrains_decoding_as_the_hand_written_one_did() -> None:
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    derived = grammar.json_schema_to_gbnf(json.dumps(JOB_OUTPUT_SCHEMA))
    assert derived == grammar.json_schema_to_gbnf(json.dumps(HAND_WRITTEN_JOB_SCHEMA))


@pytest.mark.parametrize(
    "reply",
    [
        {"answer": "$31.8 million", "citation": "Total revenue was $31.8 million.", "explanation": "It says so."},
        {"answer": None, "citation": None, "explanation": ""},
    ],
)
def test_a_reply_the_schema_allows_validates(reply: dict[str, str | None]) -> None:
    assert JobOutput.model_validate(reply).model_dump() == reply
