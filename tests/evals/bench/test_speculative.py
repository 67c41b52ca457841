"""``minions bench speculative``: the runs of a pair take the cores in turns; on a tiny
random-weight hybrid model the line carries what a reader needs to trust the ratio (plain against plain too),
and a loaded machine made on purpose goes away after."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Generator
from itertools import groupby, pairwise
from pathlib import Path
from typing import Any

import pytest

from minions.backends.speculation import NullSpeculator
from minions.errors import DocumentNotFoundError
from minions.evals.bench import speculative as bench
from minions.evals.bench.speculative import SpecBenchConfig, speculative_bench
from minions.evals.financebench import find_filing


class StepsEngine:
    """Stands in for an ``Engine``: ``steps`` steps of ``step_s`` seconds, each logged as (name, start, end)."""

    def __init__(self, name: str, steps: int, log: list[tuple[str, float, float]], *, step_s: float = 0.004,
                 fail_at: int | None = None) -> None:  # fmt: skip
        self.name, self.n, self.log, self.step_s, self.fail_at = name, steps, log, step_s, fail_at
        self.closed_early = False
        self.speculator = NullSpeculator()

    def clear_cache(self) -> None:
        pass

    def steps(self, jobs: Any, **_: Any) -> Generator[None, None, list[Any]]:
        try:
            for k in range(self.n):
                yield
                if k == self.fail_at:
                    raise RuntimeError(f"{self.name} failed")
                start = time.perf_counter()
                time.sleep(self.step_s)
                self.log.append((self.name, start, time.perf_counter()))
        except GeneratorExit:
            self.closed_early = True
            raise
        return [self.name]


def test_the_runs_of_a_pair_take_turns_in_the_order_given() -> None:
    log: list[tuple[str, float, float]] = []
    engines: dict[str, Any] = {"plain": StepsEngine("plain", 30, log), "spec": StepsEngine("spec", 12, log),
                               "again": StepsEngine("again", 30, log)}  # fmt: skip

    done = bench._pair(engines, [], 8, 0.02)

    assert done == {"plain": ["plain"], "spec": ["spec"], "again": ["again"]}
    assert len(log) == 72
    turns = [log[0][0]] + [b[0] for a, b in pairwise(log) if b[0] != a[0]]
    assert len(turns) >= 6 and turns[:3] == ["plain", "spec", "again"]
    lengths = [sum(1 for _ in group) for _, group in groupby(name for name, _, _ in log)]
    assert max(lengths) <= 12  # a turn of 20 ms is about 5 steps of 4 ms, not a whole run


def test_runs_one_after_another_without_turns() -> None:
    log: list[tuple[str, float, float]] = []
    engines: dict[str, Any] = {"spec": StepsEngine("spec", 5, log), "plain": StepsEngine("plain", 5, log)}

    bench._pair(engines, [], 8, 0.0)

    assert [name for name, _, _ in log] == ["spec"] * 5 + ["plain"] * 5


def test_a_run_that_fails_ends_the_others_and_raises() -> None:
    log: list[tuple[str, float, float]] = []
    plain, spec = StepsEngine("plain", 40, log), StepsEngine("spec", 40, log, fail_at=3)

    with pytest.raises(RuntimeError, match="spec failed"):
        bench._pair({"plain": plain, "spec": spec}, [], 8, 0.01)

    assert plain.closed_early  # its jobs were ended (Engine.steps frees what they hold), not left running


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is not running
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_busy_process_stops_when_the_bench_is_killed() -> None:
    code = "from minions.evals.bench.speculative import _spin; print(_spin().pid, flush=True)"
    out = subprocess.run([sys.executable, "-c", f"{code}; import os; os._exit(0)"], capture_output=True, text=True)
    pid = int(out.stdout)  # its parent ended without killing it
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid)


def _filing(benchmark_data: Path) -> Path:
    """The bench's default filing, or a skip where the benchmark data is not there."""
    try:
        return find_filing(SpecBenchConfig().document, benchmark_data / "financebench")
    except DocumentNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
def test_the_bench_runs_pairs_under_a_background_load_and_stops_it(
    tiny_models: dict[str, Path], benchmark_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdf = _filing(benchmark_data)
    spinners: list[subprocess.Popen[bytes]] = []
    spin = bench._spin

    def recorded() -> subprocess.Popen[bytes]:
        spinners.append(spin())
        return spinners[-1]

    monkeypatch.setattr(bench, "_spin", recorded)
    config = SpecBenchConfig(model=str(tiny_models["lfm2"]), chunks=1, chunk_tokens=200, jobs_per_chunk=2,
                             max_tokens=16, batches=(2,), settings=("extraction",), repeats=2, n_threads=1,
                             background_load=1, noise=True)  # fmt: skip
    (line,) = speculative_bench(pdf.parent.parent, config)

    assert line["background_load"] == 1 and len(spinners) == 1
    assert all(p.poll() is not None for p in spinners)  # the busy process is gone once the bench returns
    assert len(line["speedups"]) == 2 and line["speedup"] in line["speedups"]
    # a second plain run in each pair: the spread of the same work, to read the speedups against
    assert len(line["plain_vs_plain"]) == 2 and line["noise_median"] in line["plain_vs_plain"]
    assert line["jobs"] == 2 and line["identical_outputs"] + line["near_ties"] + line["mismatches"] == 2
    assert line["memory"] != "attention" and line["rollback_s"] > 0  # the hybrid's rollback cost is printed


@pytest.mark.slow
def test_a_fixed_depth_drafts_no_longer_and_is_never_gated(tiny_models: dict[str, Path], benchmark_data: Path) -> None:
    """``depth``: every step may draft that many tokens, and the speed gate makes none plain (adaptive, this run
    makes its steps plain)."""
    pdf = _filing(benchmark_data)
    config = SpecBenchConfig(model=str(tiny_models["lfm2"]), chunks=1, chunk_tokens=200, jobs_per_chunk=2,
                             max_tokens=24, batches=(2,), settings=("freeform",), repeats=1, n_threads=1,
                             depth=2)  # fmt: skip
    (line,) = speculative_bench(pdf.parent.parent, config)

    assert line["fixed_depth"] == 2
    assert line["depths"] and max(int(k) for k in line["depths"]) <= 2
    assert line["gate"]["gated_plain_steps"] == 0 and line["mismatches"] == 0
