"""Run options and their defaults, in one place (the CLI and the app read them from here)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from minions.chunking import DEFAULT_CHUNK_SIZE, ChunkBy
from minions.cost import Price, PriceTable, default_price_table
from minions.errors import ConfigError
from minions.types import Usage

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "AnswerMode",
    "Budget",
    "ChooseBy",
    "InputError",
    "RunOptions",
    "default_protocol",
    "missing_remote",
    "needs_remote",
]

AnswerMode = Literal["auto", "write", "quote"]
ChooseBy = Literal["auto", "scores", "schema", "meaning", "quote"]


class InputError(ConfigError, ValueError):
    """The arguments of a run cannot work (empty task, no documents, a zero budget); nothing was sent."""


@dataclass(frozen=True)
class Budget:
    """The most a run may spend on the remote model. ``None`` means no limit."""

    max_remote_tokens: int | None = None
    max_remote_usd: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_remote_tokens", "max_remote_usd"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise InputError(
                    f"Budget {name}={value} allows no remote call: give a positive limit or None for no limit."
                )

    def exceeded(self, tokens: int, usd: float) -> str | None:
        """Why ``tokens``/``usd`` spent would break the budget, or None when they fit."""
        if self.max_remote_tokens is not None and tokens > self.max_remote_tokens:
            return f"remote token budget of {self.max_remote_tokens} reached ({tokens} needed)"
        if self.max_remote_usd is not None and usd > self.max_remote_usd:
            return f"remote budget of ${self.max_remote_usd:.4f} reached (${usd:.4f} needed)"
        return None

    def reply_tokens(self, spent: Usage, prompt_tokens: int, price: Price | None) -> int | None:
        """The longest reply a request of ``prompt_tokens`` may get with ``spent`` already spent, each token paid
        at ``price`` (None: unknown, so only the token limit holds); negative where even the prompt does not fit,
        None where nothing limits it."""
        limits = []
        if self.max_remote_tokens is not None:
            limits.append(self.max_remote_tokens - spent.total_tokens - prompt_tokens)
        if self.max_remote_usd is not None and price is not None:
            left = self.max_remote_usd - spent.cost_usd - price.cost(Usage(prompt_tokens=prompt_tokens))
            if price.output > 0:
                limits.append(math.floor(left * 1e6 / price.output))
            elif left < 0:
                limits.append(-1)
        return min(limits) if limits else None


@dataclass(frozen=True)
class RunOptions:
    """Every knob of a protocol run, with its default."""

    max_rounds: int = 3
    """Minions/Minion: rounds of plan-dispatch-decide (or of questions to the local model)."""
    max_jobs_per_round: int = 64
    """Past this many local jobs, a scope falls back to BM25 retrieval of its best chunks."""
    chunk_size: int = DEFAULT_CHUNK_SIZE
    """Characters per chunk unless the plan asks otherwise."""
    chunk_by: ChunkBy = "chars"
    """How documents are cut; a plan's chunk size (in characters) applies when this is "chars"."""
    overlap: int = 0
    top_k: int = 10
    """RAG: chunks sent to the remote model; Minions: chunks per retrieval-scoped job."""
    read_chunks: int = 10
    """Local reading (``local``): chunks the local model reads per question, the best by words."""
    read_tokens: int | None = 1200
    """Local reading: prompt tokens the local model may compute for one question, where it runs on this device
    (the embedded engine: a chunk whose state is saved costs only the question after it; a server on 127.0.0.1,
    or a fleet of them: every prompt token, counted). Of the best
    ``read_chunks``, those past this are quoted by words (their best sentence by words) instead of read; the best
    chunk is always read. On 2 cores SmolLM2 computes some 500 prompt tokens a second, and a chunk is ~400 of
    them. None: the model reads all ``read_chunks``."""
    embeddings: str | None = None
    """Local reading of documents not in a library: the embedding model that ranks their chunks by meaning beside
    words, as a library's search does (``backends.embeddings.resolve_embedder``: None follows
    ``$MINIONS_EMBEDDINGS``, else "auto"; "none": words alone). Only where the chunks outnumber ``read_chunks``
    (else all are read); each chunk's vector is computed once and kept by its text's hash
    (``search.meaning.rank_loaded``)."""
    score_sentences: bool = True
    """Local reading: the local model names the line of each read chunk that answers, and its labels'
    log-probabilities score the chunk's best sentences (backends that report log-probabilities); off, it picks
    one through a JSON schema whose alternatives are the sentences."""
    answer: AnswerMode = "auto"
    """Local reading: "write", the local model writes a short answer from the quotes it picked, citing them (kept
    only where every figure and name in it is in the quotes it cites: ``protocols.evidence.written``); "quote", the
    answer is the best quote with its place; "auto", "write" for a model of ``WRITE_FROM_PARAMETERS`` or more."""
    choose: ChooseBy = "auto"
    """Local reading, a question with a closed set of answers (yes/no, options: ``protocols.choices``): how the
    local model chooses one on its quotes (``protocols.evidence.choosing``): "scores", by the options'
    log-probabilities; "schema", under a JSON schema that allows only them; "meaning", the lettered option closest
    in meaning to the quotes (the embedding model of ``embeddings``, on this device); "auto", where the caller
    gave the choices (a benchmark's options), by meaning for lettered options where an embedding model runs on
    this device and the local model is too small to write its answer (``answer``), else scores where the backend
    reports log-probabilities, else the schema, and the best quote for a closed form read off the question's text
    ("Did revenue grow?"): SmolLM2-135M's picks measured no better than chance (docs/local-reading.md), and a "No"
    above a quote that says yes misleads; "quote", no choice (the answer is the best quote)."""
    unsure_margin: float = 0.02
    """Local choice by scores (by meaning): where the best option's probability over the options (its cosine to the
    quotes) is within this of the next, the answer says the model is not sure instead of guessing. Chosen on
    PubMedQA's dev split, by scores (docs/local-reading.md): 0.05 set aside 17 of 123 of SmolLM2's picks and 56 of
    173 of Gemma 3 270M's, without the picks kept being right more often; 0.02 sets aside the near-ties."""
    batch_size: int = 64
    """Local jobs per batch call. The engine runs as many at once as it has sequences and refills them as jobs
    finish, so larger batches keep it busy; cancellation reaches the backend inside a batch."""
    max_retries: int = 2
    """Times a reply that fails validation goes back to the model with the error."""
    job_max_tokens: int = 200
    remote_max_tokens: int = 1024
    fallback_plan: bool = False
    """Minions: when the planner's reply never validates, run the task itself as one retrieval-scoped job
    (with a notice) instead of stopping. For weak stand-in remotes (the cost bench)."""
    budget: Budget | None = None
    redact: bool = False
    """Redact emails, phone numbers, identifiers and person names from everything sent off the device."""
    price_table: PriceTable = field(default_factory=default_price_table)

    def __post_init__(self) -> None:
        for name in (
            "max_rounds",
            "max_jobs_per_round",
            "chunk_size",
            "top_k",
            "read_chunks",
            "batch_size",
            "job_max_tokens",
            "remote_max_tokens",
        ):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.chunk_by not in get_args(ChunkBy):
            raise InputError(f"chunk_by must be one of {', '.join(get_args(ChunkBy))}, got {self.chunk_by!r}.")
        if self.answer not in get_args(AnswerMode):
            raise InputError(f"answer must be one of {', '.join(get_args(AnswerMode))}, got {self.answer!r}.")
        if not 0 <= self.overlap < self.chunk_size:
            raise InputError(f"overlap must be at least 0 and below chunk_size, got {self.overlap}.")
        if self.read_tokens is not None and self.read_tokens < 1:
            raise InputError(f"read_tokens must be at least 1 (or None: no limit), got {self.read_tokens}.")
        if self.max_retries < 0:
            raise InputError(f"max_retries must be 0 or more, got {self.max_retries}.")

    @classmethod
    def from_kwargs(cls, options: dict[str, Any]) -> RunOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise InputError(f"Unknown option(s) {', '.join(unknown)}: use {', '.join(sorted(known))}.")
        return cls(**options)


# Which protocol runs when none is named, and which cannot run without a remote model: one rule for the SDK,
# the CLI, the app and the server.
#
# Every protocol but ``local`` has the remote model plan, decide or answer. A small local model cast in that part
# fails (its plans do not validate) or writes junk after minutes of work, so those protocols refuse to start
# without a remote model, and with none configured the default is ``local``: the local model reads the chunks
# that rank best on this device and answers with the sentence that holds the fact.

LOCAL_ONLY = "local"
"""The one protocol that runs on the local model alone."""
WITH_REMOTE = "minions"
NEEDS_REMOTE = "needs a remote model"
ANY_HOW = "give one (remote= in code; --remote or MINIONS_REMOTE on the command line), or use the local protocol"


def default_protocol(has_remote: bool) -> str:
    """``minions`` when a remote model is configured, ``local`` when none is."""
    return WITH_REMOTE if has_remote else LOCAL_ONLY


def needs_remote(protocol: str) -> bool:
    """Whether ``protocol`` has the remote model play a part (every one but ``local``)."""
    return protocol.strip().lower() != LOCAL_ONLY


def missing_remote(protocol: str | None, how: str = ANY_HOW) -> str:
    """One line saying that ``protocol`` needs a remote model, then ``how`` to give it one.

    With no protocol named, the line starts with "needs a remote model" (the reason beside a disabled choice).
    """
    reason = f"{NEEDS_REMOTE}: {how}"
    return reason if protocol is None else f"The {protocol} protocol {reason}."
