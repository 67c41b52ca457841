"""One job of an engine run as the engine holds it (``EngineSequence``): its request, where it is, what its prompt
cost, what it emitted, and its speculation's bookkeeping.

The scheduler (``backends.llamacpp.scheduler``) moves a sequence through its phases; a decode step
(``backends.llamacpp.step``) drafts, verifies and rolls back its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from minions.types import ChatResult, SamplingParams

from ..speculation.speculator import DraftStats
from .sampling import SequenceSampler, TextStream
from .slots import Slot

__all__ = ["UTF8_SLACK", "EngineSequence", "PrefillCounts", "SequencePhase", "SpeculationState"]

# Tokens a job may run past max_tokens: generation goes on while the text ends inside a UTF-8 character.
UTF8_SLACK = 4

SequencePhase = Literal["queued", "waiting", "prefill", "decode", "done"]
"""Where an ``EngineSequence`` is: queued -> (waiting for the job computing its shared prefix ->) prefill ->
decode -> done."""


@dataclass(eq=False)
class PrefillCounts:
    """How a job's prompt came to be in its sequence (``BatchStats``' ``prefill_*`` fields, for one job)."""

    reused: int = 0
    """Prompt tokens taken from KV memory (a sequence's, or a saved state's)."""
    computed: int = 0
    """Prompt tokens that ran through the model."""
    restored: int = 0
    """Of ``reused``, the tokens whose state was restored from disk."""


@dataclass(eq=False)
class SpeculationState:
    """A generating job's speculation: what its drafts gave, and on recurrent memory how it goes back after a
    rejected draft."""

    drafts: DraftStats = field(default_factory=DraftStats)
    checkpoint: tuple[int, bytes] | None = None
    """Recurrent memory: the position and the recurrent state of the sequence before its verify call."""
    redo: list[int] = field(default_factory=list)
    """Recurrent memory: confirmed tokens to compute again (before the pending one) after a rollback."""


@dataclass(eq=False)
class EngineSequence:
    """One job of a run as the engine holds it: its prompt, its llama.cpp sequence (``slot``) and what it emitted.
    (A protocol's job is ``minions.protocols.evidence.jobs.Job``; this is the engine's.)"""

    index: int
    prompt: list[int]
    params: SamplingParams
    seed: int
    max_new: int = 0
    state: SequencePhase = "queued"
    slot: Slot | None = None
    n_past: int = 0
    source: EngineSequence | None = None
    """While ``waiting``: the job computing the prompt prefix this one shares (its first ``share_len`` tokens)."""
    share_len: int = 0
    prefix: int = 0
    """Tokens of the marked prefix (``ChatRequest.prefix``) worth keeping on disk; 0: none."""
    save: bool = False
    """Save the prefix's state once it is computed."""
    prefill: PrefillCounts = field(default_factory=PrefillCounts)
    generated: list[int] = field(default_factory=list)
    sampled: list[int] = field(default_factory=list)
    logprobs: list[list[tuple[str, float]]] = field(default_factory=list)
    looping: int = 0
    """The period of the loop the reply was cut in (``minions.loops.repeating``); 0 when it was not."""
    pending: int | None = None
    """The token emitted last and not yet computed: the next decode call's first for this job."""
    sampler: SequenceSampler | None = None
    text: TextStream = field(default_factory=lambda: TextStream(()))
    speculation: SpeculationState = field(default_factory=SpeculationState)
    t_admit: float = 0.0
    t_first: float = 0.0
    result: ChatResult | None = None

    @property
    def need(self) -> int:
        """KV cells the job may fill: its prompt and its whole reply."""
        return len(self.prompt) + self.max_new + UTF8_SLACK

    @property
    def seq(self) -> int:
        """The id of the llama.cpp sequence the job runs in (it must hold one)."""
        assert self.slot is not None
        return self.slot.seq
