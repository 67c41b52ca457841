"""Test data and scripted replies for protocol tests."""

from __future__ import annotations

import json
from typing import Any

from minions.types import Message, SamplingParams

FACT = "Revenue in fiscal 2023 was $4.2 billion, up 12 percent."
SECRET = "The warehouse in Ostrava stores spare turbine blades."
FILLER = (
    "The company designs, manufactures and sells industrial equipment to customers in many countries. "
    "Operations are organized in three segments with separate management teams and reporting lines. "
)


def make_text(paragraphs: int = 12) -> str:
    parts = []
    for i in range(paragraphs):
        parts.append(f"Paragraph {i}. " + FILLER * 4)
        if i == 7:
            parts.append(FACT)
        if i == 2:
            parts.append(SECRET)
    return "\n\n".join(parts)


def job_reply(messages: list[Message], params: SamplingParams) -> str:
    """A local model that finds the revenue fact when its chunk has it."""
    chunk = messages[-1].content
    if "Revenue in fiscal 2023" in chunk:
        return json.dumps(
            {
                "explanation": "The excerpt states revenue.",
                "citation": "Revenue in fiscal 2023 was $4.2 billion",
                "answer": "$4.2 billion",
            }
        )
    return json.dumps({"explanation": "Not in this excerpt.", "citation": None, "answer": None})


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
