"""The engine's pure parts, without a model: chunking rules, prefix matching, stop strings and UTF-8."""

from __future__ import annotations

import pytest

from minions.backends.llamacpp.sampling import TextStream, _utf8_hold
from minions.backends.llamacpp.scheduler import chunk_size, reuse_cap
from minions.backends.llamacpp.slots import common_prefix


def chunks(n: int, done: int, budget: int = 512, n_batch: int = 512) -> list[int]:
    sizes = []
    while done < n:
        k = chunk_size(n, done, budget, n_batch)
        sizes.append(k)
        done += k
    return sizes


@pytest.mark.parametrize("n", [3, 10, 400, 512, 513, 514, 1024, 1025, 1026, 2000])
@pytest.mark.parametrize("shared", [0, 1, 50, 380, 511, 512, 1023, 1024, 1025, 5000])
def test_no_prompt_token_is_computed_alone_except_where_llama_eval_does(n: int, shared: int) -> None:
    reuse = reuse_cap(shared, n, 512)
    assert 0 <= reuse <= min(shared, n - 1)
    for budget in (512, 100, 7):
        sizes = chunks(n, reuse, budget)
        assert sum(sizes) == n - reuse and all(k >= 1 for k in sizes)
        alone = [i for i, k in enumerate(sizes) if k == 1]
        # Llama.eval computes the prompt in chunks of 512 from 0: only a last chunk of 1 when n % 512 == 1
        assert alone == ([len(sizes) - 1] if n % 512 == 1 else [])


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5], [6]) == 0


def test_stop_strings_cut_the_text_at_the_first_listed_stop_found() -> None:
    stream = TextStream(["END", "<|im_end|>"])
    assert not stream.push(b"Hello E")
    assert stream.delta() == "Hello "  # "E" may begin "END": held back
    assert stream.push(b"ND and more")
    assert stream.text == "Hello " and stream.flush() == ""


def test_streamed_text_never_splits_a_character() -> None:
    stream = TextStream([])
    euro = "€".encode()
    stream.push(b"cost " + euro[:1])
    assert stream.delta() == "cost "
    stream.push(euro[1:])
    stream.push(b"5")
    assert stream.delta() == "€5" and stream.text == "cost €5"


def test_length_checks_wait_while_the_text_ends_inside_a_character() -> None:
    # llama-cpp-python's counter: a 3-byte character's lead byte at the end leaves 2 bytes to wait for
    assert _utf8_hold(b"ab" + "€".encode()[:1], 0) == 2
    assert _utf8_hold(b"abc", 0) == 0
    stream = TextStream([])
    stream.push(b"ab" + "€".encode()[:1])
    assert stream.holding
    stream.push("€".encode()[1:])
    assert stream.holding  # the counter runs down one token at a time, as in create_completion
    stream.push(b"x")
    assert not stream.holding
