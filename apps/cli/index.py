"""``minions index`` (add documents to a library) and ``minions cache`` (what the library and the saved prompt
states take on disk, and ``cache clear``), for ``minions.apps.cli.main``.

    minions index FILE|FOLDER... [--library DIR] [--warm]    per file: pages, chunks, added/unchanged/skipped, ETA
    minions index --watch FOLDER...     the same, then the folders kept in sync: a line per file changed, until Ctrl-C
    minions index --status              the meaning vectors: chunks embedded of all, the background process adding them
    minions cache [--json] | minions cache clear
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["add_index_parsers", "cmd_cache", "cmd_index", "progress_line"]

BAR = 24


INDEX_FLAGS = (
    ("--warm", "also compute every new chunk's state on the local model (slow: minutes)"),
    ("--watch", "then keep the folders in sync: files added, changed, renamed, deleted"),
    ("--follow-links", "read files and folders that links lead to outside the folders named (skipped otherwise)"),
    ("--json", "print one JSON line per file"),
    ("--status", "the meaning vectors: chunks embedded, and the process adding them"),
    (
        "--wait",
        "compute the meaning vectors, the chunks' then their sentences', before returning (default: in the background)",
    ),
    (
        "--reembed",
        "compute every chunk's meaning vector again, with the model MINIONS_EMBEDDINGS names (after a change)",
    ),
)
"""``minions index``'s switches, in the order its help lists them."""


def add_index_parsers(sub: Any, add_model_options: Callable[[argparse.ArgumentParser], None]) -> None:
    index = sub.add_parser("index", help="add documents to a library: their text indexed, for questions over all")
    index.add_argument("files", nargs="*", metavar="FILE|FOLDER", help="documents, or folders of them")
    add_library_option(index, "the library to add to")
    index.add_argument("--chunk-size", type=int, help="characters per chunk (default: the protocols' default)")
    for flag, help_ in INDEX_FLAGS:
        index.add_argument(flag, action="store_true", help=help_)
    add_model_options(index)
    index.set_defaults(func=cmd_index)

    cache = sub.add_parser("cache", help="the saved prompt states: disk used, or `minions cache clear`")
    cache.add_argument("action", nargs="?", choices=("show", "clear"), default="show")
    cache.add_argument("--json", action="store_true")
    cache.set_defaults(func=cmd_cache)


def add_library_option(parser: argparse.ArgumentParser, what: str, *, optional_value: bool = False) -> None:
    from minions.paths import LIBRARY_ENV

    kwargs: dict[str, Any] = {"nargs": "?", "const": ""} if optional_value else {}
    parser.add_argument(
        "--library", metavar="DIR", help=f"{what} (default: ${LIBRARY_ENV} or ~/.local/share/minions/library)", **kwargs
    )


def open_library(args: argparse.Namespace, **options: Any) -> Any:
    from minions.paths import library_dir
    from minions.protocols.library import Library

    return Library(args.library or library_dir(), **options)


def add_line(p: Any) -> str:
    """``[3/74] 3M_2018_10K.pdf  added  pages 160  chunks 584  ETA 1m10s`` of an ``AddProgress``."""
    eta = "" if p.eta_s is None or p.files == p.files_total else f"  ETA {int(p.eta_s) // 60}m{int(p.eta_s) % 60:02d}s"
    why = f": {p.why}" if p.why else ""
    return f"[{p.files}/{p.files_total}] {p.file}  {p.status}{why}  (pages {p.pages}, chunks {p.chunks}){eta}"


def progress_line(p: Any) -> str:
    """``name [#####-----] pages 40/160  chunks 120/480  230 tok/s  ETA 3m10s`` of a ``ChunkStateProgress``."""
    filled = BAR * p.chunks // p.chunks_total if p.chunks_total else BAR
    pages = f"pages {p.pages}/{p.pages_total}  " if p.pages_total else ""
    if p.finished or p.eta_s is None:
        eta = "done" if p.finished else "ETA --"
    else:
        eta = f"ETA {int(p.eta_s) // 60}m{int(p.eta_s) % 60:02d}s"
    return (
        f"{p.document[:40]} [{'#' * filled}{'-' * (BAR - filled)}] {pages}chunks {p.chunks}/{p.chunks_total}  "
        f"{p.tokens_per_s:.0f} tok/s  {eta}"
    )


def embed_line(p: Any, what: str = "meaning vectors") -> str:
    """``meaning vectors [#####-----] 1,200/34,274 chunks  38.1/s  ETA 14m20s`` of an ``EmbedProgress``."""
    filled = BAR * p.done // p.total if p.total else BAR
    rate = p.done / p.seconds if p.seconds else 0.0
    eta = "done" if p.done >= p.total else f"ETA {int(p.eta_s or 0) // 60}m{int(p.eta_s or 0) % 60:02d}s"
    return f"{what} [{'#' * filled}{'-' * (BAR - filled)}] {p.done:,}/{p.total:,} chunks  {rate:.1f}/s  {eta}"


def cmd_index(args: argparse.Namespace) -> int:
    from minions.errors import MinionsError
    from minions.protocols.background import resume_embedding

    options: dict[str, Any] = {"chunk_size": args.chunk_size} if args.chunk_size else {}
    library = open_library(args, local=args.local, **options)
    live = sys.stderr.isatty() and not args.json

    def added(p: Any) -> None:
        if args.json:
            fields = {"file": p.file, "status": p.status, "why": p.why, "files": p.files, "of": p.files_total}
            print(json.dumps({**fields, "elapsed_s": round(p.elapsed_s, 2)}), flush=True)
        else:
            print(add_line(p), file=sys.stderr, flush=True)

    def warmed(p: Any) -> None:
        if live:
            print("\r" + progress_line(p).ljust(100), end="\n" if p.finished else "", file=sys.stderr, flush=True)
        elif p.finished and not args.json:
            print(progress_line(p), file=sys.stderr, flush=True)

    def embedded(p: Any, key: str = "embedded", what: str = "meaning vectors") -> None:
        if args.json:
            print(json.dumps({key: p.done, "of": p.total, "elapsed_s": round(p.seconds, 2)}), flush=True)
        elif live:
            line = embed_line(p, what).ljust(100)
            print("\r" + line, end="\n" if p.done >= p.total else "", file=sys.stderr, flush=True)
        elif p.done >= p.total:
            print(embed_line(p, what), file=sys.stderr, flush=True)

    def sentences(p: Any) -> None:
        embedded(p, "sentences", "their sentences")

    if args.status:
        with library:
            return _status(library, args.json)
    if not args.files and not args.reembed:
        raise MinionsError("Name the documents or folders to add (or --reembed to compute the vectors again).")
    if args.watch:
        if args.follow_links:
            print("--follow-links is for one index run: a watched folder is read only inside itself", file=sys.stderr)
            return 2
        return _watch(library, args.files, added)
    if library.embedder is None:
        if args.reembed:
            raise MinionsError("--reembed needs an embedding model: set MINIONS_EMBEDDINGS (auto, onnx/<folder>, ...).")
        print("the library searches by words alone (no embedding model): MINIONS_EMBEDDINGS names one", file=sys.stderr)
    if args.reembed and not args.files and args.wait:
        with library:
            count = library.embed(embedded, again=True)
            library.keep_sentences(on_progress=sentences)
        print(f"library {library.index.path}: {count} chunks embedded again with {library.embedder.name}")
        return 0
    if args.reembed:
        library.index.drop_vectors()  # computed again below, or by the background process
    with library:
        report = library.add(*args.files, on_progress=added, warm=args.warm, on_warm=warmed, on_embed=embedded,
                             follow_links=args.follow_links, embed=args.wait)  # fmt: skip
        if args.wait:
            library.keep_sentences(on_progress=sentences)
        background = None if args.wait else resume_embedding(library)
        docs = library.documents
        summary = (
            f"library {library.index.path}: {len(docs)} document{'s' * (len(docs) != 1)}, "
            f"{sum(d.pages for d in docs)} pages, "
            f"{sum(d.chunks for d in docs)} chunks, {library.disk_bytes() / 1e6:.1f} MB; this run: {report.summary()}"
        )
    if args.json:
        print(json.dumps({"summary": True, "added": len(report.added), "unchanged": len(report.unchanged),
                          "skipped": report.skipped, "documents": len(docs), "index_s": round(report.seconds, 2),
                          "embedded": report.embedded, "embed_s": round(report.embed_seconds, 2),
                          "disk_bytes": library.disk_bytes(),
                          "meaning": background.to_dict() if background else None}))  # fmt: skip
    else:
        for name, why in report.skipped:
            print(f"skipped {name}: {why}", file=sys.stderr)
        print(summary)
        if background is not None and not background.complete and background.embedded < background.total:
            print(f"meaning is being added in the background ({background.embedded:,}/{background.total:,} chunks so "
                  f"far, pid {background.pid}): questions meanwhile are answered by words; minions index --status "
                  "shows how far it is")  # fmt: skip
        elif background is not None and not background.complete:
            print(f"the chunks' sentences are being embedded ahead of questions in the background "
                  f"({background.sentences or 0:,}/{background.total:,} chunks so far, pid {background.pid}): "
                  "a new question meanwhile embeds those it weighs itself")  # fmt: skip
        if args.warm:
            print(cache_summary())
    if not report.added and not report.unchanged:
        raise MinionsError("No document could be added: " + "; ".join(f"{f}: {why}" for f, why in report.skipped))
    return 0


def _status(library: Any, as_json: bool) -> int:
    """``minions index --status``: the library's documents, and where its meaning vectors stand."""
    from minions.protocols.background import embedding_status

    status = embedding_status(library)
    docs = library.documents
    if as_json:
        print(json.dumps({"library": library.index.path, "documents": len(docs), **status.to_dict()}))
    else:
        print(f"library {library.index.path}: {len(docs)} document{'s' * (len(docs) != 1)}")
        print(status.line())
    return 0


def _watch(library: Any, folders: list[str], on_progress: Callable[[Any], None]) -> int:
    """``minions index --watch``: catch up, then keep the folders in sync until Ctrl-C."""
    from minions.protocols.watch import FolderWatch

    with library, _ctrl_c() as stopped:
        watch = FolderWatch(library, folders, on_progress=on_progress).start()
        try:
            shown = False
            while watch.running and not stopped.wait(0.2):
                if not shown and watch.ready.is_set():
                    shown = True
                    where = ", ".join(str(f) for f in watch.folders)
                    print(f"library {library.index.path}: {len(library.documents)} documents; watching {where} "
                          "(Ctrl-C stops)", file=sys.stderr, flush=True)  # fmt: skip
            if stopped.is_set():
                print("stopped watching", file=sys.stderr)
        finally:
            watch.stop()  # a batch being applied is finished first
    return 0


@contextmanager
def _ctrl_c() -> Iterator[threading.Event]:
    """An event that Ctrl-C (SIGINT) sets while the block runs, in place of a KeyboardInterrupt: one raised inside
    ``Thread.join``'s lock wait can leave threading's record of that thread wrong (CPython's
    ``_wait_for_tstate_lock`` then marks a running thread stopped), and a watch once outlived Ctrl-C by 30 s."""
    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped  # signals reach only the main thread: nothing to catch here
        return
    previous = signal.signal(signal.SIGINT, lambda *_: stopped.set())
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, previous)


def cache_summary() -> str:
    from minions.backends.llamacpp.kvstore import KVStore

    store = KVStore()
    u = store.usage()
    return (
        f"saved prompt states: {u.entries} chunks, {u.tokens} tokens, {u.bytes / 1e6:.1f} MB of "
        f"{store.max_bytes / 1e9:.1f} GB in {store.root}"
    )


def cmd_cache(args: argparse.Namespace) -> int:
    from minions.backends.llamacpp.kvstore import KVStore

    store = KVStore()
    if args.action == "clear":
        before = store.clear()
        print(f"cleared {before.entries} saved prompt states ({before.bytes / 1e6:.1f} MB) from {store.root}")
        return 0
    library = library_usage()
    cached = _vector_cache()
    if args.json:
        u = store.usage()
        print(json.dumps({"root": str(store.root), "entries": u.entries, "tokens": u.tokens, "bytes": u.bytes,
                          "max_bytes": store.max_bytes, "library": library, "vector_cache": cached}))  # fmt: skip
    else:
        print(cache_summary())
        print(f"vectors of loaded documents and of the sentences searches weigh: {cached['bytes'] / 1e6:.1f} MB in "
              f"{cached['path']}")  # fmt: skip
        if library is not None:
            v = library["vectors"]
            vectors = f"meaning vectors {v['bytes'] / 1e6:.1f} MB ({v['chunks']} chunks, {v['model'] or 'none'})"
            print(f"library {library['path']}: {library['documents']} documents, {library['bytes'] / 1e6:.1f} MB, "
                  f"of which {vectors}")  # fmt: skip
            for d in library["per_document"]:
                print(f"  {d['name']}: {d['pages']} pages, {d['chunks']} chunks, {d['bytes'] / 1e6:.1f} MB on disk")
            print(sent_lines(library["embeddings_sent"]))
    return 0


def _vector_cache() -> dict[str, Any]:
    """The user's vector cache (``meaning.VectorCache``): where it is and its bytes on disk, its log's too."""
    from minions.protocols.search.meaning import user_cache_path

    path = user_cache_path()
    files = [path, path.with_name(path.name + "-wal")]
    return {"path": str(path), "bytes": sum(f.stat().st_size for f in files if f.is_file())}


def sent_lines(sent: dict[str, Any]) -> str:
    """What the library's log says left this device to be embedded (``search.sent.sent_summary``), in lines."""
    if not sent["log"]:
        return "nothing of the library left this device to be embedded"
    lines = [f"sent off this device to be embedded ({', '.join(sent['to'])}): {sent['bytes']:,} bytes, "
             f"{sent['tokens']:,} tokens, ${sent['usd']:.6f}, in {len(sent['log'])} records"]  # fmt: skip
    lines += [f"  {d['document']}: {d['chunks']} chunks, {d['bytes']:,} bytes, {d['tokens']:,} tokens"
              for d in sent["per_document"]]  # fmt: skip
    return "\n".join(lines)


def library_usage() -> dict[str, Any] | None:
    """The default library's disk, in all and per document (its share of the index, by characters); None when
    there is none."""
    from minions.paths import library_dir
    from minions.protocols.library import INDEX_FILE
    from minions.protocols.search.index import SqliteIndex
    from minions.protocols.search.sent import sent_summary

    path = library_dir() / INDEX_FILE
    if not path.exists():
        return None
    index = SqliteIndex(path)
    try:
        docs, size = index.documents(), index.disk_bytes()
        (vectors, vector_bytes), model = index.vector_bytes(), index.vector_model()
        sent = sent_summary(index.sent())
    finally:
        index.close()
    chars = sum(d.chars for d in docs) or 1
    per = [{"name": d.name, "pages": d.pages, "chunks": d.chunks, "bytes": int(size * d.chars / chars)} for d in docs]
    meaning = {"model": model, "chunks": vectors, "bytes": vector_bytes}
    return {"path": str(path), "documents": len(docs), "bytes": size, "vectors": meaning, "per_document": per,
            "embeddings_sent": sent}  # fmt: skip
