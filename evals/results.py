"""Results files: JSONL, one line per finished item, each carrying its configuration and its fingerprint.

A results file holds one configuration (dataset, data path, protocol, models, options). Lines are written
and flushed one at a time, so a run that stops (a crash, Ctrl-C, a dead machine) loses at most the line being
written; resuming reads the file, checks that every line has this run's fingerprint, cuts off a torn last line
and skips the items already there. A file of another configuration is an error, never mixed into.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from .errors import ResultsFileError

__all__ = ["EvalConfig", "ResultsFile", "read_results"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvalConfig:
    """What makes two results comparable. How many items run, in what order and how fast are not part of it."""

    dataset: str
    data_path: str
    protocol: str
    local: str
    remote: str | None
    dataset_options: Mapping[str, Any] = field(default_factory=dict)
    protocol_options: Mapping[str, Any] = field(default_factory=dict)
    judge: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "data_path": self.data_path,
            "protocol": self.protocol,
            "local": self.local,
            "remote": self.remote,
            "dataset_options": dict(sorted(self.dataset_options.items())),
            "protocol_options": dict(sorted(self.protocol_options.items())),
            "judge": self.judge,
        }

    @property
    def fingerprint(self) -> str:
        canonical = json.dumps(self.to_dict(), sort_keys=True, default=str, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _parse_lines(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The records of a results file, and the byte length of its intact part (a torn last line excluded)."""
    data = path.read_bytes()
    records: list[dict[str, Any]] = []
    intact = 0
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        last = number == len(lines)
        if raw.strip():
            try:
                record = json.loads(raw)
                if not isinstance(record, dict) or "fingerprint" not in record or "item_id" not in record:
                    raise ValueError("not a results record")
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                if last:  # the line being written when the run stopped: its item runs again
                    log.warning("%s: the last line is incomplete (a run stopped while writing it); dropped", path)
                    break
                raise ResultsFileError(
                    f"{path} line {number} is not a results record ({exc}): pass a results file written by "
                    "`minions eval run`, or a new --out path.",
                    path=str(path),
                ) from exc
            records.append(record)
        if not last:
            intact += len(raw) + 1
        elif raw.strip():
            intact += len(raw)
    return records, intact


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a results file, in the order written (a torn last line is dropped)."""
    p = Path(path)
    if not p.is_file():
        raise ResultsFileError(f"No such results file: {p}.", path=str(p))
    return _parse_lines(p)[0]


def _differences(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    keys = [k for k in ours if ours.get(k) != theirs.get(k)]
    return "; ".join(f"{k}: {theirs.get(k)!r} there, {ours.get(k)!r} now" for k in keys) or "unknown differences"


class ResultsFile:
    """The results file of one configuration, opened to resume and append: ``with ResultsFile(p, c) as f``."""

    def __init__(self, path: str | Path, config: EvalConfig) -> None:
        self.path = Path(path)
        self.config = config
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        intact = 0
        if self.path.exists():
            self.records, intact = _parse_lines(self.path)
            self._check(self.records)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        if self.path.stat().st_size != intact:
            self._file.truncate(intact)  # a torn last line: cut it before appending
        if intact and not self.path.read_bytes().endswith(b"\n"):
            self._file.write(b"\n")

    def _check(self, records: list[dict[str, Any]]) -> None:
        fingerprint = self.config.fingerprint
        for record in records:
            if record["fingerprint"] != fingerprint:
                differences = _differences(self.config.to_dict(), record.get("config") or {})
                raise ResultsFileError(
                    f"{self.path} holds results of another configuration ({differences}): resume with the same "
                    "settings, or pass a new --out file; results of two configurations are never mixed.",
                    path=str(self.path),
                )

    def latest(self) -> dict[str, dict[str, Any]]:
        """The last record of every item (a retried item's new record replaces its old one)."""
        return {r["item_id"]: r for r in self.records}

    def finished(self, *, retry_errors: bool = False) -> set[str]:
        """Ids of the items not to run again: every recorded one, or only those without error."""
        return {i for i, r in self.latest().items() if not (retry_errors and r.get("error"))}

    def append(self, record: dict[str, Any]) -> None:
        record = {"fingerprint": self.config.fingerprint, **record}
        line = json.dumps(record, ensure_ascii=False, default=str)
        with self._lock:
            self._file.write(line.encode("utf-8") + b"\n")
            self._file.flush()
            os.fsync(self._file.fileno())
            self.records.append(record)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
