"""Hybrid targets (a tiny random-weight LFM2: short convolutions and attention) keep exactly the state of
step-by-step decoding after speculative steps with rejected drafts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "Lfm2Config"):
    pytest.skip("this transformers has no LFM2", allow_module_level=True)

from minions.backends.pytorch import (  # noqa: E402
    AttentionState,
    Chooser,
    ReplayState,
    SpecConfig,
    Speculation,
    generate,
    has_recurrent_state,
    state_keeper,
)
from minions.backends.speculation import CostCurve  # noqa: E402

VOCAB = 40
FLAT = CostCurve((1, 8, 32), (1.0, 1.1, 1.4))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = transformers.Lfm2Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, conv_L_cache=3,
        layer_types=["conv", "full_attention", "conv", "full_attention"],
    )  # fmt: skip
    return transformers.Lfm2ForCausalLM(config).eval()


def prompt(seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, VOCAB, (20,), generator=g).tolist()
    return base + base[:6] + base


def run(model, tokens, mode, keeper):
    cache = transformers.DynamicCache(config=model.config)
    out = generate(model, cache, tokens, max_new=32, choose=Chooser(), is_end=lambda t: False,
                   speculation=Speculation(SpecConfig(mode=mode), FLAT), keeper=keeper)  # fmt: skip
    return out, cache


def states(cache) -> list[torch.Tensor]:
    out = []
    for layer in cache.layers:
        if hasattr(layer, "conv_states"):
            out.extend(s for s in layer.conv_states.values() if s is not None)
        if getattr(layer, "keys", None) is not None:
            out.extend([layer.keys, layer.values])
    return out


def test_an_lfm2_model_is_recognised_as_hybrid(model) -> None:
    assert has_recurrent_state(model)
    assert isinstance(state_keeper(model), ReplayState)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=8, hidden_size=16, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2))  # fmt: skip
    assert isinstance(state_keeper(llama), AttentionState)


@pytest.mark.parametrize("seed", range(2))
def test_speculative_greedy_equals_plain_and_commits_the_step_by_step_state(model, seed: int) -> None:
    plain, plain_cache = run(model, prompt(seed), "plain", ReplayState())
    keeper = ReplayState()
    tree, tree_cache = run(model, prompt(seed), "tree", keeper)
    assert tree.tokens == plain.tokens
    assert tree.drafts.total_accepted > 0 and tree.drafts.steps < plain.drafts.steps
    assert keeper.replayed > 0  # some drafts were rejected and rolled back
    want, got = states(plain_cache), states(tree_cache)
    assert len(got) == len(want) == 6  # two conv states, two attention layers' keys and values
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)


def test_without_rollback_the_conv_state_keeps_rejected_drafts(model) -> None:
    """The check above can fail: cutting only the attention KV leaves rejected drafts in the conv state."""
    tokens = prompt(0)
    _, plain_cache = run(model, tokens, "plain", ReplayState())
    wrong, wrong_cache = run(model, tokens, "chain", AttentionState())
    assert wrong.drafts.total_drafted > wrong.drafts.total_accepted  # drafts were rejected
    differ = [
        not torch.allclose(g, w, atol=1e-5) for g, w in zip(states(wrong_cache), states(plain_cache), strict=True)
    ]
    assert any(differ)
