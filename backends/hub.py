"""GGUF models from the Hugging Face Hub: ``minions models pull REPO[/FILE]``, then ``llamacpp/<name>``.

A pull asks the hub (``HF_ENDPOINT``, default huggingface.co; ``HF_TOKEN`` for gated or private repositories)
for the repository's files with their LFS sha256, picks the GGUF file (the one named, the only one, or the
``PREFERRED_QUANTIZATION`` among several), downloads it with ``huggingface_hub``'s HTTP transfer into
``<file>.part`` (a progress bar; a cut connection resumes from the bytes already there, in the same call or in
the next pull after the process died), and checks its sha256 against the hub's before it counts as pulled. A
file that does not match is deleted and the pull fails.

Pulled models live in ``<cache>/models/<owner>/<repo>/<file>.gguf`` with a small manifest beside each
(``<file>.gguf.pulled.json``: repository, revision, sha256, size); only a checked file has one, so a download cut
off or refused is never listed nor used. ``find_pulled(name)`` resolves ``llamacpp/<name>``: the file name with
or without ``.gguf``, or ``<owner>/<repo>/<file>``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from minions.documents.files import sha256_file
from minions.errors import ConfigError, DownloadError, ModelNotFoundError
from minions.paths import cache_dir

__all__ = [
    "PREFERRED_QUANTIZATION",
    "PulledModel",
    "find_pulled",
    "list_pulled",
    "models_dir",
    "parse_spec",
    "pull",
    "quantization_of",
]

log = logging.getLogger(__name__)

PREFERRED_QUANTIZATION = "Q4_K_M"
"""Picked when a repository holds several GGUF files and the pull names none (a common size/quality balance)."""
MANIFEST_SUFFIX = ".pulled.json"
PART_SUFFIX = ".part"
_QUANT = re.compile(r"(?i)(?<![A-Z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32)(?=[-_.])")


@dataclass(frozen=True)
class PulledModel:
    repo: str
    filename: str
    revision: str
    sha256: str
    size: int
    path: str
    pulled_at: str

    @property
    def name(self) -> str:
        """What follows ``llamacpp/``: the file name without ``.gguf``."""
        return Path(self.filename).name.removesuffix(".gguf")

    @property
    def quantization(self) -> str:
        return quantization_of(self.filename)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name, "quantization": self.quantization}


class _Quiet(tqdm):
    """No progress bar."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "disable": True})


def models_dir() -> Path:
    """``<cache>/models``: where pulled models live."""
    return cache_dir() / "models"


def quantization_of(filename: str) -> str:
    """The quantization a GGUF file's name states (``Q4_K_M``, ``IQ4_XS``, ``Q8_0``, ``F16``), or ``unknown``."""
    found = _QUANT.findall(Path(filename).name)
    return found[-1].upper() if found else "unknown"


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``owner/repo`` or ``owner/repo/path/file.gguf`` as (repository, file or None)."""
    parts = [p for p in spec.strip().strip("/").split("/") if p]
    if len(parts) < 2:
        raise ConfigError(
            f"{spec!r} is not a Hugging Face repository: write owner/repo or owner/repo/file.gguf "
            "(e.g. bartowski/Llama-3.2-3B-Instruct-GGUF/Llama-3.2-3B-Instruct-Q4_K_M.gguf)."
        )
    repo, file = "/".join(parts[:2]), "/".join(parts[2:]) or None
    if file is not None and not file.endswith(".gguf"):
        raise ConfigError(f"{file!r} is not a GGUF file: name a .gguf file of {repo}, or only the repository.")
    return repo, file


def _choose(repo: str, files: list[str]) -> str:
    ggufs = sorted(f for f in files if f.endswith(".gguf"))
    if not ggufs:
        raise ModelNotFoundError(f"{repo} holds no GGUF file: pull a repository of GGUF files (names end in -GGUF).")
    if len(ggufs) == 1:
        return ggufs[0]
    preferred = [f for f in ggufs if quantization_of(f) == PREFERRED_QUANTIZATION and "-of-" not in f]
    if len(preferred) == 1:
        return preferred[0]
    shown = ", ".join(ggufs[:12]) + (", ..." if len(ggufs) > 12 else "")
    raise ConfigError(f"{repo} holds {len(ggufs)} GGUF files: pull one as {repo}/FILE, one of {shown}.")


def _translate(exc: Exception, repo: str, endpoint: str) -> Exception:
    """Our error for what ``huggingface_hub`` raised; it says what to do."""
    import httpx2
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        return ConfigError(f"{repo} is gated: accept its terms on the hub, then set HF_TOKEN to a token of yours.")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return ModelNotFoundError(
            f"No repository {repo} at {endpoint} (or it is private: set HF_TOKEN). Check the name."
        )
    if isinstance(exc, errors.EntryNotFoundError):
        return ModelNotFoundError(
            f"{repo} has no such file at {endpoint}: pull the repository alone to list its files."
        )
    if isinstance(exc, (errors.LocalEntryNotFoundError, httpx2.TransportError)):
        return DownloadError(
            f"Cannot reach {endpoint} to pull {repo} ({type(exc).__name__}: {exc}): check the network, or set "
            "HF_ENDPOINT; a pull run again continues where this one stopped."
        )
    return DownloadError(f"Pulling {repo} from {endpoint} failed ({type(exc).__name__}: {exc}): run the pull again.")


def pull(spec: str, *, revision: str | None = None, progress: bool = True) -> PulledModel:
    """Download the GGUF file ``spec`` names (``owner/repo[/file.gguf]``), check its sha256, and record it.
    ``progress``: a progress bar on stderr."""
    import httpx2  # huggingface_hub's HTTP client
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    repo, file = parse_spec(spec)
    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    token = os.environ.get("HF_TOKEN") or None
    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(repo, revision=revision, files_metadata=True)
        siblings = {s.rfilename: s for s in info.siblings or []}
        file = file or _choose(repo, list(siblings))
        if file not in siblings:
            raise ModelNotFoundError(f"{repo} has no file {file}: pull {repo} alone to see its GGUF files.")
        lfs = siblings[file].lfs
        if lfs is None:
            raise DownloadError(f"{repo}/{file} is not stored in LFS, so the hub gives no sha256 to check it against.")
        target = models_dir() / repo / file
        done = _already_pulled(target, lfs.sha256)
        if done is not None:
            return done
        url = hf_hub_url(repo, file, revision=info.sha, endpoint=endpoint)
        location = get_hf_file_metadata(url, token=token, endpoint=endpoint).location
        _download(location, target, lfs.size, token, progress)
    except (HfHubHTTPError, httpx2.HTTPError, OSError, ValueError) as exc:
        raise _translate(exc, repo, endpoint) from exc
    return _check_and_record(repo, file, info.sha or revision or "main", lfs.sha256, lfs.size, target)


def _already_pulled(target: Path, sha256: str) -> PulledModel | None:
    manifest = target.with_name(target.name + MANIFEST_SUFFIX)
    if not (target.is_file() and manifest.is_file()):
        return None
    model = PulledModel(**json.loads(manifest.read_text(encoding="utf-8")))
    return model if model.sha256 == sha256 and target.stat().st_size == model.size else None


def _download(url: str, target: Path, size: int, token: str | None, progress: bool) -> None:
    """``url`` into ``target``'s ``.part`` file, from where an earlier download stopped (huggingface_hub's own
    temporary files are per process, so a download killed mid-way would start again from nothing)."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    part = target.with_name(target.name + PART_SUFFIX)
    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if have > size:  # not a prefix of this file
        part.unlink()
        have = 0
    if have:
        log.info("resuming %s at %d of %d bytes", target.name, have, size)
    with part.open("r+b" if have else "wb") as f:
        f.seek(have)
        http_get(
            url,
            f,
            resume_size=have,
            headers=build_hf_headers(token=token),
            expected_size=size,
            displayed_filename=target.name,
            tqdm_class=tqdm if progress else _Quiet,
        )
    part.replace(target)


def _check_and_record(repo: str, file: str, revision: str, sha256: str, size: int, local: Path) -> PulledModel:
    actual = sha256_file(local)
    if actual != sha256:
        local.unlink(missing_ok=True)
        raise DownloadError(
            f"{repo}/{file} does not match the hub's checksum (sha256 {actual[:16]}..., the hub says "
            f"{sha256[:16]}...): the file was deleted; run the pull again, and check HF_ENDPOINT if it fails again."
        )
    with local.open("rb") as f:
        if f.read(4) != b"GGUF":
            local.unlink(missing_ok=True)
            raise DownloadError(f"{repo}/{file} is not a GGUF file (its checksum matched): pull a GGUF repository.")
    model = PulledModel(repo, file, revision, sha256, size, str(local), datetime.now(UTC).isoformat(timespec="seconds"))
    manifest = local.with_name(local.name + MANIFEST_SUFFIX)
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(model), indent=2), encoding="utf-8")
    tmp.replace(manifest)
    log.info("pulled %s/%s (%d bytes, sha256 checked) to %s", repo, file, size, local)
    return model


def list_pulled() -> list[PulledModel]:
    """Every pulled model whose file is still there, by name."""
    root = models_dir()
    found = []
    for manifest in sorted(root.rglob(f"*{MANIFEST_SUFFIX}")) if root.is_dir() else []:
        try:
            model = PulledModel(**json.loads(manifest.read_text(encoding="utf-8")))
        except (ValueError, TypeError) as exc:
            log.warning("ignoring %s: %s", manifest, exc)
            continue
        if Path(model.path).is_file():
            found.append(model)
    return sorted(found, key=lambda m: m.name.lower())


def find_pulled(name: str) -> PulledModel | None:
    """The pulled model ``name`` designates: its file name (with or without ``.gguf``) or ``owner/repo/file``."""
    wanted = name.strip().removesuffix(".gguf")
    for model in list_pulled():
        if wanted in (model.name, f"{model.repo}/{model.filename}".removesuffix(".gguf")):
            return model
    return None
