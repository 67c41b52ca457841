"""minions: a small on-device model and a frontier cloud model working together on long documents.

The public API. Names from the higher layers (backends, protocols) load on first use, so that
``import minions`` stays cheap and the core never imports a model SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    BudgetExceededError,
    ConfigError,
    ContextLengthError,
    DocumentError,
    DocumentNotFoundError,
    EmptyDocumentError,
    MinionsError,
    MissingAPIKeyError,
    ModelNotFoundError,
    ModelOutputError,
    RateLimitError,
    UnknownProviderError,
    UnreadableDocumentError,
)
from minions.types import ChatRequest, ChatResult, Message, SamplingParams, Timings, Usage

if TYPE_CHECKING:
    from minions.backends.base import Backend, Capabilities
    from minions.backends.llamacpp import LlamaCppBackend
    from minions.backends.ollama import OllamaBackend
    from minions.backends.openai import OpenAIBackend
    from minions.backends.registry import resolve
    from minions.backends.scripted import ScriptedBackend
    from minions.chunking import Chunk, chunk_document, chunk_documents
    from minions.cost import Price, PriceTable
    from minions.documents import Document, load_document, load_documents
    from minions.protocols import (
        RAG,
        Budget,
        LocalOnly,
        Minion,
        Minions,
        RemoteOnly,
        RunResult,
        get_protocol,
    )
    from minions.protocols.library import Library

__version__ = "0.1.0"

_LAZY = {
    "Backend": "minions.backends.base",
    "Capabilities": "minions.backends.base",
    "LlamaCppBackend": "minions.backends.llamacpp",
    "OllamaBackend": "minions.backends.ollama",
    "OpenAIBackend": "minions.backends.openai",
    "ScriptedBackend": "minions.backends.scripted",
    "resolve": "minions.backends.registry",
    "Chunk": "minions.chunking",
    "chunk_document": "minions.chunking",
    "chunk_documents": "minions.chunking",
    "Price": "minions.cost",
    "PriceTable": "minions.cost",
    "Document": "minions.documents",
    "load_document": "minions.documents",
    "load_documents": "minions.documents",
    "Budget": "minions.protocols",
    "Library": "minions.protocols.library",
    "LocalOnly": "minions.protocols",
    "Minion": "minions.protocols",
    "Minions": "minions.protocols",
    "RAG": "minions.protocols",
    "RemoteOnly": "minions.protocols",
    "RunResult": "minions.protocols",
    "get_protocol": "minions.protocols",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'minions' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "RAG",
    "Backend",
    "BackendConnectionError",
    "BackendError",
    "BackendTimeoutError",
    "Budget",
    "BudgetExceededError",
    "Capabilities",
    "ChatRequest",
    "ChatResult",
    "Chunk",
    "ConfigError",
    "ContextLengthError",
    "Document",
    "DocumentError",
    "DocumentNotFoundError",
    "EmptyDocumentError",
    "Library",
    "LlamaCppBackend",
    "LocalOnly",
    "Message",
    "Minion",
    "Minions",
    "MinionsError",
    "MissingAPIKeyError",
    "ModelNotFoundError",
    "ModelOutputError",
    "OllamaBackend",
    "OpenAIBackend",
    "Price",
    "PriceTable",
    "RateLimitError",
    "RemoteOnly",
    "RunResult",
    "SamplingParams",
    "ScriptedBackend",
    "Timings",
    "UnknownProviderError",
    "UnreadableDocumentError",
    "Usage",
    "chunk_document",
    "chunk_documents",
    "get_protocol",
    "load_document",
    "load_documents",
    "resolve",
]
