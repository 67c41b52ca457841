"""How answers are scored: numbers within a tolerance, SQuAD token F1, option letters and yes/no/maybe labels.

- ``finance_score`` (FinanceBench's metric ``numeric``): yes/no when the gold answer starts with one, else
  ``numeric_match`` when it has a number, else token F1.
- ``numeric_match``: the gold answer's key number (its first number that is not a bare year) appears in the
  prediction, within 1% relative tolerance. Currency signs, thousands separators, parenthesised negatives,
  percentages and scale words are understood, so ``"$1,577 million"`` matches ``"1.577 billion"`` and
  ``"(1,577)"`` is -1577. Magnitudes are compared, since a sign is as often written in words ("a decline of").
- ``token_f1``: SQuAD-style: lowercase, strip punctuation and articles, F1 of the token bags; the max over
  the references, as QASPER's evaluator does.
- ``parse_choice``: the option a reply picks ("B", "(b)", "Answer: B", or the option's text).
- ``parse_yes_no_maybe``: the label a reply gives (PubMedQA).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .items import LETTERS, EvalItem

__all__ = [
    "REL_TOLERANCE",
    "Baselines",
    "Quantity",
    "baselines",
    "finance_score",
    "max_f1",
    "normalize_answer",
    "numeric_match",
    "parse_choice",
    "parse_quantities",
    "parse_yes_no_maybe",
    "score",
    "token_f1",
]

REL_TOLERANCE = 0.01

# -- SQuAD token F1 -----------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace (the SQuAD/QASPER normalisation)."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def max_f1(prediction: str, golds: Sequence[str]) -> float:
    return max((token_f1(prediction, g) for g in golds), default=0.0)


# -- numbers ------------------------------------------------------------------------------------------------

_SCALES = {
    "trillion": 1e12,
    "tn": 1e12,
    "billion": 1e9,
    "bn": 1e9,
    "b": 1e9,
    "million": 1e6,
    "mn": 1e6,
    "mm": 1e6,
    "m": 1e6,
    "thousand": 1e3,
    "k": 1e3,
}
_UNITS = (1.0, 1e3, 1e6, 1e9, 1e12)
_QUANTITY = re.compile(
    r"""
    (?<![\w.])                                   # not inside a word, a code (COVID-19) or a number
    (?P<open>\()?\s*
    (?P<minus>[-−–](?=\s*(?:\$|US\$|USD)?\s*\.?\d))?\s*
    (?P<currency>US\$|\$|USD\b|€|£)?\s*
    (?P<number>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)
    (?:\s*(?P<unit>%|percent\b|per\s+cent\b|trillion\b|tn\b|billion\b|bn\b|b\b|million\b|mn\b|mm\b|m\b
                   |thousand\b|k\b))?
    (?P<close>\s*\))?
    """,
    re.IGNORECASE | re.VERBOSE,
)


@dataclass(frozen=True)
class Quantity:
    value: float
    """The number as written (sign applied), before its scale word."""
    scale: float = 1.0
    percent: bool = False
    year_like: bool = False
    """A bare integer between 1900 and 2100: most likely a fiscal year, not an answer."""

    def candidates(self, other: Quantity) -> set[float]:
        """Magnitudes this quantity may stand for when compared with ``other``.

        A number without a scale word is often in the question's unit ("in USD millions"): against one with a
        scale word, that one counts in every unit ("1.577 billion" is also 1577 millions). A percent sign on
        one side only counts both ways ("36%" against "0.36"). Scale words on both sides are meant as written.
        """
        v = abs(self.value)
        out = {v * self.scale}
        if self.scale != 1.0 and other.scale == 1.0:
            out.update(v * self.scale / unit for unit in _UNITS)
        if self.percent and not other.percent:
            out.add(v / 100)
        return out


def parse_quantities(text: str) -> list[Quantity]:
    """Every number in ``text``, in order, with its sign, scale and whether it is a percentage."""
    out = []
    for m in _QUANTITY.finditer(text):
        raw = m.group("number").replace(",", "")
        value = float(raw)
        negative = bool(m.group("minus")) or bool(m.group("open") and m.group("close"))
        unit = re.sub(r"\s+", " ", (m.group("unit") or "").lower())
        percent = unit in ("%", "percent", "per cent")
        scale = _SCALES.get(unit, 1.0)
        year_like = (
            not percent
            and scale == 1.0
            and not m.group("currency")
            and raw.isdigit()
            and 1900 <= value <= 2100
            and "," not in m.group("number")
        )
        out.append(Quantity(-value if negative else value, scale, percent, year_like))
    return out


def _close(a: float, b: float, rel: float) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-9)


def quantities_match(a: Quantity, b: Quantity, rel: float = REL_TOLERANCE) -> bool:
    return any(_close(x, y, rel) for x in a.candidates(b) for y in b.candidates(a))


def key_quantity(gold: str) -> Quantity | None:
    """The number a gold answer is about: its first that is not a bare year; None when it has none."""
    return next((q for q in parse_quantities(gold) if not q.year_like), None)


def numeric_match(prediction: str, gold: str, rel: float = REL_TOLERANCE) -> bool:
    """Whether the gold's key number appears in the prediction (within ``rel``); False if gold has none."""
    key = key_quantity(gold)
    return key is not None and any(quantities_match(key, q, rel) for q in parse_quantities(prediction))


# -- labels -------------------------------------------------------------------------------------------------

_EXPLICIT_LABEL = re.compile(r"\b(?:answer|decision|verdict)\b[\s:=]*(?:is\b)?[\s:=]*[\"'*(]*\s*(yes|no|maybe)\b", re.I)
_LABEL = re.compile(r"\b(yes|no|maybe)\b", re.I)


def parse_yes_no_maybe(text: str) -> str | None:
    """``yes``, ``no`` or ``maybe``: an explicit "answer: X" first, else the first of the three words."""
    m = _EXPLICIT_LABEL.search(text) or _LABEL.search(text)
    return m.group(1).lower() if m else None


def _choice_patterns(letters: str) -> list[re.Pattern[str]]:
    upper, any_case = f"[{letters}]", f"[{letters}{letters.lower()}]"
    # A lowercase letter counts only in parentheses or alone: "the answer is a vocabulary" picks nothing.
    letter = rf"(?:\(({any_case})\)|({upper}))(?!\w)"
    return [
        # "Answer: B", "the answer is (b)", "Option C", "correct choice: D"
        re.compile(rf"(?i:\b(?:answer|option|choice)\b)[\s:=]*(?i:is\b)?[\s:=]*(?i:option\s*)?[\"'*]*{letter}"),
        # the whole reply is one letter: "B", "(b)", "b."
        re.compile(rf"^\W*({any_case})\W*$"),
        # a reply that starts "B." / "B)" / "(B)" / "B:" / "B -"
        re.compile(rf"^\W*\(?({upper})\s*[).:\-]"),
        # "(c)" anywhere
        re.compile(rf"\(({any_case})\)"),
    ]


def _by_text(prediction: str, options: Sequence[str]) -> str | None:
    """The option whose text the reply contains; the longest wins, and a tie picks none."""
    said = f" {normalize_answer(prediction)} "
    found = []
    for i, option in enumerate(options):
        norm = normalize_answer(option)
        if norm and f" {norm} " in said:
            found.append((len(norm), LETTERS[i]))
    found.sort(reverse=True)
    if found and (len(found) == 1 or found[0][0] > found[1][0]):
        return found[0][1]
    return None


def parse_choice(prediction: str, options: Sequence[str]) -> str | None:
    """The letter of the option a reply picks, or None when it picks none (or several by their text)."""
    letters = LETTERS[: len(options)]
    text = prediction.strip()
    if not text or not letters:
        return None
    for pattern in _choice_patterns(letters):
        m = pattern.search(text)
        if m:
            return next(g for g in m.groups() if g).upper()
    return _by_text(text, options)


# -- per item -----------------------------------------------------------------------------------------------

_LEADING_YES_NO = re.compile(r"^\W*(yes|no)\b", re.I)


def finance_score(prediction: str, gold: str) -> float:
    """FinanceBench: a gold that starts "Yes"/"No" is matched on that word (its numbers are the reasoning);
    else 1/0 on the gold's key number when it has one; else token F1 (free-text answers are better graded by
    an LLM judge)."""
    lead = _LEADING_YES_NO.match(gold)
    if lead:
        said = _LEADING_YES_NO.match(prediction) or _LABEL.search(prediction)
        return float(said is not None and said.group(1).lower() == lead.group(1).lower())
    if key_quantity(gold) is not None:
        return float(numeric_match(prediction, gold))
    return token_f1(prediction, gold)


def score(item: EvalItem, prediction: str) -> float:
    """The item's score for ``prediction``, in [0, 1], by the item's metric (max over its gold answers)."""
    if item.metric == "numeric":
        return max((finance_score(prediction, g) for g in item.gold), default=0.0)
    if item.metric == "f1":
        return max_f1(prediction, item.gold)
    if item.metric == "choice":
        return float(parse_choice(prediction, item.options) in item.gold)
    if item.metric == "yes_no_maybe":
        return float(parse_yes_no_maybe(prediction) in item.gold)
    raise ValueError(f"unknown metric {item.metric!r}")


# -- what a closed-form benchmark's accuracy is measured against --------------------------------------------------


@dataclass(frozen=True)
class Baselines:
    """The accuracy of two answerers that read nothing, over a benchmark's closed-form items: one that picks an
    option at random (``chance``: the mean of 1 / options), one that always gives the most common gold answer
    (``majority``, the share of items whose gold it is: PubMedQA's "yes")."""

    items: int
    chance: float
    majority: float
    majority_answer: str

    def to_dict(self) -> dict[str, object]:
        return {"items": self.items, "chance": self.chance, "majority": self.majority,
                "majority_answer": self.majority_answer}  # fmt: skip


def baselines(answers: Iterable[tuple[str, int]]) -> Baselines | None:
    """``Baselines`` over (gold answer, number of options) per closed-form item; None where there is none."""
    found = list(answers)
    if not found:
        return None
    counts = Counter(gold for gold, _ in found)
    answer, top = counts.most_common(1)[0]
    chance = sum(1 / n for _, n in found) / len(found)
    return Baselines(len(found), chance, top / len(found), answer)
