"""A closed question answered on the evidence: the local model chooses one of the answers it allows.

A question with a closed set of answers (``protocols.choices``: yes/no, yes/no/maybe, lettered options) gets one of
them, chosen by the local model from the best quotes its reading found, then the quote that supports it:

    prompt   the quotes (``CHOICE_QUOTES``, best first), the question, the options (``prompts/choose*.j2``); the
             quotes are the prefix every ask of the question shares, so a local engine computes them once
    scores   where the backend reports log-probabilities: the reply is started ("The answer is") and the next
             token's distribution over the options' names (" B", " Yes") scores them all at once
    schema   elsewhere (or ``choose="schema"``): a JSON schema allows only the options' names, decoded greedily
    orders   every question is asked twice, the options as given and turned by one place; the two distributions
             take the places' own pull out of the options' scores (``_unbiased``: SmolLM2-135M names the last letter
             of BAMBOO's options, and the answer offered first, whatever they say)
    prior    by scores, the two asks are made again on no evidence (``NO_EVIDENCE``): an option's score is what the
             quotes add to it (SmolLM2 leans to "No" on any question; contextual calibration, Zhao et al. 2021)
    meaning  lettered options (what each says is its text, not its name), for a model too small to write its
             answer (``written.answer_mode``), where an embedding model runs on this device
             (``RunContext.embedder``): each option scores its closeness in meaning to the quotes (its vector's
             best cosine to theirs), and the closest is picked; the language model's letters are not asked. On
             BAMBOO PaperQA SmolLM2-135M's letters, their pull taken out, were right less often than chance
             (docs/local-reading.md). Closeness tells what an option is about, not whether it says "rose" or
             "fell": options that differ by one word are not told apart
    unsure   the best option's probability (by scores) or closeness (by meaning) within
             ``RunOptions.unsure_margin`` of the next, or the two orders picking two options (by schema): the answer
             says it is not sure instead of guessing

``RunResult.reading["choice"]`` says what happened (an evaluation scores an abstention as wrong and counts it)::

    {"options": ["Yes", "No"], "by": "scores", "picks": [0, 0], "probabilities": [0.71, 0.29],
     "picked": 0, "abstained": False}

(by meaning, ``"closeness"``: each option's cosine, and no picks or probabilities)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minions.backends.address import on_this_device
from minions.backends.embeddings import Embedder
from minions.errors import BackendError
from minions.types import ChatRequest, ChatResult, Message, PromptPrefix, SamplingParams

from ..channel import priced
from ..choices import Choices
from ..context import RunContext
from ..parsing import extract_json
from ..prompts import render
from ..result import Citation
from .citations import place
from .jobs import SCORE_REPLY_TOKENS, SCORE_STOP, SCORE_TOP_TOKENS, answer_step
from .written import answer_mode

__all__ = ["CHOICE_QUOTES", "Choice", "by_meaning", "choice_answer", "choice_requests", "choose", "option_logprobs"]

log = logging.getLogger(__name__)

CHOICE_QUOTES = 3
"""Quotes (best first) the model reads before it chooses: the answer's sentence is most often the first."""
SCHEMA_REPLY_TOKENS = 24
NO_EVIDENCE = "(nothing)"
"""The quote of the asks that measure what the model answers on no evidence (``_combine``)."""


@dataclass(frozen=True)
class Choice:
    """The model's choice among ``choices``' options: ``picked`` (None: not sure), by "scores", "schema" or
    "meaning", the pick of each ask (options listed as given, then turned), the probabilities (by scores) and each
    option's closeness in meaning to the quotes (by meaning)."""

    choices: Choices
    by: str
    picks: tuple[int | None, ...]
    probabilities: tuple[float, ...] | None
    picked: int | None
    closeness: tuple[float, ...] | None = None

    @property
    def abstained(self) -> bool:
        return self.picked is None

    def to_dict(self) -> dict[str, Any]:
        probabilities = [round(p, 4) for p in self.probabilities] if self.probabilities is not None else None
        out = {"options": list(self.choices.options), "lettered": self.choices.lettered, "by": self.by,
               "picks": list(self.picks), "probabilities": probabilities, "picked": self.picked,
               "abstained": self.abstained}  # fmt: skip
        if self.closeness is not None:
            out["closeness"] = [round(c, 4) for c in self.closeness]
        return out

    @property
    def ranked(self) -> list[int]:
        """The options, the likeliest (or closest) first (not for a choice by schema, which scores none)."""
        scores = self.probabilities if self.probabilities is not None else self.closeness
        assert scores is not None, "a choice by schema ranks no options"
        return sorted(range(len(scores)), key=lambda i: -scores[i])


def orders(choices: Choices) -> list[list[int]]:
    """The orders the options are listed in: as given, then turned by one place (the second ask's first option is
    the first ask's second: ``_unbiased``); one order for one option."""
    given = list(range(len(choices.options)))
    return [given, given[1:] + given[:1]] if len(given) > 1 else [given]


def choice_requests(question: str, choices: Choices, quotes: Sequence[str], *, scored: bool) -> list[ChatRequest]:
    """One request per order (``orders``): the quotes first (the prefix they share), then the question and the
    options in that order. ``scored``: the reply is started, and its next token's log-probabilities come back;
    else a JSON schema allows only the options' names."""
    system = render("choose_system", lettered=choices.lettered)
    evidence = render("choose", quotes=list(quotes))
    names = choices.names
    requests = []
    for order in orders(choices):
        listed = choices.listing(order)
        said = [name for name, _ in listed]
        answers = f"{', '.join(said[:-1])} or {said[-1]}" if len(said) > 1 else said[0]
        ask = render("choose_question", question=question, lettered=choices.lettered, options=listed, answers=answers)
        messages = [Message("system", system), Message("user", f"{evidence}\n\n{ask}")]
        if scored:
            messages.append(Message("assistant", render("choose_reply")))
            params = SamplingParams(max_tokens=SCORE_REPLY_TOKENS, stop=SCORE_STOP, logprobs=SCORE_TOP_TOKENS)
        else:
            schema = {"type": "object", "properties": {"answer": {"enum": list(names)}}, "required": ["answer"]}
            params = SamplingParams(max_tokens=SCHEMA_REPLY_TOKENS, json_schema=schema)
        requests.append(ChatRequest(messages, params, prefix=PromptPrefix(1, len(evidence))))
    return requests


def _key(token: object) -> str:
    return str(token).strip().lstrip("[(\"'*").rstrip("]).:,\"'*")


def _named(token: object, names: Sequence[str], lettered: bool) -> int | None:
    """The index of the name ``token`` spells: a letter exactly (in capitals: "a" is a word), a word in any case
    or its first letters where no other name starts so ("Ye", "N")."""
    key = _key(token)
    if not key:
        return None
    if lettered:
        return names.index(key) if key in names else None
    found = [i for i, name in enumerate(names) if name.lower().startswith(key.lower())]
    return found[0] if len(found) == 1 else None


def option_logprobs(result: ChatResult, names: Sequence[str], lettered: bool) -> list[float] | None:
    """The log-probability of each name (in ``names``' order) at the reply token that names the answer, its
    spellings (" Yes", "Yes", "yes") added up; a name outside the reported alternatives counts just below the least
    likely of them. None where the backend reported none."""
    steps = result.stats.get("logprobs") if result.ok else None
    if not steps or not steps[0]:
        return None
    step = answer_step(steps, render("choose_reply"), lambda token: _named(token, names, lettered) is not None)
    pooled: list[list[float]] = [[] for _ in names]
    for token, lp in step:
        i = _named(token, names, lettered)
        if i is not None:
            pooled[i].append(float(lp))
    floor = min(float(lp) for _, lp in step) - 1.0
    return [_logsumexp(lps) if lps else floor for lps in pooled]


def _logsumexp(values: Sequence[float]) -> float:
    peak = max(values)
    return peak + math.log(sum(math.exp(v - peak) for v in values))


def _probabilities(logprobs: Sequence[float]) -> list[float]:
    """``logprobs`` made a distribution over the options alone."""
    total = _logsumexp(logprobs)
    return [math.exp(lp - total) for lp in logprobs]


def _unbiased(first: Sequence[float], turned: Sequence[float]) -> list[float]:
    """Each option's score with the letters' own pull taken out. A small model favours a letter whatever it
    names ("D" on BAMBOO, whatever the fourth option says); say the log-probability of letter L is

        first[L]  = q(L) + s(L)     + c1        # asked with the options as given: letter L names option L
        turned[L] = q(L) + s(L + 1) + c2        # turned by one: letter L names option L + 1 (mod n)

    with q the letters' pull, s the options' scores and c the asks' constants. Then
    d(L) = first[L] - turned[L] = s(L) - s(L + 1) + (c1 - c2); around the circle the s terms cancel, so
    c1 - c2 = mean(d), and s follows step by step from s(0) = 0: s(L + 1) = s(L) - (d(L) - mean(d)). A model
    that names one letter whatever it names scores every option alike: it is not sure."""
    n = len(first)
    d = [first[k] - turned[k] for k in range(n)]
    mean = sum(d) / n
    scores = [0.0]
    for k in range(n - 1):
        scores.append(scores[-1] - (d[k] - mean))
    return scores


def _schema_pick(result: ChatResult, names: Sequence[str]) -> str | None:
    if not result.ok:
        return None
    try:
        answer = extract_json(result.text).get("answer")
    except ValueError:
        return None
    return answer if answer in names else None


def _combine(choices: Choices, results: Sequence[ChatResult], scored: bool, margin: float) -> Choice | None:
    """The choice the asks make together (None where a reply could not be read). By scores, ``results`` are the asks
    on the quotes, then the same asks on ``NO_EVIDENCE``."""
    per_order = orders(choices)
    listed = [[name for name, _ in choices.listing(order)] for order in per_order]
    if len(choices.options) == 1:
        return Choice(choices, "scores" if scored else "schema", (0,), (1.0,) if scored else None, 0)
    if not scored:
        said = [_schema_pick(r, names) for r, names in zip(results, listed, strict=True)]
        if any(name is None for name in said):
            return None
        picks = tuple(order[names.index(name)] for order, names, name in zip(per_order, listed, said, strict=True)
                      if name is not None)  # fmt: skip
        return Choice(choices, "schema", picks, None, picks[0] if len(set(picks)) == 1 else None)
    read = [option_logprobs(r, names, choices.lettered) for r, names in zip(results, listed * 2, strict=True)]
    by_place = [lps for lps in read if lps is not None]
    if len(by_place) != len(read):
        return None
    picks = tuple(
        order[max(range(len(order)), key=lambda k: lps[k])] for order, lps in zip(per_order, by_place[:2], strict=True)
    )
    on_quotes, on_nothing = _unbiased(*by_place[:2]), _unbiased(*by_place[2:])
    total = _probabilities([e - p for e, p in zip(on_quotes, on_nothing, strict=True)])
    ranked = sorted(range(len(total)), key=lambda i: -total[i])
    sure = total[ranked[0]] - total[ranked[1]] >= margin
    return Choice(choices, "scores", picks, tuple(total), ranked[0] if sure else None)


def choose(ctx: RunContext, quotes: Sequence[Citation]) -> Choice | None:
    """The local model's choice among ``ctx.choices`` on ``quotes`` (best first), recorded in
    ``ctx.reading["choice"]``; None where there is nothing to choose, ``choose="quote"`` was asked for, the backend
    can neither score nor follow a schema, or it failed (the quote answer stands)."""
    choices, how = ctx.choices, ctx.options.choose
    caps = ctx.local.capabilities
    scored = caps.logprobs and how in ("auto", "scores")
    if choices is None or not quotes or how == "quote":
        return None
    texts = [q.text for q in quotes[:CHOICE_QUOTES]]
    if how == "meaning" or (how == "auto" and ctx.choices_given and choices.lettered):
        # a model too small to write its answer (``written.answer_mode``) reads a letter no better than chance
        mode, why = answer_mode("auto", ctx.local) if how == "auto" else ("quote", "choose=meaning was asked for")
        embedder = ctx.embedder
        if embedder is not None and on_this_device(embedder.address) and choices.lettered and mode == "quote":
            chosen = by_meaning(embedder, choices, texts, ctx.options.unsure_margin)
            ctx.reading["choice"] = chosen.to_dict() | {"why": why}
            return chosen
        if how == "meaning":
            ctx.notes.append(
                "Choosing by meaning needs lettered options and an embedding model on this device: "
                "the answer is the best quote."
            )
            return None
    if not (scored or caps.json_schema):
        return None
    if how == "auto" and not ctx.choices_given:  # read off the question: the quote answers (RunOptions.choose)
        ctx.reading["choice"] = {
            "options": list(choices.options),
            "by": "quote",
            "asked": "choose='meaning', 'scores' or 'schema'" if choices.lettered else "choose='scores' or 'schema'",
        }
        return None
    question = ctx.question or ctx.task
    requests = choice_requests(question, choices, texts, scored=scored)
    if scored:  # what the model would answer on no evidence: its pull towards an answer, taken out
        requests += choice_requests(question, choices, [NO_EVIDENCE], scored=True)
    try:
        with ctx.timed("local"):
            results = ctx.local.batch(requests, cancel=ctx.cancel)
    except BackendError as exc:
        log.warning("the local model failed while choosing an answer: %s", exc)
        ctx.notes.append(f"The local model failed while choosing an answer ({exc}): the answer is its best quote.")
        return None
    for r in results:
        ctx.meter.add("local", priced(ctx.local, r.usage, ctx.options.price_table))
    choice = _combine(choices, results, scored, ctx.options.unsure_margin)
    if choice is None:
        ctx.notes.append("The local model's choice could not be read: the answer is its best quote.")
        return None
    ctx.reading["choice"] = choice.to_dict()
    return choice


def by_meaning(embedder: Embedder, choices: Choices, quotes: Sequence[str], margin: float) -> Choice:
    """The option closest in meaning to ``quotes``: each option's closeness is its vector's best cosine to the
    quotes' (an option says one thing, which one quote may say); not sure where the best two are within
    ``margin``."""
    n = len(choices.options)
    vectors = np.asarray(embedder.embed([*choices.options, *quotes]), dtype=np.float32)
    closeness = (vectors[:n] @ vectors[n:].T).max(axis=1).tolist()
    ranked = sorted(range(n), key=lambda i: -closeness[i])
    sure = n == 1 or closeness[ranked[0]] - closeness[ranked[1]] >= margin
    return Choice(choices, "meaning", (), None, ranked[0] if sure else None, tuple(closeness))


def choice_answer(choice: Choice, quote: Citation) -> str:
    """The answer in the form asked ("Yes", "C: <option>"), then the best ``quote``, which it rests on, and its
    place; or that the model is not sure, naming the two options it could not tell apart, then the quote."""
    c = choice.choices
    quote_answer = f"According to {place(quote)}:\n\u201c{quote.text}\u201d"
    if choice.picked is not None:
        return f"{c.answer(choice.picked)}\n{quote_answer}"
    first, second = choice.ranked[:2] if choice.by != "schema" else [p or 0 for p in choice.picks[:2]]
    return (
        f"Not sure: the local model cannot tell {c.answer(first)!r} from {c.answer(second)!r} on what it read.\n"
        f"{quote_answer}"
    )
