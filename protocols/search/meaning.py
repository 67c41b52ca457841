"""A meaning signal beside words: chunks scored by how close their meaning is to the question's.

``wordllama`` (the ``meaning`` extra: ``pip install 'minions[meaning]'``) holds static word embeddings, 256
dimensions, with their weights inside its wheel (16 MB): a text's embedding is the mean of its tokens', so a
thousand chunks embed in about a third of a second on a CPU, with no model to run. ``meaning_scores`` is the cosine
similarity of each text to the question; ``meaning_order`` ranks by it alone, ``meaning_fused`` re-orders a
ranking by words with it by reciprocal rank fusion (``ranking.fused_order``, the fusion the local model's scores
go through).

Measured on FinanceBench (docs/library.md, ``minions bench evidence --meaning``), it does not raise recall on
filings, alone or fused: the protocols do not use it. The bench measures it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minions.errors import ConfigError

from .ranking import Ranked, fused_order

__all__ = ["MEANING_WEIGHT", "meaning_fused", "meaning_order", "meaning_scores"]

MEANING_WEIGHT = 1.0
"""The meaning term's weight in the fusion, the words' term counting 1."""


@functools.cache
def _model() -> Any:
    """The embeddings, loaded once, offline: ``wordllama`` 0.4 looks for its tokenizer's file in a folder its
    wheel does not have and then downloads it; pointed at its own package folder, it finds both files there."""
    try:
        import wordllama
    except ImportError as exc:
        raise ConfigError(
            "The meaning signal needs wordllama: pip install 'minions[meaning]' (its weights are in the package)."
        ) from exc
    return wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)


def meaning_scores(question: str, texts: Sequence[str]) -> list[float]:
    """The cosine similarity of each of ``texts`` to ``question``'s meaning, in their order."""
    if not texts:
        return []
    model = _model()
    asked = model.embed([question], norm=True)[0]
    return [float(x) for x in model.embed(list(texts), norm=True) @ asked]


def meaning_order(ranked: Sequence[Ranked], scores: Sequence[float]) -> list[Ranked]:
    """``ranked`` by meaning alone (``scores``, one per item: ``meaning_scores``), closest first; ties keep their
    order."""
    return [ranked[i] for i in sorted(range(len(ranked)), key=lambda i: (-scores[i], i))]


def meaning_fused(ranked: Sequence[Ranked], scores: Sequence[float], *, weight: float = MEANING_WEIGHT) -> list[Ranked]:
    """``ranked`` (best first, by words) re-ordered by reciprocal rank fusion of its order and its order by meaning
    (``scores``, one per item), ``weight`` on meaning's term; each keeps its words' score."""
    return [ranked[i] for i, _ in fused_order(scores, weight=weight)]
