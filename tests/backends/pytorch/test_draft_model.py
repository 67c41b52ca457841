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
    Calibration,
    ForwardCost,
    Mode,
    SpecConfig,
    Speculation,
    TokenTree,
    TransformersBackend,
    best_first,
)
from minions.errors import ModelNotFoundError
from minions.types import ChatResult, Message, SamplingParams

#  0 root; 1, 2 the first position's choices; 3, 4 the second position's, below 1
TOKENS = (10, 11, 12, 13, 14)
PARENTS = (-1, 0, 0, 1, 1)
VALUES = (1.0, 0.9, 0.05, 0.8, 0.1)


def test_the_best_first_tree_keeps_the_most_valued_nodes_with_their_parents() -> None:
    flat = ForwardCost((1, 8), (1.0, 1.0))  # more nodes cost nothing: every node pays
    tree, kept = best_first(TOKENS, PARENTS, VALUES, flat, spent=0.0)
    assert kept == [0, 1, 3, 4, 2]  # by value; node 3 (0.8) after its parent (0.9)
    assert tree == TokenTree((10, 11, 13, 14, 12), (-1, 0, 1, 1, 0))


def test_the_best_first_tree_grows_only_while_it_pays() -> None:
    # each node costs a tenth of a forward: 0.9 and 0.8 pay, 0.1 and 0.05 do not
    linear = ForwardCost((1, 2), (1.0, 1.1))
    tree, kept = best_first(TOKENS, PARENTS, VALUES, linear, spent=0.0)
    assert kept == [0, 1, 3]
    assert tree == TokenTree((10, 11, 13), (-1, 0, 1))
    # time spent drafting counts: the same nodes are worth more when the step already cost more
    steep = ForwardCost((1, 2), (1.0, 2.5))
    assert best_first(TOKENS, PARENTS, VALUES, steep, spent=0.0)[1] == [0]
    assert best_first(TOKENS, PARENTS, VALUES, steep, spent=20.0)[1] == [0, 1, 3]


def test_the_calibration_learns_how_often_the_target_takes_a_node() -> None:
    calibration = Calibration()
    assert calibration.value(0, 0.3) == pytest.approx(0.3)  # nothing measured: the draft's own probability
    tree = TokenTree(TOKENS, PARENTS)
    ranks, probs = [0, 0, 1, 0, 1], [1.0, 0.3, 0.2, 0.35, 0.3]
    for _ in range(40):
        calibration.record(tree, ranks, probs, path=[0, 1, 3])
    assert calibration.value(0, 0.3) > 0.95  # the draft's first choice, unsure, yet always taken
    assert calibration.value(1, 0.2) < 0.05  # its second choices, never
    # a probability never seen borrows its rank's rate, not the draft's word
    assert calibration.value(0, 0.9) > 0.95
    assert calibration.value(1, 0.9) < 0.1
    # the target took node 2: nodes 1 and 2 were tried; 3 and 4, below the rejected 1, were not
    calibration.record(tree, ranks, probs, path=[0, 2])
    assert (calibration.tried[0][1], calibration.accepted[0][1]) == (81, 80)
    assert (calibration.tried[1][1], calibration.accepted[1][1]) == (81, 1)


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
CPU = ForwardCost((1, 8, 32), (0.06, 0.1, 0.15))


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
