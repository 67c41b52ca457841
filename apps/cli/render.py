"""Terminal rendering for the CLI: live progress from the event stream, the answer, the usage and cost table."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from minions.events import AnswerToken, Event, JobFailed, JobFinished, Notice, PlanReady, RoundDone
from minions.types import Usage

__all__ = ["LiveProgress", "print_models", "print_result", "usage_table"]


class LiveProgress:
    """A progress bar of local jobs, per round, on stderr. ``sink`` is the event sink to pass to a run.

    ``answer``: where an answer the local model writes goes as it comes (the bar ends when it starts); what went
    there is ``streamed``, for ``print_result``."""

    def __init__(self, *, enabled: bool = True, console: Console | None = None, answer: TextIO | None = None) -> None:
        self.enabled = enabled
        self.answer = answer
        self.streamed = ""
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self._task: TaskID | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.enabled:
            self._progress.stop()

    def sink(self, event: Event) -> None:
        if isinstance(event, AnswerToken):
            self._stream(event.text)
        if not self.enabled:
            return
        with self._lock:
            if isinstance(event, PlanReady):
                self._task = self._progress.add_task(f"round {event.round}: local jobs", total=event.jobs)
            elif isinstance(event, JobFinished | JobFailed) and self._task is not None:
                if not (isinstance(event, JobFailed) and event.will_retry):
                    self._progress.advance(self._task)
            elif isinstance(event, RoundDone) and self._task is not None:
                self._progress.update(self._task, description=f"round {event.round}: done")
            elif isinstance(event, Notice):
                self.console.print(f"[yellow]{event.level}:[/yellow] {event.message}")

    def _stream(self, text: str) -> None:
        if self.answer is None:
            return
        with self._lock:
            if self.enabled and not self.streamed:
                self._progress.stop()
            self.streamed += text
            self.answer.write(text)
            self.answer.flush()


def _fmt_usd(x: float) -> str:
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def usage_table(
    usage: Mapping[str, Usage],
    models: Mapping[str, str | None],
    remote_only: Usage | None,
    *,
    local_egress: str | None = None,
) -> Table:
    """The usage and cost table. ``local_egress`` says what left this device through a local model or an embedding
    model on another machine (``RunResult.device_egress``); without it and without a remote model, nothing did."""
    table = Table(title="Usage and cost", title_justify="left")
    for col in ("role", "model", "calls", "input tok", "cached", "output tok", "seconds", "cost"):
        table.add_column(col, justify="left" if col in ("role", "model") else "right")

    def row(role: str, model: str, u: Usage, style: str | None = None) -> None:
        table.add_row(
            role,
            model,
            str(u.calls),
            f"{u.prompt_tokens:,}",
            f"{u.cached_prompt_tokens:,}",
            f"{u.completion_tokens:,}",
            f"{u.seconds:.1f}",
            _fmt_usd(u.cost_usd),
            style=style,
        )

    for role, u in usage.items():
        if u.calls or role == "local":
            row(role, models.get(role) or "", u)
    total = sum(usage.values(), Usage())
    row("total", "", total, style="bold")
    if not models.get("remote"):
        table.caption = f"no remote model configured: {local_egress or 'nothing left this device'}"
    elif remote_only is not None:
        table.add_section()
        row("remote only (est.)", models.get("remote") or "", remote_only, style="dim")
        saved = remote_only.cost_usd - total.cost_usd
        table.caption = f"saved {_fmt_usd(saved)} against sending the documents to the remote model"
    return table


def _clip(quote: str, limit: int = 160) -> str:
    """A long quote cut at a word before ``limit`` characters, marked as cut."""
    if len(quote) <= limit:
        return quote
    cut = quote.rfind(" ", limit // 2, limit)
    return quote[: cut if cut > 0 else limit].rstrip(" ,;:") + " …"


def print_result(
    result: Any, *, local_name: str, remote_name: str | None, console: Console | None = None, streamed: str = ""
) -> None:
    """Print a protocol's ``RunResult``: the answer, its citations, notes, and the usage table.

    ``streamed``: the written answer already printed as it came (``LiveProgress``); kept, it is not printed again
    and its citations are numbered as it cites them; replaced, a line says why and the quote answer follows."""
    # Piped output gets a wide table rather than rich's 80-column default.
    out = console or Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120)
    written = result.reading.get("answer", {})
    kept = written.get("replaced") is False
    why = written.get("why") or "the run stopped while it was written"
    if streamed:
        out.print()
        if not kept:
            out.print(f"not kept: {why}; the quote answer:", style="yellow", markup=False, highlight=False)
    if not (streamed and kept):
        out.print(result.answer or "[no answer]", markup=False, highlight=False)
    for i, c in enumerate(result.citations[:5], 1):
        number = f"[{i}] " if kept else ""
        out.print(f'  {number}[{c.label}] "{_clip(c.text)}"', markup=False, highlight=False)
    for note in result.notes:
        if not (streamed and written.get("why") and written["why"] in note):  # said above
            out.print(f"note: {note}", style="yellow", markup=False)
    library = result.reading.get("library")
    if library:  # asked of a library: which documents were searched, and why
        searched = _library_line(library, result.timings)
        out.print(searched, style="dim", markup=False, highlight=False)
    if result.device_egress and remote_name:  # without a remote model the table's caption says it
        out.print(f"egress: {result.device_egress}", style="yellow", markup=False)
    out.print()
    models = {"local": local_name, "remote": remote_name}
    out.print(usage_table(dict(result.usage), models, result.remote_only_estimate, local_egress=result.device_egress))


def _library_line(library: Any, timings: Any) -> str:
    """``searched 3M_2018_10K.pdf (cover names 3m; period 2018) of 74 documents; route 4 ms, rank 9 ms, prefill
    1.2 s, decode 0.3 s``."""
    if library.get("routed"):
        where = ", ".join(f"{d} ({library['why'].get(d, '')})" for d in library["documents"])
        head = f"searched {where} of {library['of']} documents"
    else:
        head = f"searched all {library['of']} documents"
    parts = [f"{step} {library[f'{step}_s'] * 1000:.0f} ms" for step in ("route", "rank") if f"{step}_s" in library]
    parts = parts or [f"search {library.get('search_s', 0) * 1000:.0f} ms"]
    parts += [f"prefill {timings['local_prefill_s']:.1f} s"] if "local_prefill_s" in timings else []
    parts += [f"decode {timings['local_decode_s']:.1f} s"] if "local_decode_s" in timings else []
    meaning = str(library.get("meaning", ""))
    if "words" in meaning:  # vectors still being added (minions index --status): found by words where missing
        head += f"; meaning {meaning}"
    return f"{head}; " + ", ".join(parts)


def print_models(infos: list[Any], console: Console | None = None) -> None:
    out = console or Console(file=sys.stdout)
    table = Table(title="Models", title_justify="left")
    for col in ("role", "model", "available", "detail"):
        table.add_column(col)
    for i in infos:
        table.add_row(i.role, i.spec, "yes" if i.available else "no", i.detail)
    out.print(table)
