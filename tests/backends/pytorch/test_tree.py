"""Token trees on a tiny random-weight Llama built here: verification equals sequential decoding, and greedy or
seeded sampled decoding with trees equals plain decoding token for token."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from minions.backends.pytorch import (  # noqa: E402
    Chooser,
    SpecConfig,
    Speculation,
    ancestor_mask,
    generate,
    keep_path,
    verify,
)
from minions.backends.speculation import TokenTree  # noqa: E402

from .tiny import FLAT, copy_heavy_prompt  # noqa: E402


def new_cache(model):
    return transformers.DynamicCache(config=model.config)


def prefill(model, tokens):
    cache = new_cache(model)
    with torch.inference_mode():
        model(input_ids=torch.tensor([tokens]), cache=cache, use_cache=True)
    return cache


def sequential_logits(model, tokens):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([tokens])).logits[0].float()


TREE = TokenTree((5, 7, 9, 11, 7, 3, 8, 2, 4), (-1, 0, 0, 0, 1, 1, 2, 4, 7))


def test_every_root_to_leaf_path_gets_the_logits_of_sequential_decoding(model) -> None:
    prompt = copy_heavy_prompt(1)
    cache = prefill(model, prompt)
    logits = verify(model, cache, TREE, len(prompt))
    assert cache.get_seq_length() == len(prompt) + len(TREE)
    assert len(TREE.paths()) == 4
    for path in TREE.paths():
        reference = sequential_logits(model, prompt + [TREE.tokens[i] for i in path])[len(prompt) :]
        torch.testing.assert_close(logits[path], reference, atol=1e-5, rtol=1e-4)


def test_keeping_a_path_leaves_the_cache_of_prefilling_that_path(model) -> None:
    prompt = copy_heavy_prompt(2)
    cache = prefill(model, prompt)
    verify(model, cache, TREE, len(prompt))
    path = [0, 1, 4, 7, 8]  # branches off the node order: an index select, not a slice
    keep_path(cache, len(prompt), path)
    reference = prefill(model, prompt + [TREE.tokens[i] for i in path])
    for got, want in zip(cache.layers, reference.layers, strict=True):
        torch.testing.assert_close(got.keys, want.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got.values, want.values, atol=1e-5, rtol=1e-4)


def test_the_ancestor_mask_lets_a_node_see_the_past_its_ancestors_and_itself() -> None:
    mask = ancestor_mask(TREE, 3, torch.float32)[0, 0] == 0
    assert mask.shape == (len(TREE), 3 + len(TREE))
    assert mask[:, :3].all()
    seen = {i: {j for j in range(len(TREE)) if mask[i, 3 + j]} for i in range(len(TREE))}
    assert seen[8] == {0, 1, 4, 7, 8}
    assert seen[6] == {0, 2, 6}
    assert seen[3] == {0, 3}


def decode(model, prompt, mode, *, chooser=None, max_new=48, end=None, should_stop=None):
    speculation = Speculation(SpecConfig(mode=mode), FLAT)
    return generate(model, new_cache(model), prompt, max_new=max_new, choose=chooser or Chooser(),
                    is_end=lambda t: t == end, speculation=speculation, should_stop=should_stop)  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_greedy_decoding_with_trees_and_chains_equals_plain_greedy(model, seed: int) -> None:
    prompt = copy_heavy_prompt(seed)
    plain = decode(model, prompt, "plain")
    chain = decode(model, prompt, "chain")
    tree = decode(model, prompt, "tree")
    assert chain.tokens == plain.tokens
    assert tree.tokens == plain.tokens
    assert tree.finish == plain.finish
    assert plain.drafts.steps == len(plain.tokens) + (plain.finish == "stop")
    # speculation happened: drafts were accepted, in fewer forward passes
    assert tree.drafts.total_accepted > 0
    assert tree.drafts.steps < plain.drafts.steps


def test_seeded_sampling_with_trees_draws_the_same_tokens_as_plain_sampling(model) -> None:
    """The walk asks the target for exactly one sample per emitted token, in order: with one seed, tree decoding
    draws the very tokens plain sampling draws, so its distribution is the target's."""
    prompt = copy_heavy_prompt(7)
    plain = decode(model, prompt, "plain", chooser=Chooser(temperature=0.8, top_p=0.95, seed=3))
    tree = decode(model, prompt, "tree", chooser=Chooser(temperature=0.8, top_p=0.95, seed=3))
    other = decode(model, prompt, "plain", chooser=Chooser(temperature=0.8, top_p=0.95, seed=4))
    assert tree.tokens == plain.tokens
    assert other.tokens != plain.tokens  # the seed matters: the comparison above is not vacuous


def test_a_stop_inside_accepted_drafts_ends_the_reply_where_plain_decoding_ends_it(model) -> None:
    """A loop or a stop string found after several tokens accepted at once cuts the reply at the same token as
    plain decoding, which checks after every token."""
    prompt = copy_heavy_prompt(0)
    full = decode(model, prompt, "tree")
    assert max(full.drafts.accepted_lengths) >= 3  # steps of several tokens, so some stops below fall inside one
    for n in range(8, 40):

        def at_n(tokens, n=n):
            return len(tokens) >= n

        tree = decode(model, prompt, "tree", should_stop=at_n)
        assert tree.tokens == full.tokens[:n] and tree.finish == "stop", n


def test_the_token_limit_and_the_end_token_are_honoured(model) -> None:
    prompt = copy_heavy_prompt(0)
    for max_new in (1, 5):
        tree = decode(model, prompt, "tree", max_new=max_new)
        assert tree.tokens == decode(model, prompt, "plain", max_new=max_new).tokens
        assert len(tree.tokens) == max_new and tree.finish == "length"
    full = decode(model, prompt, "plain").tokens
    end = full[20]  # ends the reply where it first appears
    tree = decode(model, prompt, "tree", end=end)
    assert tree.tokens == full[: full.index(end)]
    assert tree.finish == "stop"
