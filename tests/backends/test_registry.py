from __future__ import annotations

import pytest

from minions.backends import registry
from minions.backends.registry import default_local, default_remote, providers, resolve
from minions.backends.scripted import ScriptedBackend
from minions.errors import ModelNotFoundError, UnknownProviderError


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(UnknownProviderError, match=r"Unknown provider 'nope'.*llamacpp.*openai"):
        resolve("nope/model")


def test_a_provider_without_a_model_is_an_error() -> None:
    with pytest.raises(UnknownProviderError, match="openai/<model>"):
        resolve("openai")


def test_openai_compatible_splits_model_and_url_at_the_last_at() -> None:
    backend = resolve("openai-compatible/org/model@v2@http://127.0.0.1:9/v1")
    assert backend.name == "openai-compatible/org/model@v2"
    with pytest.raises(UnknownProviderError, match="openai-compatible/<model>@<base_url>"):
        resolve("openai-compatible/model-without-url")


def test_an_openai_compatible_server_is_on_this_device_only_on_loopback() -> None:
    assert resolve("openai-compatible/smollm2@http://127.0.0.1:8080/v1").capabilities.local
    assert not resolve("openai-compatible/smollm2@http://192.0.2.1:8080/v1").capabilities.local


def test_providers_resolve_without_reading_keys(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = resolve("openai/gpt-4o-mini")  # the key is read at the first call, not here
    assert backend.name == "openai/gpt-4o-mini"
    assert not backend.capabilities.local
    assert resolve("ollama/llama3.2").name == "ollama/llama3.2"


def test_a_missing_gguf_path_says_so(tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve(f"llamacpp/{tmp_path}/missing.gguf")
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(ModelNotFoundError, match="not a GGUF"):
        resolve(f"llamacpp/{not_gguf}")


def test_registered_providers_resolve_and_backends_pass_through(register_provider) -> None:
    fake = ScriptedBackend("scripted/x")
    register_provider("scripted", lambda model: fake)
    assert "scripted" in providers()
    assert resolve("scripted/anything") is fake
    assert resolve(fake) is fake


def test_an_unregistered_provider_no_longer_resolves() -> None:
    registry.register_provider("gone", lambda model: ScriptedBackend(f"gone/{model}"))
    assert resolve("gone/m").name == "gone/m"
    registry.unregister_provider("gone")
    assert "gone" not in providers()
    with pytest.raises(UnknownProviderError, match="Unknown provider 'gone'"):
        resolve("gone/m")


def test_environment_sets_the_defaults(monkeypatch) -> None:
    monkeypatch.delenv("MINIONS_LOCAL", raising=False)
    monkeypatch.delenv("MINIONS_REMOTE", raising=False)
    assert default_local() == "llamacpp/default"
    assert default_remote() is None
    monkeypatch.setenv("MINIONS_REMOTE", "openai/gpt-4o")
    assert default_remote() == "openai/gpt-4o"
