"""Apps on top of the protocols: the chat app over local documents and an OpenAI-compatible server.

    from minions.apps import AppConfig, create_app
    app = create_app(AppConfig(port=8765))      # an ASGI app: uvicorn.run(app, ...)

Names load on first use, so that ``minions.apps.cli.main`` can add its ``app`` and ``serve`` commands without
importing FastAPI.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import AppConfig
    from .documents import AppDocuments
    from .runs import Models, Runner, Settings
    from .store import Store
    from .web import create_app

_LAZY = {
    "AppConfig": "minions.apps.config",
    "AppDocuments": "minions.apps.documents",
    "Models": "minions.apps.runs",
    "Runner": "minions.apps.runs",
    "Settings": "minions.apps.runs",
    "Store": "minions.apps.store",
    "create_app": "minions.apps.web",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'minions.apps' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["AppConfig", "AppDocuments", "Models", "Runner", "Settings", "Store", "create_app"]
