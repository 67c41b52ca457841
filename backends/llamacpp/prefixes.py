"""Saved prompt prefixes: the state of "system prompt + chunk" kept on disk, restored instead of computed again.

A request marks the prefix that other prompts share (``ChatRequest.prefix``, a ``PromptPrefix``: the local jobs
mark the end of their chunk, before the question). ``marked_prompt`` finds it in tokens: the prompt is tokenized
whole, as always, and the prefix is the part of those tokens that the text up to the mark tokenizes to, so a
marked prompt is the same tokens with the cache on or off.

The state of the prefix (llama.cpp's per-sequence state: the keys and values of its cells, or a recurrent
model's state; the same calls for both) is saved in a ``KVStore`` under a key that names all it depends on:

- the model file (``model_file_key``: its name, size, modification time and the hash of its first MiB),
- its chat template, and the prefix's token ids (which the template and the chunk's text made),
- the settings that change the state's bytes or layout: flash attention (the V layout), the KV types, one
  stream per sequence, the batch size (prompt chunking), and the llama.cpp build.

An entry that does not load (damaged, other model) is dropped and the prefix is computed again. A restored
prefix gives the same logits, bit for bit, as the same prefix computed (``tests/backends/llamacpp/test_prefixes.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from minions.types import Message, PromptPrefix

from ..model_files import model_file_key
from .ffi import LlamaContext, LlamaModel
from .kvstore import KVStore

__all__ = ["PrefixCache", "marked_prompt"]

log = logging.getLogger(__name__)

FORMAT = 1
_MARK = "\ue000"
"""A private-use character: where the prefix ends in the rendered prompt."""


def marked_prompt(model: LlamaModel, messages: Sequence[Message], mark: PromptPrefix | None) -> tuple[list[int], int]:
    """The prompt's tokens and how many of them are the marked prefix (0: no mark, or none found)."""
    tokens = model.chat_tokens(messages)
    if mark is None or not 0 <= mark.message < len(messages):
        return tokens, 0
    message = messages[mark.message]
    cut = len(message.content) if mark.chars is None else mark.chars
    if not 0 < cut <= len(message.content):
        return tokens, 0
    marked = list(messages)
    marked[mark.message] = Message(message.role, message.content[:cut] + _MARK + message.content[cut:])
    text = model.render_chat(marked)
    at = text.find(_MARK)
    if at < 0 or text.count(_MARK) != 1:
        return tokens, 0
    head = model.tokenize(text[:at], special=True, add_bos=False)
    # where the text after the mark merges with the prefix's last tokens, the prefix ends before them
    n = 0
    for a, b in zip(head, tokens, strict=False):
        if a != b:
            break
        n += 1
    return tokens, n


class PrefixCache:
    """Saved prefix states of one model under one set of engine settings."""

    def __init__(self, model: LlamaModel, settings: dict[str, Any], store: KVStore) -> None:
        self.model = model
        self.store = store
        lib = model.lib
        template = lib.llama_model_chat_template(model.model, None) or b""
        version = getattr(lib, "__version__", "") or _package_version()
        base = {
            "format": FORMAT,
            "model": model_file_key(model.path),
            "template": hashlib.sha256(template).hexdigest(),
            "llama_cpp": version,
            "type_k": "f16",
            "type_v": "f16",
            "kv_unified": False,
            **settings,
        }
        self._base = hashlib.sha256(json.dumps(base, sort_keys=True).encode()).digest()
        self.model_name = model.path.name

    def key(self, tokens: Sequence[int]) -> str:
        h = hashlib.sha256(self._base)
        h.update(np.asarray(tokens, dtype=np.int32).tobytes())
        return h.hexdigest()

    def __contains__(self, tokens: Sequence[int]) -> bool:
        return self.key(tokens) in self.store

    def load(self, ctx: LlamaContext, seq: int, tokens: Sequence[int]) -> bool:
        """Restore the saved state of ``tokens`` into ``seq``. False when there is none or it does not load (then
        ``seq`` holds nothing, and a damaged entry is gone)."""
        key = self.key(tokens)
        entry = self.store.get(key)
        if entry is None:
            return False
        data, meta = entry
        restored = meta.get("n_tokens") == len(tokens) and ctx.seq_restore(seq, data)
        if restored and ctx.seq_pos_max(seq) == len(tokens) - 1:
            return True
        log.warning("a saved prompt state did not restore (%d tokens): computing it again", len(tokens))
        ctx.seq_rm(seq)
        self.store.path(key).unlink(missing_ok=True)
        return False

    def save(self, ctx: LlamaContext, seq: int, tokens: Sequence[int]) -> bool:
        """Save what ``seq`` holds, which must be exactly ``tokens``."""
        if ctx.seq_pos_max(seq) != len(tokens) - 1:
            return False
        meta = {"n_tokens": len(tokens), "model": self.model_name}
        return self.store.put(self.key(tokens), ctx.seq_state(seq), meta)


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return ""
