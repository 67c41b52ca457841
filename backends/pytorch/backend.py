"""A local model through PyTorch and transformers, decoding with token-tree speculation.

``transformers/default`` is the embedded SmolLM2-135M-Instruct GGUF (``AutoModelForCausalLM.from_pretrained(
folder, gguf_file=...)`` dequantizes it); ``transformers//abs/model.gguf``, ``transformers/./model.gguf`` or
``transformers/~/folder`` name a GGUF file or a transformers folder (``config.json`` and safetensors) on disk.
Nothing is ever downloaded (``local_files_only``).

Replies use the model's chat template (``backends.templates`` where its file has none: a base model reads plain
text). A JSON schema is enforced by a grammar (llguidance) that masks the logits at every chosen token, so a
constrained reply always parses unless it was cut at ``max_tokens``.
Decoding is plain, chain or tree speculation (``decode.generate``) over drafts from a draft model (by default the
model's own GGUF in llama.cpp, ``speculation.drafters.DraftTrees``) or from the job's own text; greedy and sampled
decoding are lossless either way. Hybrid models (LFM2's convolutions, Mamba-2 layers) verify
chains and roll their state back exactly (``hybrid.ReplayState``).

``batch`` decodes jobs together (``batched.generate_batch``: one forward pass per step over every job's next
token) where that is expected to be faster than one job at a time with speculation, else one at a time.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from minions.errors import BackendError, ConfigError, ContextLengthError, ModelNotFoundError
from minions.events import CancelToken
from minions.loops import REPEAT_MIN_ITEMS, repeating
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, Timings, Usage, reply_start

from ..base import BaseBackend, Capabilities, OnResult, cancelled_result, error_result
from ..settings import cpu_threads
from ..speculation.depth import CostCurve
from ..speculation.drafters import DraftLoader, DraftTrees
from ..templates import CHATML_TURN, template_without_one
from .batched import generate_batch
from .decode import Chooser, Decoded, DecodeState, JsonGrammar, Mode, SpecConfig, Speculation, decode, measure_cost
from .hybrid import has_recurrent_state, state_keeper

__all__ = ["TransformersBackend", "resolve_source"]

log = logging.getLogger(__name__)

DEFAULT_CONTEXT = 8192
DRAFT_SPEEDUP_GUESS = 2.5
"""How much faster than plain decoding one job at a time decodes with a draft model's trees, before this
backend has measured it (``bench tree`` measured 2.6-3.1x on a 2-core CPU)."""
TEXT_SPEEDUP_GUESS = 1.6
"""The same with trees drafted from the job's own text (``bench tree``: 1.6-1.8x)."""
DRAFT_CONTEXT = 4096
"""KV cells of the draft model's one sequence."""


def resolve_source(model: str | Path | None) -> Path:
    """The GGUF file or transformers folder ``model`` names; None or "default" is the embedded SmolLM2."""
    from ..model_files import smollm2_path

    if model is None or str(model) in ("", "default"):
        return smollm2_path()
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise ModelNotFoundError(
        f"{str(model)!r} is neither a .gguf file nor a transformers folder with config.json: pass "
        "transformers//abs/path/model.gguf or transformers//abs/path/folder (nothing is downloaded)."
    )


def _llamacpp_loader() -> DraftLoader:
    """llama.cpp's draft model loader, imported on first use: this backend runs without the llama.cpp engine."""
    from ..llamacpp.draft_model import load_draft_model

    return load_draft_model


def _draft_source(draft: str | Path | None, source: Path, device: str) -> Path | None:
    if draft is None:
        return None
    if str(draft) != "auto":
        path = Path(draft).expanduser()
        if not path.is_file():
            raise ModelNotFoundError(f"The draft model {str(draft)!r} is not a file: pass the path of a GGUF file.")
        return path
    if device != "cpu" or source.suffix != ".gguf" or importlib.util.find_spec("llama_cpp") is None:
        return None
    return source


def _context_window(source: Path) -> int:
    """The model's trained context length, read from its metadata without loading the weights."""
    if source.is_dir():
        config = json.loads((source / "config.json").read_text())
        return int(config.get("max_position_embeddings") or DEFAULT_CONTEXT)
    stat = source.stat()
    return _gguf_context_window(source, stat.st_size, stat.st_mtime_ns)


@functools.cache
def _gguf_context_window(source: Path, size: int, mtime_ns: int) -> int:
    """A GGUF's context length, read once per file and version (``GGUFReader`` reads every field, the
    vocabulary's included: about 2 s for SmolLM2's)."""
    from gguf import GGUFReader

    reader = GGUFReader(source)
    for name, field in reader.fields.items():
        if name.endswith(".context_length"):
            return int(field.parts[field.data[0]][0])
    return DEFAULT_CONTEXT


class TransformersBackend(BaseBackend):
    """``transformers/<GGUF file or folder>``: a model in this process, on the CPU unless ``device`` says."""

    max_concurrency = 1
    max_batch = 8
    """Jobs decoded together at most (``batch``)."""

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        speculation: Mode = "tree",
        spec: SpecConfig | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        draft_model: str | Path | None = "auto",
        draft_loader: DraftLoader | None = None,
    ) -> None:
        """``draft_model``: a GGUF with the model's vocabulary that llama.cpp runs to draft token trees; "auto":
        the model's own GGUF on the CPU when llama.cpp is installed (its quantized kernels draft several times
        faster than PyTorch verifies); None: drafts come from the job's own text only. ``draft_loader`` runs it
        (None: llama.cpp's, ``llamacpp.draft_model.load_draft_model``, imported only then)."""
        self.source = resolve_source(model)
        self.name = f"transformers/{model if model not in (None, '') else 'default'}"
        self.spec = spec or SpecConfig(mode=speculation)
        self.dtype, self.device = dtype, device
        self.capabilities = Capabilities(
            json_schema=True, logprobs=True, batching=True, streaming=False, local=True,
            context_window=_context_window(self.source),
        )  # fmt: skip
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None
        self._lltokenizer: Any = None
        self._speculation: Speculation | None = None
        self.draft_model = _draft_source(draft_model, self.source, device)
        self.draft_loader = draft_loader
        self._drafter: DraftTrees | None = None
        self._paces: deque[float] = deque(maxlen=16)
        """Seconds a token of the latest one-at-a-time replies, decoding only."""

    # -- loading --------------------------------------------------------------------------------------------
    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            folder, extra = (self.source.parent, {"gguf_file": self.source.name}) if self.source.is_file() else (
                self.source, {})  # fmt: skip
            start = time.perf_counter()
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
            if not tokenizer.chat_template:  # a file without one: ChatML, or plain text for a base model
                turns = len(tokenizer.encode(CHATML_TURN, add_special_tokens=False)) == 1
                tokenizer.chat_template = template_without_one(turns)
            model: Any = AutoModelForCausalLM.from_pretrained(
                folder, local_files_only=True, dtype=getattr(torch, self.dtype), **extra
            )
            model = model.to(self.device).eval()
            log.info("loaded %s in %.1fs", self.source, time.perf_counter() - start)
            self._loaded = (model, tokenizer)
        return self._loaded

    @property
    def model(self) -> Any:
        return self._load()[0]

    @property
    def tokenizer(self) -> Any:
        return self._load()[1]

    def speculation(self) -> Speculation:
        """Speculation's state for this backend: T(n) measured once on first use, acceptance learned per job."""
        if self._speculation is None:
            plain = CostCurve((1,), (1.0,))  # plain decoding never drafts: its curve is never read
            cost = measure_cost(self.model, self.new_cache) if self.spec.mode != "plain" else plain
            self._speculation = Speculation(self.spec, cost)
        return self._speculation

    def drafter(self) -> DraftTrees | None:
        """The draft model, loaded on first use; None without one."""
        if self._drafter is None and self.draft_model is not None:
            vocab = int(self.model.config.vocab_size)
            model = (self.draft_loader or _llamacpp_loader())(Path(self.draft_model), DRAFT_CONTEXT, cpu_threads())
            if model.n_vocab != vocab:
                model.close()
                raise ConfigError(
                    f"The draft model {self.draft_model} has {model.n_vocab} tokens and {self.source.name} "
                    f"has {vocab}: a draft model needs the same vocabulary (or pass draft_model=None)."
                )
            self._drafter = DraftTrees(model)
        return self._drafter

    def new_cache(self) -> Any:
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def end_ids(self) -> frozenset[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured])
        return frozenset(i for i in ids if i is not None)

    def grammar(self, schema: Any) -> JsonGrammar:
        if self._lltokenizer is None:
            import llguidance.hf

            self._lltokenizer = llguidance.hf.from_tokenizer(
                self.tokenizer, n_vocab=int(self.model.config.vocab_size), eos_token=sorted(self.end_ids())
            )
        return JsonGrammar(self._lltokenizer, schema)

    # -- the interface ----------------------------------------------------------------------------------------
    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        tokenizer = self.tokenizer
        reply_started = reply_start(messages) is not None  # the reply goes on from its text
        encoded = tokenizer.apply_chat_template(
            [m.to_dict() for m in messages],
            add_generation_prompt=not reply_started,
            continue_final_message=reply_started,
        )
        ids = encoded["input_ids"] if not isinstance(encoded, list) else encoded
        return [int(i) for i in ids]

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        return self.complete(messages, params)

    def _job(self, messages: Sequence[Message], params: SamplingParams) -> tuple[DecodeState, Chooser]:
        """A job for the decode loops: its prompt, token limit, chooser (grammar, sampling) and stops."""
        prompt = self.prompt_ids(messages)
        limit = self.capabilities.context_window
        if len(prompt) + 1 > limit:
            raise ContextLengthError(
                f"The prompt has {len(prompt)} tokens; {self.name} reads at most {limit}: send a shorter chunk.",
                backend=self.name,
            )
        grammar = self.grammar(params.json_schema) if params.json_schema is not None else None
        chooser = Chooser(temperature=params.temperature, top_p=params.top_p, seed=params.seed, grammar=grammar,
                          logprobs=params.logprobs)  # fmt: skip
        job = DecodeState(prompt, min(params.max_tokens, limit - len(prompt)), chooser, self.end_ids().__contains__,
                  self._stopper(params), grammar.forced if grammar is not None else None)  # fmt: skip
        return job, chooser

    def _result(
        self,
        job: DecodeState,
        chooser: Chooser,
        params: SamplingParams,
        spec: Speculation,
        seconds: float,
        batch: int = 1,
    ) -> ChatResult:
        decoded = job.out
        text, finish = _cut(self.tokenizer.decode(decoded.tokens, skip_special_tokens=True), decoded, params)
        stats = self._stats(job.prompt, decoded, chooser, spec)
        stats["batch"] = batch
        return ChatResult(
            text=text,
            usage=Usage(len(job.prompt), len(decoded.tokens), calls=1, seconds=seconds),
            finish_reason=finish,
            timings=Timings(total_s=seconds, prefill_s=decoded.prefill_s, decode_s=decoded.decode_s),
            model=self.name,
            stats=stats,
        )

    def complete(
        self, messages: Sequence[Message], params: SamplingParams, *, speculation: Speculation | None = None
    ) -> ChatResult:
        """One reply; ``speculation`` overrides the backend's own (benches run plain, chain and tree alike)."""
        start = time.perf_counter()
        speculation = speculation or self.speculation()
        with self._lock:
            job, chooser = self._job(messages, params)
            drafting = speculation.config.draft and speculation.config.mode != "plain"
            decoded = decode(self.model, self.new_cache(), job, speculation=speculation,
                             keeper=state_keeper(self.model), drafter=self.drafter() if drafting else None)  # fmt: skip
            if decoded.tokens:
                self._paces.append(decoded.decode_s / len(decoded.tokens))
            return self._result(job, chooser, params, speculation, time.perf_counter() - start)

    def batch(
        self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None, cancel: CancelToken | None = None
    ) -> list[ChatResult]:
        """Every job's reply, in order; a failed job's result carries its error.

        Jobs are decoded together, ``max_batch`` rows per forward pass with plain decoding, when that is expected
        to be faster than one job at a time with speculation: ``T(B) / B`` seconds a token, from the measured
        cost curve, against the median pace of this backend's recent one-at-a-time replies (before any, a
        guess: ``T(1)`` over the speedup of its speculation as measured by ``bench tree``). On this 2-core CPU
        that is a batch of 8; on an accelerator, where ``T(B)`` hardly grows, any batch. Models with recurrent
        or convolution state decode one at a time.
        """
        size = min(len(requests), self.max_batch)
        if size < 2 or has_recurrent_state(self.model) or not self._batching_pays(size):
            return super().batch(requests, on_result=on_result, cancel=cancel)
        results: list[ChatResult] = []
        for first in range(0, len(requests), size):
            group = requests[first : first + size]
            if cancel is not None and cancel.cancelled:
                done = [cancelled_result(self.name) for _ in group]
            else:
                done = self._batch(group)
            for i, result in enumerate(done, first):
                if on_result is not None:
                    on_result(i, result)
            results.extend(done)
        return results

    def _batching_pays(self, size: int) -> bool:
        spec = self.speculation()
        if spec.config.mode == "plain":
            return True
        guess = spec.cost(1) / (DRAFT_SPEEDUP_GUESS if self.draft_model is not None else TEXT_SPEEDUP_GUESS)
        single = median(self._paces) if self._paces else guess
        return spec.cost(size) / size < single

    def _batch(self, group: Sequence[ChatRequest]) -> list[ChatResult]:
        """One group decoded together; a job that cannot run (a prompt too long) fails alone."""
        start = time.perf_counter()
        plain = Speculation(SpecConfig(mode="plain"), CostCurve((1,), (1.0,)))
        jobs: dict[int, tuple[DecodeState, Chooser]] = {}
        results: dict[int, ChatResult] = {}
        with self._lock:
            for i, req in enumerate(group):
                try:
                    jobs[i] = self._job(list(req.messages), req.params)
                except BackendError as exc:
                    results[i] = error_result(self.name, exc)
            try:
                if jobs:
                    generate_batch(self.model, self.new_cache, [job for job, _ in jobs.values()], speculation=plain)
            except RuntimeError as exc:  # torch's own errors: say which backend, keep the other groups
                error = BackendError(f"Batched decoding failed: {exc}", backend=self.name)
                results.update({i: error_result(self.name, error) for i in jobs})
                jobs = {}
            seconds = time.perf_counter() - start
            for i, (job, chooser) in jobs.items():
                results[i] = self._result(job, chooser, group[i].params, plain, seconds, batch=len(jobs))
        return [results[i] for i in range(len(group))]

    def _stopper(self, params: SamplingParams) -> Any:
        decode = self.tokenizer.decode

        def should_stop(tokens: Sequence[int]) -> bool:
            if len(tokens) >= REPEAT_MIN_ITEMS and repeating(tokens):
                return True
            return bool(params.stop) and any(s in decode(tokens[-64:]) for s in params.stop)

        return should_stop

    def _stats(self, prompt: Sequence[int], d: Decoded, chooser: Chooser, spec: Speculation) -> dict[str, Any]:
        stats: dict[str, Any] = {
            "mode": spec.config.mode,
            "prefill_computed": len(prompt) - 1,
            "decode_tokens": len(d.tokens),
            **d.drafts.to_dict(),
            "prompt_ids": list(prompt),
            "token_ids": list(d.tokens),
        }
        if len(d.tokens) >= REPEAT_MIN_ITEMS and (period := repeating(d.tokens)):
            stats["looping"] = period
        if chooser.logprobs:
            piece = self.tokenizer.decode
            stats["logprobs"] = [[[piece([i]), lp] for i, lp in step] for step in chooser.top[: len(d.tokens) + 1]]
        return stats


def _cut(text: str, decoded: Decoded, params: SamplingParams) -> tuple[str, Any]:
    """The reply up to its first stop string, and why it ended (a reply cut in a loop ends by length)."""
    for s in params.stop:
        if s in text:
            return text[: text.index(s)], "stop"
    looping = len(decoded.tokens) >= REPEAT_MIN_ITEMS and repeating(decoded.tokens)
    return text, "length" if looping else decoded.finish
