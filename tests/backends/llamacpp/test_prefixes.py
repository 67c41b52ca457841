"""Saved prompt prefixes on the real model: a job restored from disk replies token for token as one computed
from scratch (greedy and seeded sampling), and a damaged entry is computed again, never used."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from minions.backends.llamacpp.engine import Engine, EngineConfig
from minions.backends.llamacpp.kvstore import KVStore
from minions.backends.llamacpp.prefixes import marked_prompt
from minions.backends.llamacpp.quantize import default_local_model
from minions.chunking import Chunk
from minions.protocols.evidence.jobs import job_request
from minions.types import ChatRequest, ChatResult, SamplingParams

pytestmark = pytest.mark.slow

TEXT = (
    "3M is a global science company with four business segments: Safety and Industrial, Transportation and "
    "Electronics, Health Care, and Consumer. Net sales in 2018 were $32.8 billion, up 3.5 percent from 2017. "
    "Operating income was $7.2 billion, and earnings per diluted share were $8.89. The company returned $6.4 "
    "billion to shareholders through dividends and share repurchases. Research and development spending was "
    "$1.8 billion, or 5.6 percent of sales. Capital expenditures were $1.6 billion. The company employed about "
    "93,000 people at year end and had operations in more than 70 countries. "
)
CHUNKS = [Chunk("10k.txt", i, TEXT + f"This is part {i + 1} of the filing.", 0, len(TEXT)) for i in range(2)]
QUESTIONS = ("What were net sales in 2018?", "How many people did the company employ?")


def requests() -> list[ChatRequest]:
    params = [SamplingParams(max_tokens=12), SamplingParams(max_tokens=12, temperature=0.9, seed=7)]
    return [job_request(q, c, p) for c in CHUNKS for q in QUESTIONS for p in params]


def engine(kv_dir: Path | None) -> Engine:
    config = EngineConfig(n_ctx=1024, seq_ctx=512, max_seqs=2, speculate=False, learn_drafts=False,
                          kv_cache=kv_dir is not None, kv_cache_dir=str(kv_dir) if kv_dir else None)  # fmt: skip
    return Engine(default_local_model(), config)


def run(kv_dir: Path | None) -> tuple[list[list[int]], dict]:
    e = engine(kv_dir)
    try:
        results: Sequence[ChatResult] = e.run(requests(), trace_tokens=True)
    finally:
        e.close()
    assert all(r.ok for r in results)
    return [list(r.stats["token_ids"]) for r in results], dict(results[0].stats["batch"])


@pytest.fixture(scope="module")
def baseline() -> list[list[int]]:
    return run(None)[0]


def test_the_prefix_is_the_chunk_and_the_prompt_is_unchanged() -> None:
    e = engine(None)
    try:
        request = requests()[0]
        tokens, n = marked_prompt(e.model, request.messages, request.prefix)
        assert tokens == e.tokens(request.messages)  # the same tokens with or without a mark
        head = e.model.detokenize(tokens[:n]).decode()
        assert head.endswith("This is part 1 of the filing.") and QUESTIONS[0] not in head
    finally:
        e.close()


def test_restored_prefixes_reply_as_computed_ones(tmp_path: Path, baseline: list[list[int]]) -> None:
    cold, cold_stats = run(tmp_path)
    assert cold == baseline
    assert cold_stats["prefixes_saved"] == len(CHUNKS) and cold_stats["prefill_restored"] == 0
    assert KVStore(tmp_path).usage().entries == len(CHUNKS)

    warm, warm_stats = run(tmp_path)  # a new engine: nothing in memory, the chunks come from disk
    assert warm == baseline
    assert warm_stats["prefill_restored"] >= len(CHUNKS) * 100
    assert warm_stats["prefill_computed"] < cold_stats["prefill_computed"] - len(CHUNKS) * 100


def test_a_damaged_entry_is_computed_again(tmp_path: Path, baseline: list[list[int]]) -> None:
    e = engine(tmp_path)
    try:
        stats = e.save_prefixes(requests())  # indexing ahead of questions
    finally:
        e.close()
    assert (stats.prefixes, stats.saved) == (len(CHUNKS), len(CHUNKS)) and stats.computed_tokens > 200
    paths = sorted(tmp_path.glob("*/*.kv"))
    raw = paths[0].read_bytes()
    paths[0].write_bytes(raw[: len(raw) // 2])  # cut short, as by a crash of a disk that lost its tail

    replies, batch = run(tmp_path)
    assert replies == baseline
    # one chunk restored, the damaged one computed and saved again
    assert batch["prefixes_saved"] == 1 and batch["prefill_restored"] > 100
    assert KVStore(tmp_path).usage().entries == len(CHUNKS)
