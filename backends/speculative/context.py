"""A llama.cpp context that returns logits for every token of a verify call.

``engine_llama.LlamaContext`` reserves logits for one token per sequence (``n_outputs_max = n_seq_max``);
verification reads ``k + 1`` rows per sequence, so this context reserves ``n_batch`` rows (n_batch x n_vocab
floats: 100 MB for SmolLM2 at n_batch 512, which is why the engine does not do it by default). Everything else
is the engine's context: a KV stream per sequence, flash attention off.
"""

from __future__ import annotations

from minions.errors import BackendError

from ..engine_llama import LlamaContext, LlamaModel

__all__ = ["open_context"]


class _VerifyContext(LlamaContext):
    def __init__(self, model: LlamaModel, *, seq_ctx: int, n_seq_max: int, n_batch: int, n_threads: int) -> None:
        lib = self.lib = model.lib
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = seq_ctx * n_seq_max
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq_max
        params.n_outputs_max = n_batch  # every token of a verify call may need its logits
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.kv_unified = False
        params.no_perf = True
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = lib.llama_init_from_model(model.model, params)
        if not self.ctx:
            raise BackendError(f"llama.cpp could not create {n_seq_max} sequences of {seq_ctx} cells.")
        self.mem = lib.llama_get_memory(self.ctx)
        self.seq_ctx = lib.llama_n_ctx_seq(self.ctx)
        self.kv_bytes = self.seq_ctx * n_seq_max * model.kv_bytes_per_token
        self.n_seq_max = n_seq_max
        self.n_batch = n_batch


def open_context(model: LlamaModel, *, n_seqs: int, seq_ctx: int, n_batch: int, n_threads: int) -> LlamaContext:
    """A context of ``n_seqs`` streams of ``seq_ctx`` cells with logits for up to ``n_batch`` tokens per call."""
    return _VerifyContext(model, seq_ctx=seq_ctx, n_seq_max=n_seqs, n_batch=n_batch, n_threads=n_threads)
