"""Draft-model trees: the tree choice and the calibration (fast), and the real SmolLM2 in PyTorch drafted for by
the same GGUF in llama.cpp (slow): greedy and seeded sampled replies equal plain decoding's, token for token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("llguidance")

from minions.backends.pytorch import (
    Mode,
    SpecConfig,
    Speculation,
    TransformersBackend,
)
from minions.backends.speculation import CostCurve
from minions.errors import ModelNotFoundError
from minions.types import ChatResult, Message, SamplingParams


def test_a_draft_model_that_is_no_file_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="not a file"):
        TransformersBackend(draft_model=tmp_path / "missing.gguf")


def test_the_automatic_draft_is_the_models_own_gguf_on_the_cpu_only() -> None:
    assert TransformersBackend().draft_model == TransformersBackend().source
    assert TransformersBackend(device="cuda").draft_model is None  # a CPU draft would hold an accelerator back
    assert TransformersBackend(draft_model=None).draft_model is None


@pytest.fixture(scope="module")
def smollm2() -> TransformersBackend:
    pytest.importorskip("llama_cpp")
    return TransformersBackend()


# a CPU-like cost curve (seconds) instead of measuring T(n): timing is not what these tests check
CPU = CostCurve((1, 8, 32), (0.06, 0.1, 0.15))


def reply(backend: TransformersBackend, messages: list[Message], params: SamplingParams, mode: Mode) -> ChatResult:
    return backend.complete(messages, params, speculation=Speculation(SpecConfig(mode=mode), CPU))


QUOTE = [
    Message(
        "user",
        "Excerpt: Total revenue for 2025 was $31.8 million, compared with $24.6 million in 2024, an increase of "
        "29 percent. Operating costs rose 12 percent to $19.2 million.\n\nCopy the sentence about total revenue "
        "exactly, word for word.",
    )
]


@pytest.mark.slow
def test_greedy_replies_drafted_by_a_model_equal_plain_decoding(smollm2: TransformersBackend) -> None:
    params = SamplingParams(max_tokens=48)
    plain = reply(smollm2, QUOTE, params, "plain")
    assert "31.8" in plain.text
    drafter = smollm2.drafter()
    assert drafter is not None
    for mode in ("chain", "tree"):
        drafted = reply(smollm2, QUOTE, params, mode)
        assert drafted.stats["token_ids"] == plain.stats["token_ids"], mode
        # the draft is the same model: most drafts are taken, in far fewer forward passes
        assert drafted.stats["accepted"] >= len(plain.stats["token_ids"]) // 2
        assert drafted.stats["verify_steps"] <= plain.stats["verify_steps"] // 2


@pytest.mark.slow
def test_a_schema_reply_drafted_by_a_model_equals_plain_decoding(smollm2: TransformersBackend) -> None:
    schema = {
        "type": "object",
        "properties": {"revenue": {"type": "string", "maxLength": 40}, "year": {"type": "integer"}},
        "required": ["revenue", "year"],
    }
    params = SamplingParams(max_tokens=40, json_schema=schema)
    plain = reply(smollm2, QUOTE, params, "plain")
    tree = reply(smollm2, QUOTE, params, "tree")
    assert tree.stats["token_ids"] == plain.stats["token_ids"]
    assert tree.text == plain.text and set(json.loads(tree.text)) == {"revenue", "year"}
    assert tree.stats["verify_steps"] < plain.stats["verify_steps"]


@pytest.mark.slow
def test_seeded_sampling_drafted_by_a_model_draws_the_tokens_plain_sampling_draws(smollm2: TransformersBackend) -> None:
    def sample(mode: Mode, seed: int) -> list[int]:
        params = SamplingParams(max_tokens=32, temperature=0.9, top_p=0.95, seed=seed)
        return list(reply(smollm2, QUOTE, params, mode).stats["token_ids"])

    assert sample("tree", 5) == sample("plain", 5)
    assert sample("plain", 6) != sample("plain", 5)  # the seed matters: the comparison above is not vacuous


@pytest.mark.slow
def test_the_draft_computes_only_what_a_job_does_not_share_with_the_last(smollm2: TransformersBackend) -> None:
    drafter = smollm2.drafter()
    assert drafter is not None
    params = SamplingParams(max_tokens=8)
    first = reply(smollm2, QUOTE, params, "chain")
    before = drafter.model.computed
    other = [Message("user", QUOTE[0].content.replace("Copy the sentence", "Quote the sentence"))]
    second = reply(smollm2, other, params, "chain")
    computed = drafter.model.computed - before
    pairs = zip(first.stats["prompt_ids"], second.stats["prompt_ids"], strict=False)
    shared = next(i for i, (a, b) in enumerate(pairs) if a != b)
    assert shared > 40
    # the second prompt's unshared tokens and its drafts, not its whole prompt again
    assert computed <= len(second.stats["prompt_ids"]) - shared + 3 * 8 + 2
