"""``minions bench fleet`` against two OpenAI-compatible servers on 127.0.0.1: the production job prompts, one
line per timed run, and a summary with the throughput ratio and the load it ran under."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minions.cli import main
from minions.errors import ConfigError
from minions.protocols.fleet_bench import FleetBenchConfig, fleet_bench
from tests.backends.test_fleet import EchoServer
from tests.loopback import serving

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "northwind-annual-report-2025.md"


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
