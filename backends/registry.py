"""Resolve ``"provider/model"`` strings to backends. Apps never branch on providers; they call ``resolve``.

Spellings:

- ``llamacpp/default``: the embedded SmolLM2 (``llamacpp`` alone means the same)
- ``llamacpp//abs/path/model.gguf``, ``llamacpp/./model.gguf``, ``llamacpp/~/m.gguf``: a GGUF file
- ``openai/gpt-4o-mini`` (and every provider in ``backends.openai.PROVIDERS``: ``openrouter/...``,
  ``anthropic/...``, ``gemini/...``, ...)
- ``transformers/default``: the embedded SmolLM2 through PyTorch; ``transformers//abs/model.gguf`` or
  ``transformers//abs/folder``: a GGUF file or a transformers folder on disk (never downloaded)
- ``ollama/llama3.2``
- ``openai-compatible/<model>@<base_url>``: any OpenAI-compatible server, e.g.
  ``openai-compatible/smollm2@http://127.0.0.1:8080/v1`` (the model name may itself contain ``/``)
- ``openai-compatible/<model>@<url>,<url>,...``: the same model on several servers, jobs spread over them
  (``backends.fleet``)

``MINIONS_LOCAL`` and ``MINIONS_REMOTE`` name the default local and remote models; ``MINIONS_DRAFT_MODEL``, a GGUF
that drafts for the embedded engine's model (speculative decoding, lossless).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from minions.errors import UnknownProviderError

from .base import Backend

__all__ = [
    "DEFAULT_LOCAL",
    "default_local",
    "default_remote",
    "providers",
    "register_provider",
    "resolve",
    "unregister_provider",
]

DEFAULT_LOCAL = "llamacpp/default"
DRAFT_ENV = "MINIONS_DRAFT_MODEL"
"""A draft model's GGUF for the embedded engine (``llamacpp/...``): the same vocabulary, ten or more times cheaper."""

Factory = Callable[[str], Backend]
_FACTORIES: dict[str, Factory] = {}


def register_provider(name: str, factory: Factory) -> None:
    """Make ``name/<model>`` resolve through ``factory(model)``. Tests register scripted backends this way."""
    _FACTORIES[name] = factory


def unregister_provider(name: str) -> None:
    """Undo ``register_provider(name, ...)``: ``name/<model>`` no longer resolves (a name not registered is left
    alone; the built-in providers cannot be removed)."""
    _FACTORIES.pop(name, None)


def _llamacpp(model: str) -> Backend:
    from .llamacpp import LlamaCppBackend

    draft = os.environ.get(DRAFT_ENV) or None
    return LlamaCppBackend(None if model in ("", "default") else model, draft_model=draft)


def _transformers(model: str) -> Backend:
    from .pytorch import TransformersBackend

    return TransformersBackend(None if model in ("", "default") else model)


def _ollama(model: str) -> Backend:
    from .ollama import OllamaBackend

    return OllamaBackend(model)


def _openai_compatible(spec: str) -> Backend:
    from .openai import OpenAIBackend, Provider

    model, sep, base_url = spec.rpartition("@")
    urls = [u.strip() for u in base_url.split(",")]
    if not sep or not model or not all(u.startswith(("http://", "https://")) for u in urls):
        raise UnknownProviderError(
            f"openai-compatible needs a model and a URL: openai-compatible/<model>@<base_url>[,<base_url>...], got "
            f"{spec!r} (e.g. openai-compatible/smollm2@http://127.0.0.1:8080/v1)."
        )
    if len(urls) > 1:
        from .fleet import FleetBackend

        return FleetBackend(model, urls)
    return OpenAIBackend(model, provider=Provider("openai-compatible", base_url, key_env=None))


def _provider_factory(provider: str) -> Factory:
    def make(model: str) -> Backend:
        from .openai import OpenAIBackend

        return OpenAIBackend(model, provider=provider)

    return make


def providers() -> dict[str, Factory]:
    from .openai import PROVIDERS

    table: dict[str, Factory] = {name: _provider_factory(name) for name in PROVIDERS}
    table.update({"llamacpp": _llamacpp, "transformers": _transformers, "ollama": _ollama,
                  "openai-compatible": _openai_compatible})  # fmt: skip
    table.update(_FACTORIES)
    return table


def resolve(spec: str | Backend) -> Backend:
    """A backend for ``spec`` (returned unchanged if it already is one)."""
    if not isinstance(spec, str):
        return spec
    provider, _, model = spec.strip().partition("/")
    table = providers()
    if provider not in table:
        raise UnknownProviderError(
            f"Unknown provider {provider!r} in {spec!r}: use one of {', '.join(sorted(table))} "
            "as provider/model (see `minions models`)."
        )
    if not model and provider not in ("llamacpp", "transformers"):
        raise UnknownProviderError(f"{spec!r} names no model: write {provider}/<model>.")
    return table[provider](model)


def default_local() -> str:
    return os.environ.get("MINIONS_LOCAL") or DEFAULT_LOCAL


def default_remote() -> str | None:
    """The configured remote model, or None: then the local model also writes the final answer."""
    return os.environ.get("MINIONS_REMOTE") or None
