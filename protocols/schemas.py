"""What the models must write, as pydantic models (``extra="forbid"``): they validate the reply and their JSON
schema constrains decoding where the backend can."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .options import DEFAULT_CHUNK_SIZE
from .parsing import as_answer

__all__ = [
    "JOB_OUTPUT_SCHEMA",
    "MAX_INSTRUCTION_CHARS",
    "Answer",
    "Decision",
    "JobOutput",
    "JobSpec",
    "MinionTurn",
    "Plan",
    "response_schema",
]

Scope = Literal["all", "pages", "sections", "retrieve"]
MAX_INSTRUCTION_CHARS = 1500


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # Strict structured output makes every key required (nullable where optional): null means "default".
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class JobSpec(_Strict):
    """One instruction for the local model, and which chunks it runs over."""

    instruction: str = Field(min_length=3, max_length=MAX_INSTRUCTION_CHARS)
    scope: Scope = "all"
    documents: list[str] = Field(default_factory=list, description="names; empty means every document")
    pages: list[list[int]] = Field(default_factory=list, description="[first, last] page ranges, 1-based")
    sections: list[str] = Field(default_factory=list)
    query: str | None = Field(default=None, description="keywords for scope 'retrieve'")

    @field_validator("documents", "sections")
    @classmethod
    def _drop_blank_names(cls, names: list[str]) -> list[str]:
        # Models asked for a list they have no use for often write [""]: that means "no restriction".
        return [n for n in names if n.strip()]

    @model_validator(mode="after")
    def _scope_has_its_argument(self) -> JobSpec:
        if self.scope == "pages" and not self.pages:
            raise ValueError("scope 'pages' needs pages, e.g. [[3, 5]]")
        if self.scope == "sections" and not self.sections:
            raise ValueError("scope 'sections' needs section titles")
        if self.scope == "retrieve" and not (self.query or "").strip():
            raise ValueError("scope 'retrieve' needs a query")
        for r in self.pages:
            if len(r) != 2 or r[0] < 1 or r[1] < r[0]:
                raise ValueError(f"page range {r} must be [first, last] with 1 <= first <= last")
        return self


class Plan(_Strict):
    jobs: list[JobSpec] = Field(min_length=1, max_length=8)
    chunk_size: int = Field(default=DEFAULT_CHUNK_SIZE, ge=300, le=6000, description="characters per chunk")
    samples: int = Field(default=1, ge=1, le=3, description="runs of each job")


class Decision(_Strict):
    decision: Literal["final", "continue"]
    answer: str | None = None
    feedback: str | None = None
    evidence: list[int] = Field(default_factory=list, description="ids of the findings the answer rests on")
    jobs: list[JobSpec] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _complete(self) -> Decision:
        if self.decision == "final" and not (self.answer or "").strip():
            raise ValueError("a final decision needs an answer")
        if self.decision == "continue" and not self.jobs:
            raise ValueError("to continue, give new jobs for the local model")
        return self


class Answer(_Strict):
    answer: str = Field(min_length=1)
    citations: list[str] = Field(default_factory=list, description="verbatim quotes from the context")


class MinionTurn(_Strict):
    decision: Literal["ask", "final"]
    message: str | None = Field(default=None, description="the question for the local model")
    answer: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> MinionTurn:
        if self.decision == "final" and not (self.answer or "").strip():
            raise ValueError("a final decision needs an answer")
        if self.decision == "ask" and not (self.message or "").strip():
            raise ValueError("to ask, give a message for the local model")
        return self


class JobOutput(BaseModel):
    """A local job's reply: the answer first (a reply cut short has said it), a verbatim quote, an explanation."""

    # Lenient on purpose (small models): extra keys are ignored, answers coerced. Its JSON schema
    # (JOB_OUTPUT_SCHEMA) describes the reply as written, not as accepted: every key in the fields' order, the
    # explanation a string (the serialization mode: a key with a default is still a key to write).
    model_config = ConfigDict(
        json_schema_mode_override="serialization", json_schema_serialization_defaults_required=True
    )

    answer: str | None = None
    citation: str | None = None
    explanation: str = ""

    @field_validator("explanation", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str:
        return "" if value is None else str(value)

    @field_validator("citation", "answer", mode="before")
    @classmethod
    def _optional_text(cls, value: Any) -> str | None:
        return as_answer(value)


# Keywords that OpenAI's strict structured outputs reject; pydantic still checks them on the reply.
_UNSUPPORTED = frozenset({"default", "minLength", "maxLength"})


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if node.get("type") == "null" or {"type": "null"} in node.get("anyOf", []):
        return node
    return {"anyOf": [node, {"type": "null"}]}


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items() if k not in _UNSUPPORTED and k not in ("properties", "$defs")}
    if "$defs" in node:
        out["$defs"] = {name: _strict(sub) for name, sub in node["$defs"].items()}
    if "properties" in node:
        required = set(node.get("required", ()))
        props = {name: _strict(sub) for name, sub in node["properties"].items()}
        out["properties"] = {n: (sub if n in required else _nullable(sub)) for n, sub in props.items()}
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


def response_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema in the form strict structured-output APIs accept: every key required (optional
    ones nullable), no extra keys, no unsupported keywords."""
    schema: dict[str, Any] = _strict(model.model_json_schema())
    return schema


JOB_OUTPUT_SCHEMA: dict[str, Any] = response_schema(JobOutput)
"""What a local job is asked to write (``JobOutput``'s schema): the ``minion`` protocol's local turns."""
