"""One decode step of a run's generating jobs, speculative where the speculator drafts: draft, fill, call, verify,
roll back.

Every generating job has a pending token: emitted, not yet computed. A step asks the speculator for a draft of
what may follow it (``backends.speculation``), puts ``[pending, d_1 .. d_k]`` of every job in one ``llama_decode``
call with the logits after each token, and lets each job's own sampler confirm the draft token by token
(``speculation.tree.accept`` over the chain): it keeps what its sampler picks, up to and including the first
token that differs from the draft, so the reply is plain decoding's, for greedy and seeded sampling alike. The
cells of the rejected draft tokens go (``rollback``). With no draft (``NO_DRAFT``) a step is plain decoding: one
token of every job.

The scheduler (``backends.llamacpp.scheduler``) gives a step its jobs, the call and what a new token does to a job
(``Decoder``'s ``call`` and ``emit``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..speculation.depth import fillers
from ..speculation.speculator import NO_DRAFT, Draft, Speculator
from ..speculation.tree import TokenTree, accept
from .ffi import LlamaModel
from .sequence import EngineSequence
from .slots import Lane, Slot

__all__ = ["Decoder", "Plan", "StepCounts", "draft", "fill", "filler_slots", "rollback", "top_logprobs"]

Plan = list[tuple[EngineSequence, list[int]]]
"""A decode call's batch: each job and its tokens in it."""


@dataclass(eq=False, slots=True)
class StepCounts:
    """What a run's decode steps did (the ``BatchStats`` fields of these names)."""

    decode_steps: int = 0
    verify_tokens: int = 0
    filler_tokens: int = 0
    rollbacks: int = 0
    redo_tokens: int = 0
    depths: dict[int, int] = field(default_factory=dict)
    decode_s: float = 0.0


class Decoder:
    """The decode steps of one run. ``call`` runs a batch (False when it failed: its jobs failed); ``emit`` gives a
    job its next token (False when the reply ended)."""

    def __init__(
        self,
        model: LlamaModel,
        speculator: Speculator,
        *,
        call: Callable[[Plan], bool],
        emit: Callable[[EngineSequence, int], bool],
    ) -> None:
        self.model = model
        self.speculator = speculator
        """Drafts for each step (``speculation.NullSpeculator`` never drafts: plain decoding)."""
        self.call = call
        self.emit = emit
        self.counts = StepCounts()
        self.sample_s = 0.0
        """Time in the samplers (a grammar's masking can take longer than the call): see ``step``."""

    def step(self, lane: Lane, jobs: list[EngineSequence]) -> None:
        """One decode step of every generating job (in the order of their sequence ids): plan the drafts, run the
        call (each job's pending token and its draft, ``[pending, d_1 .. d_k]``, with the logits after each), apply
        the rule (each job keeps what its own sampler confirms: ``_verify``), report to the speculator."""
        start, counts = time.perf_counter(), self.counts
        drafting = self.speculator.drafting(len(jobs))  # the speculator's speed gate may make this step plain
        drafts = draft(self.speculator, lane, jobs) if drafting else [NO_DRAFT] * len(jobs)
        plan, rows, filled = fill(lane, jobs, drafts)
        for d in drafts:
            counts.depths[len(d.tokens)] = counts.depths.get(len(d.tokens), 0) + 1
        called = time.perf_counter()
        ok = self.call(plan)
        for slot in filled:  # the fillers' cells go; the slot keeps the prompt it held
            lane.ctx.seq_rm(slot.seq, len(slot.tokens), -1)
        if ok:
            self.speculator.observe_call([len(tokens) for _, tokens in plan], time.perf_counter() - called,
                                         [job.seq for job, _ in plan])  # fmt: skip
            counts.decode_steps += 1
            verified = sum(len(tokens) for _, tokens in plan)
            counts.verify_tokens += verified
            counts.filler_tokens += lane.batch.n - verified
            before, sampling = sum(job.speculation.drafts.emitted for job in jobs), self.sample_s
            for (job, _), d, row in zip(plan, drafts, rows, strict=True):
                self._verify(lane, job, d, row)
            # The whole step, drafting, verifying and rolling back included, but not the sampling: a step samples
            # once per emitted token whether it speculated or not (a verify stops at the first mismatch), and a
            # grammar's masking, slow inside JSON's punctuation and fast inside a quoted string, would otherwise
            # make the speed gate compare the phases of a reply, not the two ways. A step that could draft but
            # whose drafts were all cut to nothing tested no speculation: it is neither a speculative step (the
            # gate would judge drafting by steps that verified no draft, and back off from it) nor a plain one (its
            # drafters ran), unless a draft model drafted for it: that time was spent on speculation.
            verified = any(d.tokens for d in drafts) or (drafting and self.speculator.paid)
            if verified or not drafting:
                emitted = sum(job.speculation.drafts.emitted for job in jobs) - before
                seconds = time.perf_counter() - start - (self.sample_s - sampling)
                self.speculator.observe_step(len(jobs), emitted, seconds, drafted=verified)
        counts.decode_s += time.perf_counter() - start

    def sample(self, job: EngineSequence, logits: npt.NDArray[np.float32]) -> int:
        """The token the job's own sampler picks from ``logits`` (recorded, with its log-probabilities if asked)."""
        assert job.sampler is not None
        start = time.perf_counter()
        token = job.sampler.sample(logits)
        self.sample_s += time.perf_counter() - start
        job.sampled.append(token)
        if job.params.logprobs > 0:
            job.logprobs.append(top_logprobs(self.model, logits, job.params.logprobs))
        return token

    def _verify(self, lane: Lane, job: EngineSequence, d: Draft, row: int) -> None:
        """Emit the job's own sampler's tokens while they equal the draft (``speculation.tree.accept`` over the
        chain ``[pending, d_1 .. d_k]``, whose node ``i`` has its logits at ``row + i``: lossless for greedy and
        seeded sampling alike), then drop the cells of the rejected draft tokens."""
        logits, seq = lane.ctx.logits, job.seq
        n_held = job.n_past - len(d.tokens)  # the cells that hold confirmed tokens: up to the pending one
        assert job.pending is not None
        path, emitted = accept(TokenTree.chain(job.pending, d.tokens), lambda i: self.sample(job, logits(row + i)),
                               lambda token: self.emit(job, token))  # fmt: skip
        accepted = len(path) - 1
        job.speculation.drafts.record(d.drafter, len(d.tokens), accepted, len(emitted))
        self.speculator.learn(seq, d, emitted, ended=job.state != "decode")
        if job.state == "decode" and accepted < len(d.tokens):
            assert job.slot is not None
            if rollback(lane, job, n_held + accepted):
                self.counts.rollbacks += 1
                self.counts.redo_tokens += len(job.speculation.redo)
        job.speculation.checkpoint = None


def draft(speculator: Speculator, lane: Lane, jobs: list[EngineSequence]) -> list[Draft]:
    """Each job's draft, as long as the speculator finds worth it and no longer than fits: the call (every job's
    share of the batch), the job's sequence, and what is left of its reply."""
    share = lane.batch.capacity // len(jobs) - 1  # every draft fits the call
    return speculator.propose([
        (j.seq, [*j.prompt, *j.generated],
         min(share - len(j.speculation.redo), lane.slots.capacity - j.n_past - len(j.speculation.redo) - 1,
             j.max_new - len(j.generated)))
        for j in jobs
    ], carried=[1 + len(j.speculation.redo) for j in jobs])  # fmt: skip


def fill(lane: Lane, jobs: list[EngineSequence], drafts: list[Draft]) -> tuple[Plan, list[int], list[Slot]]:
    """The decode call's batch: each job's tokens (``plan``: on recurrent memory the confirmed tokens to compute
    again, then ``[pending, d_1 .. d_k]``), the row of its pending token's logits, and the free slots between the
    jobs' that carry fillers (``filler_slots``)."""
    batch = lane.batch
    batch.clear()
    plan, rows = [], []
    for job, d in zip(jobs, drafts, strict=True):
        assert job.pending is not None
        if d.tokens and lane.slots.recurrent:  # the state to go back to if a draft token is wrong
            job.speculation.checkpoint = (job.n_past, lane.ctx.recurrent_state(job.seq))
        plan.append((job, [*job.speculation.redo, job.pending, *d.tokens]))
        job.speculation.redo = []
    filled = filler_slots(lane, plan)
    gaps = {slot.seq: slot for slot in filled}  # every id between the jobs' when any (``fillers``)
    previous = None
    for (job, tokens), d in zip(plan, drafts, strict=True):
        if gaps and previous is not None:  # in the order of the ids: the fillers before this job's sequence
            for seq in range(previous + 1, job.seq):
                batch.add(tokens, len(gaps[seq].tokens), seq, logits_last=False)
        previous = job.seq
        last = batch.add(tokens, job.n_past, job.seq, logits_last=True)
        batch.want[last - len(d.tokens) : last + 1] = 1  # logits after each token
        rows.append(last - len(d.tokens))
    return plan, rows, filled


def filler_slots(lane: Lane, plan: Plan) -> list[Slot]:
    """The free slots between the call's sequences that carry copies of their neighbours' tokens after what they
    hold, so that llama.cpp runs the call as one ubatch (``speculation.depth.fillers``: where that is cheaper, as
    ``CallCost`` prices it). Not on recurrent memory, whose state cannot drop the fillers, nor on a slot without
    room or with a stream copy pending; then none."""
    slots = lane.slots
    if slots.recurrent:
        return []
    gaps = fillers([len(tokens) for _, tokens in plan], [job.seq for job, _ in plan])
    n = len(plan[0][1]) if plan else 0
    filled = [slots.slots[seq] for seq in gaps]
    if any(s.job is not None or s.seq in slots.pending or len(s.tokens) + n > slots.capacity for s in filled):
        return []
    if len(plan) + len(filled) > lane.batch.capacity // max(1, n):
        return []
    return filled


def rollback(lane: Lane, job: EngineSequence, n: int) -> bool:
    """Keep the first ``n`` positions of the job's sequence. Attention cells just go. Recurrent memory goes back to
    its checkpoint from before the verify call, and the confirmed tokens of that call are computed again at the
    start of the job's next one (one call, not two: they only add tokens to a call that happens anyway): then
    True, and the job's ``speculation.redo`` holds them."""
    slot, checkpoint = job.slot, job.speculation.checkpoint
    assert slot is not None
    if checkpoint is None:
        job.n_past = n
        lane.slots.keep(slot, n)  # the rejected drafts' cells go
        return False
    start, state = checkpoint
    lane.ctx.restore_recurrent_state(slot.seq, state)
    lane.ctx.seq_rm(slot.seq, start, -1)  # the state is at start - 1 again: only attention cells go
    job.speculation.redo = slot.tokens[start:n]
    del slot.tokens[start:]
    job.n_past = start
    return True


def top_logprobs(model: LlamaModel, logits: npt.NDArray[np.float32], n: int) -> list[tuple[str, float]]:
    """The ``n`` most likely tokens under ``logits`` (before any grammar or temperature), as (text as it would
    appear in the reply, log p)."""
    top = np.argpartition(logits, -n)[-n:]
    top = top[np.argsort(-logits[top])]
    peak = float(logits.max())
    log_total = peak + float(np.log(np.exp(logits.astype(np.float64) - peak).sum()))
    return [(model.piece(int(t)).decode("utf-8", errors="replace"), float(logits[t]) - log_total) for t in top]
