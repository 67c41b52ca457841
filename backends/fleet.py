"""One model on several OpenAI-compatible servers (vLLM, SGLang, llama.cpp's server): a fleet.

Spelled ``openai-compatible/<model>@<url>,<url>,...`` (see ``backends.registry``). A batch's jobs sit in one
queue; each server takes them ``per_server`` at a time (``MINIONS_SERVER_CONCURRENCY``; unset, as many as the
server's slots where it reports them, llama.cpp's server does, else ``DEFAULT_PER_SERVER``: servers that batch on
their own want several requests in flight, and more than they take would only wait in their queue), so a faster
server simply takes more of them. A job whose prompt marks a shared prefix (a document chunk before the question,
``ChatRequest.prefix``) has a home server, picked from that text: a server takes its own jobs first and others'
only when none of its own is queued, so the jobs over one chunk, in this batch and the next, meet the server that
keeps the chunk's state (a server's prompt cache is its own).

A server that fails (refuses connections, drops them, times out, answers with something that is not a
completion, or lacks the model) is out for the rest of the batch, and the jobs it held go back to the queue for
the others: a job is lost only when every server has failed, and then it comes back as an error result saying
so. A job that fails on its own merits (a prompt too long for the context, a reply that is not JSON) is not
retried elsewhere: it would fail there too. ``chat`` takes the servers in turn and falls over the same way.

        jobs ──► queue ──┬──► server 1 (per_server workers) ──► results[i]
                         │        └── fails: it leaves, its jobs go back ──┐
                         └──► server 2 (per_server workers) ◄──────────────┘
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from minions.cost import Price
from minions.errors import (
    BackendConnectionError,
    BackendError,
    BackendTimeoutError,
    ConfigError,
    MalformedResponseError,
    ModelNotFoundError,
)
from minions.events import CancelToken
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

from .address import on_this_device
from .base import BaseBackend, Capabilities, MessagesLike, OnResult, cancelled_result, error_result
from .openai import OpenAIBackend, Provider
from .settings import count_from_env

__all__ = ["DEFAULT_PER_SERVER", "PER_SERVER_ENV", "FleetBackend", "home_server", "server_concurrency"]

log = logging.getLogger(__name__)

PER_SERVER_ENV = "MINIONS_SERVER_CONCURRENCY"
DEFAULT_PER_SERVER = 4
"""Requests in flight per server when ``MINIONS_SERVER_CONCURRENCY`` is unset."""
SERVER_RETRIES = 1
"""Retries of a failed request on the same server before it counts as down (the other servers take over)."""

_SERVER_DOWN = (BackendConnectionError, BackendTimeoutError, MalformedResponseError, ModelNotFoundError)
"""Failures of the server, not of the job: the job goes to another server."""


def server_concurrency() -> int:
    """``MINIONS_SERVER_CONCURRENCY``, else ``DEFAULT_PER_SERVER``."""
    return count_from_env(PER_SERVER_ENV, DEFAULT_PER_SERVER, "requests")


class FleetBackend(BaseBackend):
    """``model`` served by every one of ``base_urls``; jobs spread over them, a failed server's jobs retried."""

    def __init__(
        self,
        model: str,
        base_urls: Sequence[str],
        *,
        per_server: int | None = None,
        **server_options: Any,
    ) -> None:
        if not base_urls:
            raise ConfigError("A fleet needs at least one base URL: openai-compatible/<model>@<url>,<url>.")
        self.model = model
        self.name = f"openai-compatible/{model}"
        self.base_urls = tuple(base_urls)
        self.address = ",".join(self.base_urls)
        options = {"max_retries": SERVER_RETRIES, "backoff_s": 0.2, **server_options}
        provider = Provider("openai-compatible", None, key_env=None)
        self.servers = [OpenAIBackend(model, provider=provider, base_url=url, **options) for url in self.base_urls]
        given = per_server is not None or bool(os.environ.get(PER_SERVER_ENV, "").strip())
        self.per_server: int | None = (
            (per_server if per_server is not None else server_concurrency()) if given else None
        )
        """Requests in flight per server, where given (or ``MINIONS_SERVER_CONCURRENCY``); None: each server's
        own slots where it reports them, else ``DEFAULT_PER_SERVER`` (``in_flight``)."""
        self._local = on_this_device(self.address)
        self._capabilities: Capabilities | None = None
        self._turn = itertools.count()

    @property
    def capabilities(self) -> Capabilities:
        """What every server does: a job may go to any of them. Reading it the first time asks each server whether
        it reports log-probabilities (``OpenAIBackend.capabilities``); ``batching``: the batch's jobs run on all the
        servers at once (on one server, where it runs several together)."""
        if self._capabilities is None:
            with ThreadPoolExecutor(len(self.servers)) as pool:  # each server is asked at the same time
                self._capabilities = self._joined(list(pool.map(lambda server: server.capabilities, self.servers)))
        return self._capabilities

    @capabilities.setter
    def capabilities(self, declared: Capabilities) -> None:
        self._capabilities = declared

    def _joined(self, every: Sequence[Capabilities]) -> Capabilities:
        """What the fleet does, given what each of its servers does."""
        return Capabilities(
            json_schema=all(c.json_schema for c in every),
            logprobs=all(c.logprobs for c in every),
            batching=len(self.servers) > 1 or all(c.batching for c in every),
            streaming=True,
            local=self._local,
            context_window=min(c.context_window for c in every),
        )

    @property
    def declared(self) -> Capabilities:
        """What every server does as far as is known without asking them (``backends.base.Asks``)."""
        if self._capabilities is not None:
            return self._capabilities
        return self._joined([server.declared for server in self.servers])

    def questions(self) -> list[ChatRequest]:
        """What reading ``capabilities`` the first time sends: each server's question."""
        return [] if self._capabilities is not None else [q for server in self.servers for q in server.questions()]

    @property
    def price(self) -> Price | None:
        """What its calls cost per million tokens: its servers' price (they price each reply)."""
        return self.servers[0].price

    def in_flight(self, server: OpenAIBackend) -> int:
        """Requests in flight on ``server``: ``per_server``, else the slots it reports, else ``DEFAULT_PER_SERVER``."""
        return self.per_server or server.slots or DEFAULT_PER_SERVER

    @property
    def max_concurrency(self) -> int:
        return sum(self.in_flight(server) for server in self.servers)

    @max_concurrency.setter
    def max_concurrency(self, requests: int) -> None:
        self.per_server = max(1, requests // len(self.servers))

    # -- one call: the servers in turn ------------------------------------------------------------------

    def _in_turn(self) -> list[OpenAIBackend]:
        start = next(self._turn) % len(self.servers)
        return self.servers[start:] + self.servers[:start]

    def _chat(self, messages: list[Message], params: SamplingParams) -> ChatResult:
        failures: list[str] = []
        for server in self._in_turn():
            try:
                return self._tagged(server._chat(messages, params), server)
            except _SERVER_DOWN as exc:
                log.warning("%s failed (%s); trying the next server", server.address, exc)
                failures.append(f"{server.address}: {exc}")
        raise BackendConnectionError(self._all_failed(failures), backend=self.name)

    def stream(self, messages: MessagesLike, params: SamplingParams | None = None) -> Iterator[str]:
        """The reply's text as it arrives, from the next server in turn (no fall-over once it has begun)."""
        return self._in_turn()[0].stream(messages, params)

    def count_tokens(self, text: str) -> int:
        return self.servers[0].count_tokens(text)

    def prompt_tokens(self, requests: Sequence[ChatRequest]) -> list[int]:
        """What each of ``requests`` costs the server it goes to: its whole prompt (``OpenAIBackend``)."""
        return self.servers[0].prompt_tokens(requests)

    def _tagged(self, result: ChatResult, server: OpenAIBackend) -> ChatResult:
        """``result`` with the server that answered in its stats."""
        return replace(result, stats={**result.stats, "server": server.address})

    def _all_failed(self, failures: Sequence[str]) -> str:
        return (
            f"Every server of {self.name} failed ({'; '.join(failures)}): start them, or check the URLs "
            f"({self.address})."
        )

    # -- a batch: one queue, per_server workers per server ------------------------------------------------

    def batch(
        self, requests: Sequence[ChatRequest], *, on_result: OnResult | None = None, cancel: CancelToken | None = None
    ) -> list[ChatResult]:
        return _FleetRun(self, requests, on_result, cancel).run()


def home_server(request: ChatRequest, servers: int) -> int | None:
    """The server (an index) that a request with a marked prefix goes to first: the same for the same prefix text,
    in every batch; None for a request without one."""
    text = request.shared_text()
    if text is None:
        return None
    digest = hashlib.blake2b("\0".join(text).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % servers


class _FleetRun:
    """One batch over the fleet. Every job ends with a result: answered, failed on its own, cancelled, or failed
    because every server did."""

    def __init__(
        self,
        fleet: FleetBackend,
        requests: Sequence[ChatRequest],
        on_result: OnResult | None,
        cancel: CancelToken | None,
    ) -> None:
        self.fleet = fleet
        self.requests = requests
        self.on_result = on_result
        self.cancel = cancel
        self.results: list[ChatResult | None] = [None] * len(requests)
        self.queue: deque[int] = deque(range(len(requests)))
        self.home = [home_server(r, len(fleet.servers)) for r in requests]
        self.left = len(requests)  # jobs without a result yet
        self.up = set(range(len(fleet.servers)))
        self.failures: list[str] = []
        self.cond = threading.Condition()

    def run(self) -> list[ChatResult]:
        workers = [
            threading.Thread(target=self._work, args=(s,), name=f"minions-fleet-{s}-{k}", daemon=True)
            for s, server in enumerate(self.fleet.servers)
            for k in range(min(self.fleet.in_flight(server), len(self.requests)))
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        done = [r for r in self.results if r is not None]
        assert len(done) == len(self.results), "every job ends with a result"
        return done

    def _next(self, server: int) -> int | None:
        """The next job for ``server``, waiting while others may still hand jobs back; None when it is done."""
        with self.cond:
            while True:
                if server not in self.up or self.left == 0:
                    return None
                if self.queue:
                    return self._take(server)
                self.cond.wait()

    def _take(self, server: int) -> int:
        """The first queued job whose home is ``server``, else the first queued job (held by the caller's lock)."""
        for k, i in enumerate(self.queue):
            if self.home[i] == server:
                del self.queue[k]
                return i
        return self.queue.popleft()

    def _work(self, s: int) -> None:
        server = self.fleet.servers[s]
        while (i := self._next(s)) is not None:
            if self.cancel is not None and self.cancel.cancelled:
                self._finish(i, cancelled_result(self.fleet.name))
                continue
            req = self.requests[i]
            try:
                result = self.fleet._tagged(server._chat(list(req.messages), req.params), server)
            except _SERVER_DOWN as exc:
                self._server_failed(s, i, exc)
                continue
            except BackendError as exc:
                log.warning("job %d failed on %s: %s", i, server.address, exc)
                result = error_result(self.fleet.name, exc)
            self._finish(i, result)

    def _finish(self, i: int, result: ChatResult) -> None:
        with self.cond:
            self.results[i] = result
            self.left -= 1
            self.cond.notify_all()
        if self.on_result is not None:
            self.on_result(i, result)

    def _server_failed(self, s: int, i: int, exc: Exception) -> None:
        """Server ``s`` is out; job ``i`` goes back to the queue, or fails when no server is left."""
        address = self.fleet.servers[s].address
        with self.cond:
            if s in self.up:
                log.warning("%s failed (%s); its jobs go to the other servers", address, exc)
                self.up.discard(s)
                self.failures.append(f"{address}: {exc}")
            if self.up:
                self.queue.appendleft(i)
                self.cond.notify_all()
                return
            stranded = [i, *self.queue]
            self.queue.clear()
        error = BackendConnectionError(self.fleet._all_failed(self.failures), backend=self.fleet.name)
        for j in stranded:
            self._finish(j, error_result(self.fleet.name, error))
