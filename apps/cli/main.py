"""The ``minions`` command line.

    minions ask FILE... "question"      answer a question about local documents
    minions models                      what is configured, available and pulled
    minions models pull OWNER/REPO[/FILE]   a GGUF model from the Hugging Face Hub
    minions bench cost|engine|speculative|tree|pdf|evidence|fleet
    minions app [--port P]              the chat app over your documents, in the browser
    minions serve [--port P]            an OpenAI-compatible API (the model name picks the protocol)

The CLI is the top of the import graph: it imports backends and protocols lazily, inside the commands.
Errors of ours print one line and exit with status 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from minions.errors import MinionsError
from minions.events import SETUP_LOG

from .bench import add_bench_parser
from .models import add_budget_options, budget_options, cmd_models, cmd_models_pull
from .models import add_model_options as _add_model_options
from .models import resolve_models as _resolve_models

if TYPE_CHECKING:
    from minions.protocols import RunResult

__all__ = ["main"]

log = logging.getLogger(__name__)

EXIT_USAGE = 2


# -- ask -------------------------------------------------------------------------------------------------
def cmd_ask(args: argparse.Namespace) -> int:
    from minions.apps.asking import check_protocol
    from minions.documents import load_documents
    from minions.paths import cache_dir, writable_dir
    from minions.protocols import default_protocol, get_protocol

    writable_dir(cache_dir(), "set MINIONS_CACHE_DIR to a folder you can write")
    if not args.inputs and args.library and not Path(args.library).expanduser().exists():
        args.inputs, args.library = [args.library], ""  # `minions ask --library "question"`: the default library
    if not args.inputs:
        raise MinionsError(
            'Give documents and a question: minions ask FILE... "question", or minions ask "question" --library'
        )
    *paths, question = args.inputs
    if not paths and args.library is None:
        raise MinionsError(
            'Give at least one document and a question: minions ask FILE... "question" (or a library: '
            'minions ask "question" --library)'
        )
    if not question.strip():
        raise MinionsError("The question is empty: write what you want to know about the documents.")
    # the documents first: a wrong path is said before a model is loaded (or converted, on first use)
    documents = load_documents(paths) if args.library is None else []
    local, remote = _resolve_models(args)
    name = args.protocol or default_protocol(remote is not None)
    check_protocol(name, remote, "pass --remote provider/model or set MINIONS_REMOTE, or use --protocol local")
    options: dict[str, Any] = budget_options(args)
    if args.redact:
        options["redact"] = True
    if args.chunk_size is not None:
        options["chunk_size"] = args.chunk_size
    if args.chunk_by is not None:
        options["chunk_by"] = args.chunk_by
    if args.max_rounds is not None:
        options["max_rounds"] = args.max_rounds
    if args.answer is not None:
        options["answer"] = args.answer
    if args.choose is not None:
        options["choose"] = args.choose
    from minions.apps.cli.render import LiveProgress

    shown = (not args.json and sys.stderr.isatty()) or args.progress
    with LiveProgress(enabled=shown, answer=None if args.json else sys.stdout) as progress:
        if args.library is not None:
            result = _ask_library(args, question, paths, local, remote, name, options, progress.sink)
        else:
            protocol = get_protocol(name, local=local, remote=remote, **options)
            result = protocol.run(question, documents, events=progress.sink)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_result(
            result, local_name=local.name, remote_name=remote.name if remote else None, streamed=progress.streamed
        )
    if result.error:
        # What the run had is printed above; the failure itself is the one-line error.
        raise MinionsError(result.error)
    return 0


def _ask_library(
    args: argparse.Namespace,
    question: str,
    names: Sequence[str],
    local: Any,
    remote: Any,
    protocol: str,
    options: dict[str, Any],
    events: Any,
) -> RunResult:
    """``minions ask "question" --library [DIR]``: the whole library, or the documents ``names`` in it."""
    from minions.apps.asking import ask_library
    from minions.apps.cli.index import open_library
    from minions.protocols.background import resume_embedding

    with open_library(args, local=local, remote=remote, protocol=protocol, **options) as library:
        resume_embedding(library)  # vectors a build left missing: added meanwhile, this question by words
        return ask_library(library, question, names, events=events)


def _print_result(result: RunResult, *, local_name: str, remote_name: str | None, streamed: str) -> None:
    from minions.apps.cli.render import print_result

    print_result(result, local_name=local_name, remote_name=remote_name, streamed=streamed)


def build_parser() -> argparse.ArgumentParser:
    from minions.protocols.evidence.written import WRITE_FROM_PARAMETERS
    from minions.protocols.factory import PROTOCOLS
    from minions.protocols.options import AnswerMode, ChooseBy, RunOptions

    parser = argparse.ArgumentParser(prog="minions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True)

    ask = sub.add_parser("ask", help="answer a question about local documents")
    ask.add_argument("inputs", nargs="*", metavar="FILE... QUESTION", help="documents, then the question")
    from minions.apps.cli.index import add_library_option

    add_library_option(ask, "ask the library (after the question), or the documents named in it", optional_value=True)
    ask.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        help="default: minions with a remote model, local (map-reduce on this device) without",
    )
    _add_model_options(ask)
    ask.add_argument("--json", action="store_true", help="print the full result as JSON")
    ask.add_argument("--progress", action="store_true", help="show progress even when stderr is not a terminal")
    add_budget_options(ask)
    ask.add_argument("--redact", action="store_true", help="redact names, emails, phones and ids before egress")
    ask.add_argument("--chunk-size", type=int, help="chunk size (characters, tokens or pages, per --chunk-by)")
    ask.add_argument("--chunk-by", choices=("chars", "tokens", "pages", "sections"))
    ask.add_argument("--max-rounds", type=int, help="most rounds of local work the remote model may ask for")
    ask.add_argument(
        "--answer",
        choices=get_args(AnswerMode),
        help="local: the local model writes a short answer from its quotes, citing them, kept only where they state "
        f"every figure and name in it (write), or answers with the best quote (quote); default {RunOptions.answer}: "
        f"write for a model of {WRITE_FROM_PARAMETERS / 1e9:g}B parameters or more",
    )
    ask.add_argument(
        "--choose",
        choices=get_args(ChooseBy),
        help="local, a yes/no question or one with options: the local model answers with one of them, by their "
        "log-probabilities (scores), under a JSON schema (schema) or, for lettered options, by their closeness in "
        "meaning to its quotes (meaning), then its quote; default: the best quote (SmolLM2-135M's picks by "
        "scores measured no better than chance)",
    )
    ask.set_defaults(func=cmd_ask)

    models = sub.add_parser("models", help="list the configured, available and pulled models; pull one")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=cmd_models)
    pull = models.add_subparsers(dest="models_command").add_parser(
        "pull", help="download a GGUF model from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN), sha256 checked"
    )
    pull.add_argument("spec", metavar="OWNER/REPO[/FILE]", help="a GGUF repository, or one file of it")
    pull.add_argument("--revision", help="a branch, tag or commit (default: main)")
    pull.add_argument("--json", action="store_true")
    pull.set_defaults(func=cmd_models_pull)

    add_bench_parser(sub)

    from minions.apps.cli.serve import add_app_parsers

    add_app_parsers(sub, _add_model_options)

    from minions.apps.cli.evals import add_eval_parser

    add_eval_parser(sub, _add_model_options, _resolve_models)
    return parser


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        return func(args)
    except MinionsError as exc:
        if args.debug:
            raise
        print(f"minions: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("minions: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the top level: a bug of ours, told in one line and logged, never a bare traceback
        if args.debug:
            raise
        log.debug("%s failed", args.command, exc_info=exc)
        print(f"minions: internal error: {type(exc).__name__}: {exc} (--debug shows the traceback)", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Warnings reach the user as the run's notes and the progress display, not as log lines.
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.ERROR, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    _show_setup_lines()
    if args.command == "bench":  # a benchmark times what it runs: no idle work (a cost table) shares the cores
        from minions.backends.llamacpp.worker import stop_idle_work

        stop_idle_work()
    return _run(args.func, args)


def _show_setup_lines() -> None:
    """One-time set-up work a command waits for (a model converted on first use) says so, one line each on stderr
    (``minions.events.SETUP_LOG``), where other log lines show only with ``--debug``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("minions: %(message)s"))
    setup = logging.getLogger(SETUP_LOG)
    setup.handlers, setup.propagate = [handler], False
    setup.setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
