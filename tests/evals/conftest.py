"""Fixtures for evaluation tests: where the shared benchmark files are, a small LongHealth-layout dataset, and
scripted local and remote models that answer its questions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.cost import Price
from minions.evals import Dataset, load_dataset
from minions.types import Message, SamplingParams

from ..conftest import BENCHMARK_DATA as DATA

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LONGHEALTH_MINI = FIXTURES / "longhealth_mini.json"

# What the scripted models answer, by a word of the question: patient_02/q2 is answered wrongly.
ANSWERS = {"antibiotic": "B", "hypertension": "C", "chemotherapy": "B", "PET-CT": "A", "anticoagulant": "C"}


def answer_for(text: str) -> str:
    return next((letter for word, letter in ANSWERS.items() if word in text), "E")


def needs(*relative: str) -> pytest.MarkDecorator:
    """Skip unless the shared benchmark files exist."""
    missing = [r for r in relative if not (DATA / r).exists()]
    return pytest.mark.skipif(bool(missing), reason=f"shared benchmark data absent: {', '.join(missing)}")


def remote_reply(messages: list[Message], params: SamplingParams) -> str:
    """A remote model: it plans one job and answers at once (minions), or answers from the context it sees."""
    text = "\n".join(m.content for m in messages)
    if "Plan jobs" in text:
        return json.dumps({"jobs": [{"instruction": "Find what the question asks about."}]})
    if "This is round" in text:
        return json.dumps({"decision": "final", "answer": answer_for(text)})
    return json.dumps({"answer": answer_for(text), "citations": []})


def local_reply(messages: list[Message], params: SamplingParams) -> str:
    """A local model: job replies for each chunk, and the reduce step's Answer."""
    prompt = messages[-1].content
    if re.search(r"finding", prompt, re.IGNORECASE):
        return json.dumps({"answer": answer_for(prompt)})
    return json.dumps({"explanation": "From the letter.", "citation": None, "answer": answer_for(prompt)})


@pytest.fixture
def longhealth() -> Dataset:
    return load_dataset("longhealth", LONGHEALTH_MINI)


@pytest.fixture
def local() -> ScriptedBackend:
    return ScriptedBackend("scripted/local", responder=local_reply)


@pytest.fixture
def remote() -> ScriptedBackend:
    return ScriptedBackend(
        "scripted/gpt-4o-mini",
        responder=remote_reply,
        capabilities=Capabilities(json_schema=True, local=False, context_window=128_000),
        price=Price(0.15, 0.075, 0.60),
    )
