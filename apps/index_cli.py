"""``minions index`` (read documents ahead of questions), ``minions cache`` (what the saved prompt states take,
and ``cache clear``) and ``minions bench cache``, for ``minions.cli``.

    minions index FILE... [--local M] [--chunk-size N]    progress: pages, chunks, tokens/s, ETA
    minions cache [--json] | minions cache clear
    minions bench cache --document 10K.pdf [--question Q ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["add_cache_bench_parser", "add_index_parsers", "cmd_cache", "cmd_index", "progress_line"]

BAR = 24


def add_index_parsers(sub: Any, add_model_options: Callable[[argparse.ArgumentParser], None]) -> None:
    index = sub.add_parser("index", help="read documents ahead of questions (the local model's chunk states, saved)")
    index.add_argument("files", nargs="+", metavar="FILE", help="documents to read")
    index.add_argument("--chunk-size", type=int, help="characters per chunk (default: the protocols' default)")
    index.add_argument("--json", action="store_true", help="print one JSON line per document")
    add_model_options(index)
    index.set_defaults(func=cmd_index)

    cache = sub.add_parser("cache", help="the saved prompt states: disk used, or `minions cache clear`")
    cache.add_argument("action", nargs="?", choices=("show", "clear"), default="show")
    cache.add_argument("--json", action="store_true")
    cache.set_defaults(func=cmd_cache)


def progress_line(p: Any) -> str:
    """``name [#####-----] pages 40/160  chunks 120/480  230 tok/s  ETA 3m10s`` of an ``IndexProgress``."""
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


def cmd_index(args: argparse.Namespace) -> int:
    from minions.backends.registry import default_local, resolve
    from minions.documents import load_documents
    from minions.protocols.indexing import index_documents
    from minions.protocols.options import RunOptions

    docs = load_documents(args.files)
    options = RunOptions(chunk_size=args.chunk_size) if args.chunk_size else RunOptions()
    live = sys.stderr.isatty() and not args.json

    def show(p: Any) -> None:
        if live:
            print("\r" + progress_line(p).ljust(100), end="\n" if p.finished else "", file=sys.stderr, flush=True)
        elif p.finished and not args.json:
            print(progress_line(p), file=sys.stderr, flush=True)

    done = index_documents(docs, resolve(args.local or default_local()), options=options, on_progress=show)
    if args.json:
        for p in done:
            print(json.dumps({"document": p.document, "pages": p.pages_total, "chunks": p.chunks_total,
                              "tokens_computed": p.tokens, "tokens_per_s": round(p.tokens_per_s, 1)}))  # fmt: skip
    else:
        print(cache_summary())
    return 0


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
    if args.json:
        u = store.usage()
        print(json.dumps({"root": str(store.root), "entries": u.entries, "tokens": u.tokens, "bytes": u.bytes,
                          "max_bytes": store.max_bytes}))  # fmt: skip
    else:
        print(cache_summary())
    return 0


def add_cache_bench_parser(kinds: Any) -> None:
    from minions.protocols.cache_bench import CacheBenchConfig

    d = CacheBenchConfig()
    bench = kinds.add_parser("cache", help="the same questions asked twice over one document: cold, then warm")
    bench.add_argument("--document", required=True, help="the document (e.g. FinanceBench's pdfs/3M_2018_10K.pdf)")
    bench.add_argument("--question", action="append", help="a question (repeatable; default: five about a 10-K)")
    bench.add_argument("--chunk-size", type=int, help="characters per chunk (default: the protocols' default)")
    bench.add_argument("--max-seqs", type=int, default=d.max_seqs, help="jobs in flight in the engine")
    bench.add_argument("--kv-dir", help="where the states go (default: a temporary folder, removed after)")
    bench.set_defaults(func=cmd_bench_cache)


def cmd_bench_cache(args: argparse.Namespace) -> int:
    from minions.protocols.cache_bench import CacheBenchConfig, cache_bench

    d = CacheBenchConfig()
    config = CacheBenchConfig(
        document=args.document,
        questions=tuple(args.question) if args.question else d.questions,
        chunk_size=args.chunk_size,
        max_seqs=args.max_seqs,
    )
    for line in cache_bench(config, kv_dir=args.kv_dir):
        print(json.dumps(line), flush=True)
    return 0
