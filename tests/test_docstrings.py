"""Docstrings name only what exists: every ``dotted.name`` a docstring cites resolves.

A name resolves when it is something, then its attributes, from one of these starts, tried in turn: the citing
module's own names (``Engine.run`` in the engine), its package as ``from . import`` reads it
(``sampling.SequenceSampler`` in ``minions.backends.llamacpp``), the top of the tree, where each folder is a
subpackage of ``minions`` (``backends.llamacpp.slots``), or as written (``minions.loops.repeating``,
``llama_cpp.llama_decode``); else its first part is one of the tree's public classes (``RunResult.evidence``).
Attributes count when a class declares them (dataclass and pydantic fields, annotations) or its methods set them.
A name whose first part is none of these (a file, a variable, a key, another library's class: ``config.json``,
``ctx.timings``) is not judged, unless that part names a module of the citing package's own tree, cited from
where it cannot be found (``draft_model.Drafter`` in the scheduler, for ``speculation.drafters.Drafter``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"minions": "minions", "backends": "minions.backends", "protocols": "minions.protocols"}
FOLDERS |= {"evals": "minions.evals", "apps": "minions.apps"}
DOTTED = re.compile(r"``([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")
_MISSING = object()
FILE_SUFFIXES = {"json", "jsonl", "md", "png", "py", "j2", "gguf", "txt", "pdf", "html", "css", "js", "toml", "kv"}


def modules() -> Iterator[tuple[str, Path]]:
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((package, *parts)), path


def cited_names(path: Path) -> Iterator[tuple[int, str]]:
    """Each ``dotted.name`` in the module's, its classes' and its functions' docstrings, and in the string
    literals that document a field (a string right after an assignment)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for match in DOTTED.finditer(node.value.value):
                yield node.lineno, match.group(1)


def _attribute(obj: Any, name: str) -> Any:
    value = getattr(obj, name, _MISSING)
    if value is not _MISSING:
        return value
    if isinstance(obj, type):
        for klass in obj.__mro__:
            declared = (
                getattr(klass, "__dataclass_fields__", {}),
                getattr(klass, "model_fields", {}),
                vars(klass).get("__annotations__", {}),
            )
            if any(name in d for d in declared) or name in _assigned_in(klass):
                return Any  # a declared field or an attribute its methods set: resolved, nothing to follow
        return _MISSING
    return _MISSING


def _assigned_in(klass: type) -> set[str]:
    """The attributes a class's methods assign (``self.name = ...``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError):
        return set()
    return {
        t.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }


def _follow(obj: Any, rest: list[str]) -> bool:
    for name in rest:
        if obj is Any:
            return True
        obj = _attribute(obj, name)
        if obj is _MISSING:
            return False
    return True


def _import(name: str) -> Any:
    """The module ``name``, or _MISSING."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return _MISSING


def _bases(module: str) -> list[Any]:
    """Where a cited name may start: the citing module, its package, the top of the tree."""
    own = importlib.import_module(module)
    package = module if Path(own.__file__ or "").name == "__init__.py" else module.rpartition(".")[0]
    return [own, package + ".", "minions.", ""]


def _starts(first: list[str], bases: list[Any]) -> Iterator[Any]:
    """What the first segments of a name are, from each base that has them."""
    for base in bases:
        if isinstance(base, str):
            found = _import(base + ".".join(first))
        else:
            found = base
            for name in first:
                found = _attribute(found, name) if found is not Any else Any
                if found is _MISSING:
                    break
        if found is not _MISSING:
            yield found


def resolves(name: str, module: str) -> bool | None:
    """Whether ``name``, cited in ``module``, exists; None when it starts with no module or class of ours (a
    file, a variable, a key, another library's class: ``config.json``, ``ctx.timings``), which the rule does not
    judge."""
    parts = name.split(".")
    if parts[-1] in FILE_SUFFIXES:
        return None
    bases = _bases(module)
    for i in range(len(parts), 0, -1):  # the longest prefix that is something, then its attributes
        starts = list(_starts(parts[:i], bases))
        if starts:
            return any(_follow(found, parts[i:]) for found in starts)
    klass = CLASSES.get(parts[0])
    if klass is not None:
        return _follow(klass, parts[1:])
    package = bases[1].rstrip(".")
    if any(m.startswith(package + ".") and m.rpartition(".")[2] == parts[0] for m in MODULES):
        return False  # a module of the citing package's own tree, cited from where it cannot be found
    return None


def _classes() -> dict[str, type]:
    """The tree's public classes by name (no two share one: ``test_names``)."""
    found: dict[str, type] = {}
    for module, path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                try:
                    found.setdefault(node.name, getattr(importlib.import_module(module), node.name))
                except ImportError:  # an optional dependency (torch) is missing
                    continue
    return found


CLASSES: dict[str, type] = {}
MODULES = [module for module, _ in modules()]


def all_citations() -> list[tuple[str, str, int, str]]:
    return [
        (module, str(path.relative_to(ROOT)), line, name)
        for module, path in modules()
        for line, name in cited_names(path)
    ]


def test_the_rule_resolves_the_kinds_of_names_it_should() -> None:
    scheduler = "minions.backends.llamacpp.scheduler"
    gate = "minions.backends.speculation.speculator"
    assert resolves("minions.loops.repeating", scheduler)  # as written
    assert resolves("cost_table.measure_cost_table", scheduler)  # beside the citing module
    assert resolves("backends.speculation.speculator.SpeedGate", scheduler)  # from the top of the tree
    assert resolves("SpeedGate.backoff_steps", gate)  # in the citing module: a dataclass field
    assert resolves("llama_cpp.llama_decode", scheduler)  # another distribution's
    assert resolves("sampling.repeating", scheduler) is False  # it is minions.loops.repeating
    assert resolves("SpeedGate.backoff", gate) is False  # the field is backoff_steps
    assert resolves("backends.llamacpp.sampler", scheduler) is False
    assert resolves("draft_model.Drafter", scheduler) is False  # it is speculation.drafters.Drafter
    assert resolves("config.json", scheduler) is None and resolves("ctx.timings", scheduler) is None


def test_every_cited_name_exists() -> None:
    citations = all_citations()
    assert len(citations) > 50  # the scan finds them
    pytest.importorskip("torch")  # the PyTorch backend's modules import it
    CLASSES.update(_classes())
    judged = [(path, line, name, resolves(name, module)) for module, path, line, name in citations]
    assert sum(ok is not None for *_, ok in judged) > 0.7 * len(judged)  # the rule judges most (4 in 5, 2026-12)
    broken = [f"{path}:{line} ``{name}``" for path, line, name, ok in judged if ok is False]
    assert broken == []
