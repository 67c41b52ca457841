"""The llama.cpp family of local backends: GGUF models in this process, through llama-cpp-python's C API.

Modules, each importing only those listed before it:

- ``ffi``: typed wrappers over the C API (model, context, batch) and ``import_llama_cpp``.
- ``slots``: which sequence holds which tokens, and prefix sharing between them.
- ``sampling``: grammars, samplers and the text stream of a sequence.
- ``speculative``: speculative decoding's llama.cpp parts (the cost table, a draft model, its benchmark); the rest
  is ``backends.speculation``, whichever engine.
- ``scheduler``: one engine run: admission, batched prefill and decode, verification.
- ``engine``: the batching engine (``Engine``, ``EngineConfig``).
- ``worker``: the one thread of the process that decodes.
- ``backend``: ``LlamaCppBackend``, the ``Backend`` the protocols use.
- ``quantize``, ``bench``: the default model's quantization, and the engine benchmark.
"""

from .backend import DEFAULT_CONTEXT, LlamaCppBackend
from .ffi import import_llama_cpp

__all__ = ["DEFAULT_CONTEXT", "LlamaCppBackend", "import_llama_cpp"]
