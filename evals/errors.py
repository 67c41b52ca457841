"""Errors of the evaluation harness. All are ``ConfigError``: the user named a wrong dataset, path or file.

ConfigError
└── EvalError                   an evaluation cannot start as asked
    ├── UnknownDatasetError     the dataset name is not one we load; the message lists the valid ones
    ├── DatasetLayoutError      the data path does not hold the benchmark's official files
    └── ResultsFileError        the results file cannot be resumed (another configuration, not ours)
"""

from __future__ import annotations

from minions.errors import ConfigError

__all__ = ["DatasetLayoutError", "EvalError", "ResultsFileError", "UnknownDatasetError"]


class EvalError(ConfigError):
    """An evaluation cannot start as asked; the message says what to change."""


class UnknownDatasetError(EvalError):
    pass


class DatasetLayoutError(EvalError):
    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class ResultsFileError(EvalError):
    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)
