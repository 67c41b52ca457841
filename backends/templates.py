"""The chat template of a model whose file has none, one for every local engine (llama.cpp's, PyTorch's).

    CHATML   an instruct model whose vocabulary has ChatML's turn tokens (SmolLM2's GGUF, Qwen's): its turns
    PLAIN    a base model (no turn tokens: Gemma 3 270M): the messages as plain text after its BOS, a blank line
             after each, the reply where the text goes on. ChatML's marks would reach it as the characters
             "<", "|", "im", and it would go on writing them (docs/local-reading.md, "A base model")

Both are Jinja templates over ``messages`` (``role``, ``content``), ``bos_token`` and ``add_generation_prompt``,
as ``llama_cpp.llama_chat_format.Jinja2ChatFormatter`` and transformers' ``apply_chat_template`` render them.
"""

from __future__ import annotations

__all__ = ["CHATML", "CHATML_TURN", "PLAIN", "template_without_one"]

CHATML_TURN = "<|im_start|>"
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>'"
    " + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
PLAIN = "{{ bos_token }}{% for message in messages %}{{ message['content'] + '\n\n' }}{% endfor %}"


def template_without_one(has_chatml_turns: bool) -> str:
    """The template of a model whose file has none: ChatML where its vocabulary has ChatML's turn tokens, else
    plain text."""
    return CHATML if has_chatml_turns else PLAIN
