"""Per-sequence sampling for the batching engine: grammars, greedy and temperature sampling, stop strings.

Every rule here mirrors ``llama_cpp.Llama.create_chat_completion`` (llama-cpp-python 0.3.36), so a job run by
the engine produces the same tokens and the same text as the high-level API run on it alone:

- the sampler chain is ``grammar -> greedy`` at temperature 0, else
  ``grammar -> top_k(40) -> typical(1) -> top_p -> min_p(0.05) -> temp -> dist(seed)``;
- a JSON schema becomes a GBNF grammar through ``json_schema_to_gbnf`` (plain JSON if the schema is beyond it);
- the text is the concatenation of token pieces (special tokens render as nothing), cut at the first stop string
  of the list that occurs; stop and length checks pause while the text ends inside a UTF-8 character.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from minions.errors import ConfigError
from minions.types import SamplingParams

from .ffi import LlamaModel

__all__ = ["GrammarCache", "GrammarState", "SequenceSampler", "TextStream"]

log = logging.getLogger(__name__)

# The high-level API's defaults for what SamplingParams does not carry.
_TOP_K = 40
_MIN_P = 0.05
_TYPICAL_P = 1.0


class GrammarCache:
    """Compiled grammars by JSON schema. Parsing a GBNF grammar costs milliseconds; a clone costs microseconds,
    so each schema is parsed once and every sequence gets its own clone (its own parse state)."""

    def __init__(self, model: LlamaModel, size: int = 16) -> None:
        self.model = model
        self.size = size
        self._templates: OrderedDict[str, Any] = OrderedDict()

    def new_sampler(self, schema: Mapping[str, Any]) -> Any:
        """A fresh grammar sampler for ``schema``; the caller frees it (``SequenceSampler.close``)."""
        key = json.dumps(schema, sort_keys=True)
        template = self._templates.get(key)
        if template is None:
            template = self._compile(schema)
            self._templates[key] = template
            while len(self._templates) > self.size:
                _, old = self._templates.popitem(last=False)
                self.model.lib.llama_sampler_free(old)
        self._templates.move_to_end(key)
        return self.model.lib.llama_sampler_clone(template)

    def _compile(self, schema: Mapping[str, Any]) -> Any:
        from llama_cpp.llama_grammar import JSON_GBNF, LLAMA_GRAMMAR_DEFAULT_ROOT, json_schema_to_gbnf

        try:
            gbnf = json_schema_to_gbnf(json.dumps(schema))
        except Exception as exc:  # the converter raises bare Exceptions; like the high-level API, fall back
            log.warning("JSON schema not convertible to a grammar (%s); constraining to any JSON object", exc)
            gbnf = JSON_GBNF
        lib = self.model.lib
        sampler = lib.llama_sampler_init_grammar(self.model.vocab, gbnf.encode(), LLAMA_GRAMMAR_DEFAULT_ROOT.encode())
        if not sampler:
            raise ConfigError(f"llama.cpp rejected the grammar made from the JSON schema {dict(schema)!r}.")
        return sampler

    def close(self) -> None:
        for sampler in self._templates.values():
            self.model.lib.llama_sampler_free(sampler)
        self._templates.clear()


class GrammarState:
    """A grammar's parse state over one reply (a llama.cpp grammar sampler, owned): the best token the grammar
    allows under some logits, and the token taken. The engine's greedy sampler picks with it; a draft model picks
    with a copy (``fork``), so that its drafts obey the job's grammar as the target's tokens do
    (``speculation.drafters.Constraint``).

    The shortcut that changes nothing: the grammar only removes tokens, so if the unconstrained argmax is allowed
    it is also the constrained argmax. Only when it is not (a few times per reply: the opening brace, the keys) is
    the grammar run over the whole vocabulary (``full_passes``)."""

    def __init__(self, model: LlamaModel, sampler: Any) -> None:
        self.model = model
        self.lib = model.lib
        self.sampler = sampler
        self._buffer = Candidates(model)
        self.full_passes = 0

    def fork(self) -> GrammarState:
        """An independent copy of the parse state now (the caller closes it)."""
        return GrammarState(self.model, self.lib.llama_sampler_clone(self.sampler))

    def pick(self, logits: npt.NDArray[np.float32]) -> int:
        """The most likely token the grammar allows (the first of equal maxima, as ``np.argmax`` and llama.cpp's
        greedy sampler take it), taken into the parse state; -1 when it allows none."""
        token = int(np.argmax(logits))
        if not self.allows(token, float(logits[token])):
            token = self.best(logits)
        self.accept(token)
        return token

    def accept(self, token: int) -> None:
        """Advance past ``token`` (not past the end of generation, which the grammar does not hold)."""
        if token >= 0 and not self.model.is_eog(token):
            self.lib.llama_sampler_accept(self.sampler, token)

    def allows(self, token: int, logit: float) -> bool:
        lib = self.lib
        one = (lib.llama_token_data * 1)(lib.llama_token_data(token, logit, 0.0))
        arr = lib.llama_token_data_array(one, 1, -1, False)
        lib.llama_sampler_apply(self.sampler, ctypes.byref(arr))
        return not math.isinf(one[0].logit)

    def best(self, logits: npt.NDArray[np.float32]) -> int:
        """The argmax over the tokens the grammar allows (a pass over the whole vocabulary); -1 if none."""
        masked = self.masked(logits)
        best = int(np.argmax(masked))
        return -1 if math.isinf(float(masked[best])) else best

    def masked(self, logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``logits`` with the tokens the grammar does not allow now at ``-inf`` (a pass over the vocabulary; the
        buffer's, valid until the next pass)."""
        cand, arr = self._buffer.fill(logits)
        self.apply(arr)
        logits_now: npt.NDArray[np.float32] = cand["logit"]
        return logits_now

    def apply(self, arr: Any) -> None:
        """Mask the tokens of ``arr`` the grammar does not allow (a pass over them)."""
        self.full_passes += 1
        self.lib.llama_sampler_apply(self.sampler, ctypes.byref(arr))

    def close(self) -> None:
        if self.sampler is not None:
            self.lib.llama_sampler_free(self.sampler)
            self.sampler = None


class Candidates:
    """All tokens of a vocabulary with their logits, as a ``llama_token_data_array`` over a buffer made on first
    use (most samplers and grammar copies never need one) and reused."""

    def __init__(self, model: LlamaModel) -> None:
        self.lib = model.lib
        self.n_vocab = model.n_vocab
        self.cand: npt.NDArray[Any] | None = None

    def fill(self, logits: npt.NDArray[np.float32]) -> tuple[npt.NDArray[Any], Any]:
        if self.cand is None:
            dtype = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
            self.cand = np.zeros(self.n_vocab, dtype=dtype)
        cand = self.cand
        cand["id"] = np.arange(len(cand), dtype=np.int32)
        cand["logit"] = logits
        cand["p"] = 0.0
        data = ctypes.cast(cand.ctypes.data, ctypes.POINTER(self.lib.llama_token_data))
        return cand, self.lib.llama_token_data_array(data, len(cand), -1, False)


class SequenceSampler:
    """Chooses one sequence's next token from its logits and keeps its grammar state (``grammar``, greedy:
    ``GrammarState.pick``)."""

    def __init__(self, model: LlamaModel, params: SamplingParams, grammar: Any, seed: int) -> None:
        self.model = model
        self.lib = model.lib
        self.grammar = None if grammar is None else GrammarState(model, grammar)
        self.greedy = params.temperature <= 0.0
        self.chain: Any = None if self.greedy else self._chain(params, seed)
        self._buffer = Candidates(model)

    @property
    def full_grammar_passes(self) -> int:
        return 0 if self.grammar is None else self.grammar.full_passes

    def _chain(self, params: SamplingParams, seed: int) -> Any:
        lib = self.lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        for sampler in (
            lib.llama_sampler_init_top_k(_TOP_K),
            lib.llama_sampler_init_typical(_TYPICAL_P, 1),
            lib.llama_sampler_init_top_p(params.top_p, 1),
            lib.llama_sampler_init_min_p(_MIN_P, 1),
            lib.llama_sampler_init_temp(params.temperature),
            lib.llama_sampler_init_dist(seed & 0xFFFFFFFF),
        ):
            lib.llama_sampler_chain_add(chain, sampler)  # the chain owns and frees them
        return chain

    def sample(self, logits: npt.NDArray[np.float32]) -> int:
        """The next token, or -1 when the grammar allows none (the reply cannot continue)."""
        if not self.greedy:
            token = self._sample_chain(logits)
            if self.grammar is not None:
                self.grammar.accept(token)
            return token
        return int(np.argmax(logits)) if self.grammar is None else self.grammar.pick(logits)

    def _sample_chain(self, logits: npt.NDArray[np.float32]) -> int:
        _, arr = self._buffer.fill(logits)
        if self.grammar is not None:
            self.grammar.apply(arr)
        self.lib.llama_sampler_apply(self.chain, ctypes.byref(arr))
        if arr.selected < 0 or arr.size == 0:
            return -1
        chosen = arr.data[arr.selected]
        if math.isinf(chosen.logit) and chosen.logit < 0:
            return -1
        token = int(chosen.id)
        self.lib.llama_sampler_accept(self.chain, token)
        return token

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()
        if self.chain is not None:
            self.lib.llama_sampler_free(self.chain)
        self.grammar = self.chain = None


class TextStream:
    """The text of one reply as its tokens arrive: stop strings, and the pieces that are safe to stream."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s.encode("utf-8") for s in stops if s]
        self.data = b""
        self.holding = False
        self._hold = 0
        self._sent = 0

    def push(self, piece: bytes) -> bool:
        """Add one token's bytes; True when a stop string ended the reply (the text is cut before it)."""
        self.data += piece
        self._hold = _utf8_hold(self.data, self._hold)
        # While the text ends inside a multi-byte character, stop strings and the length limit wait (as in the
        # high-level API, whose counter this reproduces exactly, quirks included).
        if self._hold > 0:
            self._hold -= 1
            self.holding = True
            return False
        self.holding = False
        found = [s for s in self.stops if s in self.data]
        if found:
            self.data = self.data[: self.data.index(found[0])]
            return True
        return False

    def delta(self) -> str:
        """New text that can be shown: whole characters only, holding back what may begin a stop string."""
        end = len(self.data) - _partial_utf8_tail(self.data)
        for s in self.stops:
            for k in range(min(len(s) - 1, end - self._sent), 0, -1):
                if self.data[end - k : end] == s[:k]:
                    end -= k
                    break
        return self._take(end)

    def flush(self) -> str:
        """Everything not yet streamed, at the end of the reply."""
        return self._take(len(self.data))

    def _take(self, end: int) -> str:
        if end <= self._sent:
            return ""
        chunk = self.data[self._sent : end]
        self._sent = end
        return chunk.decode("utf-8", errors="ignore")

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="ignore")


def _utf8_hold(data: bytes, hold: int) -> int:
    """llama-cpp-python's ``multibyte_fix``: for the last 3 bytes, a lead byte k bytes from the end of a
    character of ``num`` bytes leaves ``num - k`` bytes missing (the last match wins; no match keeps ``hold``)."""
    for i, byte in enumerate(data[-3:]):
        k = 3 - i
        for num, pattern in ((2, 0xC0), (3, 0xE0), (4, 0xF0)):
            if num > k and pattern & byte == pattern:
                hold = num - k
    return hold


def _partial_utf8_tail(data: bytes) -> int:
    """How many bytes at the end of ``data`` start a UTF-8 character that is not complete yet."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:  # continuation byte: keep looking for the lead byte
            continue
        size = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
        return back if size > back else 0
    return 0
