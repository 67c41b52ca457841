"""The minions exception tree.

    MinionsError                    everything minions raises on purpose
    ├── ConfigError                 the user's configuration is wrong; the message says what to set
    │   ├── UnknownProviderError    "foo/model" names no registered provider
    │   ├── MissingAPIKeyError      the provider's key variable is unset
    │   └── ModelNotFoundError      a local model file does not exist or is not a model
    ├── DownloadError               a model download failed, or did not match the hub's checksum
    ├── DocumentError               a document cannot be used
    │   ├── DocumentNotFoundError
    │   ├── UnreadableDocumentError (corrupt or encrypted PDF, unknown format)
    │   ├── EmptyDocumentError      it yields no text
    │   └── OutsideFolderError      it is (or a link leads) outside the folders that may be read
    ├── BackendError                a model call failed; carries the backend, the attempt and the usage so far
    │   ├── BackendConnectionError  the server refuses connections or is unreachable
    │   ├── RateLimitError          still rate limited after the bounded retries
    │   ├── BackendTimeoutError
    │   ├── ContextLengthError      the prompt does not fit the model's context
    │   ├── MalformedResponseError  the server answered, but not with its API's reply (an HTML page, cut-off JSON)
    │   └── NoLogprobsError         a reply without the log-probabilities the call asked for
    ├── ModelOutputError            the call worked, but the model wrote something unusable (a reply that does not
    │                               validate after the bounded retries, loops, or quotes what is not there);
    │                               carries what a BackendError carries, ``raw`` the reply
    └── BudgetExceededError         a run hit its remote token or dollar budget

Every error's message is one line that says what to do; the CLI prints it and exits with status 2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from minions.types import Usage

__all__ = [
    "BackendConnectionError",
    "BackendError",
    "BackendTimeoutError",
    "BudgetExceededError",
    "ConfigError",
    "ContextLengthError",
    "DocumentError",
    "DocumentNotFoundError",
    "DownloadError",
    "EmptyDocumentError",
    "MalformedResponseError",
    "MinionsError",
    "MissingAPIKeyError",
    "ModelNotFoundError",
    "ModelOutputError",
    "NoLogprobsError",
    "OutsideFolderError",
    "RateLimitError",
    "UnknownProviderError",
    "UnreadableDocumentError",
]


class MinionsError(Exception):
    """Base class of every error minions raises on purpose."""


class ConfigError(MinionsError):
    """The configuration is wrong; the message names what to set."""


class UnknownProviderError(ConfigError):
    pass


class MissingAPIKeyError(ConfigError):
    def __init__(self, provider: str, env_var: str) -> None:
        self.provider = provider
        self.env_var = env_var
        super().__init__(f"No API key for provider {provider!r}: set the environment variable {env_var}.")


class ModelNotFoundError(ConfigError):
    pass


class DownloadError(MinionsError):
    """A model download failed or its file did not match the hub's checksum; nothing half-done is kept."""


class DocumentError(MinionsError):
    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class DocumentNotFoundError(DocumentError):
    pass


class UnreadableDocumentError(DocumentError):
    pass


class EmptyDocumentError(DocumentError):
    pass


class OutsideFolderError(DocumentError):
    """A file that is, or that a link leads, outside the folders it may be read from
    (``minions.documents.files.contained``)."""


class _ModelCallError(MinionsError):
    """What a caller needs to debug and to account a model call that went wrong: the backend, the attempts, the
    usage so far and the raw reply. Not raised itself: a ``BackendError`` or a ``ModelOutputError``."""

    def __init__(
        self,
        message: str,
        *,
        backend: str | None = None,
        attempts: int = 1,
        usage: Usage | None = None,
        raw: Any = None,
    ) -> None:
        self.backend = backend
        self.attempts = attempts
        self.usage = usage
        self.raw = raw
        super().__init__(message)


class BackendError(_ModelCallError):
    """A model call failed: the backend gave no reply (down, refusing, too slow, the prompt too long) or none in
    its API's shape. Carries what a caller needs to debug and to account."""


class BackendConnectionError(BackendError):
    pass


class RateLimitError(BackendError):
    pass


class BackendTimeoutError(BackendError):
    pass


class ContextLengthError(BackendError):
    """The prompt and the reply's room do not fit the model's context window; ``window``: that window in tokens,
    where the server said it (a caller that sends less can ask again within it)."""

    def __init__(self, message: str, *, window: int | None = None, **context: Any) -> None:
        self.window = window
        super().__init__(message, **context)


class MalformedResponseError(BackendError):
    """The server answered, but not with a reply its API defines: an HTML page from a proxy, JSON cut off mid-way,
    a completion without choices, a stream that stopped before its end. ``content_type`` is what the server
    said it sent; ``raw`` holds the start of what it sent."""

    def __init__(self, message: str, *, content_type: str | None = None, **context: Any) -> None:
        self.content_type = content_type
        super().__init__(message, **context)


class NoLogprobsError(BackendError):
    """A reply came back without the log-probabilities the call asked for (a server, or a proxy in front of it,
    that drops them)."""


class ModelOutputError(_ModelCallError):
    """The model ran, but its reply is unusable: it failed validation after the bounded number of retries, loops,
    or quotes what is not in the text; ``raw`` holds the last reply. Not a ``BackendError``: the backend is up."""


class BudgetExceededError(MinionsError):
    def __init__(self, message: str, *, spent_tokens: int = 0, spent_usd: float = 0.0) -> None:
        self.spent_tokens = spent_tokens
        self.spent_usd = spent_usd
        super().__init__(message)
