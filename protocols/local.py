"""``LocalOnly``: the default protocol without a remote model. The local model reads the chunks that rank best and
answers with the sentence that holds the fact, and its place; nothing leaves the device."""

from __future__ import annotations

from typing import ClassVar

from minions.chunking import chunk_documents

from .base import BaseProtocol
from .context import RunContext
from .evidence.quotes import best_quotes, local_answer
from .evidence.reading import read_and_answer

__all__ = ["LocalOnly", "best_quotes", "local_answer"]


class LocalOnly(BaseProtocol):
    """Nothing leaves the device (unless the local model is on another machine: then its prompts are recorded as
    egress). The local model reads the chunks that rank best for the task, picks in each the sentence that answers
    it, and the answer is the best-ranked quote with its place; when no chunk has one, the answer says so instead
    of inventing one. A capable local model (``answer="write"``, the default from 1B parameters) writes the answer
    from those quotes instead, citing them; what it writes stands only where its quotes state every figure and name
    in it (``protocols.evidence.written``). A question with a closed set of answers (yes/no, options) is answered
    with the one the local model chooses on its quotes, then the quote (``protocols.evidence.choosing``). The
    reading is one pipeline, rank -> budget -> jobs -> cite -> quotes -> answer: ``protocols.evidence.reading``."""

    name: ClassVar[str] = "local"

    def _run(self, ctx: RunContext) -> None:
        ctx.rounds = 1
        o = ctx.options
        chunks = [] if ctx.ranking is not None else chunk_documents(ctx.documents, by=o.chunk_by, size=o.chunk_size,
                                                                    overlap=o.overlap)  # fmt: skip
        read_and_answer(ctx, chunks)
