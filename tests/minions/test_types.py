from __future__ import annotations

import dataclasses

import pytest

from minions.types import ChatResult, Message, SamplingParams, Timings, Usage, as_messages


def test_usage_adds_every_field_and_sums_from_zero() -> None:
    a = Usage(prompt_tokens=10, completion_tokens=2, cached_prompt_tokens=4, calls=1, seconds=0.5, cost_usd=0.01)
    b = Usage(prompt_tokens=5, completion_tokens=3, calls=2, seconds=1.0, cost_usd=0.02)
    total = sum([a, b])
    assert total == Usage(15, 5, 4, 3, 1.5, pytest.approx(0.03))
    assert total.total_tokens == 20
    assert a + Usage() == a


def test_usage_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Usage().prompt_tokens = 3  # type: ignore[misc]


def test_as_messages_accepts_strings_dicts_and_messages() -> None:
    assert as_messages("hi") == [Message("user", "hi")]
    assert as_messages([{"role": "system", "content": "s"}, Message("user", "u")]) == [
        Message("system", "s"),
        Message("user", "u"),
    ]
    with pytest.raises(ValueError, match="role"):
        as_messages([{"role": "robot", "content": "x"}])


def test_chat_result_to_dict_has_the_same_shape_for_errors() -> None:
    ok = ChatResult("t", Usage(calls=1), "stop", Timings(1.0), "m")
    failed = ChatResult("", Usage(), "error", Timings(), "m", error="boom")
    assert ok.ok and not failed.ok
    assert ok.to_dict().keys() == failed.to_dict().keys()


def test_sampling_params_with_returns_a_changed_copy() -> None:
    p = SamplingParams()
    q = p.with_(max_tokens=7)
    assert (p.max_tokens, q.max_tokens) == (512, 7)
