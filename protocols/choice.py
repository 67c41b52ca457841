"""Which protocol runs when none is named, and which cannot run without a remote model: one rule for the SDK,
the CLI, the app and the server.

Every protocol but ``local`` has the remote model plan, decide or answer. A small local model cast in that part
fails (its plans do not validate) or writes junk after minutes of work, so those protocols refuse to start
without a remote model, and with none configured the default is ``local``: the local model reads the chunks
that rank best on this device and answers with the sentence that holds the fact.
"""

from __future__ import annotations

__all__ = ["default_protocol", "missing_remote", "needs_remote"]

LOCAL_ONLY = "local"
"""The one protocol that runs on the local model alone."""
WITH_REMOTE = "minions"
NEEDS_REMOTE = "needs a remote model"
ANY_HOW = "give one (remote= in code; --remote or MINIONS_REMOTE on the command line), or use the local protocol"


def default_protocol(has_remote: bool) -> str:
    """``minions`` when a remote model is configured, ``local`` when none is."""
    return WITH_REMOTE if has_remote else LOCAL_ONLY


def needs_remote(protocol: str) -> bool:
    """Whether ``protocol`` has the remote model play a part (every one but ``local``)."""
    return protocol.strip().lower() != LOCAL_ONLY


def missing_remote(protocol: str | None, how: str = ANY_HOW) -> str:
    """One line saying that ``protocol`` needs a remote model, then ``how`` to give it one.

    With no protocol named, the line starts with "needs a remote model" (the reason beside a disabled choice).
    """
    reason = f"{NEEDS_REMOTE}: {how}"
    return reason if protocol is None else f"The {protocol} protocol {reason}."
