"""Protocols: how a local and a remote model share the work on long documents.

    from minions.protocols import Minions
    result = Minions(local="llamacpp/default", remote="openai/gpt-4o-mini").run(task, ["10k.pdf"])

Every protocol has the same ``run(task, documents) -> RunResult``; every remote call goes through one
``RemoteChannel`` that redacts, records egress, meters usage and enforces the budget.
"""

from .base import BaseProtocol
from .baselines import RAG, RemoteOnly
from .channel import LocalEgress, Meter, RemoteChannel, remote_leaves_device
from .factory import PROTOCOLS, get_protocol
from .local import LocalOnly
from .minion import Minion
from .minions_protocol import Minions
from .options import AnswerMode, Budget, InputError, RunOptions, default_protocol, missing_remote, needs_remote
from .redact import Redactor
from .result import Citation, EgressLog, EgressRecord, Evidence, JobRecord, RoundRecord, RunResult
from .schemas import Answer, Decision, JobOutput, JobSpec, MinionTurn, Plan
from .search.bm25 import BM25

__all__ = [
    "BM25",
    "PROTOCOLS",
    "RAG",
    "Answer",
    "AnswerMode",
    "BaseProtocol",
    "Budget",
    "Citation",
    "Decision",
    "EgressLog",
    "EgressRecord",
    "Evidence",
    "InputError",
    "JobOutput",
    "JobRecord",
    "JobSpec",
    "LocalEgress",
    "LocalOnly",
    "Meter",
    "Minion",
    "MinionTurn",
    "Minions",
    "Plan",
    "Redactor",
    "RemoteChannel",
    "RemoteOnly",
    "RoundRecord",
    "RunOptions",
    "RunResult",
    "default_protocol",
    "get_protocol",
    "missing_remote",
    "needs_remote",
    "remote_leaves_device",
]
