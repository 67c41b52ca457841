"""The scheduler of one ``Engine.run`` (see ``backends.llamacpp.engine`` for the whole picture): admission, prefix
sharing, the loop of steps, prompt chunks and endings. A job in it is an ``EngineSequence``
(``backends.llamacpp.sequence``); its decode steps (draft, fill, verify, roll back) are ``backends.llamacpp.step``.

Each step makes at most two ``llama_decode`` calls: one token (and its draft) of every generating job, then one
prompt chunk of the oldest prefilling job. A prompt is computed in chunks that reproduce, token for token, how
``Llama.eval`` computes it alone (``chunk_size`` and ``reuse_cap``), so replies equal one-at-a-time replies.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from minions.errors import BackendError
from minions.events import CancelToken
from minions.loops import REPEAT_MIN_ITEMS, repeating
from minions.types import ChatResult, FinishReason, Timings, Usage

from ..speculation.speculator import Speculator
from .ffi import LlamaModel
from .prefixes import PrefixCache
from .sampling import GrammarCache, SequenceSampler
from .sequence import EngineSequence
from .slots import Lane, Slot, common_prefix
from .step import Decoder, Plan, StepCounts

__all__ = [
    "BatchStats",
    "OnResult",
    "OnToken",
    "RunCaller",
    "RunSettings",
    "Scheduler",
    "chunk_size",
    "reuse_cap",
]

log = logging.getLogger(__name__)

OnToken = Callable[[int, str], None]
OnResult = Callable[[int, ChatResult], None]


@dataclass(frozen=True, slots=True)
class BatchStats:
    """What one ``Engine.run`` did. Prefill tokens are prompt tokens: ``computed`` ran through the model,
    ``reused`` were copied from KV memory; ``decode_tokens`` are generated tokens."""

    jobs: int = 0
    failed: int = 0
    cancelled: int = 0
    decode_calls: int = 0
    prefill_computed: int = 0
    prefill_reused: int = 0
    prefill_restored: int = 0
    """Of ``prefill_reused``, the tokens whose state was restored from disk."""
    prefixes_saved: int = 0
    decode_tokens: int = 0
    stream_copies: int = 0
    peak_seqs: int = 0
    peak_cells: int = 0
    full_grammar_passes: int = 0
    decode_steps: int = 0
    """Decode calls over generating jobs; each verifies every job's draft (if any)."""
    verify_tokens: int = 0
    """Tokens in those calls: one per job and step, plus the drafts."""
    filler_tokens: int = 0
    """Tokens those calls carried, besides, on free sequences between the jobs' (then dropped), so that llama.cpp
    ran each as one ubatch (``speculation.depth.fillers``)."""
    drafted: int = 0
    accepted: int = 0
    rollbacks: int = 0
    """Recurrent memory: verify steps whose rejected drafts made the sequence go back to its checkpoint."""
    redo_tokens: int = 0
    """Recurrent memory: confirmed tokens computed again after a rollback (in the next call)."""
    depths: dict[int, int] = field(default_factory=dict)
    """How often each draft length was chosen."""
    seconds: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    """Time in the calls (with their sampling) that decode generating jobs; ``prefill_s`` in prompt calls."""

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


_NOT_COUNTED = {*StepCounts.__slots__, "seconds", "prefill_s"}
"""``BatchStats`` fields that are not the scheduler's counters: the decode steps' and the times."""


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What a run's scheduler reads of the engine's configuration, as plain values
    (``EngineConfig.run_settings``; each field means what the ``EngineConfig`` field of its name means)."""

    n_batch: int
    max_seqs: int
    share_prefixes: bool
    min_copy_gain: int
    min_wait_gain: int
    prefill_first: bool


@dataclass(frozen=True, slots=True)
class RunCaller:
    """What the caller of one ``Engine.run`` asks of it beside its jobs: to be told each token (``on_token``) and
    each result (``on_result``) as they come, a way to stop it (``cancel``), each job's token ids in its result's
    stats (``trace``), and at most ``max_active`` jobs in flight (None: ``RunSettings.max_seqs``)."""

    on_token: OnToken | None = None
    on_result: OnResult | None = None
    cancel: CancelToken | None = None
    trace: bool = False
    max_active: int | None = None


class Scheduler:
    """The state of one ``Engine.run``: the lane being worked, its queue and jobs in flight, the counters."""

    def __init__(
        self,
        model: LlamaModel,
        config: RunSettings,
        grammars: GrammarCache,
        name: str,
        lane: Lane,
        caller: RunCaller,
        *,
        speculator: Speculator,
        prefixes: PrefixCache | None = None,
    ) -> None:
        self.model = model
        self.config = config
        self.grammars = grammars
        self.name = name
        self.speculator = speculator
        """Drafts for each decode step (``speculation.NullSpeculator`` never drafts: plain decoding)."""
        self.decoder = Decoder(model, speculator, call=self._call, emit=self._emit)
        self.prefixes = prefixes if config.share_prefixes else None
        self.max_active = caller.max_active or config.max_seqs
        self.caller = caller
        self.lane = lane
        self.queue: deque[EngineSequence] = deque()
        self.active: list[EngineSequence] = []
        self.prefill_s = 0.0
        self.counts: dict[str, int] = {k: 0 for k in BatchStats.__slots__ if k not in _NOT_COUNTED}
        """The ``BatchStats`` counters of the run's other parts (the decode steps count theirs: ``Decoder.counts``)."""
        self.started = time.perf_counter()

    # -- the loop ----------------------------------------------------------------------------------------
    def execute(self, lane: Lane, jobs: list[EngineSequence]) -> Iterator[None]:
        """Run ``jobs`` on ``lane`` until all are done (or the run is cancelled), one step per iteration."""
        self.lane = lane
        if self.config.share_prefixes:
            jobs = sorted(jobs, key=lambda j: j.prompt)  # common prefixes side by side: computed once
        self.queue.extend(jobs)
        while self.queue or self.active:
            if self.caller.cancel is not None and self.caller.cancel.cancelled:
                self._cancel_all()
                return
            self._resolve_waits()
            self._admit()
            yield
            self._step()

    def _admit(self) -> None:
        """Start queued jobs on free sequences (a job that cannot start waits in the queue)."""
        while self.queue:
            free = self.lane.slots.free()
            if not free or len(self.active) >= self.max_active:
                return
            job = self.queue.popleft()
            job.slot = self._choose_slot(job, free)
            job.slot.job = job
            job.t_admit = time.perf_counter()
            job.sampler = self._sampler(job)
            self.speculator.start(job.slot.seq, job.params.json_schema, job.sampler.grammar)
            self.active.append(job)
            self.counts["peak_seqs"] = max(self.counts["peak_seqs"], len(self.active))
            source, n = self._wait_target(job)
            if source is not None:
                job.state, job.source, job.share_len = "waiting", source, n
            else:
                self._place(job)

    def _choose_slot(self, job: EngineSequence, free: list[Slot]) -> Slot:
        # the free sequence that already holds the most of this prompt; else the least recently used one, so
        # that fresher cached prompts stay
        return max(free, key=lambda s: (self._offered(s, job), -s.last_used))

    def _offered(self, slot: Slot, job: EngineSequence) -> int:
        """How much of ``job``'s prompt ``slot`` can give it (on recurrent memory, all it holds or nothing)."""
        return self.lane.slots.offers(slot, self._reusable(slot.tokens, job))

    def _reusable(self, tokens: Sequence[int], job: EngineSequence) -> int:
        """How much of ``job``'s prompt it can take from ``tokens`` (a sequence's content, or another prompt)."""
        if not self.config.share_prefixes:
            return 0
        return reuse_cap(common_prefix(tokens, job.prompt), len(job.prompt), self.config.n_batch)

    def _wait_target(self, job: EngineSequence) -> tuple[EngineSequence | None, int]:
        """A job still prefilling a prompt that shares much more with ``job`` than any sequence holds now."""
        if not self.config.share_prefixes:
            return None, 0
        have = max(self._offered(s, job) for s in self.lane.slots.slots)
        best, best_n = None, have + self.config.min_wait_gain
        for other in self.active:
            if other is job or other.state not in ("prefill", "waiting"):
                continue
            n = self._reusable(other.prompt, job)
            if n >= best_n and other.n_past < n and self._will_hold(other, n):
                best, best_n = other, n
        return best, best_n if best is not None else 0

    def _will_hold(self, other: EngineSequence, n: int) -> bool:
        """Whether ``other``'s sequence will hold just its first ``n`` prompt tokens at some step: on attention
        memory always (a copy keeps any prefix); on recurrent memory when its prefill has yet to reach ``n`` by two
        tokens or more and goes two beyond (``_stop_at_shares`` ends a chunk there)."""
        if not self.lane.slots.recurrent:
            return True
        start = other.share_len if other.state == "waiting" else other.n_past
        return start + 2 <= n and len(other.prompt) - n >= 2

    def _place(self, job: EngineSequence) -> None:
        """Start ``job`` from the longest prefix any sequence holds (its own, free, or a copy of another's), or
        from its marked prefix's saved state when that is longer."""
        assert job.slot is not None
        slots, dst = self.lane.slots, job.slot
        if self._restore(job, max(self._reusable(s.tokens, job) for s in slots.slots)):
            n = job.prefill.restored
        else:
            own = self._offered(dst, job)
            src, n = dst, own
            for s in slots.slots:
                m = self._offered(s, job) if s is not dst else 0
                if m > n:
                    src, n = s, m
            if src is not dst and n - own >= self.config.min_copy_gain:
                slots.copy(src, dst, n)
                slots.touch(src)
                self.counts["stream_copies"] += 1
            else:
                n = own
                slots.keep(dst, n)
        job.state, job.source, job.share_len = "prefill", None, 0
        job.n_past = job.prefill.reused = n
        cache = self.prefixes
        job.save = cache is not None and n < job.prefix and job.prompt[: job.prefix] not in cache
        log.debug("job %d on seq %d reuses %d of %d prompt tokens", job.index, dst.seq, n, len(job.prompt))

    def _restore(self, job: EngineSequence, have: int) -> bool:
        """Restore ``job``'s marked prefix from disk into its sequence, when it is saved and longer than the
        ``have`` tokens memory offers (and the rest of the prompt is computed as a whole prompt would be)."""
        assert job.slot is not None
        cache, dst, p = self.prefixes, job.slot, job.prefix
        if cache is None or p <= have or reuse_cap(p, len(job.prompt), self.config.n_batch) != p:
            return False
        if dst.seq in self.lane.slots.pending:  # a stream copy from it waits for the next decode call
            return False
        if not cache.load(self.lane.ctx, dst.seq, job.prompt[:p]):
            if self.lane.ctx.seq_pos_max(dst.seq) < 0:  # a state that did not load left the sequence empty
                dst.tokens = []
            return False
        dst.tokens = list(job.prompt[:p])
        job.prefill.restored = p
        return True

    def _resolve_waits(self) -> None:
        """Waiting jobs whose source has computed the shared prefix (or stopped) start from it."""
        for job in self.active:
            src = job.source
            if job.state == "waiting" and src is not None and (src.n_past >= job.share_len or src.state == "done"):
                self._place(job)

    def _sampler(self, job: EngineSequence) -> SequenceSampler:
        schema = job.params.json_schema
        grammar = self.grammars.new_sampler(schema) if schema is not None else None
        return SequenceSampler(self.model, job.params, grammar, job.seed)

    def _step(self) -> None:
        """One step: a decode call with a token (and its draft) of every generating job, then a call with the
        next prompt chunk of the oldest prefilling job. Two calls, not one, because llama.cpp would put the
        chunk's first token in a ubatch of one token per sequence (with the generating jobs), and a prompt token
        computed alone in the middle of a prompt differs in the last bits from the same token computed in a
        chunk (``tests/backends/llamacpp/test_engine.py`` checks that the replies equal one-at-a-time replies).

        With ``EngineConfig.prefill_first`` (the default) the decode call waits while a job computes its prompt:
        the jobs generating then decode together with it, in fewer and wider calls, once every prompt is in."""
        job = next((j for j in self.active if j.state == "prefill"), None)
        if job is None or not self.config.prefill_first:
            decoding = [j for j in self.active if j.state == "decode" and j.pending is not None]
            decoding.sort(key=lambda j: j.seq)
            if decoding:
                self.decoder.step(self.lane, decoding)
        if job is not None:
            self._prefill(job)

    def _prefill(self, job: EngineSequence) -> None:
        assert job.slot is not None
        batch, start = self.lane.batch, time.perf_counter()
        k = self._stop_at_shares(job, chunk_size(len(job.prompt), job.n_past, batch.capacity, self.config.n_batch))
        if job.save and job.n_past < job.prefix < job.n_past + k:
            # end the chunk at the prefix, to save its state alone (a chunk of one token would compute it
            # otherwise than the whole prompt does: then it is not saved)
            job.save = job.prefix - job.n_past >= 2
            k = job.prefix - job.n_past if job.save else k
        last = job.n_past + k == len(job.prompt)
        tokens = job.prompt[job.n_past : job.n_past + k]
        batch.clear()
        idx = batch.add(tokens, job.n_past, job.slot.seq, logits_last=last)
        if self._call([(job, tokens)]):
            job.prefill.computed += len(tokens)
            if job.save and job.n_past == job.prefix and self.prefixes is not None:
                job.save = False
                prefix = job.prompt[: job.prefix]
                self.counts["prefixes_saved"] += self.prefixes.save(self.lane.ctx, job.slot.seq, prefix)
            if last:
                seq = job.seq
                job.state, job.t_first = "decode", time.perf_counter()
                self._emit(job, self.decoder.sample(job, self.lane.ctx.logits(idx)))
                if job.state == "decode":  # a draft model computes the prompt too, in the prompt's time
                    self.speculator.prefill(seq, job.prompt)
        self.prefill_s += time.perf_counter() - start

    def _stop_at_shares(self, job: EngineSequence, k: int) -> int:
        """On recurrent memory, end ``job``'s next prompt chunk of ``k`` tokens where a job waiting for it shares
        its prompt up to, so that its state can be copied there (it exists at the last position only)."""
        if not self.lane.slots.recurrent:
            return k
        ends = sorted(w.share_len for w in self.active if w.state == "waiting" and w.source is job)
        # chunks of one token would compute those tokens otherwise than the whole prompt does (``reuse_cap``)
        end = next((e for e in ends if job.n_past + 2 <= e < job.n_past + k and len(job.prompt) - e >= 2), 0)
        return end - job.n_past if end else k

    def _call(self, plan: Plan) -> bool:
        """One ``llama_decode`` of the batch (``plan``: each job and its tokens in it); the sequences' records
        follow. False when it failed: then its jobs failed, and the others go on untouched."""
        lane = self.lane
        rc = lane.ctx.decode(lane.batch)
        lane.slots.pending.clear()  # the stream copies ran (or were dropped with a failed call)
        if rc != 0:
            # 1 (no room: cannot happen, a sequence has room for its job's prompt and reply), 2 (aborted) or
            # < 0: the jobs of this call fail and their sequences are cleared
            for job, _ in plan:
                self.fail(job, BackendError(f"llama_decode failed ({rc}) on {self.name}.", backend=self.name))
            return False
        self.counts["decode_calls"] += 1
        for job, tokens in plan:
            assert job.slot is not None
            job.slot.tokens.extend(tokens)
            job.n_past += len(tokens)
        self.counts["peak_cells"] = max(self.counts["peak_cells"], lane.slots.cells_used)
        return True

    # -- tokens and endings ------------------------------------------------------------------------------
    def _emit(self, job: EngineSequence, token: int) -> bool:
        """The job's next token: True when the reply goes on (it is then the pending token), False when it
        ended (end of generation, a stop string, the length limit, a grammar dead end)."""
        job.pending = None
        if token < 0:
            self.fail(job, BackendError("The grammar allows no next token.", backend=self.name))
            return False
        if self.model.is_eog(token):
            self._finish(job, "stop")
            return False
        job.generated.append(token)
        stopped = job.text.push(self.model.piece(token))
        if self.caller.on_token is not None:
            delta = job.text.delta()
            if delta:
                self.caller.on_token(job.index, delta)
        full = len(job.prompt) + len(job.generated) >= self.lane.slots.capacity
        job.looping = repeating(job.generated) if len(job.generated) >= REPEAT_MIN_ITEMS else 0
        if stopped:
            self._finish(job, "stop")
        elif (not job.text.holding and len(job.generated) >= job.max_new) or full or job.looping:
            self._finish(job, "length")
        else:
            job.pending = token
            return True
        return False

    def _finish(self, job: EngineSequence, reason: FinishReason, error: BaseException | None = None) -> None:
        now = time.perf_counter()
        if self.caller.on_token is not None and reason != "error":
            rest = job.text.flush()
            if rest:
                self.caller.on_token(job.index, rest)
        admitted = job.t_admit or now
        first = job.t_first or now
        stats: dict[str, Any] = {
            "prefill_computed": job.prefill.computed,
            "prefill_reused": job.prefill.reused,
            "prefill_restored": job.prefill.restored,
            "decode_tokens": len(job.generated),
            **job.speculation.drafts.to_dict(),
        }
        if job.looping:
            stats["looping"] = job.looping
        if self.caller.trace:
            stats.update(prompt_ids=list(job.prompt), token_ids=list(job.sampled))
        if job.params.logprobs > 0:
            stats["logprobs"] = [[list(pair) for pair in step] for step in job.logprobs[: len(job.generated) + 1]]
        job.result = ChatResult(
            text=job.text.text if reason != "error" else "",
            usage=Usage(len(job.prompt), len(job.generated), job.prefill.reused, calls=1, seconds=now - admitted),
            finish_reason=reason,
            timings=Timings(total_s=now - admitted, prefill_s=first - admitted, decode_s=now - first),
            model=self.name,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
            stats=stats,
            exception=error,
        )
        self._count(job, reason)
        self._release(job, keep_prompt=reason in ("stop", "length"))
        if self.caller.on_result is not None:
            self.caller.on_result(job.index, job.result)

    def fail(self, job: EngineSequence, error: BaseException) -> None:
        log.warning("job %d failed on %s: %s", job.index, self.name, error)
        if job in self.queue:
            self.queue.remove(job)
        self._finish(job, "error", error)

    def _count(self, job: EngineSequence, reason: FinishReason) -> None:
        c = self.counts
        c["jobs"] += 1
        c["failed"] += reason == "error"
        c["cancelled"] += reason == "cancelled"
        c["prefill_computed"] += job.prefill.computed
        c["prefill_reused"] += job.prefill.reused
        c["prefill_restored"] += job.prefill.restored
        c["decode_tokens"] += len(job.generated)
        c["drafted"] += job.speculation.drafts.total_drafted
        c["accepted"] += job.speculation.drafts.total_accepted
        if job.sampler is not None:
            c["full_grammar_passes"] += job.sampler.full_grammar_passes

    def _release(self, job: EngineSequence, *, keep_prompt: bool) -> None:
        """Free the job's sequence. After a reply it keeps the prompt (a cached prefix for later jobs); after an
        error or a cancellation it keeps nothing."""
        job.state = "done"
        if job.sampler is not None:
            job.sampler.close()
        slot = job.slot
        if slot is None:
            return
        self._resolve_waits()  # jobs waiting for this one copy what it has first
        # drafters learn from a reply, not from an error or a cancelled one
        self.speculator.finish(slot.seq, [*job.prompt, *job.generated] if keep_prompt else job.prompt, len(job.prompt))
        slots = self.lane.slots
        slots.keep(slot, len(job.prompt) if keep_prompt and self.config.share_prefixes else 0)
        slots.touch(slot)
        slot.job = None
        job.slot = None
        self.active.remove(job)

    def abandon(self) -> None:
        """Leave the run where it is: every job in flight frees its sequence and its sampler."""
        for job in list(self.active):
            self._release(job, keep_prompt=False)
        self.queue.clear()

    def _cancel_all(self) -> None:
        for job in [*self.active, *self.queue]:
            self._finish(job, "cancelled")
        self.queue.clear()

    def stats(self) -> BatchStats:
        steps = self.decoder.counts
        return BatchStats(
            **self.counts,
            decode_steps=steps.decode_steps,
            verify_tokens=steps.verify_tokens,
            filler_tokens=steps.filler_tokens,
            rollbacks=steps.rollbacks,
            redo_tokens=steps.redo_tokens,
            depths=dict(sorted(steps.depths.items())),
            seconds=time.perf_counter() - self.started,
            prefill_s=self.prefill_s,
            decode_s=steps.decode_s,
        )


def reuse_cap(shared: int, n: int, n_batch: int) -> int:
    """How many of a prompt's ``n`` tokens to take from KV memory when ``shared`` are there.

    The rest is computed in chunks that match, token for token, how ``Llama.eval`` computes a whole prompt
    (chunks of ``n_batch`` from position 0): a token computed in a chunk of one token gets slightly different
    keys and values than in a longer chunk, so a one-token chunk is allowed only where ``Llama.eval`` has one,
    the last token when ``n % n_batch == 1``. At least the last token is always computed: its logits start
    the reply."""
    if n % n_batch == 1:
        k = min(shared, n - 1)
        return n - 3 if k == n - 2 else k  # never leave [n-2] as a chunk of one
    return min(shared, n - 2)


def chunk_size(n: int, done: int, budget: int, n_batch: int) -> int:
    """The next prompt chunk's size (``done`` of ``n`` computed), under the same rule as ``reuse_cap``."""
    left = n - done
    if n % n_batch == 1:
        if left == 1:
            return 1
        k = min(left - 1, budget)  # the last token goes alone, as in Llama.eval
        return k - 1 if left - 1 - k == 1 else k
    k = min(left, budget)
    return k - 1 if left - k == 1 else k
