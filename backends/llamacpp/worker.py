"""One long-lived thread for the process's llama.cpp work.

llama.cpp is built with OpenMP here, and each thread that starts a parallel region gets a team of its own. Once
two live threads of a process have decoded, both decode far slower: SmolLM2 at batch 1 decoded 103 tok/s on a
worker thread, then 48 on a second worker thread while the first was still alive, and 48 again back on the first
(``new`` threads that end after their run, one at a time, stayed at 88-97). The app (a thread per run, a reader
thread) and the OpenAI-compatible server (``asyncio.to_thread``'s pool) call the backend from many threads, so
``LlamaCppBackend`` runs every call that decodes on this one thread and waits for it; callbacks (``on_token``,
``on_result``) run there too, while the caller waits.

Work that no answer waits for (this machine's cost table, which only speculation needs) runs on this thread too,
in its idle time (``when_idle``): a step at a time (one decode call), from ``IDLE_AFTER_S`` after the last job,
and a job that comes meanwhile runs before the next step.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["IDLE_AFTER_S", "stop_idle_work", "submit", "when_idle"]

log = logging.getLogger(__name__)

T = TypeVar("T")

IDLE_AFTER_S = 5.0
"""Idle work starts this long after the last job (``math.inf``: never): a command that answers and exits never
starts it, and a run's local jobs that come seconds apart do not share the cores with it; a remote model's reply
is waited for longer."""

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_start = threading.Lock()
_idle: list[Iterator[float | None]] = []
"""Idle work, oldest first; only the llama.cpp thread touches it."""
_stepping = threading.Lock()
"""Held while a step of idle work runs: ``stop_idle_work`` waits for it."""
_stopped = False
_resume_at = 0.0
"""No idle step before this ``time.monotonic()``: the last step asked for a pause."""


def submit(fn: Callable[[], T]) -> Future[T]:
    """``fn()`` on the llama.cpp thread (started on first use); its result or exception in the future returned.
    Submitted on that thread itself (a callback that calls the backend again), it runs at once."""
    global _thread
    done: Future[T] = Future()
    if threading.current_thread() is _thread:
        _settle(fn, done)
        return done
    _jobs.put((fn, done))
    with _start:
        if _thread is None:
            # a daemon: a run left behind by an interrupted caller must not hold up the interpreter's exit
            _thread = threading.Thread(target=_serve, name="minions-llama", daemon=True)
            _thread.start()
    return done


def when_idle(work: Iterator[float | None]) -> None:
    """Take ``work`` a step (``next``) at a time on the llama.cpp thread while no job waits, from ``IDLE_AFTER_S``
    after the last job, until it is exhausted; a step that yields a number of seconds pauses it that long. A job
    submitted meanwhile runs before the next step. To drop the work, close it on this thread (a backend's
    ``close`` does, before it frees what the work uses). A step that raises drops it, with a warning. The
    interpreter's exit waits for the step in progress and starts no other."""
    submit(lambda: _idle.append(work))


def _forget() -> None:
    """In a forked child the thread is gone (only the forking thread is copied): start afresh."""
    global _jobs, _thread, _start, _idle, _stepping
    _jobs, _thread, _start, _idle, _stepping = queue.SimpleQueue(), None, threading.Lock(), [], threading.Lock()


os.register_at_fork(after_in_child=_forget)


def _serve() -> None:
    last = time.monotonic()
    while True:
        wait = None
        if _idle and not _stopped and not math.isinf(IDLE_AFTER_S):
            now = time.monotonic()
            wait = max(0.0, last + IDLE_AFTER_S - now, _resume_at - now)
        try:
            job = _jobs.get(timeout=wait)
        except queue.Empty:
            _step_idle()
            continue
        _settle(*job)
        last = time.monotonic()


def _step_idle() -> None:
    """One step of the oldest idle work (dropped when it ends, is closed, or fails)."""
    global _resume_at
    with _stepping:
        if _stopped:
            return
        work = _idle[0]
        try:
            pause = next(work)
            if isinstance(pause, (int, float)):
                _resume_at = time.monotonic() + pause
            return
        except StopIteration:
            pass
        except Exception as exc:  # idle work is never worth a dead llama.cpp thread: it is dropped, and said so
            log.warning("dropped idle work %r: %s", work, exc)
        _idle.remove(work)


def stop_idle_work() -> None:
    """No more idle steps in this process (a benchmark times what it runs, and nothing else shares the cores), once
    the one in progress (one decode call) ends; also at the interpreter's exit."""
    global _stopped
    _stopped = True
    if _stepping.acquire(timeout=60.0):
        _stepping.release()


atexit.register(stop_idle_work)


def _settle(fn: Callable[[], T], done: Future[T]) -> None:
    if not done.set_running_or_notify_cancel():
        return
    try:
        done.set_result(fn())
    except BaseException as exc:  # handed to the caller, which raises it
        done.set_exception(exc)
