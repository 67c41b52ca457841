"""A declared capability is a promise the code keeps: each test reads what a backend declares and checks it against
what the backend then does. ``batching``: a batch's jobs run together (the engine decodes several sequences at once;
a server runs as many requests at once as the slots it reports; a fleet runs jobs on all its servers); ``logprobs``:
a request for them gets them; ``json_schema``: a reply constrained to a schema parses and keeps to it.

The servers are small OpenAI-compatible ones on 127.0.0.1 (real HTTP, the real ``openai`` SDK) and, in the slow
tests, llama-cpp-python's server and the embedded engine on the shipped SmolLM2."""

from __future__ import annotations

import json

import pytest

from minions.backends.base import Backend
from minions.backends.fleet import FleetBackend
from minions.backends.llamacpp import LlamaCppBackend
from minions.backends.openai import OpenAIBackend, Provider
from minions.types import ChatRequest, Message, SamplingParams
from tests.backends.test_fleet import EchoServer, jobs
from tests.loopback import serving

LOCAL_SERVER = Provider("openai-compatible", None, key_env=None)
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Oslo"]}},
    "required": ["city"],
    "additionalProperties": False,
}


def server(url: str) -> OpenAIBackend:
    return OpenAIBackend("smollm2", provider=LOCAL_SERVER, base_url=url)


def test_hosted_apis_run_a_batch_together() -> None:
    hosted = OpenAIBackend("gpt-4o-mini")
    assert hosted.capabilities.batching and hosted.max_concurrency > 1  # nothing asked: no server is contacted


@pytest.mark.parametrize("slots", [3, None])
def test_a_server_batches_where_it_reports_slots_and_runs_that_many_at_once(slots: int | None) -> None:
    with serving(EchoServer(logprobs=True, slots=slots)) as echo:
        backend = server(echo.base_url)
        assert backend.capabilities.batching is (slots is not None)
        assert backend.capabilities.logprobs  # asked in the same breath
        backend.batch(jobs(6))
    if slots is not None:
        assert echo.peak == slots


def test_a_fleet_batches_over_two_servers_and_on_one_only_where_that_one_does() -> None:
    with serving(EchoServer()) as a, serving(EchoServer()) as b, serving(EchoServer(slots=2)) as c:
        assert FleetBackend("m", [a.base_url, b.base_url]).capabilities.batching
        assert not FleetBackend("m", [a.base_url]).capabilities.batching
        assert FleetBackend("m", [c.base_url]).capabilities.batching


def check_logprobs_and_schema(backend: Backend) -> None:
    """What ``logprobs`` and ``json_schema`` promise, on a real model."""
    caps = backend.capabilities
    assert caps.logprobs and caps.json_schema
    scored = backend.chat("Name a colour.", SamplingParams(max_tokens=2, logprobs=5))
    steps = scored.stats["logprobs"]
    assert steps and 1 < len(steps[0]) <= 5  # the alternatives of the first reply token
    shaped = backend.chat("Which city is the capital of France?", SamplingParams(max_tokens=24, json_schema=SCHEMA))
    assert json.loads(shaped.text)["city"] in ("Paris", "Rome", "Oslo")


@pytest.mark.slow
def test_llama_cpp_python_server_declares_what_it_does(openai_server: str) -> None:
    backend = server(openai_server)
    check_logprobs_and_schema(backend)
    # it runs one request at a time and reports no slots: its jobs are not declared to run together
    assert not backend.capabilities.batching and backend.slots is None


@pytest.mark.slow
def test_the_embedded_engine_declares_what_it_does() -> None:
    backend = LlamaCppBackend()
    check_logprobs_and_schema(backend)
    assert backend.capabilities.batching
    questions = ["Name a colour.", "Name a fruit.", "Name a river."]
    results = backend.batch([ChatRequest([Message("user", q)], SamplingParams(max_tokens=4)) for q in questions])
    assert results[0].stats["batch"]["peak_seqs"] == 3  # decoded together
