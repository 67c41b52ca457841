"""A base model through PyTorch: the packaged Gemma 3 270M (no chat template in its file, no ChatML tokens) reads
its prompt as plain text, as it does through llama.cpp (``backends.templates``); before, it was refused."""

from __future__ import annotations

import pytest

from minions.backends.model_files import packaged_path
from minions.protocols.choices import YES_NO
from minions.protocols.evidence.choosing import choice_requests, option_logprobs
from minions.types import Message

pytestmark = pytest.mark.slow


def test_a_base_model_reads_plain_text_and_names_the_answers() -> None:
    pytest.importorskip("transformers")
    from minions.backends.pytorch.backend import TransformersBackend

    backend = TransformersBackend(str(packaged_path("gemma3-270m")), speculation="plain", draft_model=None)
    messages = [Message("system", "SYS"), Message("user", "USER"), Message("assistant", "The answer is")]
    assert backend.tokenizer.decode(backend.prompt_ids(messages)) == "<bos>SYS\n\nUSER\n\nThe answer is"
    quote = "Revenue grew 29 percent in 2025, to $4.2 billion, on higher sales of the company's sensors."
    first = backend.batch(choice_requests("Did revenue grow in 2025?", YES_NO, [quote], scored=True)[:1])[0]
    assert {"yes", "no"} <= {token.strip().lower() for token, _ in first.stats["logprobs"][0]}
    yes, no = option_logprobs(first, ["Yes", "No"], lettered=False)
    assert yes > no
