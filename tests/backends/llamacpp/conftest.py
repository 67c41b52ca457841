"""Tiny random-weight hybrid models (``backends.llamacpp.tiny``), written once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from minions.backends.models import smollm2_path


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``lfm2`` (short convolutions and attention) and ``granitehybrid`` (Mamba-2 and attention), a few MB each,
    with SmolLM2's tokenizer."""
    pytest.importorskip("gguf", reason="the gguf package writes the tiny models: pip install -e '.[dev]'")
    from minions.backends.llamacpp.tiny import ARCHITECTURES, write_tiny_model

    folder = tmp_path_factory.mktemp("tiny-models")
    return {
        arch: write_tiny_model(folder / f"{arch}.gguf", arch, tokenizer_from=smollm2_path()) for arch in ARCHITECTURES
    }


@pytest.fixture(scope="session")
def copier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny LFM2 whose weights continue the prompt (``backends.llamacpp.copier``), 45 MB."""
    pytest.importorskip("gguf", reason="the gguf package writes the tiny models: pip install -e '.[dev]'")
    from minions.backends.llamacpp.tiny import write_tiny_model

    path = tmp_path_factory.mktemp("tiny-models") / "lfm2-copier.gguf"
    return write_tiny_model(path, "lfm2", tokenizer_from=smollm2_path(), copies=True)
