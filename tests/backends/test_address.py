"""'On this device' is a fact about an address: loopback or a Unix socket is, anything else is not."""

from __future__ import annotations

import pytest

from minions.backends.address import elsewhere, host_of, on_this_device

HERE = [
    None,  # a model in this process (the embedded llama.cpp)
    "http://127.0.0.1:11434",
    "127.0.0.1:11434",  # OLLAMA_HOST without a scheme
    "http://127.8.9.10/v1",
    "http://localhost:8080/v1",
    "http://LOCALHOST./v1",
    "http://[::1]:8000/v1",
    "http://[::ffff:127.0.0.1]:8000/v1",
    "http://0.0.0.0:11434",  # connecting to the unspecified address reaches this machine
    "unix:///run/ollama.sock",
    "http+unix://%2Frun%2Fllm.sock/v1",
]
ELSEWHERE = [
    "http://192.0.2.1:11434",
    "elsewhere:1234",
    "https://api.openai.com/v1",
    "http://10.0.0.7:8080/v1",  # a private network is still another machine
    "http://[2001:db8::1]:8000/v1",
    "http://localhost.example.com/v1",
    "http://127.0.0.1.nip.io/v1",  # a name is not its address: only "localhost" is trusted
    "http://[::1",  # not a URL
]


@pytest.mark.parametrize("address", HERE)
def test_loopback_unix_sockets_and_this_process_are_on_this_device(address: str | None) -> None:
    assert on_this_device(address)


@pytest.mark.parametrize("address", ELSEWHERE)
def test_every_other_address_is_another_machine(address: str) -> None:
    assert not on_this_device(address)


def test_host_of_says_where_text_goes() -> None:
    assert host_of("http://192.0.2.1:11434") == "192.0.2.1:11434"
    assert host_of("elsewhere:1234") == "elsewhere:1234"
    assert host_of("https://api.openai.com/v1") == "api.openai.com"
    assert host_of("http+unix://%2Frun%2Fllm.sock/v1") == host_of("unix:///run/llm.sock") == "unix socket /run/llm.sock"
    assert host_of(None) is None


def test_a_test_can_mark_one_loopback_port_as_another_machine() -> None:
    """``elsewhere`` stands for a remote server on 127.0.0.1: that port only, for the block only, nested blocks kept."""
    with elsewhere("http://127.0.0.1:8123/v1"):
        assert not on_this_device("http://127.0.0.1:8123/v1") and not on_this_device("127.0.0.1:8123")
        assert on_this_device("http://127.0.0.1:8124/v1") and on_this_device("http://localhost:8123/v1")
        assert not on_this_device("http://127.0.0.1:8123/v1,http://127.0.0.1:8124/v1")  # a fleet with one away
        with elsewhere("127.0.0.1:8123"):
            pass
        assert not on_this_device("http://127.0.0.1:8123")
    assert on_this_device("http://127.0.0.1:8123/v1")
    for address in ["http://192.0.2.1:8123", "http://127.0.0.1/v1", "unix:///run/x.sock"]:
        with pytest.raises(ValueError, match="loopback host:port"), elsewhere(address):
            pass
