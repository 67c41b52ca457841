from __future__ import annotations

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
