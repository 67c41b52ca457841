"""The PyTorch backend: resolving and errors (fast), and the real SmolLM2 GGUF through transformers (slow)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("llguidance")

from minions.backends.pytorch import SpecConfig, Speculation, TransformersBackend
from minions.backends.registry import resolve
from minions.backends.speculation import CostCurve
from minions.errors import ModelNotFoundError
from minions.types import Message, SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40}},
    "required": ["city", "country"],
    "additionalProperties": False,
}


def test_the_registry_resolves_transformers_without_loading_the_model() -> None:
    backend = resolve("transformers/default")
    assert isinstance(backend, TransformersBackend)
    assert backend.name == "transformers/default"
    assert backend.capabilities.local and backend.capabilities.json_schema and backend.capabilities.logprobs
    assert backend.capabilities.context_window == 8192  # read from the GGUF's metadata
    assert backend._loaded is None


def test_a_path_that_is_no_model_says_what_to_pass(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match=r"neither a \.gguf file nor a transformers folder"):
        resolve(f"transformers/{tmp_path / 'missing.gguf'}")
    with pytest.raises(ModelNotFoundError, match=r"config\.json"):
        resolve(f"transformers/{tmp_path}")


@pytest.fixture(scope="module")
def smollm2() -> TransformersBackend:
    backend = TransformersBackend()
    # a fixed, CPU-like cost curve instead of measuring T(n) (timing is not what these tests check)
    backend._speculation = Speculation(backend.spec, CostCurve((1, 8, 32), (1.0, 1.2, 1.6)))
    return backend


@pytest.mark.slow
def test_smollm2_answers_a_short_question(smollm2: TransformersBackend) -> None:
    result = smollm2.chat("What is the capital of France? Answer in one short sentence.", SamplingParams(max_tokens=24))
    assert result.ok and result.finish_reason == "stop"
    assert "Paris" in result.text
    assert result.usage.prompt_tokens > 10 and result.usage.completion_tokens == len(result.stats["token_ids"])
    assert result.timings.decode_s > 0 and result.stats["verify_steps"] >= 1


@pytest.mark.slow
def test_a_last_assistant_message_is_the_start_of_the_reply(smollm2: TransformersBackend) -> None:
    question = Message("user", "Which city is the capital of France?")
    started = smollm2.prompt_ids([question, Message("assistant", "The capital of France is")])
    alone = smollm2.prompt_ids([question])
    assert started[: len(alone)] == alone
    assert smollm2.tokenizer.decode(started[len(alone) :]).strip() == "The capital of France is"


@pytest.mark.slow
def test_smollm2_replies_in_the_schema_and_trees_change_nothing(smollm2: TransformersBackend) -> None:
    messages = [Message("user", "Paris is the capital of France. Reply with the city and its country as JSON.")]
    params = SamplingParams(max_tokens=40, json_schema=SCHEMA, logprobs=2)
    tree = smollm2.complete(messages, params)
    assert tree.finish_reason == "stop", tree.text
    reply = json.loads(tree.text)
    assert set(reply) == {"city", "country"} and all(isinstance(v, str) for v in reply.values())
    assert len(tree.stats["logprobs"]) == len(tree.stats["token_ids"]) + 1  # the end token's step too
    plain = smollm2.complete(
        messages, params, speculation=Speculation(SpecConfig(mode="plain"), CostCurve((1,), (1.0,)))
    )
    assert plain.stats["token_ids"] == tree.stats["token_ids"]
    # the schema's keys and punctuation are forced: drafted, accepted, fewer forward passes
    assert tree.stats["accepted"] >= 4 and tree.stats["verify_steps"] < plain.stats["verify_steps"]
