"""End to end: the real SmolLM2 on llama.cpp as the local model, and a real OpenAI-compatible server (also
serving SmolLM2) as the stand-in remote. They check structure and accounting, not the quality of a 135M model."""

from __future__ import annotations

import importlib.util

import pytest

from minions.documents import Document
from minions.protocols import Minion, Minions, RunResult

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama-cpp-python"),
]

TEXT = """Acme Widgets Annual Report 2023

Acme Widgets sells industrial widgets to factories in Europe and North America. The company employs 1,200
people and runs two plants, one in Ohio and one in Bavaria.

Revenue in fiscal 2023 was $4.2 billion, up 12 percent from $3.75 billion in fiscal 2022. Growth came from
the new line of stainless steel widgets.

Net income was $310 million. The board approved a dividend of $1.10 per share, payable in March 2024.
"""
TASK = "What was Acme's revenue in fiscal 2023?"
OPTIONS = {
    "max_rounds": 1,
    "chunk_size": 400,
    "job_max_tokens": 96,
    "remote_max_tokens": 160,
    "max_retries": 1,
    "max_jobs_per_round": 4,
}


@pytest.fixture(scope="module")
def local():
    from minions.backends.llamacpp import LlamaCppBackend

    return LlamaCppBackend(n_ctx=4096)


@pytest.fixture
def remote(openai_server: str):
    from minions.backends.openai import OpenAIBackend

    return OpenAIBackend(
        "smollm2",
        base_url=openai_server,
        provider="openai",
        context_window=4096,
        timeout=60,
        json_schema_style="json_object",
    )


@pytest.fixture
def doc() -> Document:
    return Document.from_text(TEXT, name="acme.txt")


def assert_no_document_text(egress: str) -> None:
    """The document's paragraphs never leave the device. (What the local model wrote about them does: its
    answers are the digest the remote model reads, and a small model's answer may repeat a phrase.)"""
    flat = " ".join(egress.split())
    for paragraph in TEXT.split("\n\n"):
        if len(paragraph) > 100:
            assert " ".join(paragraph.split()) not in flat


def check_accounting(result: RunResult) -> None:
    assert isinstance(result.answer, str)
    assert result.usage["remote"].calls >= 1 and result.usage["remote"].prompt_tokens > 0
    assert result.egress and all(r.backend.endswith("smollm2") for r in result.egress)
    assert result.remote_only_estimate is not None and result.remote_only_estimate.prompt_tokens > 0
    assert result.timings["total_s"] > 0
    assert result.complete or result.notes


def test_minions_with_real_models(local, remote, doc):
    events = []
    result = Minions(local, remote, **OPTIONS).run(TASK, [doc], events=events.append)

    check_accounting(result)
    egress = "\n".join(r.text for r in result.egress)
    assert_no_document_text(egress)
    if result.jobs:  # the stand-in remote wrote a usable plan
        assert result.usage["local"].calls >= len(result.jobs) and result.usage["local"].prompt_tokens > 0
        assert all(j.document == "acme.txt" for j in result.jobs)
        assert any(e.kind == "job_finished" or e.kind == "job_failed" for e in events)
    else:
        assert not result.complete and "ModelOutputError" in result.notes[0]
    assert events[-1].kind == "final"


def test_minion_with_real_models(local, remote, doc):
    result = Minion(local, remote, **OPTIONS).run(TASK, [doc])

    check_accounting(result)
    assert_no_document_text("\n".join(r.text for r in result.egress))
    if result.jobs:
        assert result.usage["local"].calls == len(result.jobs)
