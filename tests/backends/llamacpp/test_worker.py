"""The llama.cpp thread's idle work: a step at a time, only while no job waits, from ``IDLE_AFTER_S`` after the
last job; a job never waits for more than the step in progress."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Generator, Iterator

import pytest

from minions.backends.llamacpp import worker


@pytest.fixture
def soon(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """Idle work from 0.2 s after the last job, and only this test's: idle work that earlier tests' backends left
    queued (this machine's cost table, which waits while the machine is busy, as under the suite, where no table
    was measured yet) is set aside meanwhile, then queued again."""
    left: list[Iterator[float | None]] = worker.submit(lambda: worker._idle[:]).result(timeout=10)
    worker.submit(worker._idle.clear).result(timeout=10)
    monkeypatch.setattr(worker, "IDLE_AFTER_S", 0.2)
    yield 0.2
    monkeypatch.setattr(worker, "IDLE_AFTER_S", math.inf)
    worker.submit(lambda: worker._idle.extend(left)).result(timeout=10)


def steps(
    log: list[tuple[str, float]], n: int, done: threading.Event, pause: float | None = None
) -> Generator[float | None, None, None]:
    """``n`` idle steps, each logged with its time, each asking for ``pause`` before the next."""

    def work() -> Generator[float | None, None, None]:
        for i in range(n):
            log.append((f"step {i}", time.monotonic()))
            yield pause
        done.set()

    return work()


def test_idle_work_waits_for_the_jobs_and_for_idle_time(soon: float) -> None:
    log: list[tuple[str, float]] = []
    finished, release = threading.Event(), threading.Event()
    busy = worker.submit(lambda: release.wait(10))  # the thread is busy with a job
    worker.when_idle(steps(log, 3, finished))
    job = worker.submit(lambda: log.append(("job", time.monotonic())))
    release.set()
    busy.result(timeout=10)
    job.result(timeout=10)
    assert finished.wait(10)
    assert [name for name, _ in log] == ["job", "step 0", "step 1", "step 2"]  # the waiting job went first
    assert log[1][1] - log[0][1] >= soon  # idle work starts IDLE_AFTER_S after the last job


def test_a_job_runs_between_two_steps_and_a_pause_is_kept(soon: float) -> None:
    log: list[tuple[str, float]] = []
    finished = threading.Event()
    worker.when_idle(steps(log, 2, finished, pause=0.5))
    deadline = time.monotonic() + 10
    while not log and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    worker.submit(lambda: log.append(("job", time.monotonic()))).result(timeout=10)
    assert time.monotonic() - started < 0.4  # the pause holds back idle work, not jobs
    assert finished.wait(10)
    assert [name for name, _ in log] == ["step 0", "job", "step 1"]
    assert log[2][1] - log[0][1] >= 0.5


def test_failing_idle_work_is_dropped_with_a_warning(soon: float, caplog: pytest.LogCaptureFixture) -> None:
    def failing() -> Generator[float | None, None, None]:
        yield None
        raise RuntimeError("no context")

    log: list[tuple[str, float]] = []
    finished = threading.Event()
    with caplog.at_level(logging.WARNING, logger=worker.__name__):
        worker.when_idle(failing())
        worker.when_idle(steps(log, 1, finished))  # later work still runs
        assert finished.wait(10)
    assert "no context" in caplog.text
    assert worker.submit(lambda: 42).result(timeout=10) == 42  # the thread lives on
