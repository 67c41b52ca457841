from __future__ import annotations

from rich.console import Console

from minions.apps.cli.render import print_result, usage_table
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


def test_a_local_model_elsewhere_is_said_instead_of_nothing_left() -> None:
    usage = {"local": Usage(100, 20, calls=2), "remote": Usage()}
    said = "2 local prompts (80 characters) left this device to 192.0.2.1:11434 (the local model is not on this device)"
    text = render(usage_table(usage, {"local": "ollama/llama3.2", "remote": None}, None, local_egress=said))
    assert "nothing left this device" not in text
    assert "192.0.2.1:11434 (the local model is not on this device)" in " ".join(text.split())


def test_print_result_says_where_the_local_prompts_went() -> None:
    from minions.protocols import EgressRecord, RunResult

    sent = tuple(EgressRecord(1, "local", "ollama/llama3.2", "chunk text", "192.0.2.1:11434") for _ in range(3))
    result = RunResult(answer="$4.2 billion", protocol="minions", usage={"local": Usage(calls=3)}, egress=sent)
    console = Console(width=200, record=True)
    print_result(result, local_name="ollama/llama3.2", remote_name="openai/gpt-4o-mini", console=console)
    text = console.export_text()
    assert "egress: 3 local prompts (30 characters) left this device to 192.0.2.1:11434" in text
    assert "nothing left this device" not in text


def test_a_long_citation_is_cut_at_a_word_and_marked() -> None:
    from minions.protocols import Citation, RunResult

    quote = "Our rooftop and community arrays produced 96.3 gigawatt-hours of electricity, " * 3
    result = RunResult(answer="96.3 GWh", protocol="local", citations=(Citation(quote, "report.md", 0, line=10),))
    console = Console(width=400, record=True)
    print_result(result, local_name="llamacpp/default", remote_name=None, console=console)
    shown = console.export_text().splitlines()[1]
    assert shown.startswith('  [report.md line 10] "Our rooftop') and shown.endswith(' …"')
    body = shown[len('  [report.md line 10] "') : -len(' …"')]
    assert quote.startswith(body) and len(body) <= 160 and quote[len(body)] in " ,"  # ends on a whole word
