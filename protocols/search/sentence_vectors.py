"""A library's sentences embedded ahead of its questions.

A search re-ranks its best chunks by their best sentence (``meaning.by_sentence``), and a sentence not embedded
before is embedded while the question waits: 150 to 200 of them for a new question, most of its time (over the 74
filings, 316 ms median for a new question against 96 ms for one asked again: docs/library.md). ``keep_sentences``
embeds every chunk's sentences once, ahead of the questions, into the vector cache the re-ranking reads (the
user's: ``meaning.user_cache``), ``batch`` chunks at a time. The background process (``protocols.background``)
runs it after the chunks' own vectors; a question meanwhile embeds what it needs, as before.

Where it stopped is kept in the cache beside the vectors (``VectorCache.mark``, under the index's path: the model,
the last chunk done and a digest of its text), so that another cache, a cache removed, or a library built again at
the same path starts over; chunks added later are taken at the next run. Only for an embedding model on this device
(``meaning.sentence_meaning``'s rule: a library's sentences are not sent off it at every question, nor ahead of
them).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from minions.backends.address import on_this_device
from minions.backends.embeddings import Embedder

from .meaning import EMBED_BATCH, EmbedProgress, VectorCache, text_digest, user_cache, weighed_sentences

if TYPE_CHECKING:
    from .index import ChunkIndex

__all__ = ["keep_sentences", "sentences_kept"]


def keep_sentences(
    index: ChunkIndex,
    embedder: Embedder,
    cache: VectorCache | None = None,
    *,
    batch: int = EMBED_BATCH,
    on_progress: Callable[[EmbedProgress], None] | None = None,
) -> int:
    """Embed the sentences ``meaning.by_sentence`` weighs of every chunk of ``index`` after the last one done, into
    ``cache`` (None: the user's), ``batch`` chunks at a time; the number of chunks done (0 for a model on another
    machine). Sentences already in the cache are not embedded again."""
    if not on_this_device(embedder.address):
        return 0
    cache = cache or user_cache()
    after = _after(index, embedder, cache)
    total, done, started = index.count_after(after), 0, time.perf_counter()
    while rows := index.chunks_after(after, batch):
        texts = [sentence for _, text in rows for sentence in weighed_sentences(text)]
        cache.vectors(embedder, list(dict.fromkeys(texts)))
        after, done = rows[-1][0], done + len(rows)
        if index.path != ":memory:":
            place = {"model": embedder.name, "after": after, "digest": text_digest(rows[-1][1])}
            cache.set_mark(_key(index), json.dumps(place))
        if on_progress is not None:
            on_progress(EmbedProgress(done, max(total, done), time.perf_counter() - started))
    return done


def sentences_kept(index: ChunkIndex, embedder: Embedder | None, cache: VectorCache | None = None) -> int | None:
    """How many of ``index``'s chunks have their sentences in ``cache`` (None: the user's) ahead of questions; None
    where none are kept (no embedding model on this device)."""
    if embedder is None or not on_this_device(embedder.address):
        return None
    return index.chunk_count() - index.count_after(_after(index, embedder, cache or user_cache()))


def _key(index: ChunkIndex) -> str:
    return f"sentences:{index.path}"


def _after(index: ChunkIndex, embedder: Embedder, cache: VectorCache) -> int:
    """The last chunk whose sentences were kept in ``cache`` (0: none), where its mark is of this model and that
    chunk is still the one it was."""
    try:
        place = json.loads(cache.mark(_key(index)) or "{}")
        after, model, digest = int(place["after"]), place["model"], place["digest"]
    except (ValueError, KeyError, TypeError):
        return 0
    there = index.chunks_after(after - 1, 1)
    if model != embedder.name or not there or there[0][0] != after or text_digest(there[0][1]) != digest:
        return 0
    return after
