"""``minions bench speculative`` on a tiny random-weight hybrid model: the pairs run in alternating order, the
line carries what a reader needs to trust the ratio (plain against plain too), and a loaded machine made on
purpose goes away after."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from minions.backends.llamacpp.speculative import bench
from minions.backends.llamacpp.speculative.bench import SpecBenchConfig, speculative_bench

pytestmark = pytest.mark.slow


def test_the_bench_runs_pairs_under_a_background_load_and_stops_it(
    tiny_models: dict[str, Path], benchmark_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdf = benchmark_data / "financebench" / "pdfs" / "3M_2018_10K.pdf"
    if not pdf.is_file():
        pytest.skip(f"no FinanceBench filing at {pdf}")
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
