"""Evaluation harness: benchmark loaders, metrics, a resumable runner and accuracy-against-cost reports.

    from minions.evals import load_dataset, run_eval, write_report
    dataset = load_dataset("financebench", "path/to/financebench", subset="numerical")
    run_eval(dataset, "remote", local="llamacpp/default", remote="openai/gpt-4o-mini", out="fb-remote.jsonl")
    run_eval(dataset, "minions", local="llamacpp/default", remote="openai/gpt-4o-mini", out="fb-minions.jsonl")
    write_report(["fb-remote.jsonl", "fb-minions.jsonl"], "report/")

The same from the shell: ``minions eval run|report``.
"""

from .datasets import DATASETS, DatasetSpec, load_dataset
from .errors import DatasetLayoutError, EvalError, ResultsFileError, UnknownDatasetError
from .evidence import EvidenceScores, covers, evidence_scores
from .gold import GoldEvidence
from .items import METRICS, Dataset, EvalItem, Metric
from .judge import Judge, Verdict
from .metrics import max_f1, numeric_match, parse_choice, parse_yes_no_maybe, score, token_f1
from .report import Row, markdown_report, plot_cost_accuracy, summarize, write_report
from .results import EvalConfig, ResultsFile, read_results
from .runner import RunSummary, run_eval, run_grid, select_items

__all__ = [
    "DATASETS",
    "METRICS",
    "Dataset",
    "DatasetLayoutError",
    "DatasetSpec",
    "EvalConfig",
    "EvalError",
    "EvalItem",
    "EvidenceScores",
    "GoldEvidence",
    "Judge",
    "Metric",
    "ResultsFile",
    "ResultsFileError",
    "Row",
    "RunSummary",
    "UnknownDatasetError",
    "Verdict",
    "covers",
    "evidence_scores",
    "load_dataset",
    "markdown_report",
    "max_f1",
    "numeric_match",
    "parse_choice",
    "parse_yes_no_maybe",
    "plot_cost_accuracy",
    "read_results",
    "run_eval",
    "run_grid",
    "score",
    "select_items",
    "summarize",
    "token_f1",
    "write_report",
]
