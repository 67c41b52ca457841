from __future__ import annotations

from rich.console import Console

from minions.render import usage_table
from minions.types import Usage


def render(table) -> str:
    console = Console(width=140, record=True)
    console.print(table)
    return console.export_text()


def test_with_a_remote_the_table_shows_the_saving() -> None:
    usage = {"local": Usage(100, 20, calls=2), "remote": Usage(300, 40, calls=2, cost_usd=0.001)}
    text = render(
        usage_table(usage, {"local": "llamacpp/default", "remote": "openai/gpt-4o"}, Usage(5000, cost_usd=0.0125))
    )
    assert "openai/gpt-4o" in text and "remote only (est.)" in text
    assert "saved $0.0115" in text


def test_without_a_remote_it_says_nothing_left_the_device() -> None:
    usage = {"local": Usage(100, 20, calls=2), "remote": Usage()}
    text = render(usage_table(usage, {"local": "llamacpp/default", "remote": None}, Usage(5000)))
    assert "nothing left this device" in text
    assert "remote only" not in text and "│ remote" not in text
