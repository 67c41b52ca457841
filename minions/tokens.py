"""Token counting for remote models, offline.

tiktoken normally downloads its BPE files on first use. The ``bpe-openai`` package ships the same files
gzipped; we decompress them into tiktoken's cache (``TIKTOKEN_CACHE_DIR``, or ``<user cache>/minions/tiktoken``
when unset) under the name tiktoken looks for: the sha1 of the file's usual download URL. If that fails the
counter falls back to an estimate of one token per four characters and says so (``exact`` is False).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from minions.paths import cache_dir

__all__ = ["TOKEN_MARGIN", "TokenCounter", "count_tokens", "counts_exactly", "encoding_for_model", "token_counter"]

log = logging.getLogger(__name__)

_BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
CHARS_PER_TOKEN_ESTIMATE = 4
TOKEN_MARGIN = 1.3
"""Our token count is tiktoken's; another model's own tokenizer may count more (Llama, Qwen, Gemma and SmolLM2
tokenizers count up to about a quarter more on English and figures): where that model's window must hold the text,
the count is raised by this factor."""


def encoding_for_model(model: str | None) -> str:
    """The tiktoken encoding whose counts match ``model``'s (or approximate them, for non-OpenAI models)."""
    m = (model or "").lower().split("/")[-1]
    if m.startswith(("gpt-4-", "gpt-3.5")) or m == "gpt-4":
        return "cl100k_base"
    return "o200k_base"


def counts_exactly(model: str | None) -> bool:
    """Whether ``count_tokens`` counts ``model``'s tokens as the model does: OpenAI's models, whose tokenizer tiktoken
    is. Another model's own tokenizer may count up to ``TOKEN_MARGIN`` times more."""
    m = (model or "").lower().split("@")[0].split("/")[-1]
    return m.startswith(("gpt-", "chatgpt", "o1", "o3", "o4"))


def _install_bpe_file(name: str) -> None:
    cache = Path(os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache_dir() / "tiktoken")))
    target = cache / hashlib.sha1(_BPE_URL.format(name=name).encode()).hexdigest()
    if target.exists():
        return
    packed = resources.files("bpe_openai") / "data" / f"{name}.tiktoken.gz"
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.decompress(packed.read_bytes()))
    tmp.replace(target)


@dataclass(frozen=True)
class TokenCounter:
    encoding_name: str
    encoding: Any | None
    """A tiktoken ``Encoding``, or None when only an estimate is available."""

    @property
    def exact(self) -> bool:
        return self.encoding is not None

    def count(self, text: str) -> int:
        if self.encoding is None:
            return -(-len(text) // CHARS_PER_TOKEN_ESTIMATE)
        return len(self.encoding.encode(text, disallowed_special=()))


@cache
def token_counter(encoding_name: str = "o200k_base") -> TokenCounter:
    try:
        import tiktoken

        _install_bpe_file(encoding_name)
        return TokenCounter(encoding_name, tiktoken.get_encoding(encoding_name))
    except Exception as exc:  # any failure here must degrade to an estimate, never break a run
        log.warning(
            "tiktoken unavailable (%s); token counts are estimates (%d chars/token)",
            exc,
            CHARS_PER_TOKEN_ESTIMATE,
        )
        return TokenCounter(encoding_name, None)


def count_tokens(text: str, model: str | None = None) -> int:
    return token_counter(encoding_for_model(model)).count(text)
