"""Test data and scripted replies for protocol tests."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from minions.backends.embeddings import normalized
from minions.types import Message, SamplingParams

FACT = "Revenue in fiscal 2023 was $4.2 billion, up 12 percent."
SECRET = "The warehouse in Ostrava stores spare turbine blades."
FILLER = (
    "The company designs, manufactures and sells industrial equipment to customers in many countries. "
    "Operations are organized in three segments with separate management teams and reporting lines. "
)


class WordsEmbedder:
    """A stand-in embedding model for the protocols' logic: a text's vector counts ``words`` (each of ``alike``'s
    keys counts as the word it names), so texts are close where they share those words."""

    name = "test/words"
    address: str | None = None

    def __init__(self, words: Sequence[str], alike: Mapping[str, str] | None = None) -> None:
        self.words = tuple(words)
        self.alike = dict(alike or {})
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        self.calls.append(len(texts))
        rows = [[self._count(t.lower(), w) for w in self.words] for t in texts]
        return normalized(np.asarray(rows, dtype=np.float32) + 1e-3)

    def _count(self, text: str, word: str) -> int:
        return text.count(word) + sum(text.count(a) for a, meant in self.alike.items() if meant == word)


def make_text(paragraphs: int = 12) -> str:
    parts = []
    for i in range(paragraphs):
        parts.append(f"Paragraph {i}. " + FILLER * 4)
        if i == 7:
            parts.append(FACT)
        if i == 2:
            parts.append(SECRET)
    return "\n\n".join(parts)


def quote_reply(params: SamplingParams, needle: str, answer: str | None = None) -> str:
    """What an evidence-first job replies when it picks the offered sentence that contains ``needle`` (with
    ``answer``, one of that sentence's figures), or "none" when no offered sentence has it. The offered sentences
    are the alternatives of the job's JSON schema (``protocols.evidence.quotes.quote_schema``)."""
    if params.json_schema is None:  # a backend that cannot follow a schema copies the sentence itself
        return json.dumps({"quote": FACT, "answer": answer} if needle in FACT else {"quote": "none", "answer": None})
    for alternative in params.json_schema["anyOf"]:
        quote = alternative["properties"]["quote"]["const"]
        if needle in quote:
            allowed = alternative["properties"]["answer"]["enum"]
            return json.dumps({"quote": quote, "answer": answer if answer in allowed else None})
    return json.dumps({"quote": "none", "answer": None})


def job_reply(messages: list[Message], params: SamplingParams) -> str:
    """A local model that finds the revenue fact when its chunk has it."""
    if params.json_schema is None and "Revenue in fiscal 2023" not in messages[-1].content:
        return json.dumps({"quote": "none", "answer": None})
    return quote_reply(params, "Revenue in fiscal 2023", "$4.2 billion")


def plan(*jobs: dict[str, Any], chunk_size: int = 1000, samples: int = 1) -> str:
    return json.dumps(
        {
            "jobs": list(jobs) or [{"instruction": "Find the revenue for fiscal 2023."}],
            "chunk_size": chunk_size,
            "samples": samples,
        }
    )


def final(answer: str = "Revenue was $4.2 billion.", evidence: tuple[int, ...] = ()) -> str:
    return json.dumps({"decision": "final", "answer": answer, "evidence": list(evidence)})


def more(*jobs: dict[str, Any], feedback: str = "Need the segment split.") -> str:
    return json.dumps(
        {
            "decision": "continue",
            "feedback": feedback,
            "jobs": list(jobs)
            or [{"instruction": "Find the segment revenue.", "scope": "retrieve", "query": "segment revenue"}],
        }
    )
