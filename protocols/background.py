"""A library's meaning vectors computed by a process of their own, while its words already answer.

    minions index ~/filings/       # back at the prompt when the words are indexed; the vectors follow
    minions index --status         # 12,400/34,274 chunks embedded (all-MiniLM-L6-v2), running (pid 4242)

Then the process embeds every chunk's sentences ahead of the questions (``Library.keep_sentences``): a new
question's search then waits for no sentence to be embedded. It runs at a lower priority (``NICENESS``), so that a
question asked meanwhile on the same cores is not slowed by it more than need be.

``resume_embedding(library)`` starts ``python -m minions.protocols.background INDEX`` detached (its own session, its
output in ``INDEX-embedding.log``) where chunks have no vector and no such process runs; ``minions index``,
``minions ask --library``, ``minions mcp``/``serve`` and the app call it, so a build stopped (a reboot, Ctrl-C,
the machine asleep) goes on where it stopped (``Library.embed``'s cursor) at the next of them.

One embedding at a time a library (``protocols.embed_lock``): ``embedding_status`` says "running" exactly while a
process holds the lock. The SDK's ``Library.add`` still embeds before it returns: the background is for the command
line and servers. This module runs a ``Library`` (the process) and so sits above it; the library's own code never
calls it.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .embed_lock import EmbeddingLock, log_path
from .library import Library
from .search.sentence_vectors import sentences_kept

__all__ = ["NICENESS", "EmbedStatus", "embedding_status", "main", "resume_embedding"]

log = logging.getLogger(__name__)

NICENESS = 10
"""How much lower the background process's priority is than the process that started it (``os.nice``)."""


@dataclass(frozen=True)
class EmbedStatus:
    """Where a library's meaning vectors stand: chunks with a vector of all, whether a process is adding them (its
    pid), the model they are of, the end of the last background run's log when none runs and some are missing
    (why it stopped), and the chunks whose sentences are embedded ahead of questions (None: not done for a model on
    another machine)."""

    embedded: int
    total: int
    running: bool
    pid: int | None
    model: str | None
    log: str | None = None
    sentences: int | None = None

    @property
    def complete(self) -> bool:
        return self.embedded >= self.total and (self.sentences is None or self.sentences >= self.total)

    def line(self) -> str:
        """``12,400/34,274 chunks embedded (all-MiniLM-L6-v2), their sentences 0/34,274, running (pid 4242)``."""
        state = f"running (pid {self.pid})" if self.running else ("done" if self.complete else "stopped")
        kept = f", their sentences {self.sentences:,}/{self.total:,}" if self.sentences is not None else ""
        head = (
            f"meaning vectors: {self.embedded:,}/{self.total:,} chunks embedded ({self.model or 'no model'}){kept}, "
            f"{state}"
        )
        return head + (f"\n  its log ends: {self.log}" if self.log else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def embedding_status(library: Library) -> EmbedStatus:
    """Where ``library``'s vectors stand (``EmbedStatus``), read from its index and its lock."""
    index = library.index
    embedded, total = index.vector_bytes()[0], index.chunk_count()
    model = index.vector_model() or (library.embedder.name if library.embedder is not None else None)
    pid = EmbeddingLock(index.path).holder() if index.path != ":memory:" else None
    sentences = sentences_kept(index, library.embedder)
    tail = None
    if pid is None and embedded < total and log_path(index.path).is_file():
        lines = log_path(index.path).read_text(encoding="utf-8", errors="replace").strip().splitlines()
        tail = lines[-1][:300] if lines else None
    return EmbedStatus(embedded, total, pid is not None, pid, model, tail, sentences)


def resume_embedding(library: Library) -> EmbedStatus | None:
    """Start the background process that gives ``library``'s chunks their vectors, where some have none and none
    runs; its status (None: nothing to do here, for a library without an embedding model, kept in memory, or with
    an embedder object the process cannot make again). Called by everything that opens a library for the long
    run: ``minions index``, ``ask --library``, ``mcp``, ``serve`` and the app."""
    spec = library.embedding_spec
    if library.embedder is None or library.index.path == ":memory:" or spec is None:
        return None
    status = embedding_status(library)
    lock = EmbeddingLock(library.index.path)
    if status.complete or status.running or not lock.acquire(wait=False):
        return status
    try:  # locked here, and the child inherits the locked file: it is running from the moment it is started
        fd = lock.handed_on(-1)
        command = [sys.executable, "-m", __name__, library.index.path, "--lock-fd", str(fd)]
        command += ["--embeddings", spec] if spec else []
        command += ["--allow-egress"] if library.allow_egress else []
        with log_path(library.index.path).open("w", encoding="utf-8") as out:
            child = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, pass_fds=(fd,)
            )
        lock.handed_on(child.pid)
    finally:
        lock.release()  # the child's descriptor holds it on
    log.info("meaning vectors for %s: background process %d started", library.index.path, child.pid)
    return EmbedStatus(status.embedded, status.total, True, child.pid, status.model, sentences=status.sentences)


def run(index_path: str, embeddings: str | None, allow_egress: bool, lock_fd: int | None = None) -> int:
    """The background process: embed every chunk without a vector, then every chunk's sentences not yet embedded
    ahead of questions, under the lock (``lock_fd``: handed on by the process that started this one); again while
    documents were added meanwhile. Exits at once where another holds the lock."""
    from minions.backends.embeddings import vector_model_of

    lock = EmbeddingLock(index_path)
    handed = lock_fd is not None
    if lock_fd is not None:
        lock.adopt(lock_fd)
    with Library(index_path, embeddings=embeddings, allow_egress=allow_egress) as library:
        if library.embedder is None:
            print("no embedding model: the library is searched by words alone")
            return 0
        pinned, ours = library.index.vector_model(), vector_model_of(library.embedder)
        if pinned is not None and pinned != ours and library.index.vector_bytes()[0]:  # never drop them unasked
            print(
                f"the library's vectors are of {pinned}, not {ours}: minions index --reembed replaces them", flush=True
            )
            return 2
        while True:
            if not handed and not lock.acquire(wait=False):
                return 0  # another process is at it
            handed = False
            try:
                done = 0
                while n := library.embed():  # documents added while it ran: their chunks too
                    done += n
                print(f"embedded {done} chunks with {ours}", flush=True)
                print(f"embedded the sentences of {library.keep_sentences()} chunks ahead of questions", flush=True)
            finally:
                lock.release()
            if embedding_status(library).complete:  # else added between the last batch and the release
                return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minions.protocols.background", description=__doc__)
    parser.add_argument("index", help="the library's index file")
    parser.add_argument("--embeddings", help="the embedding model (default: $MINIONS_EMBEDDINGS, else auto)")
    parser.add_argument("--allow-egress", action="store_true", help="the model may run on another machine")
    parser.add_argument("--lock-fd", type=int, help="the lock file, locked, handed on by the process that started it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.nice(NICENESS)
    return run(args.index, args.embeddings, args.allow_egress, args.lock_fd)


if __name__ == "__main__":
    sys.exit(main())
