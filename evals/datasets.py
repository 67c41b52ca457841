"""The benchmarks by name: ``load_dataset(name, path, **options) -> Dataset``, the one place names are spelled."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from minions.paths import benchmark_data

from .bamboo import load_bamboo_paperqa
from .errors import EvalError, UnknownDatasetError
from .financebench import load_financebench
from .folder import load_folder
from .items import Dataset
from .leval import load_leval
from .longhealth import load_longhealth
from .pubmedqa import load_pubmedqa
from .qasper import load_qasper

__all__ = [
    "DATASETS",
    "DATA_FOLDERS",
    "DatasetSpec",
    "dataset_path",
    "dataset_spec",
    "describe_datasets",
    "load_dataset",
]


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    loader: Callable[..., Dataset]
    description: str
    expected: str
    """What ``--data`` must point at, in the benchmark's official layout."""

    @property
    def options(self) -> dict[str, Any]:
        """The loader's keyword options and their defaults."""
        fixed = set(self.loader.keywords) if isinstance(self.loader, partial) else set()
        params = inspect.signature(self.loader).parameters.values()
        return {
            p.name: p.default
            for p in params
            if p.kind is p.KEYWORD_ONLY and p.default is not p.empty and p.name not in fixed
        }


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            "financebench",
            load_financebench,
            "FinanceBench: questions over company filings (numeric)",
            "a financebench checkout: data/financebench_open_source.jsonl and pdfs/",
        ),
        DatasetSpec(
            "longhealth",
            load_longhealth,
            "LongHealth: 5-option questions over clinical letters",
            "benchmark_v5.json (or a LongHealth checkout with data/benchmark_v5.json)",
        ),
        DatasetSpec(
            "qasper", load_qasper, "QASPER: questions over NLP papers (Answer-F1)", "qasper-{dev,test}-v0.3.json"
        ),
        DatasetSpec(
            "leval-scientific",
            partial(load_leval, task="scientific_qa"),
            "L-Eval scientific_qa: full QASPER papers (F1)",
            "scientific_qa.jsonl",
        ),
        DatasetSpec(
            "leval-financial",
            partial(load_leval, task="financial_qa"),
            "L-Eval financial_qa: earnings-call transcripts (F1)",
            "financial_qa.jsonl",
        ),
        DatasetSpec(
            "pubmedqa",
            load_pubmedqa,
            "PubMedQA: yes/no/maybe over abstracts",
            "a folder with ori_pqal.json and test_ground_truth.json",
        ),
        DatasetSpec(
            "bamboo-paperqa",
            load_bamboo_paperqa,
            "BAMBOO PaperQA: multiple choice over papers",
            "paperqa_16k.jsonl (or paperqa_4k.jsonl)",
        ),
        DatasetSpec(
            "folder",
            load_folder,
            "questions of your own over folders of documents (--questions FILE, evals.folder's layout)",
            "the folder that holds the folders the questions name (scripts/make-search-sets lays out the frozen ones)",
        ),
    )
}


def dataset_spec(name: str) -> DatasetSpec:
    spec = DATASETS.get(name.strip().lower())
    if spec is None:
        raise UnknownDatasetError(f"Unknown dataset {name!r}: use one of {', '.join(DATASETS)}.")
    return spec


def load_dataset(name: str, path: str | Path, **options: Any) -> Dataset:
    """Load benchmark ``name`` from ``path`` (its official layout); ``options`` are the loader's, e.g.
    ``subset="numerical"`` (financebench), ``pad_with_others=3`` (longhealth), ``split="dev"`` or ``"all"``
    (pubmedqa)."""
    spec = dataset_spec(name)
    known = spec.options
    unknown = sorted(set(options) - set(known))
    if unknown:
        allowed = ", ".join(f"{k} (default {v!r})" for k, v in known.items()) or "none"
        raise EvalError(f"Unknown option(s) {', '.join(unknown)} for {spec.name}: its options are {allowed}.")
    return spec.loader(path, **options)


def describe_datasets() -> Mapping[str, str]:
    return {name: f"{spec.description}; --data: {spec.expected}" for name, spec in DATASETS.items()}


DATA_FOLDERS = {"leval-scientific": "leval", "leval-financial": "leval", "bamboo-paperqa": "bamboo"}
"""The folder under ``$MINIONS_DATA`` that ``--data`` defaults to, where it is not the dataset's own name."""


def dataset_path(name: str, data: str | Path | None) -> Path:
    """Where dataset ``name``'s files are: ``data`` (``--data``), else its folder under ``$MINIONS_DATA``."""
    spec = dataset_spec(name)
    return benchmark_data(DATA_FOLDERS.get(spec.name, spec.name), data, expected=spec.expected)
