"""The local engine: many chat jobs at once on one llama.cpp context, with shared prefixes and grammars.

Why: a Minions round sends the local model dozens of small jobs. One after another, each job pays its own
prefill, and each decode step reads all the weights to make one token. Here (continuous batching):

- every step decodes one token of each job that is generating, in one ``llama_decode`` call (one pass over
  the weights for all of them), and computes up to ``n_batch`` prompt tokens of the oldest job still
  prefilling; a job that finishes frees its sequence and a queued job takes it at the next step;
- a prompt whose first tokens some sequence already holds (another job's prompt, or a finished prompt kept from
  an earlier call) starts from a copy of them and computes only the rest; a job that shares a long prefix with
  a job still prefilling waits for it instead of computing the prefix twice (``backends.llamacpp.slots``);
- each job samples with its own chain (JSON-schema grammar, greedy or seeded temperature), stops on its own
  stop strings and token limit, and streams its text through ``on_token(job_index, text)``;
- with ``speculate`` (the default), each generating job's step carries a draft of the tokens that may come
  next (``backends.speculation``: its own text, replies seen before, the JSON skeleton of its schema), verified in
  the same call; the job keeps the tokens its own sampler confirms, so the reply is the one plain decoding
  gives, token for token, in fewer steps.

Memory: each of ``max_seqs`` sequences has a KV stream of ``seq_ctx`` cells, so a running job can never run
out of room or disturb another's; jobs wait for a free sequence. A job too large for ``seq_ctx`` (but within
``n_ctx``) runs alone afterwards, in a context of ``n_ctx`` cells made when first needed; a prompt beyond
``n_ctx`` fails alone with ``ContextLengthError``. A cancelled run frees the memory of every job it stopped.

Outputs: with ``speculate=False``, those of ``llama_cpp.Llama.create_chat_completion`` run on each job alone,
token for token (same template, same sampler chain, same stop rules; the per-sequence streams make the
arithmetic identical). Speculation keeps the tokens the job's own sampler picks, so its replies are plain
decoding's too, except where plain decoding's top two tokens are within rounding of each other: llama.cpp's CPU
kernels compute a call over several tokens of one sequence in another order than a call over one, which moves
logits by up to ~1 (``EngineConfig.flash_attn`` makes it exact for sequences of at most 256 cells).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from minions.errors import BackendError, ConfigError, ContextLengthError
from minions.events import CancelToken
from minions.steps import drain
from minions.types import ChatRequest, ChatResult, Message

from ..settings import cpu_threads
from ..speculation.depth import CostTable
from ..speculation.drafters import Drafter
from ..speculation.speculator import K_MAX, NullSpeculator, Speculator, default_drafters
from .cost_table import (
    DEFAULT_COST_TABLE,
    cost_table_steps,
    load_cost_table,
    load_or_measure_cost_table,
    save_cost_table,
)
from .defaults import DEFAULT_CONTEXT, DEFAULT_MAX_SEQS
from .draft_model import DraftModel
from .ffi import LlamaModel
from .kvstore import KVStore
from .prefixes import PrefixCache, marked_prompt
from .sampling import GrammarCache, TextStream
from .scheduler import BatchStats, OnResult, OnToken, RunCaller, RunSettings, Scheduler
from .sequence import EngineSequence
from .slots import Lane

__all__ = ["BatchStats", "Engine", "EngineConfig", "EngineStats", "OnToken", "PrefixStats"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    n_ctx: int = DEFAULT_CONTEXT
    """The most one job (prompt and reply) may use, as the context of the high-level ``Llama``."""
    seq_ctx: int = 2048
    """KV cells per batched sequence: jobs up to this size run together; larger ones run alone afterwards."""
    max_seqs: int = DEFAULT_MAX_SEQS
    """Jobs in flight at once. KV memory: max_seqs x seq_ctx cells (23 KB each for SmolLM2-135M)."""
    n_batch: int = 512
    """Tokens per ``llama_decode`` call: one per generating job, the rest prompt tokens."""
    n_threads: int | None = None
    """CPU threads; None: all cores."""
    share_prefixes: bool = True
    """Start from KV of common prompt prefixes. Off: every job computes its whole prompt (a baseline)."""
    min_copy_gain: int = 16
    """Copy another sequence's prefix only when it saves this many tokens (a stream copy costs a few)."""
    min_wait_gain: int = 16
    """A new job waits for a running job's prefill when that will let it copy this many more tokens."""
    flash_attn: bool = False
    """Off, as in the high-level API, whose replies the plain engine reproduces token for token. (On, a verify
    call's logits equal one-token calls' exactly while a sequence holds at most 256 cells; beyond that, and always
    with it off, llama.cpp's CPU kernels round a call over several tokens of one sequence differently, by up to
    ~1 logit.)"""
    prefill_first: bool = True
    """Decode steps wait while an admitted job computes its prompt, so that the jobs of a batch decode together:
    a decode call over many sequences costs little more than one over few where a step reads the weights (big
    targets, draft models' pairs), and no more in total where it is arithmetic. Off: jobs that have their prompt
    generate between the prompt chunks of the others (their first tokens stream sooner; the batch is wide only
    in its middle)."""
    speculate: bool = True
    """Speculative decoding of generating jobs (``backends.speculation``): lossless (every token is the one the
    job's own sampler picks from the model's logits), and how much to draft adapts to this machine's cost curve
    (a shipped default until it is measured, in idle time: ``Engine.refine_costs``) and the drafts' live
    acceptance, down to no drafts at all."""
    k_max: int = K_MAX
    """The longest draft verified in one step."""
    draft_depth: int | None = None
    """A fixed draft length (tests and experiments); None: adaptive."""
    draft_model: str | None = None
    """A second, smaller GGUF with the same vocabulary, used as one more drafter."""
    learn_drafts: bool = True
    """Keep the speculator's trace caches (n-grams of accepted replies) under ``cache_dir()/speculator``."""
    kv_cache: bool = True
    """Save the state of marked prompt prefixes (``ChatRequest.prefix``: a document chunk) to disk and restore it
    instead of computing it again (``backends.llamacpp.prefixes``); needs ``share_prefixes``."""
    kv_cache_dir: str | None = None
    """Where the saved states go; None: ``$MINIONS_KV_CACHE_DIR`` or ``cache_dir()/kv``."""
    min_saved_prefix: int = 64
    """Shorter marked prefixes are not saved (a file per few tokens costs more than it saves)."""

    @property
    def threads(self) -> int:
        """``n_threads``, or all cores."""
        return cpu_threads(self.n_threads)

    @property
    def run_settings(self) -> RunSettings:
        """What a run's scheduler reads of this configuration (it takes plain values)."""
        return RunSettings(
            n_batch=self.n_batch,
            max_seqs=self.max_seqs,
            share_prefixes=self.share_prefixes,
            min_copy_gain=self.min_copy_gain,
            min_wait_gain=self.min_wait_gain,
            prefill_first=self.prefill_first,
        )


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Totals since the engine was made, and what its KV memory holds now."""

    batches: int
    jobs: int
    decode_calls: int
    prefill_computed: int
    prefill_reused: int
    prefill_restored: int
    """Of ``prefill_reused``, the tokens restored from saved prefix states on disk."""
    decode_tokens: int
    cells_used: int
    """Cells holding tokens: running jobs' and cached prompts'."""
    cached_prompts: int


@dataclass(frozen=True, slots=True)
class PrefixStats:
    """What ``Engine.save_prefixes`` did (so far, in a progress report)."""

    prefixes: int
    """Marked prefixes among the requests (distinct)."""
    done: int
    """Of those, the ones handled so far: saved now, or found saved already."""
    saved: int
    computed_tokens: int
    """Prompt tokens computed for the prefixes saved now."""
    saved_tokens: int
    """Tokens of all handled prefixes (saved now or before)."""
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.computed_tokens / self.seconds if self.seconds > 0 else 0.0


class Engine:
    """Continuous batching over llama.cpp. Not thread-safe: callers serialize ``run``."""

    def __init__(
        self, model_path: str | os.PathLike[str], config: EngineConfig | None = None, *, name: str = ""
    ) -> None:
        self.config = c = config or EngineConfig()
        self.model = LlamaModel(model_path)
        self.name = name or f"llamacpp/{self.model.path.name}"
        self.grammars = GrammarCache(self.model)
        self.lane = self._lane(n_seqs=c.max_seqs, seq_ctx=min(c.seq_ctx, c.n_ctx))
        self._long_lane: Lane | None = None
        self._eos_text = self.model.token_text(self.model.lib.llama_vocab_eos(self.model.vocab))
        self.speculator = self._speculator() if c.speculate else NullSpeculator()
        self.prefixes: PrefixCache | None = self._prefix_cache() if c.kv_cache and c.share_prefixes else None
        self._totals = dict.fromkeys(
            ("batches", "jobs", "decode_calls", "prefill_computed", "prefill_reused", "prefill_restored",
             "decode_tokens"), 0
        )  # fmt: skip

    # -- public ------------------------------------------------------------------------------------------
    def run(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_token: OnToken | None = None,
        on_result: OnResult | None = None,
        cancel: CancelToken | None = None,
        seed: int = 0,
        trace_tokens: bool = False,
        speculate: bool | None = None,
        max_active: int | None = None,
    ) -> list[ChatResult]:
        """Run every request; results in request order. A failed job is a ``finish_reason="error"`` result.

        ``seed`` is for requests without one. ``trace_tokens`` adds each job's prompt and sampled token ids (the
        end-of-generation token included) to its ``stats`` as ``prompt_ids`` and ``token_ids``. ``speculate``:
        None follows the config; False decodes plainly (a baseline). ``max_active`` caps the jobs in flight
        (the batch size; default ``max_seqs``)."""
        steps = self.steps(requests, on_token=on_token, on_result=on_result, cancel=cancel, seed=seed,
                           trace_tokens=trace_tokens, speculate=speculate, max_active=max_active)  # fmt: skip
        return drain(steps)

    def steps(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_token: OnToken | None = None,
        on_result: OnResult | None = None,
        cancel: CancelToken | None = None,
        seed: int = 0,
        trace_tokens: bool = False,
        speculate: bool | None = None,
        max_active: int | None = None,
    ) -> Generator[None, None, list[ChatResult]]:
        """``run``, one step at a time: each ``next()`` makes one step (a decode call and a prompt chunk), and
        the generator returns what ``run`` returns. Time between steps is nobody's: a benchmark lets several
        engines take turns on the cores from one thread. Closing it early ends the run's jobs."""
        if speculate and not self.config.speculate:
            raise ConfigError("This engine was made with speculate=False: make it with EngineConfig(speculate=True).")
        speculator = self.speculator if speculate is None or speculate else NullSpeculator()
        run = Scheduler(
            self.model,
            self.config.run_settings,
            self.grammars,
            self.name,
            self.lane,
            RunCaller(on_token, on_result, cancel, trace_tokens, max_active),
            speculator=speculator,
            prefixes=self.prefixes,
        )
        try:
            jobs = [self._prepare(i, r, seed, run) for i, r in enumerate(requests)]
            fits = self.lane.slots.capacity
            yield from run.execute(self.lane, [j for j in jobs if j.state == "queued" and j.need <= fits])
            large = [j for j in jobs if j.state == "queued"]
            if large:  # one at a time, in a context of n_ctx cells (unless cancelled: then they just end)
                yield from run.execute(self.lane if cancel is not None and cancel.cancelled else self._long(), large)
        except BaseException:
            run.abandon()  # a callback raised, an interrupt, the steps closed early: free what the jobs held
            raise
        finally:
            speculator.save()
        stats = run.stats()
        for key in ("decode_calls", "prefill_computed", "prefill_reused", "prefill_restored", "decode_tokens"):
            self._totals[key] += getattr(stats, key)
        self._totals["batches"] += 1
        self._totals["jobs"] += len(requests)
        batch = stats.to_dict()
        results = [j.result for j in jobs]
        assert all(r is not None for r in results), "every job ends with a result"
        return [replace(r, stats={**r.stats, "batch": batch}) for r in results if r is not None]

    def _saved_prefix(self, request: ChatRequest) -> tuple[list[int], int]:
        """The request's prompt tokens, and how many of them are a prefix this engine saves (its mark, long enough
        and within the context; else 0)."""
        prompt, n = marked_prompt(self.model, request.messages, request.prefix)
        return prompt, n if self.config.min_saved_prefix <= n < self.config.n_ctx else 0

    def prompt_tokens(self, requests: Sequence[ChatRequest]) -> list[int]:
        """The prompt tokens each of ``requests`` would compute now: its whole prompt, less its marked prefix where
        that prefix's state is saved (``EngineConfig.kv_cache``)."""
        out = []
        for request in requests:
            prompt, n = self._saved_prefix(request)
            saved = n and self.prefixes is not None and prompt[:n] in self.prefixes
            out.append(len(prompt) - (n if saved else 0))
        return out

    def save_prefixes(
        self,
        requests: Sequence[ChatRequest],
        *,
        on_progress: Callable[[PrefixStats], None] | None = None,
        cancel: CancelToken | None = None,
    ) -> PrefixStats:
        """Compute the marked prefix (``ChatRequest.prefix``) of each request and save its state, without
        answering: later requests with the same prefix restore it (indexing a document ahead of questions).
        Prefixes saved already are skipped; a request without a mark, or with a short one, is ignored."""
        if self.prefixes is None:
            raise ConfigError("This engine keeps no saved prefixes: make it with EngineConfig(kv_cache=True).")
        cache, start = self.prefixes, time.perf_counter()
        todo: dict[str, list[int]] = {}
        for request in requests:
            prompt, n = self._saved_prefix(request)
            if n:
                todo.setdefault(cache.key(prompt[:n]), prompt[:n])
        done = saved = computed = tokens = 0

        def report() -> PrefixStats:
            return PrefixStats(len(todo), done, saved, computed, tokens, time.perf_counter() - start)

        for prefix in todo.values():
            if cancel is not None and cancel.cancelled:
                break
            if prefix not in cache:
                computed += self._compute_prefix(prefix)
                saved += 1
            done, tokens = done + 1, tokens + len(prefix)
            if on_progress is not None:
                on_progress(report())
        return report()

    def _compute_prefix(self, prefix: Sequence[int]) -> int:
        """Compute ``prefix`` in a free sequence (chunks of ``n_batch``, none of one token, as the jobs compute
        a prompt) and save its state; the sequence keeps it, as a cached prompt. Returns the tokens computed."""
        assert self.prefixes is not None
        lane = self.lane if len(prefix) + 2 < self.lane.slots.capacity else self._long()
        slot = min(lane.slots.free(), key=lambda s: s.last_used)
        lane.slots.keep(slot, 0)
        done = 0
        while done < len(prefix):
            left = len(prefix) - done
            k = min(left, lane.batch.capacity)
            k -= left - k == 1  # never leave a chunk of one token
            lane.batch.clear()
            lane.batch.add(prefix[done : done + k], done, slot.seq, logits_last=False)
            if lane.ctx.decode(lane.batch) != 0:
                lane.slots.keep(slot, 0)
                lane.ctx.seq_rm(slot.seq)
                slot.tokens = []
                raise BackendError("llama_decode failed while computing a prefix.", backend=self.name)
            lane.slots.pending.clear()
            slot.tokens.extend(prefix[done : done + k])
            done += k
        self.prefixes.save(lane.ctx, slot.seq, prefix)
        lane.slots.touch(slot)
        return len(prefix)

    def tokens(self, messages: Sequence[Message]) -> list[int]:
        """The prompt tokens of ``messages`` (the model's chat template, ending with the assistant header)."""
        return self.model.chat_tokens(messages)

    @property
    def stats(self) -> EngineStats:
        lanes = [self.lane, *([self._long_lane] if self._long_lane else [])]
        cached = sum(1 for lane in lanes for s in lane.slots.slots if s.job is None and s.tokens)
        cells = sum(lane.slots.cells_used for lane in lanes)
        return EngineStats(**self._totals, cells_used=cells, cached_prompts=cached)

    @property
    def kv_bytes(self) -> int:
        """Memory of the KV streams allocated now (the batched context, and the long-job one if made)."""
        return sum(lane.ctx.kv_bytes for lane in (self.lane, self._long_lane) if lane is not None)

    def clear_cache(self) -> None:
        """Forget the cached prompts (their cells are freed)."""
        for lane in (self.lane, self._long_lane):
            if lane is not None:
                lane.slots.clear()

    def logits_after(self, tokens: Sequence[int]) -> npt.NDArray[np.float32]:
        """Next-token logits after ``tokens``, computed alone (for near-tie checks); clears the cached prompts."""
        self.clear_cache()
        lane = self.lane if len(tokens) < self.lane.slots.capacity else self._long()
        slot, batch, n_batch = lane.slots.slots[0], lane.batch, self.config.n_batch
        idx = 0
        for start in range(0, len(tokens), n_batch):
            part = tokens[start : start + n_batch]
            batch.clear()
            idx = batch.add(part, start, slot.seq, logits_last=start + len(part) == len(tokens))
            if lane.ctx.decode(batch) != 0:
                lane.ctx.seq_rm(slot.seq)
                raise BackendError("llama_decode failed on a lone sequence.", backend=self.name)
        out = lane.ctx.logits(idx).copy()
        lane.ctx.seq_rm(slot.seq)
        return out

    def close(self) -> None:
        self.speculator.close()
        self.grammars.close()
        for lane in (self.lane, self._long_lane):
            if lane is not None:
                lane.close()
        self.model.close()

    # -- internals ---------------------------------------------------------------------------------------
    def _speculator(self) -> Speculator:
        c = self.config
        drafters: list[Drafter] = default_drafters(self.model.path, persist=c.learn_drafts)
        if c.draft_model:
            drafters.append(DraftModel(c.draft_model, n_seqs=c.max_seqs, seq_ctx=c.seq_ctx, n_threads=c.threads))

        def cost() -> CostTable:
            if self._costs_in_seconds:
                return load_or_measure_cost_table(self.model, n_threads=c.threads, max_seqs=c.max_seqs,
                                                  flash_attn=c.flash_attn)  # fmt: skip
            table = load_cost_table(self.model, n_threads=c.threads, max_seqs=c.max_seqs, flash_attn=c.flash_attn)
            return table or DEFAULT_COST_TABLE

        recurrent = self.model.memory != "attention"
        return Speculator(drafters, cost, k_max=c.k_max, depth=c.draft_depth, recurrent=recurrent)

    @property
    def _costs_in_seconds(self) -> bool:
        """Whether the speculator adds seconds of its own to the table's (a draft model's, a recurrent rollback's):
        then a default table in another machine's seconds would mislead it, and the table is measured on first
        speculative use."""
        return bool(self.config.draft_model) or self.model.memory != "attention"

    def refine_costs(self) -> Generator[float | None, None, None]:
        """Measure this machine's cost table a decode call at a time (``cost_table.cost_table_steps``) where the
        speculator drafts by ``DEFAULT_COST_TABLE`` for want of one; then cache it and draft by it. For the
        llama.cpp thread's idle time (``worker.when_idle``), so that no answer waits for what only speculation
        needs: it yields after each call, and while the machine is busy (``IDLE_LOAD``: a table measured while
        other work shares the cores is wrong in shape, and kept) it waits, yielding the seconds until it looks
        again. Nothing to do where the engine does not speculate or its table is there."""
        c = self.config
        if not c.speculate or self._costs_in_seconds or self.speculator.cost is not DEFAULT_COST_TABLE:
            return
        while _busy():
            yield BUSY_RETRY_S
        log.info("measuring decode-call costs of %s while idle (once for this machine)", self.model.path.name)
        table = yield from cost_table_steps(self.model, n_threads=c.threads, max_seqs=c.max_seqs,
                                            flash_attn=c.flash_attn)  # fmt: skip
        save_cost_table(self.model, table, n_threads=c.threads, max_seqs=c.max_seqs, flash_attn=c.flash_attn)
        if self.speculator.cost is DEFAULT_COST_TABLE:  # not replaced meanwhile (a benchmark's own table)
            self.speculator.refine(table)

    def _prefix_cache(self) -> PrefixCache:
        c = self.config
        store = KVStore(Path(c.kv_cache_dir) if c.kv_cache_dir else None)
        return PrefixCache(self.model, {"flash_attn": c.flash_attn, "n_batch": c.n_batch}, store)

    def _long(self) -> Lane:
        if self._long_lane is None:
            log.info("making a %d-cell context for jobs larger than %d tokens", self.config.n_ctx, self.config.seq_ctx)
            self._long_lane = self._lane(n_seqs=1, seq_ctx=self.config.n_ctx)
        return self._long_lane

    def _lane(self, *, n_seqs: int, seq_ctx: int) -> Lane:
        c = self.config
        n_outputs = n_seqs * (1 + c.k_max) if c.speculate else n_seqs  # a verify call's logits: a job's draft's too
        return Lane(self.model, n_seqs=n_seqs, seq_ctx=seq_ctx, n_batch=c.n_batch, n_threads=c.threads,
                    flash_attn=c.flash_attn, n_outputs=n_outputs)  # fmt: skip

    def _prepare(self, index: int, request: ChatRequest, seed: int, run: Scheduler) -> EngineSequence:
        params = request.params
        prompt, prefix = marked_prompt(self.model, request.messages, request.prefix)
        job = EngineSequence(index, prompt, params, params.seed if params.seed is not None else seed)
        job.prefix = prefix if prefix >= self.config.min_saved_prefix else 0
        n_ctx, n = self.config.n_ctx, len(job.prompt)
        if n >= n_ctx:
            error = ContextLengthError(
                f"The prompt ({n} tokens) does not fit {self.name}'s context of {n_ctx} tokens: "
                "use smaller chunks or a larger n_ctx.",
                backend=self.name,
            )
            run.fail(job, error)
            return job
        # max_tokens <= 0: up to the context; never past it (as Llama.create_completion truncates)
        job.max_new = min(params.max_tokens if params.max_tokens > 0 else n_ctx, n_ctx - n)
        job.text = TextStream([*params.stop, self._eos_text])  # the chat formatter adds the EOS text as a stop
        return job


IDLE_LOAD = 0.5
"""The machine counts as idle, for measuring its cost table, while its load average is under this per core."""
BUSY_RETRY_S = 30.0
"""How long ``Engine.refine_costs`` waits to look again at a busy machine."""


def _busy() -> bool:
    """Whether the machine's 1-minute load average is over ``IDLE_LOAD`` per core (never where it is unknown)."""
    try:
        return os.getloadavg()[0] > IDLE_LOAD * (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return False
