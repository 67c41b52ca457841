"""Imports point one way: minions core <- backends <- protocols <- evals, apps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYER = {"minions": 0, "backends": 1, "protocols": 2, "evals": 3, "apps": 3}
MODULE_LAYER = {"minions": 0, "minions.backends": 1, "minions.protocols": 2, "minions.evals": 3, "minions.apps": 3}
# The entry points sit above everything and import lazily: the CLI and the package's lazy public API.
ENTRY_POINTS = {ROOT / "minions" / "cli.py", ROOT / "minions" / "__init__.py"}


def _imported_layer(name: str) -> int | None:
    parts = name.split(".")
    if parts[0] != "minions":
        return None
    return MODULE_LAYER.get(".".join(parts[:2]), 0)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _violations(folder: str) -> list[str]:
    own = LAYER[folder]
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if path in ENTRY_POINTS:
            continue
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                layer = _imported_layer(name)
                if layer is not None and layer > own and node.lineno not in skip:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
            if any(n.split(".")[0] in {"openai", "ollama", "llama_cpp"} for n in names) and own == 0:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: the core imports a model SDK ({names})")
    return found


@pytest.mark.parametrize("folder", sorted(LAYER))
def test_imports_point_one_way(folder: str) -> None:
    assert _violations(folder) == []
