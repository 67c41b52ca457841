"""The README as a front door: short, linked to every page of docs/, documenting every variable the code reads,
and its Python examples run as written against the embedded model."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PACKAGES = ("minions", "backends", "protocols", "evals", "apps")
MAX_LINES = 250

# A block that names a remote model or a server needs a key or a running server; the rest must run here.
NEEDS_REMOTE = re.compile(r"openai|remote=|base_url")
READ = re.compile(r"""environ(?:\.get|\.setdefault|\[)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")
CONSTANT = re.compile(r"""^[A-Z_]*ENV(?::\s*str)?\s*=\s*["']([A-Z][A-Z0-9_]+)["']""", re.MULTILINE)


def _text() -> str:
    return README.read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def variables_read() -> set[str]:
    """Every environment variable the library code reads by name: ``os.environ.get("X")`` and the ``*_ENV``
    constants that name one."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            source = path.read_text(encoding="utf-8")
            found.update(READ.findall(source))
            found.update(CONSTANT.findall(source))
    return found


def test_the_readme_is_short() -> None:
    assert len(_text().splitlines()) < MAX_LINES


def test_every_page_of_docs_is_linked_and_every_link_exists() -> None:
    text = _text()
    linked = set(re.findall(r"\]\((docs/[^)#]+)", text))
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages - linked == set(), "pages the README does not link"
    assert {link for link in linked if not (ROOT / link).exists()} == set(), "links to nothing"


def test_the_docs_link_to_pages_that_exist() -> None:
    for page in DOCS.glob("*.md"):
        for link in re.findall(r"\]\(([^)#:]+\.md)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).exists(), f"{page.name} links to {link}"


def test_every_variable_the_code_reads_is_documented() -> None:
    found = variables_read()
    assert {"MINIONS_LLAMA_VERBOSE", "MINIONS_CACHE_DIR", "OLLAMA_HOST"} <= found  # the scan sees them
    text = _text()
    assert sorted(v for v in found if v not in text) == []


def test_the_python_examples_that_need_no_remote_model_are_most_of_them() -> None:
    blocks = python_blocks(_text())
    local = [b for b in blocks if not NEEDS_REMOTE.search(b)]
    assert len(local) >= 2 and len(blocks) - len(local) <= 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "block", [b for b in python_blocks(_text()) if not NEEDS_REMOTE.search(b)], ids=lambda b: b.splitlines()[0]
)
def test_a_python_example_runs_as_written(block: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip(), "printed nothing"


@pytest.mark.slow
def test_the_demo_prints_the_answer_the_readme_shows() -> None:
    shown = re.search(r"^```\n(According to .*?)^```", _text(), re.DOTALL | re.MULTILINE)
    assert shown is not None
    question = re.search(r"^QUESTION \?= (.*)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    assert question is not None
    demo = ["minions", "ask", "examples/northwind-annual-report-2025.md", question.group(1)]
    proc = subprocess.run([sys.executable, "-m", *demo], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(shown.group(1)), proc.stdout[:1000]
