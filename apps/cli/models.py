"""``minions models`` (what is configured, available and pulled; ``pull``), and the model options every command
that runs a model takes (``--local``, ``--remote``), and the budget of those that ask it questions."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_budget_options", "add_model_options", "budget_options", "cmd_models", "cmd_models_pull",
           "resolve_models"]  # fmt: skip


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--local", help="local model, provider/model (default: $MINIONS_LOCAL or llamacpp/default)")
    p.add_argument("--remote", help="remote model, provider/model (default: $MINIONS_REMOTE; none: local answers)")


def add_budget_options(p: argparse.ArgumentParser, per: str = "") -> None:
    p.add_argument("--budget-tokens", type=int, help=f"stop after this many remote tokens{per}")
    p.add_argument("--budget-usd", type=float, help=f"stop after this many remote dollars{per}")


def budget_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options of ``--budget-tokens``/``--budget-usd``: a ``Budget``, or nothing where neither is given."""
    if args.budget_tokens is None and args.budget_usd is None:
        return {}
    from minions.protocols import Budget

    return {"budget": Budget(max_remote_tokens=args.budget_tokens, max_remote_usd=args.budget_usd)}


def resolve_models(args: argparse.Namespace) -> tuple[Any, Any]:
    from minions.backends.registry import default_local, default_remote, resolve

    # the remote first: a wrong spec is said before the local model loads (or is converted, on first use)
    remote_spec = args.remote or default_remote()
    remote = resolve(remote_spec) if remote_spec else None
    return resolve(args.local or default_local()), remote


def cmd_models(args: argparse.Namespace) -> int:
    from minions.apps.cli.render import print_models
    from minions.backends.inventory import model_inventory

    infos = model_inventory()
    if args.json:
        print(json.dumps([i.to_dict() for i in infos], indent=2))
    else:
        print_models(infos)
    return 0


def cmd_models_pull(args: argparse.Namespace) -> int:
    from minions.backends.hub import pull

    model = pull(args.spec, revision=args.revision)
    if args.json:
        print(json.dumps(model.to_dict(), indent=2))
    else:
        print(
            f"pulled {model.repo}/{model.filename} ({model.quantization}, {model.size / 1e6:.1f} MB, sha256 checked) "
            f'to {model.path}\nuse it as llamacpp/{model.name}, e.g. minions ask FILE "question" --local '
            f"llamacpp/{model.name}"
        )
    return 0
