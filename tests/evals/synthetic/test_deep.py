"""The widened SmolLM2 target (``evals.synthetic.deep``): built once, loaded by the engine, close to SmolLM2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from minions.types import ChatRequest, Message, SamplingParams

SMALL = 256
"""Hidden units added per layer in these tests (the bench's target adds thousands, in F32)."""
PROMPTS = (
    "Write two sentences about the history of the Roman empire.",
    "Explain in three sentences why the sky is blue.",
    "List four uses of copper, one sentence each.",
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[float, Path]]:
    """Targets with 256 more hidden units per layer, in SmolLM2's own Q4_0, unperturbed and perturbed, built
    through ``deep_model`` in a cache dir of their own."""
    pytest.importorskip("gguf", reason="the gguf package writes the target: pip install -e '.[dev]'")
    from minions.backends.llamacpp.quantize import default_local_model
    from minions.evals.synthetic.deep import DeepRecipe, deep_model

    source = default_local_model()  # converted in the user's cache, before the cache dir moves
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIONS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield {eps: deep_model(DeepRecipe(SMALL, eps, "Q4_0"), source) for eps in (0.0, 0.1)}


def _greedy(path: Path, max_tokens: int = 48) -> list[list[int]]:
    from minions.backends.llamacpp.engine import Engine, EngineConfig

    engine = Engine(path, EngineConfig(max_seqs=len(PROMPTS), n_threads=1, speculate=False))
    try:
        results = engine.run(_jobs(max_tokens), trace_tokens=True)
    finally:
        engine.close()
    return [list(r.stats["token_ids"]) for r in results]


def _jobs(max_tokens: int) -> list[ChatRequest]:
    return [ChatRequest([Message("user", p)], SamplingParams(max_tokens=max_tokens)) for p in PROMPTS]


@pytest.mark.slow
def test_only_the_feed_forward_grows(built: dict[float, Path]) -> None:
    import gguf

    from minions.backends.llamacpp.quantize import default_local_model

    source, target = gguf.GGUFReader(str(default_local_model())), gguf.GGUFReader(str(built[0.1]))
    ff = int(source.fields["llama.feed_forward_length"].contents())
    assert int(target.fields["llama.feed_forward_length"].contents()) == ff + SMALL
    assert target.fields["tokenizer.ggml.tokens"].contents() == source.fields["tokenizer.ggml.tokens"].contents()
    theirs = {t.name: t for t in source.tensors}
    for t in target.tensors:
        old = theirs[t.name]
        kind = t.name.split(".")[-2]
        if kind in ("ffn_gate", "ffn_up"):
            assert t.shape.tolist() == [old.shape[0], ff + SMALL]
            assert (t.data[:ff] == old.data).all()  # SmolLM2's hidden units, block for block
        elif kind == "ffn_down":
            assert t.shape.tolist() == [ff + SMALL, old.shape[1]]
            assert (t.data[:, : old.data.shape[1]] == old.data).all()
        else:
            assert t.tensor_type == old.tensor_type and (t.data == old.data).all()


@pytest.mark.slow
def test_built_once_and_found_in_the_cache(built: dict[float, Path]) -> None:
    from minions.evals.synthetic.deep import DeepRecipe, deep_model

    stamp = built[0.1].stat().st_mtime_ns
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIONS_CACHE_DIR", str(built[0.1].parent.parent))
        assert deep_model(DeepRecipe(SMALL, 0.1, "Q4_0"), _source()) == built[0.1]
    assert built[0.1].stat().st_mtime_ns == stamp
    assert "ff256-eps0.1-q4_0" in built[0.1].name and built[0.0] != built[0.1]


def _source() -> Path:
    from minions.backends.llamacpp.quantize import default_local_model

    return default_local_model()


@pytest.mark.slow
def test_unperturbed_target_decodes_as_smollm2(built: dict[float, Path]) -> None:
    """Added units whose outputs weigh nothing leave every reply SmolLM2's, token for token: the widening
    itself changes nothing, only the perturbation does."""
    assert _greedy(built[0.0]) == _greedy(_source())


@pytest.mark.slow
def test_smollm2_guesses_most_of_the_perturbed_targets_tokens(built: dict[float, Path]) -> None:
    from minions.evals.bench.deep import agreement

    report = agreement(built[0.1], _source(), _jobs(48), n_threads=1)
    assert report["tokens"] >= 60
    assert 0.6 <= report["agreement"] < 1.0  # mostly SmolLM2's choices, not all of them
    shares = report["rank_shares"]  # where the target's token stands among the draft's choices
    assert shares[0] == report["agreement"] and shares[1] > 0 and sum(shares) <= 1.0
    assert _greedy(built[0.1]) != _greedy(_source())


@pytest.mark.slow
def test_agreement_drafts_under_the_jobs_grammar(built: dict[float, Path]) -> None:
    """A job with a JSON schema: the draft picks among what the grammar allows, as the engine's draft model does,
    so a target that decodes as its draft agrees on its tokens, the JSON's opening included (which SmolLM2 alone
    would write as prose). Not on every token on every machine: the target decodes a token a call, the draft is
    read over the whole reply in one call, and llama.cpp's CPU kernels sum a call over many tokens in another order
    (another kernel where the CPU has AVX-512), so where SmolLM2 itself hesitates between two tokens the two
    calls may rank them apart (one token of 24 on one x86-64 machine, none on another). What holds everywhere:
    the draft's first choice almost always, and its second where not."""
    from minions.evals.bench.deep import agreement

    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    job = ChatRequest([Message("user", PROMPTS[0])], SamplingParams(max_tokens=24, json_schema=schema))
    report = agreement(built[0.0], _source(), [job], n_threads=1)
    first, second = report["rank_shares"][:2]
    assert (
        report["tokens"] >= 8
        and report["agreement"] == first >= 0.9
        and first + second == pytest.approx(1.0, abs=0.002)
    )


def test_chain_bound_follows_the_cost_curve() -> None:
    """A flat curve lets long chains pay; a steep one caps them; no acceptance leaves plain decoding."""
    from minions.evals.bench.deep import chain_bound

    flat = {k: 1.0 + 0.02 * (k - 1) for k in range(1, 33)}
    steep = {k: 1.0 + 0.5 * (k - 1) for k in range(1, 33)}
    long = chain_bound(0.9, flat, 0.05)
    assert long["k"] >= 8 and long["speedup"] > 3.0
    short = chain_bound(0.9, steep, 0.05)
    assert short["k"] < long["k"] and 1.0 < short["speedup"] < 1.6
    assert chain_bound(0.0, flat, 0.05) == {"k": 0, "speedup": 1.0}


def test_a_tree_gains_over_a_chain_only_where_the_curve_is_flat() -> None:
    """One child a node is ``chain_bound``'s chain; second choices that are right often pay on a flat curve and
    not on a steep one, where verifying their tokens costs more than they bring."""
    from minions.evals.bench.deep import chain_bound, tree_bound

    flat = {k: 1.0 + 0.02 * (k - 1) for k in range(1, 33)}
    steep = {k: 1.0 + 0.5 * (k - 1) for k in range(1, 33)}
    for curve in (flat, steep):
        for a in (0.0, 0.6, 0.9):
            chain = chain_bound(a, curve, 0.05)
            assert tree_bound([a], curve, 0.05) == {
                "nodes": chain["k"] + 1,
                "depth": chain["k"],
                "speedup": chain["speedup"],
            }
    shares = [0.5, 0.3, 0.1, 0.05]
    wide = tree_bound(shares, flat, 0.05)
    assert wide["nodes"] > wide["depth"] + 1 and wide["speedup"] > 1.2 * chain_bound(0.5, flat, 0.05)["speedup"]
    assert tree_bound(shares, steep, 0.05)["speedup"] < 1.2 * chain_bound(0.5, steep, 0.05)["speedup"]


def test_batch_costs_price_a_verify_step_over_a_batch() -> None:
    """``batch_costs``: a call over ``n`` tokens of each sequence against one of one token each, and a drafted
    position, each a ratio of times measured on this machine as it is: only their presence and sign are asserted
    (how large they are is the bench's to print, not a test's to bound, on a machine shared with others)."""
    from minions.evals.bench.deep import batch_costs

    line = batch_costs(_source(), _source(), 2, n_threads=1, repeats=2, k_max=2)
    assert line["batch"] == 2 and set(line["verify_cost"]) == {1, 2, 3} and line["verify_cost"][1] == 1.0
    assert all(cost > 0 for cost in line["verify_cost"].values()) and line["t1_ms"] > 0
    assert line["draft_cost"] > 0 and line["draft_first_cost"] > 0
    assert set(line["splits"]) == {"3 and 1 tokens by turns", "3 and 1 tokens grouped", "every other sequence",
                                   "as many, ids consecutive"}  # fmt: skip
    assert all(cost > 0 for cost in line["splits"].values())


def test_the_batch_bound_says_whether_a_chain_can_pay() -> None:
    """Over a batch whose calls grow with every token (compute-bound) no chain pays, and the words say so; over
    a flatter curve they name the gain and the depth."""
    from minions.evals.bench.deep import _batch_words, chain_bound

    bound_curve = {n: float(n) for n in range(1, 10)}
    bound = chain_bound(0.9, bound_curve, 0.15)
    assert bound == {"k": 0, "speedup": 1.0}
    assert "no draft chain can pay" in _batch_words(8, bound, bound_curve)
    flatter = {n: 1.0 + 0.4 * (n - 1) for n in range(1, 10)}
    bound = chain_bound(0.9, flatter, 0.15)
    assert bound["k"] >= 1 and bound["speedup"] > 1.0
    assert f"at most {bound['speedup']:.2f}x" in _batch_words(8, bound, flatter)
    dearer = chain_bound(0.9, flatter, 0.15, first_cost=0.3)  # the first call computes accepted tokens too
    assert dearer["speedup"] < bound["speedup"]
    assert chain_bound(0.9, flatter, 0.15, first_cost=0.15) == bound
