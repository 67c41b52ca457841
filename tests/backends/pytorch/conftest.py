from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def model():
    """A tiny random-weight Llama (2 layers, 48 tokens), built here: nothing is downloaded."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from .tiny import VOCAB

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session", autouse=True)
def weights_loaded_once() -> Iterator[None]:
    """Each model transformers loads (SmolLM2's GGUF, dequantized: about 15 s here) is loaded once for the suite:
    the backends the tests build share its weights, which they only read."""
    pytest.importorskip("transformers")
    from minions.backends.pytorch.backend import TransformersBackend

    loaded: dict[tuple[str, str, str], tuple[Any, Any]] = {}
    load = TransformersBackend._load

    def load_once(self: TransformersBackend) -> tuple[Any, Any]:
        if self._loaded is None:
            key = (str(self.source), self.dtype, self.device)
            if key not in loaded:
                loaded[key] = load(self)
            self._loaded = loaded[key]
        return self._loaded

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TransformersBackend, "_load", load_once)
        yield
