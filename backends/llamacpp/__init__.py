"""The llama.cpp family of local backends: GGUF models in this process, through llama-cpp-python's C API.

Modules, each importing only those listed before it:

- ``ffi``: typed wrappers over the C API (model, context, batch) and ``import_llama_cpp``.
- ``slots``: which sequence holds which tokens, and prefix sharing between them.
- ``sampling``: grammars, samplers and the text stream of a sequence.
- ``cost_table``: this machine's cost table of a decode call, measured once per model and cached (speculation's
  depths are chosen by it; the rest of speculative decoding is ``backends.speculation``, whichever engine).
- ``draft_model``: a second GGUF with the target's vocabulary, drafting greedily (``DraftModel``).
- ``sequence``: one job as the engine holds it (``EngineSequence``).
- ``step``: one decode step of the generating jobs: draft, fill, verify, roll back (``Decoder``).
- ``scheduler``: one engine run: admission, prefix sharing, prompt chunks, endings.
- ``engine``: the batching engine (``Engine``, ``EngineConfig``).
- ``worker``: the one thread of the process that decodes.
- ``backend``: ``LlamaCppBackend``, the ``Backend`` the protocols use.
- ``quantize``: the default model's quantization.

Its benchmarks and synthetic models are tools, not parts of the runtime: ``evals.bench`` and ``evals.synthetic``.
"""

from .backend import DEFAULT_CONTEXT, LlamaCppBackend
from .ffi import import_llama_cpp

__all__ = ["DEFAULT_CONTEXT", "LlamaCppBackend", "import_llama_cpp"]
