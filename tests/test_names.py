"""One name per idea: no two public classes of the library share a name, so that a grep finds one thing."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("minions", "backends", "protocols", "evals", "apps")

# Pairs still being renamed, each with the files that hold it; the test fails when one is gone, so the entry goes.
RENAMING: dict[str, set[str]] = {}


def public_classes() -> dict[str, list[str]]:
    """Each public class name defined at a module's top level, with the files that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    found[node.name].append(path.relative_to(ROOT).as_posix())
    return found


def test_no_two_public_classes_share_a_name() -> None:
    shared = {name: set(paths) for name, paths in public_classes().items() if len(paths) > 1}
    assert {n: p for n, p in shared.items() if RENAMING.get(n) != p} == {}
    assert sorted(set(RENAMING) - set(shared)) == [], "renamed: take it out of RENAMING"
