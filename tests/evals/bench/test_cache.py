"""``minions bench cache`` on a small document (real model): the warm run restores the chunks the cold run saved,
computes fewer prompt tokens and replies the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from minions.errors import ConfigError
from minions.evals.bench.cache import CacheBenchConfig, cache_bench

TEXT = " ".join(
    [
        "Net sales in 2018 were $32.8 billion, up 3.5 percent from 2017.",
        "Capital expenditures were $1.6 billion in 2018.",
        "The company employed about 93,000 people at year end.",
        "Dividends paid to shareholders were $3.2 billion, or $5.44 per share.",
    ]
    * 4
)


def test_a_missing_document_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--document"):
        list(cache_bench(CacheBenchConfig(document=str(tmp_path / "none.pdf"))))


@pytest.mark.slow
def test_the_warm_run_restores_what_the_cold_run_saved(tmp_path: Path) -> None:
    doc = tmp_path / "report.txt"
    doc.write_text(TEXT)
    config = CacheBenchConfig(str(doc), questions=("What were capital expenditures in 2018?",), chunk_size=500,
                              max_seqs=2)  # fmt: skip
    cold, warm, summary = cache_bench(config, kv_dir=str(tmp_path / "kv"))
    assert cold["prefill_restored"] == 0 and warm["prefill_restored"] > 150  # two chunks of ~100 tokens
    assert warm["prefill_computed"] < cold["prefill_computed"]
    assert summary["identical_replies"] is True
    assert summary["saved_prefixes"] >= 2 and summary["disk_mb"] > 1 and summary["warm_over_cold_local"] is not None
