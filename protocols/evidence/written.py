"""A written answer from a capable local model, kept only where its quotes say what it says.

``local`` answers with a quote: right for a 135M model, short of what a 3B-8B model can do. Such a model writes a
short answer from the quotes its jobs picked, labelled [1], [2], ... (the run's citations, in their order), and
cites them. What it writes is never passed on unchecked:

    mode    ``answer_mode``: ``RunOptions.answer``; "auto" is "write" for a model of ``WRITE_FROM_PARAMETERS`` or
            more (``parameter_count``: the GGUF metadata, the server's description; else the size its name states,
            "llama3.2:3b"), "quote" below that or where the size is unknown
    write   the prompt (``prompts/written*.j2``); the reply streams as ``AnswerToken`` events, and is cut where
            it begins to loop (``minions.loops``), which replaces it
    check   ``check_written``: the answer cites at least one quote, only quotes that exist, and every figure and
            every name in it is in the quotes it cites (or the question): ``unsupported``
    decide  kept, or replaced by the quote answer, with the reason in a note and in ``RunResult.reading["answer"]``

``reading["answer"]`` says what happened::

    {"mode": "write" | "quote", "because": "ollama/llama3.2 has 3.2B parameters (its model file or server)",
     "written": "Revenue was $31.8 million [1].", "cited": [1], "replaced": False, "why": None}

(``written``, ``cited``, ``replaced`` and ``why`` only where the model wrote.) The citations stay the quotes it
was shown, so that "[n]" in the answer is ``RunResult.citations[n - 1]``.

Figures compare as numbers: "$31.8 million", "31.8 million" and "31,800,000" are one figure, "29%" and
"29 percent" another; a figure with a scale ("$42 million") must match a figure of that size, not a bare "42".
Names are the capitalised words, compared in any case ("Revenue" where a quote says "revenue"); the function words
that start sentences ("The", "According": ``COMMON``) need no quote, nor does a word capitalised only because it
starts a sentence ("Costs were ..."), unless it looks like a name there too: possessive, with capitals inside, or
followed by another capitalised word ("Contoso's", "EBITDA", "Contoso Energy").
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from minions.backends.base import Backend
from minions.backends.model_files import size_from_label
from minions.errors import BackendError
from minions.events import AnswerToken, emit
from minions.loops import repeating
from minions.types import Message, SamplingParams, Usage

from ..channel import priced
from ..context import RunContext
from ..options import AnswerMode
from ..prompts import render
from ..result import Citation
from ..search.figures import figure_share, figures
from ..search.sentences import spans
from .jobs import REPEATED_WORDS

__all__ = [
    "WRITE_FROM_PARAMETERS",
    "WrittenCheck",
    "answer_mode",
    "check_written",
    "excerpt_messages",
    "unsupported",
    "written_answer",
    "written_messages",
]

log = logging.getLogger(__name__)

WRITE_FROM_PARAMETERS = 1_000_000_000
"""The size from which "auto" lets the local model write its answer. SmolLM2-135M, asked to write, loops or invents
(docs/local-reading.md); the 1B-8B models docs/local-models.md recommends are the ones meant to write (none of them
was run here: this machine has no such model), and the check guards what any of them writes."""
WRITE_MAX_TOKENS = 200
"""A written answer is a few sentences."""

_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['’-][A-Za-z0-9]+)*")
COMMON = frozenset(
    re.findall(
        r"\w+",
        """a about according after all also although an and any as at based because before both but by during each
        for from further however i if in including its it meanwhile no none not of on or our over per since so than
        that the their there these they this those thus to total under until we what when where whereas which while
        with within yes""",
    )
)
"""Words that start a sentence and are never a name ("The", "According", "However"): they need no quote."""

Mode = Literal["write", "quote"]


def answer_mode(option: AnswerMode, backend: Backend) -> tuple[Mode, str]:
    """Whether the local model writes its answer, and why: ``option`` unless "auto"; then "write" for a model of
    ``WRITE_FROM_PARAMETERS`` or more, by its ``parameter_count()``, else by the size its name states."""
    if option != "auto":
        return option, f"answer={option} was asked for"
    count, source = backend.parameter_count(), "its model file or server"
    if count is None:
        count, source = size_from_label(backend.name), "its name"
    if count is None:
        return "quote", f"the size of {backend.name} is unknown (answer=write lets it write)"
    mode: Mode = "write" if count >= WRITE_FROM_PARAMETERS else "quote"
    return mode, f"{backend.name} has {_size(count)} parameters ({source})"


def _size(count: int) -> str:
    return f"{count / 1e9:.1f}B" if count >= WRITE_FROM_PARAMETERS else f"{count / 1e6:.0f}M"


# -- the check ---------------------------------------------------------------------------------------------------
def _values(text: str) -> set[Decimal]:
    """Every number ``text`` states, as written and at its scale ("$31.8 million": 31.8 and 31800000)."""
    out = set()
    for figure in figures(text):
        out |= {figure.number.normalize(), figure.value}
    return out


def unsupported(answer: str, sources: Sequence[str]) -> list[str]:
    """The figures and names of ``answer`` that none of ``sources`` states, in the answer's order (its "[n]"
    citation markers aside). A figure with a scale must match a figure of that size; a name (a capitalised word)
    must be a word of the sources, in any case, or a ``COMMON`` word (a sentence's first word only where it looks
    like a name: ``_looks_like_name``)."""
    text = _MARKER.sub(" ", answer)
    joined = "\n".join(sources)
    values = _values(joined)
    words = {w.lower() for found in _WORD.findall(joined) for w in (found, _bare(found))}
    missing = [figure.text for figure in figures(text) if figure.value not in values]
    found = list(_WORD.finditer(text))
    for i, m in enumerate(found):
        word = _bare(m.group(0))
        if not word[0].isupper() or word.lower() in words or word.lower() in COMMON:
            continue
        if _starts_sentence(text, m.start()) and not _looks_like_name(m.group(0), found[i + 1 : i + 2]):
            continue  # "Costs were ...": a word capitalised because it starts the sentence
        missing.append(word)
    order = {w: text.find(w) for w in missing}
    return sorted(dict.fromkeys(missing), key=lambda w: order[w])


def _starts_sentence(text: str, at: int) -> bool:
    before = text[:at].rstrip(" \t*_\"'“‘(")
    return not before or before.endswith((".", "!", "?", ":", ";", "\n", "-", "•"))


def _looks_like_name(word: str, following: Sequence[re.Match[str]]) -> bool:
    """Whether a capitalised word that starts a sentence is a name all the same: possessive ("Contoso's"), with
    capitals inside ("NorthWind", "EBITDA"), or followed by another capitalised word ("Contoso Energy")."""
    bare = _bare(word)
    following_capital = bool(following) and following[0].group(0)[0].isupper()
    return bare != word or any(ch.isupper() for ch in bare[1:]) or following_capital


def _bare(word: str) -> str:
    """``word`` without a possessive ("Northwind's": "Northwind")."""
    return re.sub(r"['’]s$", "", word)


@dataclass(frozen=True)
class WrittenCheck:
    """What ``check_written`` found: the quotes the answer cites (numbers from 1), and why it may not stand."""

    cited: tuple[int, ...]
    why: str | None

    @property
    def ok(self) -> bool:
        return self.why is None


def check_written(answer: str, quotes: Sequence[Citation], question: str = "") -> WrittenCheck:
    """Whether ``answer``, written from ``quotes`` (numbered from 1), may stand: it says something, cites at least
    one quote and only quotes that exist, and every figure and name in it is in the quotes it cites (their text
    and document names) or in ``question``."""
    cited = tuple(dict.fromkeys(int(n) for group in _MARKER.findall(answer) for n in group.split(",")))
    if not answer.strip():
        return WrittenCheck(cited, "it wrote nothing")
    if not cited:
        return WrittenCheck(cited, "it cites none of the quotes")
    wrong = [n for n in cited if not 1 <= n <= len(quotes)]
    if wrong:
        return WrittenCheck(cited, f"it cites [{wrong[0]}], and there were {len(quotes)} quotes")
    sources = [question, *(part for n in cited for part in (quotes[n - 1].text, quotes[n - 1].document))]
    missing = unsupported(answer, sources)
    if missing:
        listed = " and ".join(f"{w!r}" for w in missing[:3])
        verb = "is" if len(missing) == 1 else "are"
        return WrittenCheck(cited, f"{listed} {verb} not in the quotes it cites")
    return WrittenCheck(cited, None)


# -- the step ----------------------------------------------------------------------------------------------------
def written_answer(ctx: RunContext, quotes: Sequence[Citation], quote_answer: str) -> str:
    """The run's answer: the local model's, written from ``quotes`` and kept where ``check_written`` allows it;
    else ``quote_answer``. Records what happened in ``ctx.reading["answer"]`` (and a note where it was replaced)."""
    if not quotes:
        return quote_answer
    mode, because = answer_mode(ctx.options.answer, ctx.local)
    record: dict[str, Any] = {"mode": mode, "because": because}
    ctx.reading["answer"] = record
    if mode == "quote":
        return quote_answer
    try:
        text, looped = _write(ctx, quotes)
    except BackendError as exc:  # the quotes still answer: say why there is no written answer
        log.warning("the local model failed while writing its answer: %s", exc)
        text, check = "", WrittenCheck((), f"the local model failed while writing ({exc})")
    else:
        check = WrittenCheck((), "it repeats itself") if looped else check_written(text, quotes, ctx.task)
    record.update(written=text, cited=list(check.cited), replaced=not check.ok, why=check.why)
    if check.ok:
        return text
    ctx.notes.append(f"The local model's written answer was replaced by the quote answer: {check.why}.")
    return quote_answer


def written_messages(quotes: Sequence[tuple[str, str]], question: str) -> list[Message]:
    """The prompt of a written answer: ``quotes`` as (place, text), numbered in their order, and the question."""
    shown = [{"place": place, "text": text} for place, text in quotes]
    return [
        Message("system", render("written_system")),
        Message("user", render("written", quotes=shown, question=question)),
    ]


def excerpt_messages(excerpt: str, question: str, *, quotes: int = 3) -> list[Message]:
    """A written answer's prompt over the ``quotes`` spans of ``excerpt`` with the most figures, in their order
    (the spans a job over it quotes are mostly such): what ``minions bench speculative``'s ``written`` setting
    decodes, with no run's jobs before it."""
    found = spans(excerpt)
    best = sorted(range(len(found)), key=lambda i: -figure_share(found[i].text))[:quotes]
    return written_messages([("excerpt", found[i].text) for i in sorted(best)], question)


def _write(ctx: RunContext, quotes: Sequence[Citation]) -> tuple[str, bool]:
    """The local model's answer from ``quotes``, streamed as ``AnswerToken`` events, and whether it was cut where
    it began to loop (``minions.loops``: a small model does not stop on its own). Its usage is counted on the text
    (a streamed reply does not report it)."""
    messages = written_messages([(q.label, q.text) for q in quotes], ctx.task)
    pieces: list[str] = []
    looped = False
    start = time.perf_counter()
    stream = ctx.local.stream(messages, SamplingParams(max_tokens=WRITE_MAX_TOKENS, temperature=0.0))
    try:
        with ctx.timed("local"):
            for piece in stream:
                pieces.append(piece)
                emit(ctx.events, AnswerToken(piece))
                ctx.check_cancelled()
                if repeating("".join(pieces).split(), min_items=REPEATED_WORDS):
                    looped = True
                    break
    finally:
        if isinstance(stream, Generator):
            stream.close()  # stops the decoding where the loop left early
    text = "".join(pieces)
    prompt = sum(ctx.local.count_tokens(m.content) for m in messages)
    seconds = time.perf_counter() - start
    usage = Usage(prompt_tokens=prompt, completion_tokens=ctx.local.count_tokens(text), calls=1, seconds=seconds)
    ctx.meter.add("local", priced(ctx.local, usage, ctx.options.price_table))
    return text.strip(), looped
