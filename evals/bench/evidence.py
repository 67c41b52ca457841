"""``minions bench evidence``: does the local side find the evidence? Page recall on FinanceBench's own gold.

For every question whose filing is in the checkout, with the question as the only instruction and no remote
model, one JSON line per item and a summary line with the recall curves (@1, @5, @10, @20) of:

- ``pages_bm25``: BM25 over the filing's pages (the baseline: plain BM25, one passage per page);
- ``rag``: the chunks the RAG baseline would send, in its order (``protocols.search.ranking.lexical_rank``);
- ``ranking``: the local side's ranking of the chunks (the RAG baseline's, by words);
- ``shown``: what the local side passes on, best first (each read chunk's quote, else the chunk): what a remote
  model is shown in Minions and what the ``local`` answer step reads. It has ``read_chunks`` passages, so its
  recall stops growing there; below ``ranking``'s where a quote lies on another page than the gold one.

Where the gold answer is a short fact (``SHORT_ANSWER``), ``answered`` says whether the local answer holds it as
written, and the summary counts them (``answered``: ``yes`` of ``of``): the whole path, ranking, the sentence
picked and the quote put first, on questions of one's own (``evals/bench/written/calls.jsonl``). ``quoted_gold``
says whether the answer's quote covers the gold evidence (as ``evals.evidence.covers`` counts it), counted the same
way.

Page recall does not see which sentence of a chunk the local model picked, so the lines also count, over the read
chunks that hold a figure of the gold answer ("$1577.00" is 1,577 in the filing), how often the quote passed on
holds it (``picks``: ``figure_chunks``, ``model`` for the quote picked, ``words`` for the chunk's best sentence by
words alone, what the pick would be without the model).

Timings split ranking (by words), the local model's prefill and decode, and the document's load.

With ``library`` (``--library``), every filing of the checkout goes into one library (``protocols.library``:
built in ``library_dir``, or a temporary folder; an index already there is reused and only what changed is read) and
each question is asked of all of them, FinanceBench's shared-store setting: the lines add ``library`` (the curve
of the library's ranking: routing to the documents the question names, then their chunks by words), the routed
documents, ``rank_ms``, and with a model ``library_shown`` (what the local side passes on). The summary carries
the ``library`` curve, ``rank_ms_median``, ``index_s`` and how often routing put the question's filing first.

With ``compare_local`` (``--compare-local M``), a second local model reads the same chunks (the ranking is by words,
so both read the same ones, and both read every one with the model: no ``read_tokens`` budget): the lines add
``compare``, its ``shown`` curve, its wall time and how many read chunks it quoted the same sentence of
(``same_quotes`` of ``read``, the chunks whose jobs answered in both runs; ``failed``: the others); the summary adds
``compare_shown``, the agreement over all read chunks (``same_quotes``: ``same``, ``read``, ``rate``) and
``compare_failed``. It checks that a model on a server (``openai-compatible/<model>@<url>``) picks what the
embedded engine picks.

With ``dataset`` (``--dataset``) another benchmark (``minions eval datasets``): its documents have no pages, so no
``pages_bm25``. Its items' gold evidence is what the benchmark marks (``bamboo-paperqa``: sentences placed as
spans; ``qasper``: paragraphs); a set that marks none (``leval-scientific``, ``leval-financial``, ``pubmedqa``) is
measured with ``library`` only, its gold being the question's own document: recall@10 is then whether a chunk of
it is among the 10 best of the whole library (the summary's ``gold`` says which: ``evidence`` or ``document``).
With ``library``, the library holds every document of the set's questions. ``folder`` (``evals.folder``, questions
of one's own over folders of any documents, ``evals/bench/written/``) marks each question's quoted passage, and its
library holds every document of the folders the questions name; the summary's ``by_kind`` gives the curves per
question ``kind`` (legal, manuals, ...). ``half`` (``--half A|B``) asks only one fixed half of the questions
(``evals.items.half``): choose on one, report the other.

With ``meaning`` (``--meaning``, with ``--library``), the library embeds every chunk (``protocols.search.meaning``,
the embedding model ``embeddings`` names, default "auto") and its search fuses words and meaning; the lines add,
over the whole library (as ``Library.search`` asks it: routed by words, meaning over every document),
``library_words`` (words alone), ``library_meaning`` (meaning alone) and ``library_fused`` (one curve per weight of
``meaning_weights``, keyed by the weight), ``library_fused_chunks`` (fused, without the best chunks' re-ranking by
their best sentence: ``meaning.by_sentence``), and the same within the question's own filing (``filing_words``,
``filing_meaning``, ``filing_fused``, ``filing_fused_chunks``; not where the gold is the document itself). The
summary carries their curves, the seconds and chunks embedded (``embed_s``, ``embedded``, ``embed_per_s``) and the
index's size with vectors.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean
from typing import Any

from minions.backends.base import Backend
from minions.backends.registry import resolve
from minions.chunking import Chunk, chunk_documents
from minions.documents import Document
from minions.paths import benchmark_data
from minions.protocols import LocalOnly, RunOptions
from minions.protocols.evidence.citations import chunk_evidence
from minions.protocols.evidence.jobs import BY_WORDS
from minions.protocols.evidence.quotes import answer_spans, candidates
from minions.protocols.library import AddReport, Library
from minions.protocols.result import Citation, Evidence, JobRecord, RunResult
from minions.protocols.search.bm25 import BM25
from minions.protocols.search.meaning import MEANING_WEIGHT
from minions.protocols.search.profiles import describe, knowledge_of
from minions.protocols.search.rank import search_library
from minions.protocols.search.ranking import Ranked, lexical_rank

from ..datasets import dataset_path, load_dataset
from ..errors import EvalError
from ..evidence import RECALL_AT, covers, evidence_scores
from ..financebench import load_financebench
from ..gold import GoldEvidence
from ..items import HALVES, EvalItem, half
from .machine import load_avg
from .options import option

__all__ = ["EvidenceBenchConfig", "evidence_bench", "mean_curve", "ranked_passages", "recall_curve"]

log = logging.getLogger(__name__)

DEPTH = max(RECALL_AT)
MEANING_CURVES = (
    "library_words",
    "library_meaning",
    "library_fused",
    "library_fused_chunks",
    "filing_words",
    "filing_meaning",
    "filing_fused",
    "filing_fused_chunks",
)
Curve = dict[str, float | None] | None
"""Recall @1, @5, @10, @20 (None: the passages were not there to score)."""


@dataclass(frozen=True)
class EvidenceBenchConfig:
    dataset: str = option("financebench", "another benchmark with gold evidence, e.g. bamboo-paperqa (no pages)")
    """The benchmark (``minions eval datasets``); only FinanceBench has pages."""
    limit: int | None = option(None, "the first N questions with gold evidence")
    questions: str | None = option(
        None,
        "questions of your own over the set's documents, instead of its own (frozen ones: evals/bench/written/)",
        metavar="FILE",
    )
    """A file of questions of one's own over the set's documents, asked instead of the set's (FinanceBench's layout
    for its filings; ``evals.leval`` for L-Eval's; ``evals.folder`` for folders of any documents;
    ``evals/bench/written/`` holds the frozen ones)."""
    half: str | None = option(
        None, "only this fixed half of the questions (by a hash of each id): tune on one", choices=HALVES
    )
    """Only the questions of this fixed half of the set ("A" or "B", ``evals.items.half``): tune on one, report the
    other."""
    ids: tuple[str, ...] = option((), "only this question", flag="--id", repeat=True)
    read_chunks: int = option(RunOptions.read_chunks, "chunks the local model reads")
    score_sentences: bool = option(
        RunOptions.score_sentences, "jobs pick a sentence through a schema, not by scores", flag="--no-scores"
    )
    local: str = option("llamacpp/default", "the local model", shown="MINIONS_LOCAL or llamacpp/default")
    compare_local: str | None = option(
        None, "a second local model on the same chunks: its recall, same quotes", metavar="M"
    )
    """A second local model that reads the same chunks (the module's docstring)."""
    lexical_only: bool = option(False, "no model: the BM25 baselines and word ranking")
    """Skip the local model: only the BM25 baselines and the lexical ranking (seconds for the whole set)."""
    library: bool = option(False, "also ask every question of all the set's documents in one library")
    """Ask every question of all the filings in one library (the module's docstring)."""
    library_dir: str | None = option(None, "where that library is built or reused", shown="a temporary folder")
    """Where the library is built (None: a temporary folder, removed after)."""
    meaning: bool = option(
        False, "with --library: embed the chunks; words, meaning and fused curves, in the library and per document"
    )
    """Embed the library's chunks and print the meaning signal's curves (the module's docstring)."""
    embeddings: str = option("auto", "the embedding model for --meaning")
    """The embedding model, with ``meaning`` (``backends.embeddings.resolve_embedder``)."""
    meaning_weights: tuple[float, ...] = option(
        (MEANING_WEIGHT,), "meaning's weight in the fusion, words 1", flag="--meaning-weight", repeat=True
    )
    """The meaning term's weights in the fusion, the words' counting 1: one ``fused`` curve each."""


def _page_passages(doc: Document, question: str) -> list[Evidence] | None:
    pages = doc.pages
    if not pages:
        return None
    best = BM25([doc.text[p.start : p.end] for p in pages]).top(question, DEPTH)
    return [Evidence(doc.name, "", pages[i].start, pages[i].end, (pages[i].number,), "page") for i in best]


def ranked_passages(ranked: Sequence[Ranked], copies: Mapping[str, str] | None = None) -> list[Evidence]:
    """The best ``DEPTH`` chunks as passages; ``copies``: a document that is a byte-identical copy of a gold one,
    named as that one (``_copies``)."""
    passages = [chunk_evidence(r.chunk, score=r.score) for r in ranked[:DEPTH]]
    return [replace(p, document=copies.get(p.document, p.document)) for p in passages] if copies else passages


def _copies(item: EvalItem, library: Library) -> dict[str, str]:
    """The library's documents that are byte-identical copies of ``item``'s gold documents (the same SHA-256),
    each to the gold one it copies: the same text, so the gold passage at the same place. BAMBOO gives each
    question its own copy of its paper (92 documents for 22 papers); the library shows one copy's chunk
    (``ranking.spread_repeats``), and that chunk is the question's evidence."""
    digest = {d.name: d.sha256 for d in library.documents}
    gold = {digest[g.document]: g.document for s in item.evidence for g in s if g.document in digest}
    return {name: gold[sha] for name, sha in digest.items() if sha in gold and name != gold[sha]}


def _meaning_lines(item: EvalItem, library: Library, weights: Sequence[float], *, within: bool) -> dict[str, Any]:
    """Words alone, meaning alone and fused at each weight, over the whole library (as ``Library.search`` asks it:
    routed by words, meaning over every document) and, with ``within``, within the question's own filing."""
    embedder = library.embedder
    assert embedder is not None
    index, question = library.index, item.question
    asked = embedder.embed([question], query=True)[0]
    gold = sorted({g.document for s in item.evidence for g in s})
    copies = _copies(item, library)
    line: dict[str, Any] = {}
    for where, documents in (("library", None), ("filing", gold))[: 2 if within else 1]:
        words = search_library(index, question, documents=documents, embedder=None, glossary=library.glossary)
        line[f"{where}_words"] = recall_curve(item, ranked_passages(words.ranking.ranked, copies))
        near = index.meaning_search(asked, documents=documents, k=DEPTH)
        line[f"{where}_meaning"] = recall_curve(item, ranked_passages(near, copies))
        fused = {
            f"{w:g}": search_library(
                index,
                question,
                documents=documents,
                embedder=embedder,
                weight=w,
                asked=asked,
                glossary=library.glossary,
            )
            for w in weights
        }
        line[f"{where}_fused"] = {
            w: recall_curve(item, ranked_passages(f.ranking.ranked, copies)) for w, f in fused.items()
        }
        chunks = search_library(
            index, question, documents=documents, embedder=embedder, asked=asked, glossary=library.glossary,
            sentences=False,
        )  # fmt: skip
        line[f"{where}_fused_chunks"] = recall_curve(item, ranked_passages(chunks.ranking.ranked, copies))
    return line


def recall_curve(item: EvalItem, passages: Sequence[Evidence] | None) -> Curve:
    """``item``'s recall @1, @5, @10, @20 over ``passages`` (best first) against its gold evidence."""
    if passages is None:
        return None
    scores = evidence_scores(item, passages)
    return {f"@{k}": v for k, v in scores.recall_at.items()}


def _library_line(
    item: EvalItem, library: Library, local: Backend | None, config: EvidenceBenchConfig, *, marked: bool
) -> dict[str, Any]:
    found = library.search(item.question)
    gold = sorted({g.document for s in item.evidence for g in s})
    line: dict[str, Any] = {
        "library": recall_curve(item, ranked_passages(found.ranking.ranked, _copies(item, library))),
        "routed": found.route.documents[:3] if found.route.routed else None,
        "routed_first": bool(found.route.routed and found.route.documents[0] in gold),
        "rank_ms": round(found.seconds * 1000, 2),
    }
    if config.meaning:
        line.update(_meaning_lines(item, library, config.meaning_weights, within=marked))
    if local is not None:
        result = library.ask(item.question)
        line.update(
            library_shown=recall_curve(item, result.evidence),
            library_wall_s=round(result.timings.get("total_s", 0.0) + found.seconds, 2),
        )
    return line


def _contents(
    dataset: str, root: str | Path, folders: Sequence[str], items: Sequence[EvalItem]
) -> list[Path | Document]:
    """What the set's library holds: FinanceBench's folder of filings, the folders a set names, else the items'
    documents."""
    if dataset == "financebench":
        return [Path(root) / "pdfs"]
    return [Path(f) for f in folders] if folders else list(_documents(items))


def _open_library(
    contents: Sequence[Path | Document], config: EvidenceBenchConfig, local: Backend | None, into: str
) -> tuple[Library, AddReport]:
    """The library of ``contents`` (folders' files, or documents), and what adding them took."""
    options: dict[str, Any] = {"read_chunks": config.read_chunks, "score_sentences": config.score_sentences}
    embeddings = config.embeddings if config.meaning else "none"
    library = Library(config.library_dir or into, local=local, protocol="local", embeddings=embeddings, **options)
    report = library.add(*contents, follow_links=True)  # a benchmark's folder as its user laid it out, links too
    for name, why in report.skipped:
        log.warning("library: %s skipped: %s", name, why)
    return library, report


def _own_documents(item: EvalItem) -> EvalItem:
    """``item`` with its own documents, whole, as its gold evidence (a set that marks none)."""
    whole = tuple(GoldEvidence(d.name, start=0, end=len(d.text)) for d in item.documents())
    return replace(item, evidence=(whole,))


def _documents(items: Sequence[EvalItem]) -> list[Document]:
    """The items' documents, each once."""
    return list({d.name: d for item in items for d in item.documents()}.values())


def _item_line(
    item: EvalItem, local: Backend | None, config: EvidenceBenchConfig, compare: Backend | None = None
) -> dict[str, Any]:
    started = time.perf_counter()
    docs = item.documents()
    loaded = time.perf_counter()
    options = RunOptions(read_chunks=config.read_chunks)
    chunks = chunk_documents(docs, by=options.chunk_by, size=options.chunk_size, overlap=options.overlap)
    by_words = lexical_rank(chunks, item.question, knowledge=knowledge_of(describe(d) for d in docs))
    line: dict[str, Any] = {
        "item_id": item.id,
        "document": docs[0].name,
        "pages": len(docs[0].pages),
        "chunks": len(chunks),
        "gold_pages": sorted({p for s in item.evidence for g in s for p in g.pages}),
        "pages_bm25": recall_curve(item, _page_passages(docs[0], item.question)),
        "rag": recall_curve(item, ranked_passages(by_words)),
        "load_s": round(loaded - started, 2),
    }
    if local is None:
        return line
    result = _local_run(local, item, docs, config)
    ranked = [chunk_evidence(c) for c in _ranked_chunks(result.reading, chunks)]
    line.update(
        ranking=recall_curve(item, ranked) if ranked else None,
        shown=recall_curve(item, result.evidence),
        cited_pages=[list(c.pages) for c in result.citations[:3]],
        read=[_read(j, e) for j, e in zip(result.jobs, result.evidence, strict=False)],
        picks=_picks(item, result.jobs, {(c.document, c.index): c for c in chunks}),
        answer=result.answer[:300],
        answered=answered(result.answer, item.gold),
        quoted_gold=quoted_gold(item, result.citations[0] if result.citations else None),
        rank_s=round(result.timings.get("rank_s", 0.0), 2),
        prefill_s=round(result.timings.get("local_prefill_s", 0.0), 2),
        decode_s=round(result.timings.get("local_decode_s", 0.0), 2),
        wall_s=round(result.timings.get("total_s", 0.0), 2),
        error=result.error,
    )
    if compare is not None:
        line["compare"] = _compared(item, result, _local_run(compare, item, docs, config))
    return line


def _local_run(local: Backend, item: EvalItem, docs: Sequence[Document], config: EvidenceBenchConfig) -> RunResult:
    # compared, both models read every chunk: none is quoted by words past the embedded engine's budget of prompt
    # tokens (a server has none), so the quotes compared are the models' own
    budget: dict[str, Any] = {"read_tokens": None} if config.compare_local else {}
    protocol = LocalOnly(local, read_chunks=config.read_chunks, score_sentences=config.score_sentences, **budget)
    return protocol.run(item.question, list(docs))


def _compared(item: EvalItem, ours: RunResult, theirs: RunResult) -> dict[str, Any]:
    """The second model's run beside the first's: its ``shown`` curve, its wall time, and over the chunks both
    read (their jobs answered), how many it quoted the same sentence of (no quote in both counts as the same);
    ``failed``: chunks whose job failed in either run (a server that timed out, say)."""
    theirs_by_chunk = {(j.document, j.chunk): j for j in theirs.jobs}
    pairs = [(j, theirs_by_chunk[(j.document, j.chunk)]) for j in ours.jobs if (j.document, j.chunk) in theirs_by_chunk]
    both = [(a.citation, b.citation) for a, b in pairs if a.ok and b.ok]
    return {
        "shown": recall_curve(item, theirs.evidence),
        "read": len(both),
        "same_quotes": sum(a == b for a, b in both),
        "failed": len(pairs) - len(both),
        "wall_s": round(theirs.timings.get("total_s", 0.0), 2),
        "error": theirs.error,
    }


SHORT_ANSWER = 60
"""A gold answer this long or shorter is a fact ("$2.1 billion", "Acton, Massachusetts") an answer can hold as is;
a longer one explains, and ``answered`` says nothing of it."""


def answered(answer: str, gold: Sequence[str]) -> bool | None:
    """Whether ``answer`` holds one of the short ``gold`` answers as written (case, spacing, commas and currency
    signs aside); None where every gold answer is longer than ``SHORT_ANSWER`` (an explanation, not a fact)."""
    short = [g for g in gold if 0 < len(g.strip()) <= SHORT_ANSWER]
    if not short:
        return None
    flat = _flat(answer)
    return any(_flat(g) in flat for g in short)


def quoted_gold(item: EvalItem, quote: Citation | None) -> bool | None:
    """Whether the answer's quote covers a place of ``item``'s gold evidence (``evals.evidence.covers``: a gold page,
    else most of a gold span, else the gold's words); None where there is no quote."""
    if quote is None:
        return None
    return any(covers(quote, gold) for s in item.evidence for gold in s)


def _flat(text: str) -> str:
    return re.sub(r"[\s,$€£]", "", text.casefold())


def _figures(text: str) -> set[str]:
    """The figures of ``text`` as digits ("$1,577.00" and "1577" are both "1577"), years and one-digit ones left
    out: they are found anywhere."""
    out = set()
    for figure in answer_spans(text) if len(text) < 200 else []:
        digits = "".join(ch for ch in figure if ch.isdigit() or ch == ".").strip(".")
        digits = digits.rstrip("0").rstrip(".") if "." in digits else digits
        if len(digits.replace(".", "")) >= 2 and not (len(digits) == 4 and digits[:2] in ("19", "20")):
            out.add(digits)
    return out


def _quote_figures(text: str) -> set[str]:
    found = set()
    for span in answer_spans(text) + [t for t in text.split() if any(c.isdigit() for c in t)]:
        found |= _figures(span)
    return found


def _picks(item: EvalItem, jobs: Sequence[JobRecord], chunks: Mapping[tuple[str, int], Chunk]) -> dict[str, int]:
    """Over the read chunks that hold a figure of the gold answer: how many quotes picked hold it, and how many
    would by words alone."""
    gold = set().union(*(_figures(g) for g in item.gold)) if item.gold else set()
    counts = {"figure_chunks": 0, "model": 0, "words": 0}
    if not gold:
        return counts
    for job in jobs:
        chunk = chunks.get((job.document, job.chunk))
        if chunk is None or not gold & _quote_figures(chunk.text):
            continue
        counts["figure_chunks"] += 1
        counts["model"] += bool(job.citation and gold & _quote_figures(job.citation))
        first = candidates(chunk, item.question)[:1]
        counts["words"] += bool(first and gold & _quote_figures(first[0].text))
    return counts


def _read(job: JobRecord, shown: Evidence) -> dict[str, Any]:
    """A read chunk (in rank order): its pages, the page of the quote passed on, the model's score, and whether it
    was quoted by words instead (past the prompt tokens the model may compute, ``RunOptions.read_tokens``)."""
    return {"chunk": job.chunk, "pages": list(job.pages), "quote_pages": list(shown.pages), "score": job.score,
            "by_words": job.explanation == BY_WORDS}  # fmt: skip


def _ranked_chunks(reading: Mapping[str, Any], chunks: Sequence[Chunk]) -> list[Chunk]:
    by_place = {(c.document, c.index): c for c in chunks}
    return [by_place[(d, i)] for d, i in reading.get("ranked", ()) if (d, i) in by_place]


def mean_curve(lines: Sequence[dict[str, Any]], key: str) -> dict[str, float] | None:
    """The mean of the curves ``lines`` hold under ``key`` (None where none holds one)."""
    rows = [line[key] for line in lines if isinstance(line.get(key), dict)]
    if not rows:
        return None
    return {k: round(mean(r[k] for r in rows if r[k] is not None), 3) for k in rows[0]}


def _curves(lines: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """The mean curve of each of ``keys`` over ``lines``; a fused key's curves by weight."""
    out: dict[str, Any] = {}
    for key in keys:
        if key.endswith("_fused"):
            by_weight = [line[key] for line in lines if key in line]
            out[key] = {w: mean_curve(by_weight, w) for w in by_weight[0]} if by_weight else None
        else:
            out[key] = mean_curve(lines, key)
    return out


def _by_kind(lines: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any] | None:
    """The curves of ``keys`` per kind of question (``kind`` in a set's metadata; None where no line has one)."""
    kinds = sorted({line["kind"] for line in lines if line.get("kind")})
    if not kinds:
        return None
    grouped = {kind: [line for line in lines if line.get("kind") == kind] for kind in kinds}
    return {kind: {"items": len(group)} | _curves(group, keys) for kind, group in grouped.items()}


def evidence_bench(data: str | Path | None, config: EvidenceBenchConfig) -> Iterator[dict[str, Any]]:
    """One line per question (see the module's docstring), then the summary line."""
    if config.meaning and not config.library:
        raise EvalError("--meaning measures the vectors of a library: add --library (FinanceBench's filings).")
    own = {"questions": config.questions} if config.questions is not None else {}
    if config.dataset == "financebench":
        root = benchmark_data("financebench", data, expected="a FinanceBench checkout")
        dataset = load_financebench(root, **own)
    else:
        root = dataset_path(config.dataset, data)
        dataset = load_dataset(config.dataset, root, **own)
    marked = any(i.evidence for i in dataset.items)
    if not marked and not config.library:
        raise EvalError(
            f"{config.dataset} marks no evidence: add --library to measure how often its documents are found."
        )
    if config.half is not None and config.half not in HALVES:
        raise EvalError(f"Unknown half {config.half!r}: use {' or '.join(HALVES)}.")
    items = [i for i in dataset.items if (i.evidence or not marked) and (not config.ids or i.id in config.ids)]
    items = [i for i in items if config.half is None or half(i.id) == config.half]
    items = items[: config.limit] if config.limit else items
    items = items if marked else [_own_documents(i) for i in items]
    contents = _contents(config.dataset, root, dataset.library, items)
    local = None if config.lexical_only else resolve(config.local)
    compare = resolve(config.compare_local) if config.compare_local and local is not None else None
    lines = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="minions-library-") as into:
        library, added = _open_library(contents, config, local, into) if config.library else (None, None)
        for item in items:
            line = _item_line(item, None if library is not None else local, config, compare) if marked else {}
            line.update({"kind": item.metadata["kind"]} if item.metadata.get("kind") else {})
            if library is not None:
                line.update(_library_line(item, library, local, config, marked=marked))
            lines.append(line)
            yield line
        if library is not None:
            disk = library.disk_bytes()
            library.close()
    summary: dict[str, Any] = {
        "summary": True,
        "items": len(lines),
        "skipped": len(dataset.skipped),
        "gold": "evidence" if marked else "document",
        "read_chunks": config.read_chunks,
        "scored": not config.lexical_only and config.score_sentences,
        "load_avg": load_avg(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    curves = ["pages_bm25", "rag", "ranking", "shown", "library", "library_shown"]
    summary.update(_curves(lines, curves))
    if config.meaning and added is not None:
        rate = round(added.embedded / added.embed_seconds, 1) if added.embed_seconds else None
        summary.update(embedded=added.embedded, embed_s=round(added.embed_seconds, 1), embed_per_s=rate)
    if config.meaning:
        summary["meaning_weights"] = list(config.meaning_weights)
        summary.update(_curves(lines, MEANING_CURVES))
        curves += MEANING_CURVES
    by_kind = _by_kind(lines, [c for c in curves if not c.startswith(("pages_", "filing_"))])
    summary.update({"by_kind": by_kind} if by_kind else {})
    if config.library:
        summary.update(
            index_s=round(added.seconds if added else 0.0, 1),
            index_mb=round(disk / 1e6, 1),
            routed_first=sum(line["routed_first"] for line in lines),
        )
    compared = [line["compare"] for line in lines if "compare" in line]
    if compared:
        summary["compare_shown"] = mean_curve(compared, "shown")
        same, read = sum(c["same_quotes"] for c in compared), sum(c["read"] for c in compared)
        summary["same_quotes"] = {"same": same, "read": read, "rate": round(same / read, 3) if read else None}
        summary["compare_failed"] = sum(c["failed"] for c in compared)
        summary["compare_wall_s_median"] = sorted(c["wall_s"] for c in compared)[len(compared) // 2]
    for key in ("answered", "quoted_gold"):
        said = [line[key] for line in lines if line.get(key) is not None]
        summary.update({key: {"yes": sum(said), "of": len(said)}} if said else {})
    picks = [line["picks"] for line in lines if "picks" in line]
    if picks:
        summary["picks"] = {k: sum(p[k] for p in picks) for k in picks[0]}
    for key in ("wall_s", "rank_s", "prefill_s", "decode_s", "rank_ms", "library_wall_s"):
        values = sorted(line[key] for line in lines if key in line)
        if values:
            summary[f"{key}_median"] = values[len(values) // 2]
    yield summary
