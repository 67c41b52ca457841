"""What model calls cost: a price table in USD per million tokens, overridable by the user.

Prices are list prices as published by the providers (checked 2026-11); they change, so a user can override
or extend them with a JSON file named by ``MINIONS_PRICES`` (``{"model": [input, cached_input, output]}``)
or in code with ``PriceTable.with_overrides``. A model's price is found by exact name, else by the longest
known prefix (``gpt-4o-mini-2024-07-18`` costs what ``gpt-4o-mini`` costs). Local models cost nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from minions.errors import ConfigError
from minions.types import Usage

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "default_price_table"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    cached_input: float
    output: float

    def cost(self, usage: Usage) -> float:
        uncached = max(usage.prompt_tokens - usage.cached_prompt_tokens, 0)
        return (
            uncached * self.input
            + usage.cached_prompt_tokens * self.cached_input
            + usage.completion_tokens * self.output
        ) / 1e6


FREE = Price(0.0, 0.0, 0.0)

DEFAULT_PRICES: Mapping[str, Price] = {
    # OpenAI
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.025, 0.40),
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "o3": Price(2.00, 0.50, 8.00),
    "o4-mini": Price(1.10, 0.275, 4.40),
    # Anthropic (through an OpenAI-compatible endpoint)
    "claude-opus-4": Price(15.00, 1.50, 75.00),
    "claude-sonnet-4": Price(3.00, 0.30, 15.00),
    "claude-3-5-haiku": Price(0.80, 0.08, 4.00),
    # Google
    "gemini-2.5-pro": Price(1.25, 0.31, 10.00),
    "gemini-2.5-flash": Price(0.30, 0.075, 2.50),
    # Others with OpenAI-compatible APIs
    "deepseek-chat": Price(0.27, 0.07, 1.10),
    "llama-3.3-70b": Price(0.88, 0.88, 0.88),
}


@dataclass(frozen=True)
class PriceTable:
    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def lookup(self, model: str) -> Price | None:
        """The price of ``model`` (provider prefix ignored), or None when it is unknown."""
        name = model.split("/")[-1].lower()
        if name in self.prices:
            return self.prices[name]
        matches = [k for k in self.prices if name.startswith(k)]
        return self.prices[max(matches, key=len)] if matches else None

    def cost(self, model: str, usage: Usage) -> float:
        price = self.lookup(model)
        return price.cost(usage) if price else 0.0

    def with_overrides(self, overrides: Mapping[str, Price | tuple[float, float, float] | list[float]]) -> PriceTable:
        merged = dict(self.prices)
        for model, p in overrides.items():
            merged[model.lower()] = p if isinstance(p, Price) else Price(*map(float, p))
        return PriceTable(merged)

    @classmethod
    def from_file(cls, path: str | Path, base: PriceTable | None = None) -> PriceTable:
        try:
            data = json.loads(Path(path).read_text())
            if not isinstance(data, dict) or not all(
                isinstance(v, list | tuple) and len(v) == 3 for v in data.values()
            ):
                raise ValueError("expected {model: [input, cached_input, output]}")
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"Cannot read prices from {path}: {exc}. Write JSON like "
                '{"my-model": [1.0, 0.5, 4.0]} (USD per million input, cached input, output tokens).'
            ) from exc
        return (base or cls()).with_overrides(data)


@cache
def _table_from_env(path: str | None) -> PriceTable:
    return PriceTable.from_file(path) if path else PriceTable()


def default_price_table() -> PriceTable:
    """The built-in prices, with ``MINIONS_PRICES`` (a JSON file) applied on top when set."""
    return _table_from_env(os.environ.get("MINIONS_PRICES"))
