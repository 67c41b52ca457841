"""A thin, typed layer over llama.cpp's low-level C API (llama-cpp-python 0.3.36), for the batching engine.

Three objects, each owning one C resource:

- ``LlamaModel``: the weights, the vocabulary, the tokenizer and the chat template of one GGUF file.
- ``LlamaContext``: one context with a KV stream per sequence (``kv_unified=False``, see
  ``backends.llamacpp.slots`` for why), decoded together.
- ``TokenBatch``: a ``llama_batch`` whose arrays are numpy buffers, filled with vector writes.

The high-level ``llama_cpp.Llama`` holds one sequence; everything here is what the engine needs to run many.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from minions.errors import BackendError, ConfigError, ModelNotFoundError
from minions.types import Message, reply_start

from ..templates import CHATML_TURN, template_without_one

__all__ = ["VERBOSE_ENV", "LlamaContext", "LlamaModel", "TokenBatch", "import_llama_cpp", "llama_verbose"]


VERBOSE_ENV = "MINIONS_LLAMA_VERBOSE"
"""Set to 1 to see llama.cpp's own log lines (model loading, conversion warnings); the CLI's ``--debug`` shows
them too."""


def import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise ConfigError(
            "llama-cpp-python is not installed: run `make setup` (it builds llama.cpp with the right CPU flags), "
            "or see docs/install.md."
        ) from exc
    _route_llama_log(llama_cpp)
    return llama_cpp


def llama_verbose() -> bool:
    """Whether llama.cpp's own log lines show: ``MINIONS_LLAMA_VERBOSE`` set (and not 0), else whether this module
    logs at debug level (the CLI's ``--debug``)."""
    value = os.environ.get(VERBOSE_ENV, "").strip().lower()
    if value:
        return value not in ("0", "false", "no", "off")
    return log.isEnabledFor(logging.DEBUG)


_log_callback: Any = None
"""The C callback installed in llama.cpp, kept alive here (ctypes frees a callback nothing refers to)."""


def _route_llama_log(llama_cpp: Any) -> None:
    """Send llama.cpp's and ggml's log lines to stderr only when ``llama_verbose()``, asked at each line.

    llama-cpp-python installs a callback of its own, which filters by a table of log levels older than this
    llama.cpp's (its "error" is this llama.cpp's warning), so warnings such as the Q4_0 conversion's "falling back
    to q8_0" reached every user.
    """
    global _log_callback
    if _log_callback is not None:
        return

    def write(level: int, text: bytes, user_data: Any) -> None:
        if llama_verbose():
            sys.stderr.write(text.decode("utf-8", "replace"))
            sys.stderr.flush()

    _log_callback = llama_cpp.llama_log_callback(write)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


log = logging.getLogger(__name__)

# ``llama_state_seq_*_ext`` flag: the recurrent part of a sequence's memory only (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)
_PARTIAL_ONLY = 1
# A token's text is at most this many bytes in every vocabulary we know (the C API truncates beyond it).
_PIECE_BUFFER = 64


class LlamaModel:
    """A GGUF model: weights, vocabulary, tokenizer and chat template. Free it with ``close()``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.lib = import_llama_cpp()
        self.path = Path(path)
        lib = self.lib
        lib.llama_backend_init()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.model:
            raise ModelNotFoundError(f"llama.cpp could not load {str(self.path)!r}: is it a GGUF model file?")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab: int = lib.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train: int = lib.llama_model_n_ctx_train(self.model)
        self.n_params: int = lib.llama_model_n_params(self.model)
        # Recurrent layers (Mamba, RWKV, LFM2's short convolutions) keep one state per sequence, at its last
        # position only: such memory cannot drop the tail of a sequence (``backends.llamacpp.slots``)
        self.memory: str = (
            "hybrid" if lib.llama_model_is_hybrid(self.model)
            else "recurrent" if lib.llama_model_is_recurrent(self.model)
            else "attention"
        )  # fmt: skip
        # bytes of keys and values per token, in f16: layers x (K and V) x kv heads x head size x 2
        head = lib.llama_model_n_embd(self.model) // lib.llama_model_n_head(self.model)
        self.kv_bytes_per_token: int = (
            lib.llama_model_n_layer(self.model) * 2 * lib.llama_model_n_head_kv(self.model) * head * 2
        )
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self._formatter: Any = None

    # -- tokens ------------------------------------------------------------------------------------------
    def tokenize(self, text: str, *, special: bool = True, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; ``special=True`` parses ``<|im_start|>`` and friends as single tokens."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buf = (self.lib.llama_token * capacity)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_bos, special)
        if n < 0:  # cannot happen with one token per byte at most, but the API says to retry with -n
            buf = (self.lib.llama_token * -n)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, -n, add_bos, special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes of one token, as the high-level API detokenizes (special tokens render as nothing)."""
        cached = self._pieces[token]
        if cached is None:
            buf = ctypes.create_string_buffer(_PIECE_BUFFER)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, _PIECE_BUFFER, 0, False)
            cached = self._pieces[token] = bytes(buf.raw[: max(n, 0)])
        return cached

    def detokenize(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.piece(t) for t in tokens)

    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT and the like."""
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return str(self.lib.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="replace"))

    # -- chat template -----------------------------------------------------------------------------------
    def render_chat(self, messages: Sequence[Message]) -> str:
        """The prompt text of ``messages`` under the model's own chat template (GGUF ``tokenizer.chat_template``),
        rendered by the same Jinja formatter ``Llama.create_chat_completion`` uses, so both see the same tokens. A last
        message from the assistant is the start of the reply: the reply goes on from its text."""
        if self._formatter is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            raw = self.lib.llama_model_chat_template(self.model, None)
            template = raw.decode("utf-8") if raw else template_without_one(self.has_chatml_turns())
            eos = self.lib.llama_vocab_eos(self.vocab)
            bos = self.lib.llama_vocab_bos(self.vocab)
            self._formatter = Jinja2ChatFormatter(
                template=template, eos_token=self.token_text(eos), bos_token=self.token_text(bos)
            )
        start = reply_start(messages)
        head = messages[:-1] if start is not None else messages
        return str(self._formatter(messages=[m.to_dict() for m in head]).prompt) + (start or "")

    def has_chatml_turns(self) -> bool:
        """Whether the vocabulary has ChatML's turn marks as tokens of their own (an instruct model's)."""
        return len(self.tokenize(CHATML_TURN, special=True)) == 1

    def chat_tokens(self, messages: Sequence[Message]) -> list[int]:
        # The template writes any BOS itself (Jinja2ChatFormatter says ``added_special``), so none is added here.
        return self.tokenize(self.render_chat(messages), special=True, add_bos=False)

    def close(self) -> None:
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None


class TokenBatch:
    """A ``llama_batch`` over numpy buffers: ``tokens[i]`` at ``pos[i]`` in sequence ``seq[i]``, with logits
    computed where ``want[i]`` is 1. Each token belongs to exactly one sequence (shared prefixes are shared by
    ``seq_cp``, never by listing several ids on one token)."""

    def __init__(self, lib: Any, capacity: int) -> None:
        self.capacity = capacity
        self.tokens = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.want = np.zeros(capacity, dtype=np.int8)
        # seq_id is ``llama_seq_id **``: one pointer per token, each to that token's entry of ``self.seq``.
        self._seq_ptrs = (ctypes.POINTER(ctypes.c_int32) * capacity)(
            *[ctypes.cast(self.seq.ctypes.data + 4 * i, ctypes.POINTER(ctypes.c_int32)) for i in range(capacity)]
        )
        self.n = 0
        self._lib = lib

    def clear(self) -> None:
        self.n = 0

    @property
    def free(self) -> int:
        return self.capacity - self.n

    def add(self, tokens: Sequence[int], start_pos: int, seq: int, *, logits_last: bool) -> int:
        """Append ``tokens`` at positions ``start_pos...`` of ``seq``; return the batch index of the last one."""
        k = len(tokens)
        a, b = self.n, self.n + k
        if b > self.capacity:
            raise ValueError(f"batch overflow: {b} > {self.capacity}")
        self.tokens[a:b] = tokens
        self.pos[a:b] = np.arange(start_pos, start_pos + k, dtype=np.int32)
        self.seq[a:b] = seq
        self.want[a:b] = 0
        if logits_last:
            self.want[b - 1] = 1
        self.n = b
        return b - 1

    def as_llama_batch(self) -> Any:
        lib = self._lib
        return lib.llama_batch(
            n_tokens=self.n,
            token=self.tokens.ctypes.data_as(ctypes.POINTER(lib.llama_token)),
            embd=None,
            pos=self.pos.ctypes.data_as(ctypes.POINTER(lib.llama_pos)),
            n_seq_id=self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
            seq_id=ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(lib.llama_seq_id))),
            logits=self.want.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )


class LlamaContext:
    """One llama.cpp context of ``n_seq_max`` sequences, each with its own KV stream of ``seq_ctx`` cells, and
    logits for up to ``n_outputs`` tokens per call (default: one per sequence)."""

    def __init__(
        self,
        model: LlamaModel,
        *,
        seq_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_threads: int,
        flash_attn: bool = False,
        n_outputs: int | None = None,
    ) -> None:
        lib = self.lib = model.lib
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = seq_ctx * n_seq_max  # llama.cpp splits n_ctx evenly between the streams
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        # rows of logits one call may return: plain decoding reads one per sequence, a speculative verify call
        # one per token it checks; the default (n_batch rows of n_vocab floats) would reserve 100 MB for
        # SmolLM2's 49152-token vocabulary
        params.n_outputs_max = n_outputs or n_seq_max
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.kv_unified = False  # a stream per sequence: batched results equal single-sequence results
        params.no_perf = True
        # Off as in the high-level Llama, whose replies the plain engine reproduces. On, each query row's
        # attention is computed on its own, so a call over several tokens of one sequence (speculative
        # verification) gives bit for bit the logits of one call per token; off, it does not (up to ~1 logit)
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if n_seq_max > lib.llama_max_parallel_sequences():
            raise ConfigError(
                f"llama.cpp supports at most {lib.llama_max_parallel_sequences()} sequences: lower max_seqs."
            )
        self.ctx = lib.llama_init_from_model(model.model, params)
        if not self.ctx:
            raise BackendError(
                f"llama.cpp could not create {n_seq_max} sequences of {seq_ctx} cells for {model.path.name}."
            )
        self.mem = lib.llama_get_memory(self.ctx)
        self.seq_ctx: int = lib.llama_n_ctx_seq(self.ctx)
        self.kv_bytes = self.seq_ctx * n_seq_max * model.kv_bytes_per_token
        self.n_seq_max = n_seq_max
        self.n_batch = n_batch

    def decode(self, batch: TokenBatch) -> int:
        """``llama_decode``: 0 ok, 1 no KV room (memory unchanged), 2 aborted, < 0 error."""
        return int(self.lib.llama_decode(self.ctx, batch.as_llama_batch()))

    def logits(self, i: int) -> npt.NDArray[np.float32]:
        """The logits of batch entry ``i`` of the last decode: a view, valid until the next decode."""
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        if not ptr:
            raise BackendError(f"llama.cpp has no logits for batch entry {i}.")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))

    def recurrent_state(self, seq: int) -> bytes:
        """The recurrent part of ``seq``'s memory (its state at its last position; no attention cells), in
        llama.cpp's per-sequence state format."""
        lib = self.lib
        size = lib.llama_state_seq_get_size_ext(self.ctx, seq, _PARTIAL_ONLY)
        buf = (ctypes.c_uint8 * size)()
        if lib.llama_state_seq_get_data_ext(self.ctx, buf, size, seq, _PARTIAL_ONLY) != size:
            raise BackendError(f"llama.cpp could not save the recurrent state of sequence {seq}.")
        return bytes(buf)

    def restore_recurrent_state(self, seq: int, state: bytes) -> None:
        """Put back ``seq``'s recurrent state from ``recurrent_state`` (its attention cells stay as they are)."""
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if self.lib.llama_state_seq_set_data_ext(self.ctx, buf, len(state), seq, _PARTIAL_ONLY) != len(state):
            raise BackendError(f"llama.cpp could not restore the recurrent state of sequence {seq}.")

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        self.lib.llama_memory_seq_cp(self.mem, src, dst, p0, p1)

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        return bool(self.lib.llama_memory_seq_rm(self.mem, seq, p0, p1))

    def seq_pos_max(self, seq: int) -> int:
        """The last position ``seq`` holds, -1 when it holds none."""
        return int(self.lib.llama_memory_seq_pos_max(self.mem, seq))

    def seq_state(self, seq: int) -> bytes:
        """What ``seq`` holds (its cells' positions and keys and values, or a recurrent model's state), in
        llama.cpp's per-sequence state format. Pending stream copies must have run (a decode call since)."""
        size = self.lib.llama_state_seq_get_size(self.ctx, seq)
        buf = (ctypes.c_uint8 * size)()
        written = self.lib.llama_state_seq_get_data(self.ctx, buf, size, seq)
        if written != size:
            raise BackendError(f"llama.cpp wrote {written} of {size} bytes of sequence {seq}'s state.")
        return bytes(buf)

    def seq_restore(self, seq: int, state: bytes) -> bool:
        """Replace what ``seq`` holds with ``state`` (from ``seq_state``, maybe of another context of the same
        model and settings). False when llama.cpp refused it (another model, other settings, too large): then
        ``seq`` holds nothing."""
        self.seq_rm(seq)
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if self.lib.llama_state_seq_set_data(self.ctx, buf, len(state), seq) == len(state):
            return True
        self.seq_rm(seq)
        return False

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_free(self.ctx)
            self.ctx = None
