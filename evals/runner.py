"""Run a protocol over a benchmark's items and append one JSONL line per item; resume where a run stopped.

    dataset = load_dataset("financebench", "path/to/financebench", subset="numerical")
    summary = run_eval(dataset, "minions", local="llamacpp/default", remote="openai/gpt-4o-mini",
                       out="results/fb-minions.jsonl", sample=20, seed=0)

Steps, per item: load its documents, run the protocol, score the answer (and ask the judge, if any), measure
its evidence against the benchmark's gold evidence, write the line. An item whose run raises is recorded with
its error and score 0, and the run goes on: a ``BackendError`` or a ``ModelOutputError`` is the model's failure
(``error_kind`` "model");
any other exception is a fault of ours (``error_kind`` "harness", with its ``traceback`` in the line).
``run_grid`` runs protocols x datasets x model pairs, one results file per configuration.
"""

from __future__ import annotations

import logging
import random
import re
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from minions.backends.base import Backend
from minions.backends.registry import resolve
from minions.errors import BackendError, ModelOutputError
from minions.protocols import BaseProtocol, RunResult, get_protocol
from minions.protocols.library import Library

from .errors import EvalError
from .evidence import evidence_scores
from .items import Dataset, EvalItem
from .judge import JUDGED_METRICS, Judge
from .metrics import Baselines, baselines, score
from .results import EvalConfig, ResultsFile

__all__ = ["RunSummary", "closed_baselines", "run_eval", "run_grid", "select_items"]

log = logging.getLogger(__name__)

OnRecord = Callable[[dict[str, Any], int, int], None]
"""Called after each line is written: (record, items written so far in this run, items to run)."""


@dataclass(frozen=True)
class RunSummary:
    config: EvalConfig
    path: Path
    selected: int
    """Items the selection (ids, sample, limit) picked."""
    already_done: int
    """Of those, items the results file already had (skipped)."""
    ran: int
    failed: int
    """Items of this run recorded with an error (the model's failures and harness errors)."""
    mean_score: float | None
    """Over every selected item with a result, including earlier runs' results."""
    harness_errors: int = 0
    """Of ``failed``, the items that failed for a fault of ours, not the model's (their lines hold the traceback)."""
    abstained: int = 0
    """Selected items (with a result) where the model said it was not sure (scored 0, counted here)."""
    baselines: Baselines | None = None
    """Chance and majority-class accuracy over the selected items with a closed set of answers."""


def closed_baselines(items: Sequence[EvalItem]) -> Baselines | None:
    """Chance and majority-class accuracy over ``items`` that allow a closed set of answers."""
    return baselines((i.gold[0], len(i.choices.options)) for i in items if i.choices is not None and i.gold)


def select_items(
    items: Sequence[EvalItem],
    *,
    ids: Sequence[str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
) -> list[EvalItem]:
    """The items to run: those named by ``ids`` (in that order), else all; then ``sample`` of them drawn with
    ``seed`` (the same seed draws the same items, and a bigger sample keeps the smaller one's items first);
    then the first ``limit``."""
    chosen = list(items)
    if ids:
        by_id = {item.id: item for item in items}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            example = items[0].id if items else "?"
            raise EvalError(f"No item with id {', '.join(unknown[:5])} in this dataset (ids look like {example!r}).")
        chosen = [by_id[i] for i in ids]
    for name, value in (("sample", sample), ("limit", limit)):
        if value is not None and value < 1:
            raise EvalError(f"--{name} must be at least 1, got {value}.")
    if sample is not None:
        order = list(range(len(chosen)))
        random.Random(seed).shuffle(order)
        chosen = [chosen[i] for i in order[:sample]]
    return chosen[:limit] if limit is not None else chosen


def _egress_bytes(result: RunResult) -> int:
    return sum(len(r.text.encode("utf-8")) for r in result.egress)


def _base_record(item: EvalItem, config: EvalConfig) -> dict[str, Any]:
    return {
        "item_id": item.id,
        "dataset": config.dataset,
        "protocol": config.protocol,
        "local": config.local,
        "remote": config.remote,
        "config": config.to_dict(),
        "question": item.question,
        "gold": list(item.gold),
        "metric": item.metric,
        "choices": list(item.choices.options) if item.choices is not None else None,
    }


def run_item(
    item: EvalItem,
    protocol: BaseProtocol,
    config: EvalConfig,
    judge: Judge | None = None,
    library: Library | None = None,
) -> dict[str, Any]:
    """Run one item and return its results line (never raises for the item's own failures). With ``library``,
    the item is asked of every document in it (``protocols.library.Library.sources`` routes and ranks), not
    of its own documents.

    Timings: ``load_s`` reads the documents (a filing's first PDF extraction; with a library, its search),
    ``wall_s`` runs the protocol.
    """
    record = _base_record(item, config)
    started = time.perf_counter()
    try:
        ranking = None
        if library is not None:
            depth = max(protocol.options.read_chunks, protocol.options.top_k)
            found = library.sources(item.task, depth=depth)
            documents, ranking = found.documents, found.ranking
        else:
            documents = item.documents()
        loaded = time.perf_counter()
        choices = item.choices
        question = item.question if choices is not None else item.task
        result = protocol.run(question, documents, ranking=ranking, choices=choices)
    # An item that fails is recorded and the run goes on: one bad item must not cost the hours spent on the
    # others. A model's failure is expected now and then; anything else is a bug, kept with its traceback.
    except (BackendError, ModelOutputError) as exc:
        log.warning("%s %s failed: %s: %s", config.protocol, item.id, type(exc).__name__, exc)
        return {**record, **_failure(item, exc, time.perf_counter() - started, "model")}
    except Exception as exc:
        log.error("%s %s: harness error (a bug): %s", config.protocol, item.id, exc, exc_info=True)
        return {**record, **_failure(item, exc, time.perf_counter() - started, "harness")}
    wall = time.perf_counter() - loaded
    choice = result.reading.get("choice")
    abstained = bool(choice and choice.get("abstained"))
    auto = 0.0 if abstained else score(item, result.answer)
    usage = dict(result.usage)
    verdict = None
    if judge is not None and item.metric in JUDGED_METRICS:
        verdict = judge(item.question, result.answer, item.gold)
        usage["judge"] = verdict.usage
    return {
        **record,
        "prediction": result.answer,
        "abstained": abstained,
        "choice": choice,
        "score": float(verdict.correct) if verdict is not None and verdict.correct is not None else auto,
        "auto_score": auto,
        "evidence": evidence_scores(item, result.evidence, result.citations).to_dict(),
        "usage": {role: u.to_dict() for role, u in usage.items()},
        "cost_usd": {**{role: u.cost_usd for role, u in usage.items()}, "run": result.cost_usd},
        "egress_bytes": _egress_bytes(result),
        "timings": {**result.timings, "load_s": loaded - started, "wall_s": wall},
        "complete": result.complete,
        "notes": list(result.notes),
        "rounds": result.rounds,
        "documents": [d.name for d in documents],
        "error": None,
        "error_kind": None,
        "traceback": None,
        "judge": verdict.to_dict() if verdict is not None else None,
        "finished_at": _now(),
    }


ErrorKind = Literal["model", "harness"]


def _failure(item: EvalItem, exc: Exception, seconds: float, kind: ErrorKind) -> dict[str, Any]:
    return {
        "prediction": "",
        "score": 0.0,
        "auto_score": 0.0,
        "evidence": evidence_scores(item, ()).to_dict(),
        "usage": {},
        "cost_usd": {"run": 0.0},
        "egress_bytes": 0,
        "timings": {"wall_s": seconds},
        "complete": False,
        "notes": [],
        "error": f"{type(exc).__name__}: {exc}",
        "error_kind": kind,
        "traceback": "".join(traceback.format_exception(exc)) if kind == "harness" else None,
        "judge": None,
        "finished_at": _now(),
    }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def make_config(
    dataset: Dataset,
    protocol: str,
    local: Backend,
    remote: Backend | None,
    protocol_options: Mapping[str, Any],
    judge: Judge | None,
) -> EvalConfig:
    return EvalConfig(
        dataset=dataset.name,
        data_path=str(Path(dataset.path).resolve()),
        protocol=protocol,
        local=local.name,
        remote=remote.name if remote is not None else None,
        dataset_options=dict(dataset.options),
        protocol_options=dict(protocol_options),
        judge=judge.name if judge is not None else None,
    )


def with_library(config: EvalConfig, library: str | Path | None) -> EvalConfig:
    """``config`` as a run over one library records it (``library`` in its dataset options): a library run and
    a run over each item's own documents are two configurations, with two fingerprints."""
    if library is None:
        return config
    return replace(config, dataset_options={**config.dataset_options, "library": True})


def dataset_library(dataset: Dataset, path: str | Path) -> Library:
    """A library at ``path`` holding every document of ``dataset``'s items (those there already are kept)."""
    library = Library(path)
    seen = {d.name for d in library.documents}
    for item in dataset.items:
        docs = [d for d in item.documents() if d.name not in seen]
        seen |= {d.name for d in docs}
        library.add(*docs)
    log.info("%s: a library of %d documents at %s", dataset.name, len(seen), path)
    return library


def run_eval(
    dataset: Dataset,
    protocol: str,
    local: Backend | str,
    remote: Backend | str | None,
    out: str | Path,
    *,
    protocol_options: Mapping[str, Any] | None = None,
    judge: Backend | str | None = None,
    ids: Sequence[str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    limit: int | None = None,
    concurrency: int = 1,
    retry_errors: bool = False,
    on_record: OnRecord | None = None,
    library: str | Path | None = None,
) -> RunSummary:
    """Run ``protocol`` over the selected items of ``dataset``, appending to (and resuming) ``out``. ``library``:
    a folder where every document of the dataset goes into one library (built once, reused), and each item is
    asked of all of them (FinanceBench's shared store); it is part of the results' configuration.

    Raises ResultsFileError when ``out`` holds another configuration's results.
    """
    if concurrency < 1:
        raise EvalError(f"--concurrency must be at least 1, got {concurrency}.")
    options = dict(protocol_options or {})
    local_backend = resolve(local)
    remote_backend = resolve(remote) if remote is not None else None
    the_judge = Judge(resolve(judge)) if judge is not None else None
    runner = get_protocol(protocol, local_backend, remote_backend, **options)
    config = with_library(make_config(dataset, runner.name, local_backend, remote_backend, options, the_judge), library)
    shared = dataset_library(dataset, library) if library is not None else None
    selected = select_items(dataset.items, ids=ids, sample=sample, seed=seed, limit=limit)
    with ResultsFile(out, config) as results:
        done = results.finished(retry_errors=retry_errors)
        pending = [item for item in selected if item.id not in done]
        log.info(
            "%s/%s: %d items selected, %d already in %s",
            dataset.name,
            runner.name,
            len(selected),
            len(selected) - len(pending),
            out,
        )
        ran, failed, harness = _run_pending(pending, runner, config, the_judge, results, concurrency, on_record, shared)
        latest = results.latest()
    scores = [latest[i.id]["score"] for i in selected if i.id in latest]
    abstained = sum(bool(latest[i.id].get("abstained")) for i in selected if i.id in latest)
    return RunSummary(
        config=config,
        path=Path(out),
        selected=len(selected),
        already_done=len(selected) - len(pending),
        ran=ran,
        failed=failed,
        harness_errors=harness,
        mean_score=sum(scores) / len(scores) if scores else None,
        abstained=abstained,
        baselines=closed_baselines(selected),
    )


def _run_pending(
    pending: list[EvalItem],
    protocol: BaseProtocol,
    config: EvalConfig,
    judge: Judge | None,
    results: ResultsFile,
    concurrency: int,
    on_record: OnRecord | None,
    library: Library | None = None,
) -> tuple[int, int, int]:
    """Run the items, writing each line as it finishes; (items run, items failed, harness errors among them)."""
    ran = failed = harness = 0

    def write(record: dict[str, Any]) -> None:
        nonlocal ran, failed, harness
        results.append(record)
        ran += 1
        failed += bool(record["error"])
        harness += record["error_kind"] == "harness"
        if on_record is not None:
            on_record(record, ran, len(pending))

    if concurrency == 1:  # in this thread: Ctrl-C stops at once, and the finished lines are on disk
        for item in pending:
            write(run_item(item, protocol, config, judge, library))
        return ran, failed, harness
    # Lines are written here, in the order items finish (a resumed run reads them by id, in any order).
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="minions-eval")
    futures = [pool.submit(run_item, item, protocol, config, judge, library) for item in pending]
    written: set[Future[dict[str, Any]]] = set()
    try:
        for future in as_completed(futures):
            written.add(future)
            write(future.result())
    except KeyboardInterrupt:
        # Ctrl-C: the items not started are dropped (a resumed run runs them); the running ones cannot be
        # stopped (the interpreter waits for their threads anyway), so their lines are written when they finish.
        pool.shutdown(wait=False, cancel_futures=True)
        running = [f for f in futures if f not in written and not f.cancelled()]
        log.warning("interrupted: writing the %d running items as they finish", len(running))
        for future in as_completed(running):
            write(future.result())
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return ran, failed, harness


def _slug(text: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text or "none").strip("-")[:60]


def run_grid(
    datasets: Sequence[Dataset],
    protocols: Sequence[str],
    model_pairs: Sequence[tuple[Backend | str, Backend | str | None]],
    out_dir: str | Path,
    **kwargs: Any,
) -> list[RunSummary]:
    """``run_eval`` for every dataset x protocol x (local, remote) pair; each configuration gets its own file in
    ``out_dir``, named after it and its fingerprint, so a grid resumes file by file (a ``library`` run's name
    says so: ``<dataset>-library__...``, never a run's over each item's own documents). ``kwargs`` go to
    ``run_eval`` (``sample``, ``seed``, ``limit``, ``concurrency``, ``protocol_options``, ``judge``, ...)."""
    summaries = []
    pairs = [(resolve(local), resolve(remote) if remote is not None else None) for local, remote in model_pairs]
    judge = resolve(kwargs["judge"]) if kwargs.get("judge") is not None else None
    for dataset in datasets:
        for protocol in protocols:
            for local, remote in pairs:
                config = make_config(
                    dataset,
                    protocol.strip().lower(),
                    local,
                    remote,
                    kwargs.get("protocol_options") or {},
                    Judge(judge) if judge else None,
                )
                config = with_library(config, kwargs.get("library"))
                over = "-library" if kwargs.get("library") is not None else ""
                name = f"{dataset.name}{over}__{config.protocol}__{_slug(local.name)}__{_slug(config.remote)}"
                out = Path(out_dir) / f"{name}__{config.fingerprint[:8]}.jsonl"
                summaries.append(run_eval(dataset, protocol, local, remote, out, **{**kwargs, "judge": judge}))
    return summaries
