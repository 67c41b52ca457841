"""``minions bench library-scale``: a library grown to ten times FinanceBench's 74 filings, measured at each size.

Sizes are multiples of the filings' chunks (``scales``; 1, 3 and 10: 34,274, about 103,000 and 343,000 chunks).
Each size's library is built afresh: all the filings first, then filler, text already on this machine, until the
library holds the chunks wanted. Filler is every file under the ``filler`` folders, folder by folder in name order
(hidden files and links left out), its bytes read as text (gunzipped where the name ends in .gz) where the
project's text check takes them (``documents.files.check_content``: no binary), made in that order into documents
of about a filing's length (``volume_chars``: shorter files joined, a longer one cut at line ends). The order is
fixed, so a size's filler is the start of the next size's. Default folders: ``/usr/share/doc`` (changelogs,
copyright files, READMEs), ``/usr/share/man`` (manual pages as their troff source: rendering 22,000 pages
through ``man`` would take longer than the build) and this Python's site-packages (source files).

Vectors (``vectors``):

    real       every chunk embedded by the library's model (``Library.embed``): honest, and hours at 10x on two
               cores (about 60 chunks a second)
    synthetic  (the default) the filings' chunks embedded by the model; every filler chunk a random unit vector of
               the model's length, stored as the index stores vectors (``SqliteIndex.add_vectors``): search time
               and memory are measured over a full matrix, but a random vector is near no question, so filler
               competes for recall by its words only. 1x, 3x and 10x took 20 minutes here, 11 of them
               embedding the filings.
    none       words only

The model's vectors go through a cache in the work folder, by the text embedded (``meaning.VectorCache``): the
filings are embedded once a run (once ever with ``work``), and a later size reads theirs. ``embedded`` counts the
chunks the model computed at a size, ``embed_per_s`` its rate, and ``embed_all_s`` what embedding every chunk of a
size would take at the latest rate measured.

Each size is built in a fresh process and then searched in another (``spawn``), so each peak RSS is its own:
``build_rss_mb`` the builder's, ``search_rss_mb`` a process that opens the library and asks (the embedding model,
the vector matrix, SQLite's pages). The search process starts with an empty cache folder (``MINIONS_CACHE_DIR``),
so the sentences of each question's best chunks are embedded as a new question's are (``meaning.by_sentence``).
The questions are FinanceBench's whose gold pages are in the filings (which every size holds). The first is asked
once to warm up (``first_search_ms``: the vectors read in, the model loaded); then each is timed
(``Library.search``: route, words, meaning, fused, the best chunks' sentences; ``search_ms`` the median,
``search_ms_p90``), with the page recall @1..@20 of its ranking (``recall``) and, where the library has vectors,
of words alone (``search_library`` without the model: ``recall_words``, ``words_ms``), and how many questions
were routed first to their own filing (``routed_first``); then each is asked again, its sentences' vectors
cached (``search_ms_again``). With ``sentences``, the search process first embeds every chunk's sentences ahead
of the questions (``Library.keep_sentences``: ``sentences_kept`` chunks in ``sentences_s``), as the background
process does after a build, so that a new question waits for none. ``languages`` counts the documents told each
language (a question is searched in every language of the library). The first line says the CPU, its cores, the
load and the vectors' mode; each size's line its load too.
"""

from __future__ import annotations

import gzip
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from minions.backends.embeddings import Embedder, resolve_embedder, vector_model_of
from minions.documents import Document
from minions.documents.files import check_content
from minions.documents.text import decode
from minions.errors import DocumentError
from minions.paths import benchmark_data, cache_dir
from minions.protocols.library import Library
from minions.protocols.search.meaning import VectorCache
from minions.protocols.search.rank import search_library

from ..errors import EvalError
from ..financebench import load_financebench
from ..items import EvalItem
from .evidence import mean_curve, ranked_passages, recall_curve
from .machine import load_avg, machine
from .options import option

__all__ = ["FILLER", "LibraryScaleConfig", "build_library", "filler_volumes", "library_scale_bench"]

FILLER = ("/usr/share/doc", "/usr/share/man", sysconfig.get_paths()["purelib"])
"""Text on any Debian-like machine with this project installed: packages' documentation, manual pages, and the
source files of this Python's packages (about 600 MB of text here, twice what 10x needs)."""
VOLUME_CHARS = 550_000
"""A filler document's length: about a FinanceBench filing's mean (41 million characters in 74 filings)."""
SYNTHETIC_BATCH = 1024
"""Random vectors stored at a time."""
CACHE_FILE = "vectors.sqlite"
"""The run's cache of the model's vectors, in the work folder."""

_Result = TypeVar("_Result")


@dataclass(frozen=True)
class LibraryScaleConfig:
    scales: tuple[int, ...] = option(
        (1, 3, 10), "library size in multiples of the filings' chunks (1: the 74 filings alone)", flag="--scale",
        repeat=True,
    )  # fmt: skip
    filler: tuple[str, ...] = option(
        FILLER, "a folder of text that fills a library past the filings, read in name order", metavar="DIR",
        repeat=True, shown="/usr/share/doc, /usr/share/man, this Python's site-packages",
    )  # fmt: skip
    vectors: Literal["real", "synthetic", "none"] = option(
        "synthetic", "real: every chunk embedded (hours at 10x); synthetic: the filings' embedded, filler's random; "
        "none: words only",
    )  # fmt: skip
    embeddings: str = option("auto", "the embedding model, for real and synthetic vectors")
    limit: int | None = option(None, "the first N questions with gold pages", shown="all")
    work: str | None = option(
        None, "where the libraries are built and kept (and the vectors' cache)", metavar="DIR",
        shown="a temporary folder, removed after",
    )  # fmt: skip
    volume_chars: int = option(VOLUME_CHARS, "filler files are joined into documents of about this many characters")
    sentences: bool = option(
        False, "embed every chunk's sentences ahead of the questions (Library.keep_sentences), then ask them; about "
        "4 minutes for the filings here",
    )  # fmt: skip
    seed: int = 0
    """Of the synthetic vectors."""


def library_scale_bench(data: str | Path | None, config: LibraryScaleConfig) -> Iterator[dict[str, Any]]:
    """The machine line, then one line per size, smallest first (the module's docstring)."""
    root = benchmark_data("financebench", data, expected="a FinanceBench checkout")
    questions = _questions(root, config.limit)  # a layout error stops the run before any build
    if min(config.scales, default=0) < 1:
        raise EvalError(f"Scales are multiples of the filings' chunks, 1 or more: got {list(config.scales)}.")
    model = resolve_embedder(config.embeddings) if config.vectors != "none" else None
    if config.vectors != "none" and model is None:
        raise EvalError(f"No embedding model for {config.vectors} vectors: name one (--embeddings) or --vectors none.")
    yield machine() | {
        "vectors": config.vectors,
        "note": _NOTES[config.vectors],
        "embeddings": model.name if model is not None else None,
        "questions": len(questions),
        "filler": [f for f in config.filler if Path(f).is_dir()],
    }
    rate: float | None = None
    with tempfile.TemporaryDirectory(prefix="minions-scale-") as temporary:
        work = Path(config.work).expanduser() if config.work else Path(temporary)
        for scale in sorted(set(config.scales)):
            folder = work / f"library-{scale}x"
            shutil.rmtree(folder, ignore_errors=True)  # built afresh: its build time is a whole build's
            built = _in_fresh_process(_build_in_process, root, folder, scale, config, work / CACHE_FILE)
            searched = _in_fresh_process(_search_in_process, root, folder, config)
            rate = built.get("embed_per_s") or rate
            estimate = {"embed_all_s": round(built["chunks"] / rate)} if rate else {}
            yield {"scale": scale, **built, **estimate, **searched, "load": load_avg()}


_NOTES: dict[str, str] = {
    "real": "every chunk embedded by the model",
    "synthetic": "the filings' chunks embedded by the model; filler chunks have random unit vectors (a full matrix "
    "for search time and memory; near no question, so filler competes for recall by words only)",
    "none": "words only",
}


def _in_fresh_process(function: Callable[..., _Result], *args: Any) -> _Result:
    """``function(*args)`` in a new Python process (spawned, not forked: nothing of this one's memory in it)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def _peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Linux counts ``ru_maxrss`` in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1e6 if sys.platform == "darwin" else 1e3), 1)


# -- building ---------------------------------------------------------------------------------------------------


def _build_in_process(root: Path, folder: Path, scale: int, config: LibraryScaleConfig, cache: Path) -> dict[str, Any]:
    model = resolve_embedder(config.embeddings) if config.vectors != "none" else None
    return build_library(root, folder, scale, config, model, VectorCache(cache)) | {"build_rss_mb": _peak_rss_mb()}


def build_library(
    root: Path,
    folder: Path,
    scale: int,
    config: LibraryScaleConfig,
    model: Embedder | None,
    cache: VectorCache | None = None,
) -> dict[str, Any]:
    """Build ``folder``'s library: the filings of ``root``, then filler to ``scale`` times their chunks, then the
    vectors ``config.vectors`` says (``model``'s, through ``cache``). What it holds and what each step took."""
    counted = _Counted(model, cache or VectorCache(":memory:")) if model is not None else None
    library = Library(folder, embeddings=counted if counted is not None else "none")
    started = time.perf_counter()
    filings = library.add(root / "pdfs", embed=False, follow_links=True)
    if not filings.added:
        raise EvalError(f"No filing could be added from {root / 'pdfs'}: {filings.skipped[:3]}")
    words_s = time.perf_counter() - started
    filing_chunks = sum(d.chunks for d in filings.added)
    filler = _add_filler(library, config, (scale - 1) * filing_chunks)
    line: dict[str, Any] = {
        "chunks": library.index.chunk_count(),
        "documents": len(filings.added) + filler["documents"],
        "filing_chunks": filing_chunks,
        "filler_chunks": filler["chunks"],
        "filler_files": filler["files"],
        "filler_short": filler["short"],
        "words_s": round(words_s + filler["words_s"], 2),
        "filler_read_s": round(filler["read_s"], 1),
    }
    languages = Counter(str(d.profile.get("language")) for d in library.documents)
    line["languages"] = dict(languages.most_common())
    if counted is not None:
        line.update(_vectors(library, counted, config, set(filler["names"])))
    library.close()
    return line


def _add_filler(library: Library, config: LibraryScaleConfig, wanted: int) -> dict[str, Any]:
    """Filler documents added to ``library`` until they hold ``wanted`` chunks (``short``: the folders ran out
    first); the seconds adding took (``words_s``) and reading (``read_s``)."""
    out: dict[str, Any] = {"chunks": 0, "documents": 0, "files": 0, "names": [], "short": False, "words_s": 0.0}
    started = time.perf_counter()
    volumes = filler_volumes([Path(f) for f in config.filler], config.volume_chars)
    while out["chunks"] < wanted:
        volume = next(volumes, None)
        if volume is None:
            out["short"] = True
            break
        document, files = volume
        adding = time.perf_counter()
        added = library.add(document, embed=False).added
        out["words_s"] += time.perf_counter() - adding
        out["chunks"] += sum(d.chunks for d in added)
        out["documents"] += len(added)
        out["files"] += files
        out["names"] += [d.name for d in added]
    out["read_s"] = time.perf_counter() - started - out["words_s"]
    return out


def filler_volumes(folders: Sequence[Path], chars: int) -> Iterator[tuple[Document, int]]:
    """The text files under ``folders`` (the module's docstring), in order, as documents of about ``chars``
    characters: short files joined, a longer one cut at line ends (0: a document a file, whole). Each text is
    headed by its file's path; each document comes with the count of the files that start in it."""
    parts: list[str] = []
    size, number, files = 0, 0, 0
    for path, text in _filler_texts(folders):
        files += 1
        for piece in _pieces(text, chars) if chars else [text]:
            parts.append(f"{path}\n\n{piece}")
            size += len(piece)
            if size >= chars:
                number += 1
                yield Document.from_text("\n\n".join(parts), name=f"filler-{number:05d}.txt"), files
                parts, size, files = [], 0, 0
    if parts:
        yield Document.from_text("\n\n".join(parts), name=f"filler-{number + 1:05d}.txt"), files


def _pieces(text: str, chars: int) -> Iterator[str]:
    """``text`` cut at line ends into pieces of at most ``chars`` characters (at ``chars`` where a line is longer)."""
    while len(text) > chars:
        cut = text.rfind("\n", 0, chars)
        cut = cut if cut > 0 else chars
        yield text[:cut]
        text = text[cut:].lstrip("\n")
    if text:
        yield text


def _filler_texts(folders: Sequence[Path]) -> Iterator[tuple[Path, str]]:
    for folder in folders:
        for path in _files_in_order(folder):
            text = _text_of(path)
            if text:
                yield path, text


def _files_in_order(folder: Path) -> Iterator[Path]:
    """The regular files under ``folder``, folder by folder in name order; hidden ones and links left out."""
    for where, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        for name in sorted(files):
            path = Path(where) / name
            if not name.startswith(".") and not path.is_symlink() and path.is_file():
                yield path


def _text_of(path: Path) -> str | None:
    """``path``'s text (gunzipped where it ends in .gz), or None where it is not text."""
    try:
        with path.open("rb") as file:
            if path.suffix != ".gz" and b"\0" in file.read(4096):
                return None  # binary: not worth reading whole (site-packages holds a gigabyte of libraries)
            file.seek(0)
            data = file.read()
        data = gzip.decompress(data) if path.suffix == ".gz" else data
        check_content(str(path), ".txt", data)
    except (OSError, EOFError, zlib.error, DocumentError):
        return None
    text = decode(data)[0].replace("\r\n", "\n").strip()
    return text or None


# -- vectors ----------------------------------------------------------------------------------------------------


class _Timed:
    """``model``, counting the texts it embeds (not questions) and the seconds it takes."""

    def __init__(self, model: Embedder) -> None:
        self.model, self.name, self.address = model, model.name, model.address
        self.texts, self.seconds = 0, 0.0

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Any:
        started = time.perf_counter()
        vectors = self.model.embed(texts, query=query)
        if not query:
            self.texts, self.seconds = self.texts + len(texts), self.seconds + time.perf_counter() - started
        return vectors


class _Counted:
    """``model`` through ``cache``: a text embedded before (an earlier size's, or an earlier run's) is read, not
    computed; its vectors are stored under the model's own name, so a library opened with the model asks them."""

    def __init__(self, model: Embedder, cache: VectorCache) -> None:
        self.timed, self.cache = _Timed(model), cache
        self.name, self.address = vector_model_of(model), model.address

    def embed(self, texts: Sequence[str], *, query: bool = False) -> Any:
        return self.timed.embed(texts, query=True) if query else self.cache.vectors(self.timed, texts)


def _vectors(library: Library, counted: _Counted, config: LibraryScaleConfig, filler: set[str]) -> dict[str, Any]:
    """The vectors ``config.vectors`` says: filler's random (synthetic), then the model's for every chunk left."""
    synthetic, started = 0, time.perf_counter()
    if config.vectors == "synthetic":
        synthetic = _random_vectors(library, counted, filler, config.seed)
    synthetic_s = time.perf_counter() - started
    embedding = time.perf_counter()
    stored = library.embed()
    embed_s = time.perf_counter() - embedding
    timed = counted.timed
    return {
        "vectors_s": round(synthetic_s + embed_s, 1),
        "synthetic": synthetic,
        "synthetic_s": round(synthetic_s, 1),
        "embedded": timed.texts,
        "cached": stored - timed.texts,
        "embed_s": round(embed_s, 1),
        "embed_per_s": round(timed.texts / timed.seconds, 1) if timed.texts else None,
    }


def _random_vectors(library: Library, counted: _Counted, filler: set[str], seed: int) -> int:
    """A random unit vector of the model's length for every chunk of the ``filler`` documents, stored as the
    index stores the model's (float16, under the model's name); the number stored."""
    index = library.index
    index.use_vector_model(counted.name)
    dimension = int(np.asarray(counted.timed.model.embed(["the model's length"], query=True)).shape[-1])
    rng = np.random.default_rng(seed)
    stored, after = 0, 0
    while rows := index.unembedded(SYNTHETIC_BATCH, after):
        chunks = [row[0] for row in rows if row[1] in filler]
        vectors = rng.standard_normal((len(chunks), dimension), dtype=np.float32)
        index.add_vectors(chunks, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
        stored, after = stored + len(chunks), rows[-1][0]
    return stored


# -- searching --------------------------------------------------------------------------------------------------


def _questions(root: Path, limit: int | None) -> list[EvalItem]:
    """FinanceBench's questions with gold pages in the checkout's filings, the first ``limit``."""
    items = [i for i in load_financebench(root).items if i.evidence]
    if not items:
        raise EvalError(f"No FinanceBench question in {root} has gold pages in its filings.")
    return items[:limit] if limit else items


def _search_in_process(root: Path, folder: Path, config: LibraryScaleConfig) -> dict[str, Any]:
    _cold_cache(folder / "cache")
    return search_scale(root, folder, config)


def _cold_cache(folder: Path) -> None:
    """This process's cache folder (``MINIONS_CACHE_DIR``) a new, empty one: the sentences of each question's best
    chunks are embedded as a new question's are, not read from an earlier run's cache (``meaning.by_sentence``).
    The ONNX exports kept in the user's cache (a model folder that cannot be written) are linked in."""
    exports = cache_dir() / "embeddings"
    folder.mkdir(parents=True, exist_ok=True)
    if exports.is_dir() and not (folder / "embeddings").exists():
        (folder / "embeddings").symlink_to(exports)
    os.environ["MINIONS_CACHE_DIR"] = str(folder)


def search_scale(root: Path, folder: Path, config: LibraryScaleConfig) -> dict[str, Any]:
    """``folder``'s library opened and asked the questions (the module's docstring): its size on disk, search
    times, recall curves and this process's peak memory."""
    questions = _questions(root, config.limit)
    library = Library(folder, embeddings=config.embeddings if config.vectors != "none" else "none")
    kept = {}
    if config.sentences:
        started = time.perf_counter()
        kept = {"sentences_kept": library.keep_sentences(), "sentences_s": round(time.perf_counter() - started, 1)}
    started = time.perf_counter()
    library.search(questions[0].question)
    first = time.perf_counter() - started
    lines = [_asked(library, item) for item in questions]
    again = [_asked(library, item, recall=False)["search_s"] for item in questions]
    vectors, vector_bytes = library.index.vector_bytes()
    searched = [line["search_s"] for line in lines]
    out = {
        "index_mb": round(library.disk_bytes() / 1e6, 1),
        "vectors_stored": vectors,
        "vectors_mb": round(vector_bytes / 1e6, 1),
        "meaning": lines[-1]["meaning"],
        "first_search_ms": _ms(first),
        "search_ms": _ms(statistics.median(searched)),
        "search_ms_p90": _ms(_percentile(searched, 0.9)),
        "search_ms_again": _ms(statistics.median(again)),
        "recall": mean_curve(lines, "recall"),
        "routed_first": sum(line["routed_first"] for line in lines),
        **kept,
    }
    if library.embedder is not None:
        words_ms = _ms(statistics.median(line["words_s"] for line in lines))
        out.update(words_ms=words_ms, recall_words=mean_curve(lines, "recall_words"))
    library.close()
    return out | {"search_rss_mb": _peak_rss_mb()}


def _asked(library: Library, item: EvalItem, *, recall: bool = True) -> dict[str, Any]:
    """``item``'s question searched (``Library.search``), timed; with ``recall``, its recall curve, whether it
    was routed first to its own filing and, where the library has vectors, words alone (timed, its curve)."""
    started = time.perf_counter()
    found = library.search(item.question)
    line: dict[str, Any] = {"search_s": time.perf_counter() - started}
    if not recall:
        return line
    gold = {g.document for s in item.evidence for g in s}
    line.update(
        meaning=found.ranking.about.get("meaning"),
        routed_first=bool(found.route.routed and found.route.documents[0] in gold),
        recall=recall_curve(item, ranked_passages(found.ranking.ranked)),
    )
    if library.embedder is not None:
        started = time.perf_counter()
        words = search_library(library.index, item.question, embedder=None, glossary=library.glossary)
        line["words_s"] = time.perf_counter() - started
        line["recall_words"] = recall_curve(item, ranked_passages(words.ranking.ranked))
    return line


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
