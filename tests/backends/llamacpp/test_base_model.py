"""A base model (no chat template, no turn tokens): the packaged Gemma 3 270M, read as plain text.

ChatML's turn marks would reach such a model as the characters "<", "|", "im": before, Gemma went on with " not a"
after "The answer is", and no answer of a closed question was among its 20 likeliest tokens.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.ffi import LlamaModel
from minions.backends.model_files import packaged_path
from minions.protocols import LocalOnly
from minions.protocols.choices import YES_NO
from minions.protocols.evidence.choosing import choice_requests, option_logprobs
from minions.types import Message

pytestmark = pytest.mark.slow

QUOTE = "Revenue grew 29 percent in 2025, to $4.2 billion, on higher sales of the company's sensors."
QUESTION = "Did revenue grow in 2025?"


@pytest.fixture(scope="module")
def gemma() -> Path:
    return packaged_path("gemma3-270m")


def test_a_base_model_reads_the_messages_as_plain_text_after_its_bos(gemma: Path, smollm2_gguf: Path) -> None:
    messages = [Message("system", "SYS"), Message("user", "USER"), Message("assistant", "The answer is")]
    base = LlamaModel(gemma)
    try:
        assert not base.has_chatml_turns()
        assert base.render_chat(messages) == "<bos>SYS\n\nUSER\n\nThe answer is"
        assert base.chat_tokens(messages)[0] == base.lib.llama_vocab_bos(base.vocab)
    finally:
        base.close()
    instruct = LlamaModel(smollm2_gguf)  # an instruct model without a template in its file keeps ChatML
    try:
        assert instruct.has_chatml_turns()
        assert instruct.render_chat(messages).startswith("<|im_start|>system\nSYS<|im_end|>")
    finally:
        instruct.close()


def test_a_base_model_names_the_answers_of_a_closed_question(gemma: Path) -> None:
    backend = LlamaCppBackend(str(gemma))
    try:
        results = backend.batch(choice_requests(QUESTION, YES_NO, [QUOTE], scored=True))
        for result, names in zip(results, (["Yes", "No"], ["No", "Yes"]), strict=True):
            step = result.stats["logprobs"][0]
            said = {token.strip().lower() for token, _ in step}
            assert {"yes", "no"} <= said  # both answers among the likeliest next tokens, not the floor
            yes, no = option_logprobs(result, names, lettered=False)[:: 1 if names[0] == "Yes" else -1]
            assert yes > no  # the quote says it grew
    finally:
        backend.close()


def test_the_packaged_model_answers_a_yes_no_question_with_its_quote(gemma: Path, tmp_path: Path) -> None:
    (tmp_path / "report.txt").write_text(f"Annual report.\n\n{QUOTE}\n\nThe board met four times.\n")
    result = LocalOnly("llamacpp/gemma3-270m", choose="scores").run(QUESTION, documents=[tmp_path / "report.txt"])
    assert result.reading["choice"]["by"] == "scores"
    first = result.answer.splitlines()[0]
    assert first in {"Yes", "No"} or first.startswith("Not sure")
    assert "29 percent" in result.answer
