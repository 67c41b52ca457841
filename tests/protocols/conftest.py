"""Fixtures for protocol tests: a small document, a scripted local model that reads its chunks, and a
scripted remote model that is not on this device."""

from __future__ import annotations

import pytest

from minions.backends.base import Capabilities
from minions.backends.scripted import ScriptedBackend
from minions.documents import Document, Page

from .helpers import FACT, FILLER, job_reply, make_text


@pytest.fixture
def doc() -> Document:
    return Document.from_text(make_text(), name="report.txt")


@pytest.fixture
def paged_doc() -> Document:
    texts = [f"Page {n} text. " + FILLER * 3 + (FACT if n == 4 else "") for n in range(1, 7)]
    pages, start, body = [], 0, []
    for n, t in enumerate(texts, start=1):
        pages.append(Page(n, start, start + len(t)))
        body.append(t)
        start += len(t) + 2
    return Document(name="filing.pdf", text="\n\n".join(body), pages=tuple(pages))


@pytest.fixture
def local() -> ScriptedBackend:
    return ScriptedBackend("scripted/local", responder=job_reply)


@pytest.fixture
def remote() -> ScriptedBackend:
    return ScriptedBackend(
        "scripted/gpt-4o-mini", capabilities=Capabilities(json_schema=True, local=False, context_window=128_000)
    )
