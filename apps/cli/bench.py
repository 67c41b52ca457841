"""``minions bench cost|engine|speculative|tree|pdf|evidence|fleet|embed|cache``: each benchmark (``evals.bench``) as a
command that prints one JSON line per setting."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from minions.errors import MinionsError
from minions.paths import DATA_ENV

from .models import add_model_options as _add_model_options
from .models import resolve_models as _resolve_models

__all__ = ["add_bench_parser"]


def cmd_bench_cost(args: argparse.Namespace) -> int:
    from minions.evals.bench.cost import cost_bench

    local, remote = _resolve_models(args)
    if remote is None:
        raise MinionsError("bench cost needs a remote model: pass --remote provider/model or set MINIONS_REMOTE.")
    print(json.dumps(cost_bench(args.data, items=args.items, local=local, remote=remote)))
    return 0


def cmd_bench_engine(args: argparse.Namespace) -> int:
    from minions.evals.bench.cost import production_jobs
    from minions.evals.bench.engine import BenchConfig, engine_bench

    config = _given(BenchConfig(), args, ("document", "chunks", "max_tokens", "max_seqs", "order", "baseline"))
    # the jobs production sends; the prompt-order experiment (instruction first) has its own prompt
    make_jobs = production_jobs if config.order == "chunk-first" else None
    print(json.dumps(engine_bench(args.data, config, make_jobs)))
    return 0


def _add_bench_engine_parser(kinds: Any) -> None:
    from minions.evals.bench.engine import BenchConfig

    d = BenchConfig()
    engine = kinds.add_parser(
        "engine", help="local jobs one at a time vs batched (shared prefixes, constrained JSON), same model"
    )
    _add_data_option(engine, "FinanceBench checkout or its pdfs/ folder")
    engine.add_argument("--document", help=f"PDF in the data folder (default {d.document})")
    engine.add_argument("--chunks", type=int, help=f"excerpts (default {d.chunks})")
    engine.add_argument("--max-tokens", type=int, help=f"reply token limit per job (default {d.max_tokens})")
    engine.add_argument("--max-seqs", type=int, help=f"jobs decoded together (default {d.max_seqs})")
    engine.add_argument("--order", choices=("chunk-first", "instruction-first"), help=f"default {d.order}")
    engine.add_argument("--baseline", choices=("highlevel", "engine"), help=f"default {d.baseline}")
    engine.set_defaults(func=cmd_bench_engine)


def cmd_bench_speculative(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from minions.evals.bench.speculative import SpecBenchConfig, speculative_bench

    names = (
        "model",
        "document",
        "chunks",
        "max_tokens",
        "n_threads",
        "k_max",
        "depth",
        "repeats",
        "background_load",
        "noise",
        "turn",
        "draft",
    )
    config = _given(SpecBenchConfig(), args, names)
    if args.batches:
        config = replace(config, batches=tuple(args.batches))
    if args.settings:
        config = replace(config, settings=tuple(args.settings))
    if "written" in config.settings:
        from minions.protocols.evidence.written import excerpt_messages

        config = replace(config, prompts=(("written", excerpt_messages),))
    if args.target:
        from minions.evals.bench.deep import deep_bench

        return _print_lines(deep_bench(args.data, config, args.target))
    return _print_lines(speculative_bench(args.data, config))


def _add_bench_speculative_parser(kinds: Any) -> None:
    from minions.evals.bench.speculative import SpecBenchConfig

    d = SpecBenchConfig()
    spec = kinds.add_parser("speculative", help="plain vs speculative decoding (extraction and free-form jobs)")
    _add_data_option(spec, "FinanceBench checkout or its pdfs/ folder")
    spec.add_argument("--model", help="GGUF file to measure, a hybrid one too (default: the shipped SmolLM2)")
    _add_pair_options(
        spec,
        "measure a draft model's pair: 'deep' (SmolLM2 widened to a ~1B model's cost, built once) or a GGUF; "
        "first its tok/s beside the draft's, its T(k)/T(1) and the pair's agreement",
        "a draft model (same vocabulary; with --target: SmolLM2)",
    )
    spec.add_argument("--document", help=f"PDF in the data folder (default {d.document})")
    spec.add_argument("--chunks", type=int, help=f"excerpts (default {d.chunks})")
    spec.add_argument("--max-tokens", type=int, help=f"reply token limit per job (default {d.max_tokens})")
    spec.add_argument("--batches", type=int, nargs="+", help=f"batch sizes (default {' '.join(map(str, d.batches))})")
    spec.add_argument(
        "--settings",
        nargs="+",
        choices=("extraction", "freeform", "written"),
        help="jobs to decode: JSON extraction, free-form prose, or the written answer from quotes (where prompt "
        f"lookup and a draft model pay) (default {' '.join(d.settings)})",
    )
    spec.add_argument("--n-threads", type=int, help="CPU threads (default: all cores)")
    spec.add_argument("--k-max", type=int, help=f"longest draft (default {d.k_max})")
    spec.add_argument(
        "--depth", type=int, help="draft this many tokens at every speculative step, speed gate off (default: adaptive)"
    )
    spec.add_argument("--repeats", type=int, help=f"plain/speculative pairs per setting (default {d.repeats})")
    spec.add_argument(
        "--background-load", type=int, help="busy processes, one core each, kept running while it measures (default 0)"
    )
    spec.add_argument(
        "--noise",
        action="store_true",
        default=None,
        help="a second plain run in every pair: plain against plain (the noise), speedups over both plain runs",
    )
    spec.add_argument(
        "--turn",
        type=float,
        help=f"seconds each run of a pair holds the cores before the other's turn; 0: one after another "
        f"(default {d.turn})",
    )
    spec.set_defaults(func=cmd_bench_speculative)


def cmd_bench_tree(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from minions.evals.bench.tree import TreeBenchConfig, tree_bench

    config = _given(TreeBenchConfig(), args, ("document", "chunks", "max_tokens", "repeats", "n_threads", "target"))
    if args.draft:
        config = replace(config, draft_model=args.draft)
    if args.no_llamacpp:
        config = replace(config, llamacpp=False)
    if args.no_draft:
        config = replace(config, draft=False)
    if args.no_batched:
        config = replace(config, batched=False)
    return _print_lines(tree_bench(args.data, config))


def _add_bench_tree_parser(kinds: Any) -> None:
    from minions.evals.bench.tree import TreeBenchConfig

    d = TreeBenchConfig()
    tree = kinds.add_parser(
        "tree", help="PyTorch backend: plain vs chain vs token-tree speculation, drafted from the text or a model"
    )
    _add_data_option(tree, "FinanceBench checkout or its pdfs/ folder")
    tree.add_argument("--document", help=f"PDF in the data folder (default {d.document})")
    tree.add_argument("--chunks", type=int, help=f"excerpts, {d.jobs_per_chunk} jobs each (default {d.chunks})")
    tree.add_argument("--max-tokens", type=int, help=f"reply token limit per job (default {d.max_tokens})")
    tree.add_argument("--repeats", type=int, help=f"runs of every mode in turn (default {d.repeats})")
    tree.add_argument("--n-threads", type=int, help="torch CPU threads (default: all cores)")
    tree.add_argument("--no-llamacpp", action="store_true", help="skip llama.cpp's plain decode beside it")
    tree.add_argument("--no-draft", action="store_true", help="skip the draft model's chain and tree")
    tree.add_argument("--no-batched", action="store_true", help="skip decoding the jobs together")
    _add_pair_options(
        tree,
        "the model to measure: 'deep' (SmolLM2 widened to a ~1B model's cost, built once) or a GGUF "
        "(default: the shipped SmolLM2)",
        "with --target: the draft model's GGUF (default: SmolLM2)",
    )
    tree.set_defaults(func=cmd_bench_tree)


def _add_pair_options(parser: Any, target_help: str, draft_help: str) -> None:
    """``--target deep|PATH`` and ``--draft PATH``: a speculation bench's target and draft model."""
    parser.add_argument("--target", metavar="deep|PATH", help=target_help)
    parser.add_argument("--draft", metavar="PATH", help=draft_help)


def cmd_bench_pdf(args: argparse.Namespace) -> int:
    from minions.evals.bench.pdf import pdf_bench

    return _print_lines(pdf_bench(args.files, data=args.data, pypdf_pages=args.pypdf_pages))


def _add_bench_pdf_parser(kinds: Any) -> None:
    pdf = kinds.add_parser("pdf", help="PDF text extraction in pages/s (load_document, and pypdf beside it)")
    pdf.add_argument("files", nargs="+", metavar="FILE", help="PDFs: paths, or names in --data or its pdfs/")
    _add_data_option(pdf, "a folder of PDFs, or a FinanceBench checkout")
    pdf.add_argument("--pypdf-pages", type=int, help="time pypdf on the first N pages only (0: skip; default: all)")
    pdf.set_defaults(func=cmd_bench_pdf)


def cmd_bench_evidence(args: argparse.Namespace) -> int:
    from minions.backends.registry import default_local
    from minions.evals.bench.evidence import EvidenceBenchConfig, evidence_bench

    config = EvidenceBenchConfig(
        limit=args.limit,
        read_chunks=args.read_chunks,
        score_sentences=not args.no_scores,
        local=args.local or default_local(),
        ids=tuple(args.id or ()),
        dataset=args.dataset,
        lexical_only=args.lexical_only,
        library=args.library,
        library_dir=args.library_dir,
        compare_local=args.compare_local,
        meaning=args.meaning,
        meaning_weights=tuple(args.meaning_weight or EvidenceBenchConfig.meaning_weights),
        embeddings=args.embeddings or EvidenceBenchConfig.embeddings,
        questions=args.questions,
        half=args.half,
    )
    for line in evidence_bench(args.data, config):
        if args.items or line.get("summary"):
            print(json.dumps(line), flush=True)
    return 0


def _add_bench_evidence_parser(kinds: Any) -> None:
    from minions.evals.bench.evidence import EvidenceBenchConfig
    from minions.evals.items import HALVES

    d = EvidenceBenchConfig()
    ev = kinds.add_parser("evidence", help="page recall of the local side on FinanceBench's gold evidence")
    _add_data_option(ev, "a FinanceBench checkout, or --dataset's files")
    ev.add_argument(
        "--dataset", default=d.dataset, help="another benchmark with gold evidence, e.g. bamboo-paperqa (no pages)"
    )
    ev.add_argument("--limit", type=int, default=d.limit, help="the first N questions with gold evidence")
    ev.add_argument(
        "--questions",
        metavar="FILE",
        help="questions of your own over the set's documents, instead of its own (frozen ones: evals/bench/written/)",
    )
    ev.add_argument(
        "--half", choices=HALVES, help="only this fixed half of the questions (by a hash of each id): tune on one"
    )
    ev.add_argument("--id", action="append", help="only this question (repeatable)")
    ev.add_argument("--read-chunks", type=int, default=d.read_chunks, help="chunks the local model reads")
    ev.add_argument("--no-scores", action="store_true", help="jobs pick a sentence through a schema, not by scores")
    ev.add_argument("--local", help="the local model (default: MINIONS_LOCAL or llamacpp/default)")
    ev.add_argument(
        "--compare-local", metavar="M", help="a second local model on the same chunks: its recall, same quotes"
    )
    ev.add_argument("--lexical-only", action="store_true", help="no model: the BM25 baselines and word ranking")
    ev.add_argument("--items", action="store_true", help="print one line per question before the summary")
    ev.add_argument(
        "--library", action="store_true", help="also ask every question of all the set's documents in one library"
    )
    ev.add_argument("--library-dir", help="where that library is built or reused (default: a temporary folder)")
    ev.add_argument(
        "--meaning",
        action="store_true",
        help="with --library: embed the chunks; words, meaning and fused curves, in the library and per document",
    )
    ev.add_argument("--embeddings", help=f"the embedding model for --meaning (default {d.embeddings})")
    ev.add_argument(
        "--meaning-weight",
        type=float,
        action="append",
        help=f"meaning's weight in the fusion, words 1 (repeatable; default {d.meaning_weights[0]:g})",
    )
    ev.set_defaults(func=cmd_bench_evidence)


def cmd_bench_embed(args: argparse.Namespace) -> int:
    from minions.evals.bench.embed import EmbedBenchConfig, embed_bench
    from minions.paths import benchmark_data

    args.ways = tuple(args.way) if args.way else None
    config = _given(EmbedBenchConfig(), args, ("files", "chunks", "pairs", "model", "ways"))
    root = benchmark_data("financebench", args.data, expected="a FinanceBench checkout")
    return _print_lines(embed_bench(root / "pdfs", config))


def _add_bench_embed_parser(kinds: Any) -> None:
    from minions.evals.bench.embed import WAYS, EmbedBenchConfig

    d = EmbedBenchConfig()
    embed = kinds.add_parser("embed", help="meaning vectors a second: each runtime against PyTorch float32")
    _add_data_option(embed, "a FinanceBench checkout (its pdfs/ give the chunks)")
    embed.add_argument("--files", type=int, help=f"the first N filings give the chunks (default {d.files})")
    embed.add_argument("--chunks", type=int, help=f"chunks embedded per run (default {d.chunks})")
    embed.add_argument("--pairs", type=int, help=f"timed pairs per way, baseline then way (default {d.pairs})")
    embed.add_argument("--model", help="a sentence-transformers folder (default: the one auto takes)")
    embed.add_argument("--way", action="append", choices=WAYS[1:], help="only this way (repeatable)")
    embed.set_defaults(func=cmd_bench_embed)


def cmd_bench_fleet(args: argparse.Namespace) -> int:
    from minions.evals.bench.fleet import FleetBenchConfig, fleet_bench

    config = _given(
        FleetBenchConfig(local=args.local),
        args,
        ("document", "jobs", "max_tokens", "pairs", "per_server", "cold_warm", "rounds"),
    )
    return _print_lines(fleet_bench(config))


def _add_bench_fleet_parser(kinds: Any) -> None:
    from minions.evals.bench.fleet import FleetBenchConfig

    d = FleetBenchConfig()
    fleet = kinds.add_parser("fleet", help="local jobs on one OpenAI-compatible server vs spread over several")
    fleet.add_argument("--local", required=True, help="openai-compatible/<model>@<url>,<url>,... (two or more)")
    fleet.add_argument("--document", help=f"the document the jobs read (default {d.document})")
    fleet.add_argument("--jobs", type=int, help=f"jobs per run (default {d.jobs})")
    fleet.add_argument("--max-tokens", type=int, help=f"reply token limit per job (default {d.max_tokens})")
    fleet.add_argument("--pairs", type=int, help=f"timed pairs, one server then the fleet (default {d.pairs})")
    fleet.add_argument("--per-server", type=int, help=f"requests in flight per server (default {d.per_server})")
    fleet.add_argument(
        "--cold-warm",
        action="store_true",
        help="the embedded engine, one server and the fleet: a question over unread chunks, then another",
    )
    fleet.add_argument(
        "--rounds", type=int, help=f"--cold-warm rounds, each setting on another slice (default {d.rounds})"
    )
    fleet.set_defaults(func=cmd_bench_fleet)


def _add_data_option(parser: Any, what: str) -> None:
    parser.add_argument("--data", help=f"{what} (default: ${DATA_ENV}/financebench)")


def add_bench_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks; each prints one JSON line per setting")
    kinds = bench.add_subparsers(dest="bench", required=True)
    cost = kinds.add_parser("cost", help="remote tokens of minions vs remote-only on FinanceBench filings")
    _add_data_option(cost, "a FinanceBench checkout (data/*.jsonl and pdfs/)")
    cost.add_argument("--items", type=int, default=3)
    _add_model_options(cost)
    cost.set_defaults(func=cmd_bench_cost)
    _add_bench_engine_parser(kinds)
    _add_bench_speculative_parser(kinds)
    _add_bench_tree_parser(kinds)
    _add_bench_pdf_parser(kinds)
    _add_bench_evidence_parser(kinds)
    _add_bench_fleet_parser(kinds)
    _add_bench_embed_parser(kinds)

    from minions.apps.cli.library import add_cache_bench_parser

    add_cache_bench_parser(kinds)


_Config = TypeVar("_Config")


def _given(defaults: _Config, args: argparse.Namespace, names: Sequence[str]) -> _Config:
    """``defaults`` (a dataclass) with the options of ``names`` that were given on the command line."""
    from dataclasses import replace

    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return replace(defaults, **given)  # type: ignore[type-var]


def _print_lines(lines: Iterable[Mapping[str, Any]]) -> int:
    """A benchmark's JSON lines, each printed as it comes."""
    for line in lines:
        print(json.dumps(line), flush=True)
    return 0
