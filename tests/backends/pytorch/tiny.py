"""A tiny random-weight Llama's vocabulary, prompts and cost curve, shared by the decoding tests (the model itself
is the ``model`` fixture in ``conftest.py``)."""

from __future__ import annotations

import torch

from minions.backends.speculation import CostCurve

VOCAB = 48
FLAT = CostCurve((1, 8, 32, 64), (1.0, 1.1, 1.3, 1.8))
"""A cost curve like PyTorch's on a CPU: verifying many tokens costs little more than one."""


def copy_heavy_prompt(seed: int, n: int = 24) -> list[int]:
    """Random text that repeats itself, so context drafts get accepted."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, VOCAB - 1, (n,), generator=g).tolist()
    return base + base[:8] + base
