"""Reports over results files: per configuration, accuracy, tokens, dollars and latency, and the two headline
ratios against the remote-only baseline on the same items:

    accuracy recovered = accuracy / accuracy of remote-only
    cost reduction     = cost of remote-only / cost

Beside them, per configuration, the evidence metrics (``evals/evidence.py``): mean recall at 1, 5, 10 and 20
passages, citation recall and QASPER's evidence F1, over the items that have gold evidence.

``write_report(paths, out_dir)`` writes ``report.md`` (Markdown tables per dataset) and ``cost_accuracy.png``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import EvalError
from .evidence import RECALL_AT
from .metrics import Baselines, baselines
from .results import read_results

__all__ = ["BASELINE", "Row", "load_records", "markdown_report", "plot_cost_accuracy", "summarize", "write_report"]

BASELINE = "remote"
"""The protocol the ratios compare against: the remote model reads the documents itself."""


@dataclass(frozen=True)
class Row:
    """One configuration's summary over its items (the latest result of each)."""

    dataset: str
    protocol: str
    local: str
    remote: str | None
    fingerprint: str
    items: int
    errors: int
    """Items whose run raised (recorded with score 0): the model's failures and harness errors."""
    stopped: int
    """Items whose run stopped early (a reply that never validated, a budget, a context overflow) and whose
    partial answer was scored; the results file's ``notes`` say why."""
    accuracy: float
    remote_tokens: float
    """Per item, prompt and completion."""
    local_tokens: float
    cost_usd: float
    """Total over the items: local and remote (a judge's cost is not the protocol's)."""
    latency_s: float
    """Mean wall-clock seconds per item."""
    egress_bytes: float
    """Mean bytes of text sent to the remote model per item (UTF-8)."""
    accuracy_recovered: float | None = None
    cost_reduction: float | None = None
    remote_token_reduction: float | None = None
    baseline_items: int = 0
    """Items this row shares with its remote-only baseline; the ratios are computed on those."""
    harness_errors: int = 0
    """Of ``errors``, the items that failed for a fault of ours (a bug), not the model's."""
    evidence_items: int = 0
    """Items with gold evidence; the evidence means below are over those (None: no such item)."""
    recall_at: Mapping[int, float | None] = field(default_factory=dict)
    citation_recall: float | None = None
    evidence_f1: float | None = None
    abstained: int = 0
    """Items where the model said it was not sure instead of choosing (scored 0)."""
    baselines: Baselines | None = None
    """Chance and majority-class accuracy over the items with a closed set of answers (None: none has)."""

    @property
    def cost_per_item(self) -> float:
        return self.cost_usd / self.items if self.items else 0.0


def load_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """The latest record of every (configuration, item) in the files."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for record in read_results(path):
            latest[(record["fingerprint"], record["item_id"])] = record
    return list(latest.values())


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _tokens(record: dict[str, Any], role: str) -> float:
    return float((record.get("usage") or {}).get(role, {}).get("total_tokens", 0))


def _cost(record: dict[str, Any]) -> float:
    return float((record.get("cost_usd") or {}).get("run", 0.0))


def _evidence_mean(group: list[dict[str, Any]], key: str) -> float | None:
    """The mean of an evidence metric over the items that have it (None where none has)."""
    values = [float(v) for r in group if (v := (r.get("evidence") or {}).get(key)) is not None]
    return _mean(values) if values else None


def _row(group: list[dict[str, Any]]) -> Row:
    first = group[0]
    return Row(
        dataset=first["dataset"],
        protocol=first["protocol"],
        local=first["local"],
        remote=first.get("remote"),
        fingerprint=first["fingerprint"],
        items=len(group),
        errors=sum(1 for r in group if r.get("error")),
        stopped=sum(1 for r in group if not r.get("error") and r.get("complete") is False),
        accuracy=_mean([float(r["score"]) for r in group]),
        remote_tokens=_mean([_tokens(r, "remote") for r in group]),
        local_tokens=_mean([_tokens(r, "local") for r in group]),
        cost_usd=sum(_cost(r) for r in group),
        latency_s=_mean([float((r.get("timings") or {}).get("wall_s", 0.0)) for r in group]),
        egress_bytes=_mean([float(r.get("egress_bytes", 0)) for r in group]),
        harness_errors=sum(1 for r in group if r.get("error_kind") == "harness"),
        evidence_items=sum(1 for r in group if (r.get("evidence") or {}).get("gold")),
        recall_at={k: _evidence_mean(group, f"recall_at_{k}") for k in RECALL_AT},
        citation_recall=_evidence_mean(group, "citation_recall"),
        evidence_f1=_evidence_mean(group, "evidence_f1"),
        abstained=sum(1 for r in group if r.get("abstained")),
        baselines=baselines((r["gold"][0], len(r["choices"])) for r in group if r.get("choices") and r.get("gold")),
    )


def _ratio(numerator: float, denominator: float) -> float | None:
    if denominator > 0:
        return numerator / denominator
    return math.inf if numerator > 0 else None


def _same_setting(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ca, cb = a.get("config") or {}, b.get("config") or {}
    keys = ("dataset", "data_path", "dataset_options", "remote", "judge")
    return all(ca.get(k) == cb.get(k) for k in keys)


def _with_ratios(row: Row, group: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> Row:
    """``row`` with the ratios against ``baseline``, both computed on the items they share."""
    base = {r["item_id"]: r for r in baseline}
    shared = [r for r in group if r["item_id"] in base]
    if not shared:
        return row
    ours = [float(r["score"]) for r in shared]
    theirs = [float(base[r["item_id"]]["score"]) for r in shared]
    return replace(
        row,
        accuracy_recovered=_ratio(_mean(ours), _mean(theirs)),
        cost_reduction=_ratio(sum(_cost(base[r["item_id"]]) for r in shared), sum(_cost(r) for r in shared)),
        remote_token_reduction=_ratio(
            sum(_tokens(base[r["item_id"]], "remote") for r in shared), sum(_tokens(r, "remote") for r in shared)
        ),
        baseline_items=len(shared),
    )


def summarize(records: Sequence[dict[str, Any]]) -> list[Row]:
    """One row per configuration, sorted by dataset then protocol, with ratios against remote-only where a
    remote-only run of the same dataset and remote model is among the records."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(record["fingerprint"], []).append(record)
    rows = []
    for group in groups.values():
        row = _row(group)
        baselines = [g for g in groups.values() if g[0]["protocol"] == BASELINE and _same_setting(g[0], group[0])]
        if baselines:
            ids = {r["item_id"] for r in group}
            best = max(baselines, key=lambda g: len(ids & {r["item_id"] for r in g}))
            row = _with_ratios(row, group, best)
        rows.append(row)
    return sorted(rows, key=lambda r: (r.dataset, r.protocol != BASELINE, r.protocol, r.local, r.remote or ""))


# -- Markdown -----------------------------------------------------------------------------------------------


def _x(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "∞" if math.isinf(value) else f"{value:.2f}x"


def _usd(value: float) -> str:
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.4f}" if value >= 0.01 or value == 0 else f"${value:.6f}"


HEADER = (
    "| protocol | local | remote | items | errors | stopped early | accuracy | abstained | chance | majority "
    "| remote tok/item | local tok/item "
    "| $ total | $/item | s/item | bytes to remote/item | acc. recovered | cost reduction | remote-token reduction |"
)


def _models(row: Row) -> list[str]:
    return [row.protocol, f"`{row.local}`", f"`{row.remote}`" if row.remote else "-"]


def _line(row: Row) -> str:
    cells = [
        *_models(row),
        str(row.items),
        f"{row.errors} ({row.harness_errors} harness)" if row.harness_errors else str(row.errors),
        str(row.stopped),
        f"{row.accuracy:.3f}",
        str(row.abstained),
        _share(row.baselines.chance if row.baselines else None),
        f"{row.baselines.majority:.3f} ({row.baselines.majority_answer})" if row.baselines else "n/a",
        f"{row.remote_tokens:,.0f}",
        f"{row.local_tokens:,.0f}",
        _usd(row.cost_usd),
        _usd(row.cost_per_item),
        f"{row.latency_s:.1f}",
        f"{row.egress_bytes:,.0f}",
        _x(row.accuracy_recovered),
        _x(row.cost_reduction),
        _x(row.remote_token_reduction),
    ]
    return "| " + " | ".join(cells) + " |"


EVIDENCE_HEADER = (
    "| protocol | local | remote | accuracy | $/item | items with gold evidence | "
    + " | ".join(f"recall@{k}" for k in RECALL_AT)
    + " | citation recall | evidence F1 |"
)


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _evidence_line(row: Row) -> str:
    cells = [
        *_models(row),
        f"{row.accuracy:.3f}",
        _usd(row.cost_per_item),
        str(row.evidence_items),
        *(_share(row.recall_at.get(k)) for k in RECALL_AT),
        _share(row.citation_recall),
        _share(row.evidence_f1),
    ]
    return "| " + " | ".join(cells) + " |"


def _table(header: str, lines: list[str]) -> list[str]:
    return [header, "|" + "---|" * (header.count(" | ") + 1), *lines]


def markdown_report(rows: Sequence[Row], *, plot: str | None = "cost_accuracy.png") -> str:
    lines = [
        "# Evaluation report",
        "",
        "Accuracy is the mean item score (numeric match, token F1, option or label match, or the judge's "
        "verdict). An item whose run raised counts under errors and scores 0 (harness errors, in brackets, are "
        "faults of ours, not the model's: their results lines hold the traceback); one whose run stopped early "
        "(a reply that never validated, a budget, a context overflow) is scored on its partial answer. Tokens "
        "and latency are per item; $ is local + remote (a judge's cost is not counted). The ratios compare each "
        f"protocol with `{BASELINE}` (remote-only) on the items both ran: accuracy recovered = accuracy / "
        "remote-only accuracy, cost reduction = remote-only cost / cost (∞: this protocol spent nothing "
        "remotely; n/a: no remote-only run, or neither cost anything: price the remote model with "
        "MINIONS_PRICES). Where the questions allow a closed set of answers (options, yes/no/maybe), accuracy "
        "stands beside chance (a random option) and the majority class (always the most common gold answer); "
        "an item where the model said it was not sure is scored wrong and counted under abstained.",
        "",
        "Evidence compares the passages each run passed on (to the remote model, or to the local answer step), "
        "ranked best first, with the benchmark's gold evidence: recall@k is the share of the gold places that "
        "the first k passages cover (the best annotator's, where there are several), citation recall the same "
        "for the answer's citations, evidence F1 QASPER's paragraph-level F1; each is the mean over the items "
        "that have gold evidence (n/a: none has).",
    ]
    for dataset in sorted({r.dataset for r in rows}):
        ours = [r for r in rows if r.dataset == dataset]
        lines += ["", f"## {dataset}", "", *_table(HEADER, [_line(r) for r in ours])]
        lines += ["", "Evidence:", "", *_table(EVIDENCE_HEADER, [_evidence_line(r) for r in ours])]
    if plot:
        lines += ["", f"![cost against accuracy]({plot})"]
    return "\n".join(lines) + "\n"


# -- plot ---------------------------------------------------------------------------------------------------


def plot_cost_accuracy(rows: Sequence[Row], path: str | Path) -> Path:
    """Accuracy against cost per item (remote tokens per item where nothing was priced), one point per row: every
    protocol of every dataset on one plot (a colour per dataset, a marker per protocol), with each closed-form
    dataset's majority-class (dashed) and chance (dotted) accuracy drawn across it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_cost = any(r.cost_usd > 0 for r in rows)
    xs = [r.cost_per_item if by_cost else r.remote_tokens for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = "osD^vP*X"
    datasets = sorted({r.dataset for r in rows})
    protocols = sorted({r.protocol for r in rows})
    for row, x in zip(rows, xs, strict=True):
        color = f"C{datasets.index(row.dataset) % 10}"
        marker = markers[protocols.index(row.protocol) % len(markers)]
        ax.scatter([x], [row.accuracy], c=color, marker=marker, s=60, label=f"{row.dataset} / {row.protocol}")
        ax.annotate(row.protocol, (x, row.accuracy), textcoords="offset points", xytext=(5, 4), fontsize=8)
    for dataset in datasets:
        b = next((r.baselines for r in rows if r.dataset == dataset and r.baselines is not None), None)
        if b is not None:  # what reading nothing scores: always the most common answer, and a random one
            color = f"C{datasets.index(dataset) % 10}"
            ax.axhline(b.majority, color=color, linestyle="--", linewidth=1, label=f"{dataset} / majority class")
            ax.axhline(b.chance, color=color, linestyle=":", linewidth=1, label=f"{dataset} / chance")
    if all(x > 0 for x in xs) and max(xs) / min(xs) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("USD per item (local + remote)" if by_cost else "remote tokens per item")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title("Cost against accuracy")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def write_report(paths: Sequence[str | Path], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``report.md`` and ``cost_accuracy.png`` into ``out_dir``; returns their paths."""
    records = load_records(paths)
    if not records:
        raise EvalError(f"No results in {', '.join(map(str, paths))}: run `minions eval run` first.")
    rows = summarize(records)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_cost_accuracy(rows, out / "cost_accuracy.png")
    md = out / "report.md"
    md.write_text(markdown_report(rows, plot=png.name), encoding="utf-8")
    return md, png
