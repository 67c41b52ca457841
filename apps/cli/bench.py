"""``minions bench cost|engine|speculative|tree|pdf|evidence|fleet|embed|cache|vectors|library-scale``: each benchmark
(``evals.bench``) as a command that prints one JSON line per setting.

A benchmark's options are its config's fields (``evals.bench.options.option``): ``add_config_options`` makes them,
``config_from`` reads them back; a parser here adds only what is not the config's (``--data``, what to print)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
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

    config = config_from(BenchConfig, args)
    # the jobs production sends; the prompt-order experiment (instruction first) has its own prompt
    make_jobs = production_jobs if config.order == "chunk-first" else None
    print(json.dumps(engine_bench(args.data, config, make_jobs)))
    return 0


def _add_bench_engine_parser(kinds: Any) -> None:
    from minions.evals.bench.engine import BenchConfig

    engine = kinds.add_parser(
        "engine", help="local jobs one at a time vs batched (shared prefixes, constrained JSON), same model"
    )
    _add_data_option(engine, "FinanceBench checkout or its pdfs/ folder")
    add_config_options(engine, BenchConfig)
    engine.set_defaults(func=cmd_bench_engine)


def cmd_bench_speculative(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from minions.evals.bench.speculative import SpecBenchConfig, speculative_bench

    config = config_from(SpecBenchConfig, args)
    if "written" in config.settings:
        from minions.protocols.evidence.written import excerpt_messages

        config = replace(config, prompts=(("written", excerpt_messages),))
    if args.target:
        from minions.evals.bench.deep import deep_bench

        return _print_lines(deep_bench(args.data, config, args.target))
    return _print_lines(speculative_bench(args.data, config))


def _add_bench_speculative_parser(kinds: Any) -> None:
    from minions.evals.bench.speculative import SpecBenchConfig

    spec = kinds.add_parser("speculative", help="plain vs speculative decoding (extraction and free-form jobs)")
    _add_data_option(spec, "FinanceBench checkout or its pdfs/ folder")
    spec.add_argument(
        "--target",
        metavar="deep|PATH",
        help="measure a draft model's pair: 'deep' (SmolLM2 widened to a ~1B model's cost, built once) or a GGUF; "
        "first its tok/s beside the draft's, its T(k)/T(1) and the pair's agreement",
    )
    add_config_options(spec, SpecBenchConfig)
    spec.set_defaults(func=cmd_bench_speculative)


def cmd_bench_tree(args: argparse.Namespace) -> int:
    from minions.evals.bench.tree import TreeBenchConfig, tree_bench

    return _print_lines(tree_bench(args.data, config_from(TreeBenchConfig, args)))


def _add_bench_tree_parser(kinds: Any) -> None:
    from minions.evals.bench.tree import TreeBenchConfig

    tree = kinds.add_parser(
        "tree", help="PyTorch backend: plain vs chain vs token-tree speculation, drafted from the text or a model"
    )
    _add_data_option(tree, "FinanceBench checkout or its pdfs/ folder")
    add_config_options(tree, TreeBenchConfig)
    tree.set_defaults(func=cmd_bench_tree)


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

    config = config_from(EvidenceBenchConfig, args, local=args.local or default_local())
    for line in evidence_bench(args.data, config):
        if args.items or line.get("summary"):
            print(json.dumps(line), flush=True)
    return 0


def _add_bench_evidence_parser(kinds: Any) -> None:
    from minions.evals.bench.evidence import EvidenceBenchConfig

    ev = kinds.add_parser("evidence", help="page recall of the local side on FinanceBench's gold evidence")
    _add_data_option(ev, "a FinanceBench checkout, or --dataset's files")
    add_config_options(ev, EvidenceBenchConfig)
    ev.add_argument("--items", action="store_true", help="print one line per question before the summary")
    ev.set_defaults(func=cmd_bench_evidence)


def cmd_bench_embed(args: argparse.Namespace) -> int:
    from minions.evals.bench.embed import EmbedBenchConfig, embed_bench
    from minions.paths import benchmark_data

    config = config_from(EmbedBenchConfig, args)
    root = benchmark_data("financebench", args.data, expected="a FinanceBench checkout")
    return _print_lines(embed_bench(root / "pdfs", config))


def _add_bench_embed_parser(kinds: Any) -> None:
    from minions.evals.bench.embed import EmbedBenchConfig

    embed = kinds.add_parser("embed", help="meaning vectors a second: each runtime against PyTorch float32")
    _add_data_option(embed, "a FinanceBench checkout (its pdfs/ give the chunks)")
    add_config_options(embed, EmbedBenchConfig)
    embed.set_defaults(func=cmd_bench_embed)


def cmd_bench_fleet(args: argparse.Namespace) -> int:
    from minions.evals.bench.fleet import FleetBenchConfig, fleet_bench

    return _print_lines(fleet_bench(config_from(FleetBenchConfig, args)))


def _add_bench_fleet_parser(kinds: Any) -> None:
    from minions.evals.bench.fleet import FleetBenchConfig

    fleet = kinds.add_parser("fleet", help="local jobs on one OpenAI-compatible server vs spread over several")
    add_config_options(fleet, FleetBenchConfig)
    fleet.set_defaults(func=cmd_bench_fleet)


def cmd_bench_cache(args: argparse.Namespace) -> int:
    from minions.evals.bench.cache import CacheBenchConfig, cache_bench

    return _print_lines(cache_bench(config_from(CacheBenchConfig, args), kv_dir=args.kv_dir))


def _add_bench_cache_parser(kinds: Any) -> None:
    from minions.evals.bench.cache import CacheBenchConfig

    bench = kinds.add_parser("cache", help="the same questions asked twice over one document: cold, then warm")
    add_config_options(bench, CacheBenchConfig)
    bench.add_argument("--kv-dir", help="where the states go (default: a temporary folder, removed after)")
    bench.set_defaults(func=cmd_bench_cache)


def cmd_bench_vectors(args: argparse.Namespace) -> int:
    from minions.evals.bench.vectors import VectorsBenchConfig, vectors_bench

    return _print_lines(vectors_bench(config_from(VectorsBenchConfig, args)))


def _add_bench_vectors_parser(kinds: Any) -> None:
    from minions.evals.bench.vectors import VectorsBenchConfig

    help_ = "a question's nearest chunks: every vector scored against the HNSW graph, by library size"
    bench = kinds.add_parser("vectors", help=help_)
    add_config_options(bench, VectorsBenchConfig)
    bench.set_defaults(func=cmd_bench_vectors)


def cmd_bench_library_scale(args: argparse.Namespace) -> int:
    from minions.evals.bench.library_scale import LibraryScaleConfig, library_scale_bench

    return _print_lines(library_scale_bench(args.data, config_from(LibraryScaleConfig, args)))


def _add_bench_library_scale_parser(kinds: Any) -> None:
    from minions.evals.bench.library_scale import LibraryScaleConfig

    help_ = "a library of 1x, 3x, 10x FinanceBench's filings: build time, index size, memory, search time, recall"
    bench = kinds.add_parser("library-scale", help=help_)
    _add_data_option(bench, "a FinanceBench checkout (its filings and questions)")
    add_config_options(bench, LibraryScaleConfig)
    bench.set_defaults(func=cmd_bench_library_scale)


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
    _add_bench_cache_parser(kinds)
    _add_bench_vectors_parser(kinds)
    _add_bench_library_scale_parser(kinds)


_Config = TypeVar("_Config")


def add_config_options(parser: Any, config: type[Any]) -> None:
    """An option for each field of the dataclass ``config`` made with ``evals.bench.options.option``, derived from
    the field: its flag (the field's name, or the one declared), its type (a tuple's items; a bool is a flag that
    sets the other value), its choices (a ``Literal``'s, or the ones declared) and its default, in the help. Not
    given, an option is None and the field's default stands (``config_from``)."""
    from dataclasses import MISSING, fields
    from typing import get_type_hints

    from minions.evals.bench.options import OPTION

    types = get_type_hints(config)
    defaults = {f.name: f.default for f in fields(config) if f.default is not MISSING}
    for f in fields(config):
        spec = f.metadata.get(OPTION)
        if spec is not None:
            flag = spec.flag or f"--{f.name.replace('_', '-')}"
            parser.add_argument(flag, dest=f.name, default=None, **_option_kind(spec, types[f.name], f.default),
                                help=_option_help(spec, f.default, defaults))  # fmt: skip


def _option_kind(spec: Any, kind: Any, default: Any) -> dict[str, Any]:
    """How argparse reads an option of type ``kind``: its action, type, count, choices and metavar."""
    import types
    from typing import Literal, Union, get_args, get_origin

    if get_origin(kind) in (Union, types.UnionType):  # X | None: None is the default, never given
        kind = next(k for k in get_args(kind) if k is not type(None))
    if kind is bool:
        return {"action": "store_const", "const": not default}
    out: dict[str, Any] = {"required": spec.required} if spec.required else {}
    if get_origin(kind) is tuple:
        out.update({"action": "append"} if spec.repeat else {"nargs": "+"})
        kind = get_args(kind)[0]
    if get_origin(kind) is Literal:
        out["choices"] = get_args(kind)
    else:
        out["type"] = kind
    if spec.choices:
        out["choices"] = spec.choices
    if spec.metavar or (spec.flag and "choices" not in out):
        out["metavar"] = spec.metavar or (spec.flag or "").lstrip("-").replace("-", "_").upper()
    return out


def _option_help(spec: Any, default: Any, defaults: Mapping[str, Any]) -> str:
    """An option's help (which may name another field's default, as ``{field}``) and its default: as declared,
    else the value's, none for a flag, a required option or nothing."""

    def shown(value: Any) -> str:
        if isinstance(value, tuple):
            return " ".join(shown(v) for v in value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    said = f"default: {spec.shown}" if spec.shown else None
    if said is None and not isinstance(default, bool) and not spec.required and default not in (None, ()):
        said = f"default {shown(default)}"
    notes = [n for n in ("repeatable" if spec.repeat else None, said) if n]
    return spec.help.format(**defaults) + (f" ({'; '.join(notes)})" if notes else "")


def config_from(config: type[_Config], args: argparse.Namespace, **given: Any) -> _Config:
    """``config`` from the options ``add_config_options`` made that were given on the command line (lists as
    tuples), then ``given``; the other fields keep their defaults."""
    from dataclasses import fields

    from minions.evals.bench.options import OPTION

    values = {}
    for f in fields(config):  # type: ignore[arg-type]
        value = getattr(args, f.name, None) if OPTION in f.metadata else None
        if value is not None:
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return config(**{**values, **given})


def _print_lines(lines: Iterable[Mapping[str, Any]]) -> int:
    """A benchmark's JSON lines, each printed as it comes."""
    for line in lines:
        print(json.dumps(line), flush=True)
    return 0
