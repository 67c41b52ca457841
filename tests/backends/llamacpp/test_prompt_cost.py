"""What a prompt costs the real engine: all of it for a new chunk, the question alone once the chunk's state is
saved; and the local reading that spends a question's budget by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.engine import EngineConfig
from minions.documents import Document
from minions.protocols import LocalOnly
from minions.protocols.evidence.jobs import job_request
from minions.protocols.evidence.reading import PromptCounter
from minions.types import SamplingParams

from .test_prefixes import CHUNKS, QUESTIONS

pytestmark = pytest.mark.slow


def backend(kv_dir: Path) -> LlamaCppBackend:
    config = EngineConfig(n_ctx=2048, seq_ctx=1024, max_seqs=4, speculate=False, learn_drafts=False,
                          kv_cache=True, kv_cache_dir=str(kv_dir))  # fmt: skip
    return LlamaCppBackend(engine_config=config)


def test_a_saved_chunk_costs_only_the_question_after_it(tmp_path: Path) -> None:
    local = backend(tmp_path)
    try:
        assert isinstance(local, PromptCounter)
        ask = [job_request(QUESTIONS[0], c, SamplingParams(max_tokens=4)) for c in CHUNKS]
        cold = local.prompt_tokens(ask)
        assert all(n > 100 for n in cold)  # the chunk, the system prompt and the question
        local.batch(ask[:1])  # reading the first chunk saves its state
        warm = local.prompt_tokens(ask)
        assert warm[0] < cold[0] / 3 and warm[1] == cold[1]
    finally:
        local.close()


def test_a_question_reads_new_chunks_within_its_budget_and_quotes_the_rest_by_words(tmp_path: Path) -> None:
    text = "\n\n".join(c.text for c in CHUNKS * 2)
    doc = Document.from_text(text, name="10k.txt")
    local = backend(tmp_path)
    try:
        # ~400 prompt tokens a new chunk here, ~90 a saved one
        protocol = LocalOnly(local, chunk_size=600, read_chunks=4, read_tokens=520)
        first = protocol.run("What were net sales in 2018?", [doc])
        assert 1 <= first.usage["local"].calls < 4 and first.reading["by_words"] == 4 - first.usage["local"].calls
        assert "$32.8 billion" in first.answer
        # what the first question read is saved now: the same question reads more of its chunks by the model
        again = protocol.run("What were net sales in 2018?", [doc])
        assert again.usage["local"].calls > first.usage["local"].calls
    finally:
        local.close()
