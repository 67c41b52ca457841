"""``minions eval``: run benchmarks and report accuracy against cost.

    minions eval run DATASET --data PATH --protocol NAME [--limit N] [--sample N --seed S]
                     [--concurrency K] --out FILE.jsonl
    minions eval report FILE.jsonl... --out DIR
    minions eval datasets

``apps/cli/main.py`` mounts these with ``add_eval_parser``; bad input raises a MinionsError subclass, which the
CLI prints as one line (exit status 2). Protocols and matplotlib are imported inside the commands.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minions.evals.datasets import DATASETS, dataset_path, describe_datasets, load_dataset
from minions.evals.errors import EvalError

if TYPE_CHECKING:
    from minions.evals.runner import RunSummary

__all__ = ["add_eval_parser", "cmd_eval_datasets", "cmd_eval_report", "cmd_eval_run"]

AddModelOptions = Callable[[argparse.ArgumentParser], None]
ResolveModels = Callable[[argparse.Namespace], tuple[Any, Any]]


def _key_values(pairs: list[str] | None, flag: str) -> dict[str, Any]:
    """``["k=v", ...]`` as a dict; values are read as JSON where they parse (3, true, "x"), else as text."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise EvalError(f"{flag} takes KEY=VALUE, got {pair!r} (e.g. {flag} max_rounds=2).")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _data_path(args: argparse.Namespace) -> str:
    return str(dataset_path(args.dataset, args.data))


def _progress(record: dict[str, Any], done: int, total: int) -> None:
    kind = "harness error (a bug)" if record.get("error_kind") == "harness" else "error"
    status = f"{kind}: {record['error']}" if record["error"] else f"score {record['score']:.2f}"
    cost = (record.get("cost_usd") or {}).get("run", 0.0)
    print(
        f"[{done}/{total}] {record['protocol']} {record['item_id']}: {status}, ${cost:.4f}, "
        f"{record['timings'].get('wall_s', 0.0):.1f}s",
        file=sys.stderr,
        flush=True,
    )


def _print_summary(summary: RunSummary) -> None:
    mean = "n/a" if summary.mean_score is None else f"{summary.mean_score:.3f}"
    bugs = f", {summary.harness_errors} of them harness errors, traceback in the file" if summary.harness_errors else ""
    print(
        f"{summary.config.dataset} / {summary.config.protocol}: {summary.ran} ran ({summary.failed} failed{bugs}), "
        f"{summary.already_done} already done; mean score {mean} over {summary.selected} items -> {summary.path}"
    )
    b = summary.baselines
    if b is not None:
        print(
            f"  beside it: chance {b.chance:.3f}, majority class ({b.majority_answer!r}) {b.majority:.3f}; "
            f"{summary.abstained} of {b.items} abstained (not sure: scored wrong)"
        )


def cmd_eval_run(args: argparse.Namespace, resolve_models: ResolveModels) -> int:
    from minions.evals.runner import run_eval, run_grid  # protocols load only when a run starts

    protocols = [p.strip() for group in (args.protocol or ["minions"]) for p in group.split(",") if p.strip()]
    dataset = load_dataset(args.dataset, _data_path(args), **_key_values(args.dataset_option, "--dataset-option"))
    if dataset.skipped:
        print(
            f"{dataset.name}: {len(dataset.skipped)} question(s) skipped (see the warning above); {len(dataset)} left",
            file=sys.stderr,
        )
    if not dataset.items:
        raise EvalError(f"{dataset.name} at {dataset.path} has no items to run.")
    local, remote = resolve_models(args)
    kwargs: dict[str, Any] = {
        "protocol_options": _key_values(args.option, "--option"),
        "judge": args.judge,
        "ids": args.item,
        "sample": args.sample,
        "limit": args.limit,
        "retry_errors": args.retry_errors,
        "on_record": None if args.quiet else _progress,
        "library": args.library,
    }
    # Unset flags leave run_eval's own defaults in force: they live in one place.
    kwargs.update({k: v for k, v in (("seed", args.seed), ("concurrency", args.concurrency)) if v is not None})
    out = Path(args.out)
    if len(protocols) == 1 and out.suffix == ".jsonl":
        summaries = [run_eval(dataset, protocols[0], local, remote, out, **kwargs)]
    elif out.suffix == ".jsonl":
        raise EvalError(f"With several protocols, --out is a folder (one results file each), not {out}.")
    else:
        summaries = run_grid([dataset], protocols, [(local, remote)], out, **kwargs)
    for summary in summaries:
        _print_summary(summary)
    return 0


def cmd_eval_report(args: argparse.Namespace) -> int:
    missing = [p for p in args.results if not Path(p).is_file()]
    if missing:
        raise EvalError(f"No such results file: {', '.join(missing)}.")
    from minions.evals.report import write_report

    md, png = write_report(args.results, args.out)
    print(md.read_text(encoding="utf-8"))
    print(f"wrote {md} and {png}", file=sys.stderr)
    return 0


def cmd_eval_datasets(args: argparse.Namespace) -> int:
    for name, text in describe_datasets().items():
        options = ", ".join(f"{k}={v!r}" for k, v in DATASETS[name].options.items())
        print(f"{name:18} {text}" + (f" (options: {options})" if options else ""))
    return 0


def add_eval_parser(sub: Any, add_model_options: AddModelOptions, resolve_models: ResolveModels) -> None:
    """Mount ``eval run|report|datasets`` on the ``minions`` parser's subcommands."""
    ev = sub.add_parser("eval", help="run benchmarks (FinanceBench, LongHealth, QASPER, ...) and report")
    kinds = ev.add_subparsers(dest="eval", required=True)

    run = kinds.add_parser("run", help="run a protocol over a benchmark; appends to and resumes --out")
    run.add_argument("dataset", metavar="DATASET", help=f"one of {', '.join(DATASETS)}")
    run.add_argument(
        "--data",
        help="the benchmark in its official layout (see `minions eval datasets`); default: $MINIONS_DATA/<its folder>",
    )
    run.add_argument(
        "--protocol",
        action="append",
        help="minions, minion, remote, local or rag; repeat or "
        "comma-separate for several (then --out is a folder); default minions",
    )
    run.add_argument("--out", required=True, help="results FILE.jsonl (a folder with several protocols)")
    run.add_argument("--limit", type=int, help="run the first N selected items")
    run.add_argument("--sample", type=int, help="run N items drawn at random with --seed")
    run.add_argument("--seed", type=int, help="seed of --sample (default 0)")
    run.add_argument("--item", action="append", metavar="ID", help="run this item (repeatable)")
    run.add_argument("--concurrency", type=int, help="items run at once, in threads (default 1)")
    run.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        help="a protocol option, e.g. max_rounds=2 chunk_size=3000 (repeatable)",
    )
    run.add_argument(
        "--dataset-option",
        action="append",
        metavar="KEY=VALUE",
        help="a loader option, e.g. subset=numerical, pad_with_others=3, split=all",
    )
    run.add_argument("--judge", metavar="MODEL", help="grade free-text answers with this model (provider/model)")
    run.add_argument("--retry-errors", action="store_true", help="run again the items recorded with an error")
    run.add_argument(
        "--library",
        metavar="DIR",
        help="put every document of the dataset in one library in DIR (built once) and ask each item of all of them",
    )
    run.add_argument("--quiet", action="store_true", help="no line per item on stderr")
    add_model_options(run)
    run.set_defaults(func=lambda args: cmd_eval_run(args, resolve_models))

    report = kinds.add_parser("report", help="accuracy, tokens, dollars and the ratios to remote-only")
    report.add_argument("results", nargs="+", metavar="FILE.jsonl")
    report.add_argument("--out", required=True, help="folder for report.md and cost_accuracy.png")
    report.set_defaults(func=cmd_eval_report)

    datasets = kinds.add_parser("datasets", help="the benchmarks, what --data expects, and their options")
    datasets.set_defaults(func=cmd_eval_datasets)
