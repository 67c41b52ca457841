"""Indexing ahead of questions: the chunk prefixes the local jobs will restore, computed and saved by
``save_chunk_states``/``Library`` (real model), and the CLI's ``index`` and ``cache`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minions.apps.cli.index import progress_line
from minions.apps.cli.main import main
from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.llamacpp.engine import EngineConfig
from minions.backends.llamacpp.kvstore import KVStore
from minions.backends.scripted import ScriptedBackend
from minions.documents import Document
from minions.errors import ConfigError
from minions.protocols.chunk_states import ChunkStateProgress, save_chunk_states
from minions.protocols.library import Library
from minions.protocols.options import RunOptions

SENTENCES = [
    "Net sales in 2018 were $32.8 billion, up 3.5 percent from 2017.",
    "Operating income was $7.2 billion and earnings per diluted share were $8.89.",
    "Capital expenditures were $1.6 billion in 2018.",
    "Research and development spending was $1.8 billion, or 5.6 percent of sales.",
    "The company employed about 93,000 people at year end.",
    "Dividends paid to shareholders were $3.2 billion, or $5.44 per share.",
]
DOC = Document.from_text(" ".join(SENTENCES * 3), name="report.txt")
OPTIONS = RunOptions(chunk_size=500, read_chunks=2)


def backend(kv: Path) -> LlamaCppBackend:
    config = EngineConfig(
        n_ctx=1024, seq_ctx=512, max_seqs=2, speculate=False, learn_drafts=False, kv_cache_dir=str(kv)
    )
    return LlamaCppBackend(engine_config=config)


def test_a_backend_without_prefixes_cannot_index() -> None:
    with pytest.raises(ConfigError, match="embedded model"):
        save_chunk_states([DOC], ScriptedBackend())


def test_the_progress_line_says_pages_chunks_rate_and_eta() -> None:
    line = progress_line(ChunkStateProgress("10k.pdf", 40, 160, 120, 480, 9000, 231.4, 190.0))
    assert "pages 40/160" in line and "chunks 120/480" in line and "231 tok/s" in line and "ETA 3m10s" in line
    assert "[######" in line and line.count("#") == 6


@pytest.mark.slow
def test_indexed_chunks_are_restored_by_the_questions(tmp_path: Path) -> None:
    local = backend(tmp_path)
    seen: list[ChunkStateProgress] = []
    try:
        (done,) = save_chunk_states([DOC], local, options=OPTIONS, on_progress=seen.append)
        again = save_chunk_states([DOC], local, options=OPTIONS)[0]
    finally:
        local.close()
    assert done.finished and done.chunks == done.chunks_total >= 3 and done.tokens > 100
    assert [p.chunks for p in seen if not p.finished] == list(range(1, done.chunks_total + 1))
    assert again.tokens == 0  # saved already: nothing computed
    assert KVStore(tmp_path).usage().entries == done.chunks_total

    asked = backend(tmp_path)  # a new engine: nothing in memory
    try:
        library = Library(local=asked, chunk_size=OPTIONS.chunk_size, read_chunks=OPTIONS.read_chunks)
        library.add(DOC)
        result = library.ask("What were capital expenditures in 2018?")
        stats = asked.engine.stats
    finally:
        asked.close()
    assert "1.6 billion" in result.answer
    # both chunks read came from disk; what was computed is the questions after them
    assert stats.prefill_restored >= OPTIONS.read_chunks * 100
    assert stats.prefill_computed < stats.jobs * 60


def test_cache_shows_and_clears_the_saved_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MINIONS_KV_CACHE_DIR", str(tmp_path))
    KVStore().put("ab" + "0" * 62, b"x" * 1000, {"n_tokens": 12})
    assert main(["cache", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["entries"], shown["tokens"], shown["root"]) == (1, 12, str(tmp_path))
    assert main(["cache", "clear"]) == 0
    assert "cleared 1 saved prompt states" in capsys.readouterr().out
    assert KVStore().usage().entries == 0
