"""The form a question asks its answer in: a closed set of answers (yes/no, yes/no/maybe, lettered options).

A caller that knows the options passes them to ``run(..., choices=...)`` (a benchmark's loader knows them:
``evals.items.EvalItem.choices``); where none are given, ``closed_form`` reads them from the question:

    yes/no     a question that opens with an auxiliary or a modal verb ("Did ...?", "Is ...?", "Hat ...?",
               "Gibt es ...?"), or asks for "yes or no" ("ja oder nein"); not one that offers alternatives
               ("Did revenue grow or shrink?")
    options    lines "A. ...", "B. ..." (or "(A) ...", "A) ...") listed after the question, from A in order

The local protocol then has its model choose one of them on the evidence it read (``evidence.choosing``); the
other protocols read the question as asked, options listed (``Choices.ask``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .options import InputError

__all__ = ["LETTERS", "YES_NO", "YES_NO_MAYBE", "Choices", "as_choices", "closed_form", "is_yes_no"]

LETTERS = "ABCDEFGHIJ"
"""The letters of lettered options, in order (ten at most)."""


@dataclass(frozen=True)
class Choices:
    """The answers a question allows. ``lettered``: each is named by its letter ("C: text"); else the answers
    are their own names ("Yes", "No", "Maybe")."""

    options: tuple[str, ...]
    lettered: bool = True

    def __post_init__(self) -> None:
        if not 1 <= len(self.options) <= len(LETTERS):
            raise InputError(f"A closed question has 1 to {len(LETTERS)} options, got {len(self.options)}.")

    @property
    def names(self) -> tuple[str, ...]:
        """What the model replies for each option: its letter, or the answer itself."""
        return tuple(LETTERS[: len(self.options)]) if self.lettered else self.options

    def answer(self, index: int) -> str:
        """Option ``index`` as an answer: "C: <its text>", or "Yes"."""
        return f"{LETTERS[index]}: {self.options[index]}" if self.lettered else self.options[index]

    def listing(self, order: Sequence[int] | None = None) -> list[tuple[str, str]]:
        """(name, text) of the options in ``order`` (default: as given); lettered options take the letters of
        their place in that order."""
        order = list(order) if order is not None else list(range(len(self.options)))
        if self.lettered:
            return [(LETTERS[k], self.options[i]) for k, i in enumerate(order)]
        return [(self.options[i], self.options[i]) for i in order]

    def ask(self, question: str) -> str:
        """``question`` as the protocols read it: the options listed, and the form the answer must take."""
        if self.lettered:
            listed = "\n".join(f"{name}. {text}" for name, text in self.listing())
            return f"{question}\n\nOptions:\n{listed}\n\nAnswer with the letter of the correct option."
        words = [o.lower() for o in self.options]
        return f"{question}\n\nAnswer {', '.join(words[:-1])} or {words[-1]}."


YES_NO = Choices(("Yes", "No"), lettered=False)
YES_NO_MAYBE = Choices(("Yes", "No", "Maybe"), lettered=False)
_WORDS = {o.lower() for o in YES_NO_MAYBE.options}


def as_choices(choices: Choices | Sequence[str]) -> Choices:
    """``choices`` as given, or options as strings: "yes"/"no"/"maybe" are answers by name, anything else lettered."""
    if isinstance(choices, Choices):
        return choices
    options = tuple(str(c).strip() for c in choices)
    if {o.lower() for o in options} <= _WORDS:
        return Choices(tuple(o.capitalize() for o in options), lettered=False)
    return Choices(options)


# -- recognising the form from the question -----------------------------------------------------------------------

_OPENERS = {
    "en": "am is are was were be do does did has have had can could will would shall should may might must "
    "isn't aren't wasn't weren't don't doesn't didn't hasn't haven't hadn't can't couldn't won't wouldn't "
    "shouldn't",
    "de": "ist sind war waren bin bist hat haben hatte hatten wird werden wurde wurden kann können konnte konnten "
    "muss müssen musste mussten soll sollen sollte sollten darf dürfen durfte dürfte will wollen wollte möchte "
    "gibt gab gab's gibt's existiert existieren liegt lag steht stand enthält nennt zeigt",
}
"""Words that open a yes/no question (English auxiliaries and modals; German ones, and the verbs a question about a
document most often opens with: "Gibt es ...?", "Enthält ...?"). A German question may open with any verb: one
that opens with another is not recognised (pass its choices)."""
OPENERS = frozenset(w for words in _OPENERS.values() for w in words.split())
_ASKS_YES_NO = re.compile(r"\b(?:yes\s+or\s+no|yes/no|ja\s+oder\s+nein|ja/nein)\b", re.IGNORECASE)
_OR = re.compile(r"^.*\s(?:or|oder)\s+(.+)$", re.IGNORECASE | re.DOTALL)
_NOT_ALTERNATIVE = re.compile(
    r"^(?:not|nicht|no|none|more|less|fewer|greater|higher|lower|older|younger|longer|shorter|earlier|later|above|"
    r"below|over|under|mehr|weniger|älter|jünger|höher|niedriger|länger|später|früher)\b",
    re.IGNORECASE,
)
"""What follows "or" where it does not offer an alternative answer ("aged 80 or older", "or not")."""
ALTERNATIVE_WORDS = 4
"""An "or" followed by this few words before the question mark offers an alternative ("grow or shrink in 2025?")."""
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n")
_OPTION_LINE = re.compile(r"^\s*\(?([A-J])\s*[.):]\s+(\S.*?)\s*$")


def _question_sentence(text: str) -> str | None:
    """The last sentence of ``text`` that ends with a question mark, or None."""
    found = [piece for piece in _SENTENCE_BREAK.split(text) if "?" in piece]
    return found[-1][: found[-1].rindex("?") + 1].strip() if found else None


def is_yes_no(question: str) -> bool:
    """Whether ``question`` asks for yes or no: its question sentence opens with an auxiliary or a modal verb
    (``OPENERS``) and offers no alternatives, or it asks for "yes or no" in words."""
    if _ASKS_YES_NO.search(question):
        return True
    sentence = _question_sentence(question)
    if sentence is None:
        return False
    words = re.findall(r"[\w'’]+", sentence.lower().replace("’", "'"))
    if not words or words[0] not in OPENERS:
        return False
    alternative = _OR.search(sentence.rstrip("?").strip())
    if alternative is None:
        return True
    after = alternative.group(1)
    return bool(_NOT_ALTERNATIVE.match(after)) or len(after.split()) > ALTERNATIVE_WORDS


def _listed(text: str) -> tuple[str, Choices] | None:
    """Options listed a line each from "A." on, and the text before them (without an "Options:" heading)."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        m = _OPTION_LINE.match(line)
        if m is None or m.group(1) != "A":
            continue
        options: list[str] = []
        for later in lines[start:]:
            found = _OPTION_LINE.match(later)
            if found is None or found.group(1) != LETTERS[len(options)]:
                break
            options.append(found.group(2))
        if len(options) >= 2:
            before = "\n".join(lines[:start]).strip()
            before = re.sub(r"\n?\s*(?:options|choices|antworten|optionen)\s*:?\s*$", "", before, flags=re.I)
            return before.strip(), Choices(tuple(options))
    return None


def closed_form(text: str) -> tuple[str, Choices] | None:
    """The question of ``text`` and the answers it allows, where it allows a closed set: options listed in it
    (lettered), or yes and no; None for an open question."""
    listed = _listed(text)
    if listed is not None and listed[0]:
        return listed
    return (text, YES_NO) if is_yes_no(text) else None
