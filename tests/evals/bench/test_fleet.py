"""``minions bench fleet`` against two OpenAI-compatible servers on 127.0.0.1: the production job prompts, one
line per timed run, and a summary with the throughput ratio and the load it ran under."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from minions.apps.cli.main import main
from minions.errors import ConfigError
from minions.evals.bench.fleet import FleetBenchConfig, fleet_bench
from tests.backends.test_fleet import EchoServer
from tests.conftest import BENCHMARK_DATA, ServerStarter
from tests.loopback import serving

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "northwind-annual-report-2025.md"


def test_bench_prints_runs_and_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    with serving(EchoServer(delay_s=0.01)) as a, serving(EchoServer(delay_s=0.01)) as b:
        spec = f"openai-compatible/m@{a.base_url},{b.base_url}"
        main(["bench", "fleet", "--local", spec, "--document", str(EXAMPLE), "--jobs", "6", "--pairs", "2"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    runs, summary = lines[:-1], lines[-1]
    assert [(r["pair"], r["setting"]) for r in runs] == [
        (0, "one server"), (0, "fleet"), (1, "fleet"), (1, "one server")
    ]  # fmt: skip
    assert all(r["failed"] == 0 and r["jobs_per_s"] > 0 for r in runs)
    assert summary["summary"] and summary["servers"] == 2 and len(summary["ratios"]) == 2
    assert summary["throughput_ratio_median"] > 0 and len(summary["loadavg_before"]) == 3
    # warm-up: 2 jobs per server; then 6 jobs x 2 pairs on one server and spread over both
    assert a.served + b.served == 2 * 2 + 6 * 2 * 2 and b.served >= 2


def test_bench_needs_two_servers() -> None:
    with pytest.raises(ConfigError, match="two servers or more"):
        list(fleet_bench(FleetBenchConfig(local="openai-compatible/m@http://127.0.0.1:9/v1", document=str(EXAMPLE))))


FILING = BENCHMARK_DATA / "financebench" / "pdfs" / "3M_2018_10K.pdf"


@pytest.mark.slow
@pytest.mark.skipif(not FILING.is_file(), reason=f"shared benchmark data absent: {FILING}")
def test_cold_then_warm_on_the_embedded_engine_one_server_and_a_fleet(start_openai_server: ServerStarter) -> None:
    """The scored jobs of two questions over the same chunks, on llama-cpp-python servers that keep prompt states
    (``--cache True``): every job scored everywhere, and the embedded engine restored the chunks for the second."""
    with start_openai_server("--cache", "True") as (a, _), start_openai_server("--cache", "True") as (b, _):
        config = FleetBenchConfig(local=f"openai-compatible/smollm2@{a},{b}", document=str(FILING), jobs=2)
        lines = list(fleet_bench(replace(config, cold_warm=True, rounds=2)))
    runs, summary = lines[:-1], lines[-1]
    settings = ("embedded", "one server", "fleet")
    assert [(r["round"], r["setting"], r["slice"]) for r in runs] == [
        (round_, name, (s + round_) % 3) for round_ in range(2) for s, name in enumerate(settings)
    ]  # each setting on another slice each round
    assert all(r["failed"] == 0 for r in runs)  # every job answered with log-probabilities
    embedded = summary["embedded"]
    assert embedded["warm_reused_tokens"] > embedded["cold_reused_tokens"]  # the chunks' states, kept
    print("\n" + "\n".join(f"{name}: {summary[name]}" for name in settings), f"\nload {summary['loadavg_after']}")
