"""Imports point one way: minions core <- backends <- protocols <- evals, apps."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYER = {"minions": 0, "backends": 1, "protocols": 2, "evals": 3, "apps": 3}
MODULE_LAYER = {"minions": 0, "minions.backends": 1, "minions.protocols": 2, "minions.evals": 3, "minions.apps": 3}
# The entry points sit above everything and import lazily: the CLI and the package's lazy public API.
ENTRY_POINTS = {ROOT / "minions" / "__main__.py", ROOT / "minions" / "__init__.py"}


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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["minions", *parts]) if parts[0] != "minions" else ".".join(parts)


def _imports(path: Path, module: str, *, type_only: bool = False) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (a lazy import is still a dependency);
    imports for type checkers are left out unless ``type_only``."""
    tree = ast.parse(path.read_text())
    skip = set() if type_only else _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def _cycles(folder: str) -> list[list[str]]:
    """Strongly connected groups of more than one module among ``folder``'s modules (Tarjan's algorithm)."""
    modules = {_module_name(p): p for p in sorted((ROOT / folder).rglob("*.py"))}
    graph = {m: sorted(n for n in _imports(p, m) if n in modules and n != m) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in graph[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = []
            while True:
                n = stack.pop()
                group.append(n)
                if n == m:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for m in graph:
        if m not in index:
            visit(m)
    return groups


@pytest.mark.parametrize("folder", sorted(LAYER))
def test_no_import_cycles(folder: str) -> None:
    assert _cycles(folder) == []


ENGINES = {"llama_cpp", "torch", "transformers", "minions.backends.llamacpp", "minions.backends.pytorch"}


def test_speculation_is_backend_neutral() -> None:
    """``backends/speculation`` serves the llama.cpp engine and the PyTorch backend alike: it imports neither
    engine, nor their libraries (not even lazily: a drafter that needs a model gets it from its engine)."""
    folder = ROOT / "backends" / "speculation"
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted(folder.rglob("*.py"))
        for name in sorted(_imports(path, _module_name(path)))
        if any(name == e or name.startswith(f"{e}.") for e in ENGINES)
    ]
    assert found == []


def test_cycles_are_found() -> None:
    """The cycle check itself: two modules importing each other (lazily, in a function) are one group."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=ROOT / "tests") as tmp:
        folder = Path(tmp)
        (folder / "a.py").write_text("from . import b\n")
        (folder / "b.py").write_text("def f():\n    from .a import x\n")
        (folder / "c.py").write_text("from .a import y\n")
        assert _cycles(str(folder.relative_to(ROOT))) == [
            [f"minions.tests.{folder.name}.a", f"minions.tests.{folder.name}.b"]
        ]


def _library_modules() -> dict[str, Path]:
    return {_module_name(p): p for folder in sorted(LAYER) for p in sorted((ROOT / folder).rglob("*.py"))}


def _imports_all(path: Path, module: str) -> set[str]:
    """Every module ``path`` imports, imports for type checkers included."""
    return _imports(path, module, type_only=True)


def test_no_import_cycle_in_the_tree_type_only_imports_included() -> None:
    """No two modules of the library import each other, through any chain, across folders, even where one of the
    imports is only for type checkers (a cycle a type checker must untangle is a seam in the wrong place)."""
    modules = _library_modules()
    graph = {m: {n for n in _imports_all(p, m) if n in modules and not _within(m, n)} for m, p in modules.items()}
    assert _strongly_connected(graph) == []


def _within(module: str, other: str) -> bool:
    """Whether ``other`` is ``module`` or a package that holds it (importing a module runs its packages first)."""
    return module == other or module.startswith(f"{other}.")


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one node that reach each other (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_protocols_import_nothing_of_the_llamacpp_engine() -> None:
    """The protocols reach a local model through the ``Backend`` interface only (its benchmarks, which drive the
    engine directly, live in ``evals.bench``)."""
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "protocols").rglob("*.py"))
        for name in sorted(_imports_all(path, _module_name(path)))
        if name == "minions.backends.llamacpp" or name.startswith("minions.backends.llamacpp.")
    ]
    assert found == []


TOOLS = ("minions.evals.bench", "minions.evals.synthetic")
"""Benchmarks and synthetic models: tools for us, not parts of the runtime."""


def test_the_runtime_holds_nothing_only_tools_use() -> None:
    """Every module under ``backends/`` and ``protocols/`` is imported by some part of the runtime (the core,
    backends, protocols, evals' harness or the apps), not only by tests, benchmarks or synthetic models: those
    belong in ``evals/``."""
    modules = _library_modules()
    users: dict[str, set[str]] = {m: set() for m in modules}
    for m, p in modules.items():
        if m.startswith(TOOLS):
            continue
        for n in _imports_all(p, m):
            if n in users and n != m:
                users[n].add(m)
    runtime = [m for m in modules if m.split(".")[1:2] in (["backends"], ["protocols"])]
    unused = [m for m in runtime if not users[m] and modules[m].name != "__init__.py"]
    assert unused == []


ABOVE_SEARCH = (
    "minions.protocols.factory",
    "minions.protocols.baselines",
    "minions.protocols.minion",
    "minions.protocols.minions_protocol",
    "minions.protocols.library",
    "minions.protocols.watch",
    "minions.protocols.chunk_states",
    "minions.protocols.evidence",
)
"""The protocols' top floor (the factory, the protocols, the ``Library`` that runs them, its folder watch and chunk
states) and the local reading (``evidence/``): what ``protocols/search/`` sits under."""


def test_search_imports_neither_the_protocols_nor_the_reading() -> None:
    """``protocols/search/`` holds what searches (the index, routing, words, meaning, the ranking): it is used by the
    reading and the library, and imports neither (not even lazily, nor for type checkers)."""
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / "protocols" / "search").rglob("*.py"))
        for name in sorted(_imports_all(path, _module_name(path)))
        if name == "minions.protocols" or any(name == a or name.startswith(f"{a}.") for a in ABOVE_SEARCH)
    ]
    assert found == []
