"""An optional LLM judge for free-text answers: a chosen backend reads the question, the references and the
prediction and says yes or no. Its usage is counted apart from the run's, under the role ``judge``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from minions.backends.base import Backend
from minions.cost import PriceTable, default_price_table
from minions.errors import BackendError
from minions.protocols.channel import priced
from minions.protocols.prompts import render as render_prompt
from minions.types import Message, SamplingParams, Usage

from .metrics import parse_yes_no_maybe

__all__ = ["JUDGED_METRICS", "Judge", "Verdict", "render"]

log = logging.getLogger(__name__)

JUDGED_METRICS = ("numeric", "f1")
"""Metrics whose automatic score a judge replaces; option letters and labels are scored exactly."""
JUDGE_MAX_TOKENS = 8


def render(name: str, **values: Any) -> str:
    """Render ``evals/prompts/<name>.j2`` through the project's one prompt loader."""
    return render_prompt(name, package="minions.evals", **values)


@dataclass(frozen=True)
class Verdict:
    correct: bool | None
    """None when the judge's reply says neither yes nor no, or the judge failed (``error``)."""
    reply: str
    usage: Usage
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "reply": self.reply, "error": self.error}


class Judge:
    def __init__(self, backend: Backend, *, prices: PriceTable | None = None) -> None:
        self.backend = backend
        self.prices = prices or default_price_table()

    @property
    def name(self) -> str:
        return self.backend.name

    def __call__(self, question: str, prediction: str, references: Sequence[str]) -> Verdict:
        prompt = render("judge", question=question, prediction=prediction or "(no answer)", references=references)
        try:
            result = self.backend.chat([Message("user", prompt)], SamplingParams(max_tokens=JUDGE_MAX_TOKENS))
        except BackendError as exc:
            log.warning("judge %s failed: %s", self.name, exc)
            return Verdict(None, "", exc.usage or Usage(), error=f"{type(exc).__name__}: {exc}")
        usage = priced(self.backend, result.usage, self.prices)
        label = parse_yes_no_maybe(result.text)
        return Verdict({"yes": True, "no": False}.get(label or ""), result.text, usage)
