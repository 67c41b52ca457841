"""Batched decoding: several jobs through one forward pass per step, each reply what it is alone (a tiny
random-weight Llama built here, fast; the real SmolLM2 through ``TransformersBackend.batch``, slow)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from minions.backends.pytorch import (  # noqa: E402
    Chooser,
    SpecConfig,
    Speculation,
    TransformersBackend,
    batched,
    generate,
)
from minions.backends.pytorch.decode import DecodeState  # noqa: E402
from minions.backends.speculation import CostCurve  # noqa: E402
from minions.types import ChatRequest, Message, SamplingParams  # noqa: E402

from .tiny import FLAT, VOCAB, copy_heavy_prompt  # noqa: E402

END = VOCAB - 1


def new_cache(model):
    return lambda: transformers.DynamicCache(config=model.config)


PROMPTS = [
    copy_heavy_prompt(0),
    copy_heavy_prompt(1, 10),
    copy_heavy_prompt(2, 40),
    copy_heavy_prompt(3, 17),
]  # different lengths: padded rows


def alone(model, p, mode, max_new, chooser):
    speculation = Speculation(SpecConfig(mode=mode), FLAT)
    return generate(model, new_cache(model)(), p, max_new=max_new, choose=chooser, is_end=lambda t: t == END,
                    speculation=speculation)  # fmt: skip


def together(model, prompts, mode, limits, choosers):
    jobs = [DecodeState(p, n, c, lambda t: t == END) for p, n, c in zip(prompts, limits, choosers, strict=True)]
    return batched.generate_batch(model, new_cache(model), jobs, speculation=Speculation(SpecConfig(mode=mode), FLAT))


@pytest.mark.parametrize("mode", ["plain", "chain", "tree"])
def test_batched_greedy_replies_equal_one_at_a_time(model, mode) -> None:
    limits = [40, 7, 33, 40]  # rows end at different steps
    single = [alone(model, p, mode, n, Chooser()) for p, n in zip(PROMPTS, limits, strict=True)]
    outs = together(model, PROMPTS, mode, limits, [Chooser() for _ in PROMPTS])
    assert [o.tokens for o in outs] == [s.tokens for s in single]
    assert [o.finish for o in outs] == [s.finish for s in single]
    assert sum(len(o.tokens) for o in outs) > 60
    if mode != "plain":
        assert sum(o.drafts.total_accepted for o in outs) > 0  # drafts were verified inside the batch


def test_compacting_the_cache_changes_no_reply(model, monkeypatch) -> None:
    """Gathering every row's valid cells to the front after each step gives the same replies."""
    single = [alone(model, p, "tree", 40, Chooser()).tokens for p in PROMPTS]
    monkeypatch.setattr(batched, "COMPACT_AT", 1.01)
    outs = together(model, PROMPTS, "tree", [40] * 4, [Chooser() for _ in PROMPTS])
    assert [o.tokens for o in outs] == single


def test_batched_seeded_sampling_draws_what_each_job_draws_alone(model) -> None:
    def chooser(seed):
        return Chooser(temperature=0.9, top_p=0.95, seed=seed)

    single = [alone(model, p, "plain", 30, chooser(s)).tokens for s, p in enumerate(PROMPTS)]
    outs = together(model, PROMPTS, "plain", [30] * 4, [chooser(s) for s in range(4)])
    assert [o.tokens for o in outs] == single
    assert single[0] != alone(model, PROMPTS[0], "plain", 30, chooser(9)).tokens  # the seed matters


def test_batching_is_chosen_only_where_it_is_expected_to_pay() -> None:
    backend = TransformersBackend(draft_model=None)
    backend._speculation = Speculation(SpecConfig(), CostCurve((1, 8), (1.0, 1.0)))  # an accelerator's flat T
    assert backend._batching_pays(2)
    backend._speculation = Speculation(SpecConfig(), CostCurve((1, 8), (1.0, 8.0)))  # T(B) = B x T(1)
    assert not backend._batching_pays(8)
    backend._paces.extend([2.0] * 4)  # measured: one at a time is slower than a batch's share
    assert backend._batching_pays(8)
    assert backend._loaded is None  # deciding loads nothing


@pytest.mark.slow
def test_the_backend_batches_jobs_and_each_reply_is_its_own() -> None:
    pytest.importorskip("llguidance")
    backend = TransformersBackend(draft_model=None)
    backend._speculation = Speculation(SpecConfig(), CostCurve((1, 8), (1.0, 1.05)))  # batching pays
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
    requests = [
        ChatRequest(
            [Message("user", "What is the capital of France? One short sentence.")], SamplingParams(max_tokens=24)
        ),
        ChatRequest(
            [Message("user", "Paris is in France. Reply with the city as JSON.")],
            SamplingParams(max_tokens=24, json_schema=schema),
        ),
        ChatRequest([Message("user", "word " * 9000)], SamplingParams(max_tokens=8)),  # too long: fails alone
        ChatRequest([Message("user", "Name a primary color.")], SamplingParams(max_tokens=6)),
    ]
    seen: list[int] = []
    results = backend.batch(requests, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == [0, 1, 2, 3]
    assert not results[2].ok and "reads at most" in (results[2].error or "")
    plain = Speculation(SpecConfig(mode="plain"), CostCurve((1,), (1.0,)))
    for i in (0, 1, 3):
        assert results[i].ok and results[i].stats["batch"] == 3
        alone_ = backend.complete(list(requests[i].messages), requests[i].params, speculation=plain)
        assert results[i].stats["token_ids"] == alone_.stats["token_ids"], i
    assert "Paris" in results[0].text and results[1].text.startswith('{"city"')
    # a group in which no job can run comes back failed, job by job
    (only,) = backend._batch([requests[2]])
    assert not only.ok and "reads at most" in (only.error or "")
