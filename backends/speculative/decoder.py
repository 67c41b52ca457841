"""A batched llama.cpp decoder with speculative verification: the speculative path of the local engine.

Each step (one ``llama_decode`` for every generating sequence):

1. every drafter proposes up to ``k_max`` tokens for every sequence; a sequence takes the proposal with the most
   expected tokens ``E(a, len)`` under its acceptance estimate ``a`` for that drafter;
2. ``choose_depths`` cuts each proposal to the length that maximises the batch's expected tokens per second on
   this machine's cost curve (0: plain decoding for that sequence);
3. one call computes ``[last, d_1 .. d_k]`` of every sequence with logits for all of them;
4. ``sample_compare`` emits the sequence's own sampler's tokens while they equal the draft (greedy or seeded
   sampling, grammar included: the sampler sees exactly the logits and the order of plain decoding);
5. rollback: the keys and values of rejected draft tokens are dropped with ``llama_memory_seq_rm`` from the
   first rejected position.

Prompts are computed in their own calls, one chunk of the oldest prefilling job per step (as the engine does).
``speculate=False`` (per run) is plain decoding through the same code: the baseline of the benchmark.

This is its own small path, not ``backends.engine``: the engine's context reserves logits for one token per
sequence and its step samples one token per job; folding steps 1-5 into ``engine._Run._step`` is the next
change (see the package docstring).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minions.errors import BackendError, ContextLengthError
from minions.types import ChatRequest, ChatResult, FinishReason, SamplingParams, Timings, Usage

from ..engine_llama import LlamaModel, TokenBatch
from ..sampling import GrammarCache, SequenceSampler, TextStream
from .context import open_context
from .depth import AcceptanceTracker, CostCurve, choose_depths, expected_tokens, load_or_measure_cost_curve
from .drafters import ContextLookup, Drafter, TraceCache, schema_key
from .rules import sample_compare

__all__ = ["SpecConfig", "SpecDecoder"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SpecConfig:
    max_seqs: int = 8
    seq_ctx: int = 2048
    """KV cells per sequence: a job's prompt and reply must fit."""
    n_batch: int = 512
    n_threads: int | None = None
    k_max: int = 8
    """The longest draft verified in one step."""
    depth: int | None = None
    """A fixed draft length (tests); None: adaptive (``choose_depths``)."""
    persist: bool = True
    """Keep the trace caches under ``cache_dir()/speculator`` across runs and restarts."""


@dataclass(eq=False)
class _Job:
    index: int
    prompt: list[int]
    params: SamplingParams
    max_new: int
    text: TextStream
    seed: int
    seq: int = -1
    state: str = "queued"  # queued -> prefill -> decode -> done
    n_past: int = 0
    pending: int = -1
    generated: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    sampler: SequenceSampler | None = None
    steps: int = 0
    drafted: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    t_admit: float = 0.0
    t_first: float = 0.0
    result: ChatResult | None = None


class SpecDecoder:
    """Many jobs at once on one context, with speculative decoding. Not thread-safe."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        config: SpecConfig | None = None,
        *,
        drafters: Sequence[Drafter] | None = None,
        cost: CostCurve | None = None,
    ) -> None:
        self.config = c = config or SpecConfig()
        self.model = LlamaModel(model_path)
        self.name = f"llamacpp/{self.model.path.name}"
        self.n_threads = c.n_threads or os.cpu_count() or 1
        self.ctx = open_context(self.model, n_seqs=c.max_seqs, seq_ctx=c.seq_ctx, n_batch=c.n_batch,
                                n_threads=self.n_threads)  # fmt: skip
        self.batch = TokenBatch(self.model.lib, c.n_batch)
        self.grammars = GrammarCache(self.model)
        self.drafters: list[Drafter] = list(drafters) if drafters is not None else self.default_drafters()
        self.cost = cost or load_or_measure_cost_curve(self.model, n_threads=self.n_threads)
        self.tracker = AcceptanceTracker()
        self._eos_text = self.model.token_text(self.model.lib.llama_vocab_eos(self.model.vocab))

    def default_drafters(self) -> list[Drafter]:
        """Context lookup, the trace cache of this model, and the per-schema (grammar) trace."""
        path: Path = self.model.path
        if self.config.persist:
            trace = TraceCache.for_model(path)
            grammar = TraceCache.for_model(path, name="grammar", orders=(3, 2), span=8)
            grammar.path = trace.path.with_name(trace.path.name.replace("trace-", "grammar-")) if trace.path else None
        else:
            trace, grammar = TraceCache(), TraceCache(name="grammar", orders=(3, 2), span=8)
        return [ContextLookup(), trace, grammar]

    # -- public ------------------------------------------------------------------------------------------
    def run(
        self,
        requests: Sequence[ChatRequest],
        *,
        speculate: bool = True,
        max_active: int | None = None,
        seed: int = 0,
        trace_tokens: bool = False,
    ) -> list[ChatResult]:
        """Every request, results in order. ``max_active`` caps the jobs decoded together (batch size)."""
        run = _Run(self, speculate, max_active or self.config.max_seqs, trace_tokens)
        jobs = [run.prepare(i, r, seed) for i, r in enumerate(requests)]
        try:
            run.execute([j for j in jobs if j.state == "queued"])
        finally:
            run.abandon()
            self.save()
        stats = run.stats()
        out = []
        for j in jobs:
            assert j.result is not None
            out.append(ChatResult(**{**_fields(j.result), "stats": {**j.result.stats, "batch": stats}}))
        return out

    def reset_speculator(self) -> None:
        """Fresh drafters and acceptance estimates (a benchmark run that must not learn from the one before)."""
        self.drafters = self.default_drafters()
        self.tracker = AcceptanceTracker()

    def logits_after(self, prompt: Sequence[int], reply: Sequence[int] = ()) -> Any:
        """Next-token logits after ``prompt`` and ``reply``, computed alone on sequence 0 exactly as plain decoding
        computes them (the prompt in chunks of ``n_batch``, then the reply one token per call): the near-tie
        check measures plain decoding's own top-2 gap."""
        n_batch, idx = self.config.n_batch, 0
        self.ctx.seq_rm(0, -1, -1)
        parts = [list(prompt[s : s + n_batch]) for s in range(0, len(prompt), n_batch)]
        pos = 0
        for part in [*parts, *([t] for t in reply)]:
            self.batch.clear()
            idx = self.batch.add(part, pos, 0, logits_last=True)
            if self.ctx.decode(self.batch) != 0:
                raise BackendError("llama_decode failed on a lone sequence.", backend=self.name)
            pos += len(part)
        out = self.ctx.logits(idx).copy()
        self.ctx.seq_rm(0, -1, -1)
        return out

    def save(self) -> None:
        for d in self.drafters:
            if isinstance(d, TraceCache):
                d.save()

    def close(self) -> None:
        self.grammars.close()
        self.ctx.close()
        self.model.close()


def _fields(r: ChatResult) -> dict[str, Any]:
    return {f: getattr(r, f) for f in ("text", "usage", "finish_reason", "timings", "model", "error", "stats")}


class _Run:
    def __init__(self, d: SpecDecoder, speculate: bool, max_active: int, trace: bool) -> None:
        self.d = d
        self.speculate = speculate
        self.max_active = min(max_active, d.config.max_seqs)
        self.trace = trace
        self.queue: deque[_Job] = deque()
        self.active: list[_Job] = []
        self.free = list(range(d.config.max_seqs))
        self.c: Counter[str] = Counter()
        self.depths: Counter[int] = Counter()
        self.t = {"prefill_s": 0.0, "decode_s": 0.0, "draft_s": 0.0}
        self.started = time.perf_counter()

    def prepare(self, index: int, request: ChatRequest, seed: int) -> _Job:
        d, p = self.d, request.params
        prompt = d.model.chat_tokens(request.messages)
        cap = d.config.seq_ctx
        job = _Job(index, prompt, p, min(p.max_tokens if p.max_tokens > 0 else cap, cap - len(prompt)),
                   TextStream([*p.stop, d._eos_text]), p.seed if p.seed is not None else seed)  # fmt: skip
        if len(prompt) >= cap:
            msg = f"The prompt ({len(prompt)} tokens) does not fit a sequence of {cap} cells."
            self._finish(job, "error", ContextLengthError(msg, backend=d.name))
        return job

    # -- the loop ----------------------------------------------------------------------------------------
    def execute(self, jobs: list[_Job]) -> None:
        self.queue.extend(jobs)
        while self.queue or self.active:
            while self.queue and self.free and len(self.active) < self.max_active:
                self._admit(self.queue.popleft())
            self._decode_step()
            self._prefill_step()

    def _admit(self, job: _Job) -> None:
        d = self.d
        job.seq = self.free.pop(0)
        d.ctx.seq_rm(job.seq, -1, -1)
        schema = job.params.json_schema
        grammar = d.grammars.new_sampler(schema) if schema is not None else None
        job.sampler = SequenceSampler(d.model, job.params, grammar, job.seed)
        for drafter in d.drafters:
            if drafter.name == "grammar" and isinstance(drafter, TraceCache):
                drafter.set_scope(job.seq, schema_key(schema))
        job.state, job.t_admit = "prefill", time.perf_counter()
        self.active.append(job)

    def _prefill_step(self) -> None:
        job = next((j for j in self.active if j.state == "prefill"), None)
        if job is None:
            return
        d, batch = self.d, self.d.batch
        start = time.perf_counter()
        part = job.prompt[job.n_past : job.n_past + d.config.n_batch]  # chunks from 0, as Llama.eval
        last = job.n_past + len(part) == len(job.prompt)
        batch.clear()
        idx = batch.add(part, job.n_past, job.seq, logits_last=last)
        if d.ctx.decode(batch) != 0:
            self._finish(job, "error", BackendError(f"llama_decode failed on {d.name}.", backend=d.name))
            return
        self.c["decode_calls"] += 1
        self.c["prefill_computed"] += len(part)
        job.n_past += len(part)
        if last:
            assert job.sampler is not None
            job.state, job.t_first = "decode", time.perf_counter()
            self._emit(job, job.sampler.sample(d.ctx.logits(idx)))
        self.t["prefill_s"] += time.perf_counter() - start

    def _decode_step(self) -> None:
        jobs = [j for j in self.active if j.state == "decode"]
        if not jobs:
            return
        d, batch = self.d, self.d.batch
        start = time.perf_counter()
        offers: list[dict[str, list[int]]] = [{} for _ in jobs]
        drafts = self._drafts(jobs, offers) if self.speculate else [("", [])] * len(jobs)
        self.t["draft_s"] += time.perf_counter() - start
        batch.clear()
        rows = []
        for job, (_, draft) in zip(jobs, drafts, strict=True):
            last = batch.add([job.pending, *draft], job.n_past, job.seq, logits_last=True)
            batch.want[last - len(draft) : last + 1] = 1  # logits after the last token and after each draft token
            rows.append(last - len(draft))
            self.depths[len(draft)] += 1
        if d.ctx.decode(batch) != 0:
            for job in jobs:
                self._finish(job, "error", BackendError(f"llama_decode failed on {d.name}.", backend=d.name))
            return
        self.c["decode_calls"] += 1
        self.c["decode_steps"] += 1
        self.c["verify_tokens"] += batch.n
        for job, (name, draft), row, offer in zip(jobs, drafts, rows, offers, strict=True):
            self._verify(job, name, draft, row, offer)
        self.t["decode_s"] += time.perf_counter() - start

    def _drafts(self, jobs: list[_Job], offers: list[dict[str, list[int]]]) -> list[tuple[str, list[int]]]:
        """Each job's best proposal (by expected tokens), cut to the depth ``choose_depths`` gives it. Every
        drafter's proposal goes into ``offers``, to be scored against what the step emits."""
        d, c = self.d, self.d.config
        picks: list[tuple[str, list[int], float]] = []
        for job, offer in zip(jobs, offers, strict=True):
            tokens = [*job.prompt, *job.generated]
            room = min(c.k_max, c.seq_ctx - job.n_past - 2, job.max_new - len(job.generated))
            best: tuple[str, list[int], float] = ("", [], 0.0)
            for drafter in d.drafters if room > 0 else ():
                draft = offer[drafter.name] = drafter.propose(job.seq, tokens, room)
                a = d.tracker.get(job.seq, drafter.name)
                if draft and expected_tokens(a, len(draft)) > expected_tokens(best[2], len(best[1])):
                    best = (drafter.name, draft, a)
            picks.append(best)
        if c.depth is not None:
            depths = [min(c.depth, len(p[1])) for p in picks]
        else:
            depths = choose_depths([p[2] for p in picks], [len(p[1]) for p in picks], d.cost)
        return [(name, draft[:k]) for (name, draft, _), k in zip(picks, depths, strict=True)]

    def _verify(self, job: _Job, name: str, draft: list[int], row: int, offer: dict[str, list[int]]) -> None:
        """Emit the sampler's tokens while they match the draft; drop the rejected drafts' keys and values."""
        d = self.d
        assert job.sampler is not None
        sampler, seq = job.sampler, job.seq
        m, emitted = sample_compare(draft, lambda i: sampler.sample(d.ctx.logits(row + i)),
                                    lambda x: self._emit(job, x))  # fmt: skip
        job.steps += 1
        if draft:
            job.drafted[name] += len(draft)
            job.accepted[name] += m
        for drafter, proposal in offer.items():  # every drafter learns, verified or not
            d.tracker.observe(seq, drafter, proposal, emitted)
        if job.state != "decode":
            return  # finished: its sequence is already cleared
        job.n_past += 1 + m  # the last token and the accepted drafts are in the KV memory now
        if m < len(draft):
            d.ctx.seq_rm(job.seq, job.n_past, -1)  # rollback from the first rejected position

    # -- tokens and endings ------------------------------------------------------------------------------
    def _emit(self, job: _Job, token: int) -> bool:
        """One emitted token; False when the reply ended with it."""
        d = self.d
        job.sampled.append(token)
        if token < 0:
            self._finish(job, "error", BackendError("The grammar allows no next token.", backend=d.name))
            return False
        if d.model.is_eog(token):
            self._finish(job, "stop")
            return False
        job.generated.append(token)
        stopped = job.text.push(d.model.piece(token))
        full = len(job.prompt) + len(job.generated) >= d.config.seq_ctx
        if stopped:
            self._finish(job, "stop")
        elif (not job.text.holding and len(job.generated) >= job.max_new) or full:
            self._finish(job, "length")
        else:
            job.pending = token
            return True
        return False

    def _finish(self, job: _Job, reason: FinishReason, error: BaseException | None = None) -> None:
        now = time.perf_counter()
        admitted, first = job.t_admit or now, job.t_first or now
        drafted, accepted = sum(job.drafted.values()), sum(job.accepted.values())
        stats: dict[str, Any] = {
            "decode_tokens": len(job.generated),
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": round(accepted / drafted, 4) if drafted else None,
            "acceptance_by_drafter": {k: round(job.accepted[k] / v, 4) for k, v in job.drafted.items() if v},
            "drafted_by_drafter": dict(job.drafted),
            "verify_steps": job.steps,
            "tokens_per_step": round((len(job.sampled) - 1) / job.steps, 3) if job.steps else None,
        }
        if self.trace:
            stats.update(prompt_ids=list(job.prompt), token_ids=list(job.sampled))
        job.result = ChatResult(
            text=job.text.text if reason != "error" else "",
            usage=Usage(len(job.prompt), len(job.generated), 0, calls=1, seconds=now - admitted),
            finish_reason=reason,
            timings=Timings(total_s=now - admitted, prefill_s=first - admitted, decode_s=now - first),
            model=self.d.name,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
            stats=stats,
        )
        for key in ("drafted", "accepted"):
            self.c[key] += stats[key]
        self.c["decode_tokens"] += len(job.generated)
        self._release(job, learn=reason in ("stop", "length"))

    def _release(self, job: _Job, *, learn: bool) -> None:
        job.state = "done"
        if job.sampler is not None:
            job.sampler.close()
            job.sampler = None
        if job.seq < 0:
            return
        d = self.d
        tokens = [*job.prompt, *job.generated] if learn else job.prompt
        for drafter in d.drafters:
            drafter.finish(job.seq, tokens, len(job.prompt))
        d.tracker.forget(job.seq)
        d.ctx.seq_rm(job.seq, -1, -1)
        self.free.append(job.seq)
        job.seq = -1
        if job in self.active:
            self.active.remove(job)

    def abandon(self) -> None:
        for job in list(self.active):
            self._release(job, learn=False)
        self.queue.clear()

    def stats(self) -> dict[str, Any]:
        c = self.c
        steps = sum(self.depths.values())
        return {
            **{k: c[k] for k in ("decode_calls", "decode_steps", "verify_tokens", "prefill_computed")},
            **{k: c[k] for k in ("decode_tokens", "drafted", "accepted")},
            "acceptance": round(c["accepted"] / c["drafted"], 4) if c["drafted"] else None,
            "depths": dict(sorted(self.depths.items())),
            "mean_depth": round(sum(k * n for k, n in self.depths.items()) / steps, 3) if steps else 0.0,
            "seconds": time.perf_counter() - self.started,
            **self.t,
        }
