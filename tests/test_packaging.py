"""pyproject.toml lists every package of the tree and maps it to its folder, so the wheel holds every module.

setuptools' ``packages.find`` cannot find them: it names a package by its folder (``backends``), and the tree maps
top-level folders into the namespace ``minions`` (``backends/`` is ``minions.backends``). So the lists stay
written out, and this test fails when a folder with an ``__init__.py`` is missing from them (it would install in
editable mode, where the folder is on the path, and be missing from the wheel). ``scripts/check-wheel`` checks
the built wheel itself.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
TOP = {"minions": "minions", "minions.backends": "backends", "minions.protocols": "protocols"}
TOP |= {"minions.evals": "evals", "minions.apps": "apps"}


def packages_in_the_tree() -> dict[str, str]:
    """Every package, by import name, and its folder: each folder under a mapped top-level folder that holds an
    ``__init__.py``."""
    found: dict[str, str] = {}
    for name, folder in TOP.items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "__pycache__" not in parts:
                found[".".join((name, *parts))] = init.parent.relative_to(ROOT).as_posix()
    return found


def test_every_package_is_listed() -> None:
    assert sorted(SETUPTOOLS["packages"]) == sorted(packages_in_the_tree())


def test_every_listed_package_maps_to_its_folder() -> None:
    tree = packages_in_the_tree()
    mapping = SETUPTOOLS["package-dir"]
    for name in SETUPTOOLS["packages"]:
        # setuptools takes the longest mapped prefix of a package's name, then the rest as folders
        prefix = max((p for p in mapping if name == p or name.startswith(p + ".")), key=len)
        folder = "/".join([mapping[prefix], *name[len(prefix) :].split(".")[1:]])
        assert folder == tree[name], name


def test_the_package_data_globs_match_files() -> None:
    mapping = SETUPTOOLS["package-dir"]
    for package, globs in SETUPTOOLS["package-data"].items():
        for pattern in globs:
            assert list((ROOT / mapping[package]).glob(pattern)), f"{package}: {pattern} matches nothing"


def test_the_cli_runs_without_the_pytorch_extra() -> None:
    """The wheel's dependencies leave torch out (it is the ``pytorch`` extra): the CLI must start without it."""
    code = "import sys; sys.modules['torch'] = None; from minions.apps.cli.main import main; main(['models', '--help'])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
