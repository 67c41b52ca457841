"""The decode loop: prefill, then verify steps over token trees until an end, a stop or the token limit.

Plain decoding is the same loop with trees of only the root; chain speculation limits every node to one child.
Drafts come from the job's own text (``speculation.drafters.ContextIndex``) or a draft model
(``speculation.drafters.DraftTrees``), their shape from measured acceptance and cost (``speculation.depth.shape_tree``);
the target's own choices accept them (``speculation.tree.accept``). ``Chooser`` picks the target's token at each
node: greedy or sampled, masked by a JSON schema's grammar when there is one, recording top log-probabilities
when asked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from minions.errors import ConfigError

from ..speculation.depth import Acceptance, Calibration, CostCurve, shape_tree, time_rounds
from ..speculation.drafters import ContextIndex, DraftTrees
from ..speculation.speculator import DraftStats
from ..speculation.tree import STRONG_MATCH, TokenTree, accept
from .hybrid import AttentionState, StateKeeper
from .tree import keep_path, verify

__all__ = [
    "Chooser",
    "DecodeState",
    "Decoded",
    "JsonGrammar",
    "Mode",
    "SpecConfig",
    "Speculation",
    "decode",
    "generate",
    "measure_cost",
]

Mode = Literal["plain", "chain", "tree"]
FORCED_SUPPORT = 1e6
"""A grammar's forced tokens outrank any context draft."""


@dataclass(frozen=True, slots=True)
class SpecConfig:
    mode: Mode = "tree"
    max_nodes: int = 48
    """Drafted nodes per verify step at most (the cost curve usually picks fewer)."""
    k_max: int = 16
    """The longest draft path verified in one step (deeper than the llama.cpp engine's ``speculation.K_MAX``: a
    forward over many more tokens costs PyTorch on a CPU little more than over one)."""
    width: int = 4
    """Children per node in tree mode (chain mode uses 1)."""
    draft: bool = True
    """Draft with the backend's draft model when it has one (``speculation.drafters.DraftTrees``), else from the job's
    text."""


class Speculation:
    """What speculation learns across the jobs of one backend: acceptance by depth and rank, and T(n)."""

    def __init__(self, config: SpecConfig, cost: CostCurve) -> None:
        self.config, self.cost = config, cost
        width = 1 if config.mode == "chain" else config.width
        self.width = width
        self.acceptance = Acceptance(config.k_max, 2 * width)  # strong matches' ranks, then weak ones'
        self.calibration = Calibration()
        """How the draft model's probabilities turn out (trees drafted by a model)."""


@dataclass(slots=True)
class Decoded:
    tokens: list[int]
    """Generated ids, without the end token."""
    finish: Literal["stop", "length"]
    prefill_s: float = 0.0
    decode_s: float = 0.0
    drafts: DraftStats = field(default_factory=DraftStats)
    """Verify steps (one forward pass after the prefill each), drafted and accepted tokens."""


class JsonGrammar:
    """A JSON schema as a token mask (llguidance): ``mask`` the logits, then ``consume`` the chosen token."""

    def __init__(self, tokenizer: Any, schema: Mapping[str, Any]) -> None:
        import llguidance
        import llguidance.torch as llt

        self._llt = llt
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults={"whitespace_flexible": False}
        )
        self.matcher = llguidance.LLMatcher(tokenizer, grammar)
        if self.matcher.is_error():
            raise ConfigError(f"The JSON schema cannot be enforced: {self.matcher.get_error()}. Simplify the schema.")
        self.bitmask = llt.allocate_token_bitmask(1, tokenizer.vocab_size)
        self.vocab_size = tokenizer.vocab_size

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        self._llt.fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        logits = logits[: self.vocab_size].clone()
        self._llt.apply_token_bitmask_inplace(logits, self.bitmask[0])
        return logits

    def forced(self) -> list[int]:
        """The tokens the schema forces next (a key, its quotes and colon): drafts the target must accept."""
        return list(self.matcher.compute_ff_tokens())

    def consume(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused a token it allowed: {self.matcher.get_error()}")


class Chooser:
    """The target's token at a node: argmax at temperature 0, else a sample (top-p), under the grammar."""

    def __init__(
        self,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        grammar: JsonGrammar | None = None,
        logprobs: int = 0,
    ) -> None:
        self.temperature, self.top_p, self.grammar, self.logprobs = temperature, top_p, grammar, logprobs
        self.generator = torch.Generator().manual_seed(seed if seed is not None else 0)
        if seed is None:
            self.generator.seed()
        self.top: list[list[tuple[int, float]]] = []
        """Per chosen token, the ``logprobs`` most likely ids and their log-probabilities (unmasked)."""

    def __call__(self, node: int, logits: torch.Tensor) -> int:
        if self.logprobs:
            lp = torch.log_softmax(logits, -1)
            values, ids = lp.topk(self.logprobs)
            self.top.append([(int(i), float(v)) for i, v in zip(ids, values, strict=True)])
        if self.grammar is not None:
            logits = self.grammar.mask(logits)
        token = self._pick(logits)
        if self.grammar is not None:
            self.grammar.consume(token)
        return token

    def _pick(self, logits: torch.Tensor) -> int:
        if self.temperature <= 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / self.temperature, -1)
        if self.top_p < 1.0:
            # keep the most likely tokens whose mass reaches top_p (the first always stays)
            sorted_p, order = probs.sort(descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p >= self.top_p
            sorted_p[drop] = 0.0
            probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
        return int(torch.multinomial(probs, 1, generator=self.generator))


@dataclass
class DecodeState:
    """One reply being decoded: its text so far, its drafts, and what it emitted. ``generate`` drives one job;
    ``batched.generate_batch`` drives several through one forward pass per step."""

    prompt: Sequence[int]
    max_new: int
    choose: Callable[[int, torch.Tensor], int]
    is_end: Callable[[int], bool]
    should_stop: Callable[[Sequence[int]], bool] | None = None
    forced: Callable[[], list[int]] | None = None
    out: Decoded = field(default_factory=lambda: Decoded(tokens=[], finish="length"))
    context: list[int] = field(default_factory=list)
    index: ContextIndex = field(default_factory=ContextIndex)
    done: bool = False

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError("generate needs at least one prompt token")
        self.context = list(self.prompt)
        self.done = self.max_new <= 0

    @property
    def root(self) -> int:
        """The last emitted token (or the prompt's last): the next tree's root, not yet in the cache."""
        return self.context[-1]

    def tree(
        self, spec: Speculation | None, width: int, drafter: DraftTrees | None
    ) -> tuple[TokenTree, list[int], list[float]]:
        """The next tree to verify, each node's rank and draft probability (``spec=None``: the root alone)."""
        if spec is None:
            return TokenTree.chain(self.root), [0], [1.0]
        depth = min(spec.config.k_max, self.max_new - len(self.out.tokens) - 1)
        must = self.forced()[:depth] if self.forced is not None and depth > 0 else []
        if drafter is not None:
            return drafter.tree(self.context, must, spec.cost, spec.calibration, depth=depth, width=width,
                                max_nodes=spec.config.max_nodes)  # fmt: skip
        trie = self.index.drafts(self.context, depth)
        if must:
            trie.add(must, FORCED_SUPPORT, STRONG_MATCH)
        tree, ranks, _ = shape_tree(self.root, trie, spec.acceptance, spec.cost,
                                    max_nodes=spec.config.max_nodes, width=width)  # fmt: skip
        return tree, ranks, [1.0] * len(tree)

    def accept(self, tree: TokenTree, logits: torch.Tensor) -> tuple[list[int], list[int]]:
        """The target's accepted path through ``tree`` (its ``logits``, ``[n, V]``) and the tokens it emits
        (``speculation.tree.accept``; an end token ends the walk)."""
        return accept(tree, lambda node: self.choose(node, logits[node]), lambda token: not self.is_end(token))

    def emit(self, tree: TokenTree, path: Sequence[int], emitted: Sequence[int], drafter: str = "context") -> None:
        """Count the step and emit ``emitted`` (but an end token); ``done`` when the reply ended."""
        out = self.out
        out.drafts.record(drafter, len(tree) - 1, len(path) - 1, len(emitted))
        ended = self.is_end(emitted[-1])
        emitted = emitted[:-1] if ended else emitted
        # token by token, as plain decoding checks: a stop (a loop, a stop string) inside the accepted drafts
        # ends the reply where plain decoding would have ended it
        stopped = False
        for token in emitted[: self.max_new - len(out.tokens)]:
            out.tokens.append(token)
            if self.should_stop is not None and self.should_stop(out.tokens):
                stopped = True
                break
        if stopped or ended:  # as plain decoding: an end right after the limit is not seen, the finish is "length"
            out.finish = "stop" if stopped or len(out.tokens) < self.max_new else "length"
            self.done = True
            return
        self.context.extend(emitted)
        self.done = len(out.tokens) >= self.max_new


def active(speculation: Speculation | None) -> Speculation | None:
    """The speculation a decode loop uses: None for plain decoding."""
    return speculation if speculation is not None and speculation.config.mode != "plain" else None


def generate(
    model: Any,
    cache: Any,
    prompt: Sequence[int],
    *,
    max_new: int,
    choose: Callable[[int, torch.Tensor], int],
    is_end: Callable[[int], bool],
    speculation: Speculation | None = None,
    should_stop: Callable[[Sequence[int]], bool] | None = None,
    keeper: StateKeeper | None = None,
    forced: Callable[[], list[int]] | None = None,
    drafter: DraftTrees | None = None,
) -> Decoded:
    """Decode after ``prompt`` into an empty ``cache``; ``speculation=None`` (or mode plain) decodes plainly.

    ``keeper`` keeps the accepted path's state after each verify step (``hybrid.state_keeper(model)``; default:
    attention KV only). ``forced()``: tokens a grammar forces next, drafted ahead of the other guesses.
    ``drafter``: a draft model whose trees replace the context's drafts when ``speculation.config.draft``.
    """
    job = DecodeState(prompt, max_new, choose, is_end, should_stop, forced)
    return decode(model, cache, job, speculation=speculation, keeper=keeper, drafter=drafter)


def decode(
    model: Any,
    cache: Any,
    job: DecodeState,
    *,
    speculation: Speculation | None = None,
    keeper: StateKeeper | None = None,
    drafter: DraftTrees | None = None,
) -> Decoded:
    """``generate`` for a job already made (``TransformersBackend`` makes one per request); fills in ``job.out``."""
    keeper = keeper or AttentionState()
    prompt = job.prompt
    spec = active(speculation)
    drafter = drafter if spec is not None and spec.config.draft else None
    start = time.perf_counter()
    if len(prompt) > 1:  # the last prompt token is the first tree's root
        with torch.inference_mode():
            model(input_ids=torch.tensor([list(prompt[:-1])], device=model.device), cache=cache, use_cache=True)
        if drafter is not None:
            drafter.prefill(prompt)
    job.out.prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    past = len(prompt) - 1
    width = (spec.width if keeper.branching else 1) if spec is not None else 1
    while not job.done:
        tree, ranks, probs = job.tree(spec, width, drafter)
        keeper.before(cache)
        logits = verify(model, cache, tree, past)  # [n, V]
        path, emitted = job.accept(tree, logits)
        if spec is not None:
            spec.acceptance.record(tree, ranks, path)
            if drafter is not None:
                spec.calibration.record(tree, ranks, probs, path)
        keeper.commit(model, cache, past, tree, path)
        past += len(path)
        job.emit(tree, path, emitted, "context" if drafter is None else "draft_model")
    job.out.decode_s = time.perf_counter() - start
    return job.out


def measure_cost(
    model: Any,
    new_cache: Callable[[], Any],
    *,
    past: int = 512,
    sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    repeats: int = 3,
) -> CostCurve:
    """T(n): the fastest of ``repeats`` verify forwards over ``n`` chained tokens after ``past`` cached tokens
    (``speculation.depth.time_rounds``: in rounds over all sizes, after one that warms up every shape); the
    fastest, since other work on the machine only ever adds time."""
    vocab = int(model.config.vocab_size)
    ids = [(7 * i + 3) % vocab for i in range(past + max(sizes))]
    cache = new_cache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids[:past]], device=model.device), cache=cache, use_cache=True)

    def forward(n: int) -> float:
        tree = TokenTree.chain(ids[past], ids[past + 1 : past + n])
        start = time.perf_counter()
        verify(model, cache, tree, past)
        seconds = time.perf_counter() - start
        keep_path(cache, past, [])
        return seconds

    times = time_rounds(sizes, forward, repeats=repeats)
    return CostCurve.measured(sizes, [min(times[n]) for n in sizes])
