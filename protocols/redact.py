"""Rule-based redaction of personal data from text that leaves the device.

Emails, phone numbers, identifiers (SSN-like, IBAN-like, account and ID numbers, card numbers) and person
names become placeholders such as ``[EMAIL_1]``. The same value always gets the same placeholder within a run,
so the remote model can still refer to it, and ``restore`` puts the originals back into what comes home.

Names are found by rule, not by a tagger: two or three capitalized words (or one after a title) where the words
around them say a person is meant: a title ("Dr. Jane Smith", "Mr. Okafor"), a form's label ("Patient: Maria
Lopez", "Signed by: ..."), a role before or after ("CEO John Whitfield", "Karen Mills, our Chief Financial
Officer"), or a verb of saying or doing ("said Michael Brown", "prepared by Peter Walsh", "Jane Smith called").
A name met once is redacted wherever it appears again in the run, its surname alone included. A name with no
such cue ("Jane Smith agreed.") goes out as it is; so do words that only look like one. ``tests/protocols/
redaction_set.py`` is the labelled set the rule is measured on (``test_redaction.py``).
"""

from __future__ import annotations

import re
import threading

__all__ = ["Redactor"]

_TITLES = r"(?:Dr|Mr|Mrs|Ms|Mx|Miss|Prof|Sir|Dame|Madam|Mister|Doctor|Professor)"
_CAP = r"[A-Z][a-zA-Z'\-]*"
_NOT_WORDS = """
    Chief Executive Officer Financial Operating Technology Board Directors Director Company Committee Report Annual
    Quarterly Net Sales Income Revenue Group Holdings Bank Stock Exchange Inc Corp Corporation Ltd LLC Fund Trust
    North South East West Western Eastern Northern Southern America American Europe European Asia Pacific United
    States Kingdom New York General Electric Street Road Avenue January February March April May June July August
    September October November December Monday Tuesday Wednesday Thursday Friday Saturday Sunday The Our This That
    Item Note Section Table Exhibit Part Total Management Department Office Services CEO CFO COO CTO Chair Chairman
    Chairwoman President Secretary Treasurer Founder Partner
"""
_NOT_NAMES = frozenset(_NOT_WORDS.split())
"""Capitalized words of filings and letters that are not a person's, whatever the words around them say."""
_WORD = r"(?:[A-Z][a-z]*(?:['-][A-Z]?[a-z]+)?|[A-Z]\.)"
_PERSON = rf"({_WORD}(?:\s+{_WORD}){{1,2}})"
"""Two or three capitalized words (a middle initial counts): what a name looks like without a title before it."""
_LABEL = r"(?:Name|Patient|Contact|Attn|Attention|Signed(?:\s+by)?|Employee|Client|Witness|Author|Dear)\s*:?\s+"
_ROLE = r"(?:CEO|CFO|COO|CTO|Chair(?:man|woman)?|President|Director|Secretary|Treasurer|Officer|Founder|Partner)"
_SAYS_BEFORE = r"(?i:said|says|told|wrote|asked|thanked|according\s+to|by)\s+"
_DOES_AFTER = r"\s+(?:said|says|told|wrote|asked|called|signed|joined|resigned|reviewed|presented|agreed|noted)\b"

_CUED = (
    re.compile(rf"(?m)(?:^|\b)(?:{_LABEL}|{_ROLE},?\s+|{_SAYS_BEFORE}){_PERSON}\b"),
    re.compile(rf"\b{_PERSON},\s+(?:our|the|its|[A-Z]\w+'s|the\s+company's)\s+(?:\w+\s+){{0,3}}?{_ROLE}"),
    re.compile(rf"\b{_PERSON}{_DOES_AFTER}"),
)
"""Names without a title, by the words around them; what they match is trimmed of words never a person's."""

# Order matters: the most specific patterns run first so that, e.g., an IBAN is not read as a phone number.
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("EMAIL", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("IBAN", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")),
    ("SSN", re.compile(r"\b\d{3}-\d{2}-\d{4}\b")),
    ("CARD", re.compile(r"\b(?:\d{4}[ -]){3}\d{1,7}\b")),
    (
        "ID",
        re.compile(
            r"(?i)\b(?:account|acct|a/c|id|customer|member|policy|patient|passport|licen[cs]e|routing|mrn)"
            r"(?:\s+(?:number|no\.?|num|#))?\s*[:#]?\s*([A-Z0-9][A-Z0-9-]{4,}\d[A-Z0-9-]*)"
        ),
    ),
    (
        "PHONE",
        re.compile(
            r"(?<![\w.])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)\s?|\d{3}[\s.-])\d{3}[\s.-]\d{4}\b"
            r"|(?<![\w.])\+\d{1,3}(?:[\s.-]\d{2,4}){2,4}\b"
        ),
    ),
    ("ID", re.compile(r"\b\d{9,}\b")),
    ("NAME", re.compile(rf"\b{_TITLES}\.?\s+((?:{_CAP})(?:\s+{_CAP}){{0,2}})")),
    *(("NAME", cued) for cued in _CUED),
)


def _trim_name(words: str) -> str | None:
    """``words`` without the leading and trailing words that are never a person's; None when fewer than two
    remain (a name without a title is a given name and a surname at least)."""
    parts = words.split()
    while parts and parts[0] in _NOT_NAMES:
        parts.pop(0)
    while parts and parts[-1] in _NOT_NAMES:
        parts.pop()
    if len(parts) < 2 or any(p in _NOT_NAMES for p in parts):
        return None
    return " ".join(parts)


class Redactor:
    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._by_placeholder: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def _placeholder(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self._by_value:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            token = f"[{kind}_{self._counts[kind]}]"
            self._by_value[key] = token
            self._by_placeholder[token] = value
        return self._by_value[key]

    def _apply(self, kind: str, pattern: re.Pattern[str], text: str) -> str:
        def replace(m: re.Match[str]) -> str:
            # Rules with a group redact the group only (keep "Account number:" and the title word).
            start, end = m.span(1) if m.re.groups else m.span(0)
            value = m.string[start:end]
            if pattern in _CUED:
                trimmed = _trim_name(value)
                if trimmed is None:  # words that look like a name and are not one ("North America")
                    return m.group(0)
                start = m.string.index(trimmed, start)
                value, end = trimmed, start + len(trimmed)
            if kind == "NAME":
                self._names.add(value)
            token = self._placeholder(kind, value)
            return m.string[m.start() : start] + token + m.string[end : m.end()]

        return pattern.sub(replace, text)

    def _known_names(self, text: str) -> str:
        """Names met once with a title are redacted wherever they appear again, also without it."""
        for name in sorted(self._names, key=len, reverse=True):
            token = self._by_value[("NAME", name)]
            text = re.sub(rf"\b{re.escape(name)}\b", token, text)
            parts = name.split()
            if len(parts) > 1 and len(parts[-1]) > 2:
                text = re.sub(rf"\b{re.escape(parts[-1])}\b", token, text)
        return text

    def redact(self, text: str) -> str:
        with self._lock:
            for kind, pattern in _RULES:
                text = self._apply(kind, pattern, text)
            return self._known_names(text)

    def restore(self, text: str) -> str:
        """Put the original values back in place of the placeholders (for what comes home)."""
        with self._lock:
            mapping = dict(self._by_placeholder)
        return re.sub(r"\[[A-Z]+_\d+\]", lambda m: mapping.get(m.group(0), m.group(0)), text)

    @property
    def count(self) -> int:
        return len(self._by_placeholder)
