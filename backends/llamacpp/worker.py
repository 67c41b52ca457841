"""One long-lived thread for the process's llama.cpp work.

llama.cpp is built with OpenMP here, and each thread that starts a parallel region gets a team of its own. Once
two live threads of a process have decoded, both decode far slower: SmolLM2 at batch 1 decoded 103 tok/s on a
worker thread, then 48 on a second worker thread while the first was still alive, and 48 again back on the first
(``new`` threads that end after their run, one at a time, stayed at 88-97). The app (a thread per run, a reader
thread) and the OpenAI-compatible server (``asyncio.to_thread``'s pool) call the backend from many threads, so
``LlamaCppBackend`` runs every call that decodes on this one thread and waits for it; callbacks (``on_token``,
``on_result``) run there too, while the caller waits.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["submit"]

T = TypeVar("T")

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_start = threading.Lock()


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


def _forget() -> None:
    """In a forked child the thread is gone (only the forking thread is copied): start afresh."""
    global _jobs, _thread, _start
    _jobs, _thread, _start = queue.SimpleQueue(), None, threading.Lock()


os.register_at_fork(after_in_child=_forget)


def _serve() -> None:
    while True:
        _settle(*_jobs.get())


def _settle(fn: Callable[[], T], done: Future[T]) -> None:
    if not done.set_running_or_notify_cancel():
        return
    try:
        done.set_result(fn())
    except BaseException as exc:  # handed to the caller, which raises it
        done.set_exception(exc)
