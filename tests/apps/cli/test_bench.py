"""``minions bench``'s options, derived from each benchmark's config: the defaults are the config's, a given option
reaches its field, and the help says the config's defaults."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

import pytest

from minions.apps.cli.bench import add_config_options, config_from
from minions.apps.cli.main import build_parser
from minions.evals.bench.cache import CacheBenchConfig
from minions.evals.bench.embed import EmbedBenchConfig
from minions.evals.bench.engine import BenchConfig
from minions.evals.bench.evidence import EvidenceBenchConfig
from minions.evals.bench.fleet import FleetBenchConfig
from minions.evals.bench.library_scale import LibraryScaleConfig
from minions.evals.bench.options import OPTION, option
from minions.evals.bench.speculative import SpecBenchConfig
from minions.evals.bench.tree import TreeBenchConfig

FLEET = "openai-compatible/m@http://127.0.0.1:9/v1,http://127.0.0.1:10/v1"
BENCHES = [
    ("engine", BenchConfig, []),
    ("speculative", SpecBenchConfig, []),
    ("tree", TreeBenchConfig, []),
    ("evidence", EvidenceBenchConfig, []),
    ("embed", EmbedBenchConfig, []),
    ("fleet", FleetBenchConfig, ["--local", FLEET]),
    ("cache", CacheBenchConfig, ["--document", "report.pdf"]),
    ("library-scale", LibraryScaleConfig, []),
]


@pytest.mark.parametrize(("name", "config", "required"), BENCHES, ids=[b[0] for b in BENCHES])
def test_options_not_given_leave_the_configs_defaults(name, config, required) -> None:
    args = build_parser().parse_args(["bench", name, *required])
    given = dict(zip(required[::2], required[1::2], strict=True))
    expected = config(**{k.lstrip("-"): v for k, v in given.items()})
    assert config_from(config, args) == expected
    assert any(OPTION in f.metadata for f in fields(config))


@dataclass(frozen=True)
class Toy:
    count: int = option(3, "how many")
    ratio: float | None = option(None, "a ratio", shown="none")
    mode: Literal["a", "b"] = option("a", "which mode, {count} times")
    sizes: tuple[int, ...] = option((1, 8), "sizes")
    names: tuple[str, ...] = option((), "a name", flag="--name", repeat=True)
    keep: bool = option(True, "drop it", flag="--no-keep")
    loud: bool = option(False, "say more")
    hidden: int = 7


def _toy(argv: list[str]) -> Toy:
    import argparse

    parser = argparse.ArgumentParser()
    add_config_options(parser, Toy)
    return config_from(Toy, parser.parse_args(argv))


def test_each_kind_of_field_is_read_from_its_option() -> None:
    assert _toy([]) == Toy()
    toy = _toy(["--count", "5", "--ratio", "0.5", "--mode", "b", "--sizes", "2", "4", "--name", "x", "--name", "y",
                "--no-keep", "--loud"])  # fmt: skip
    assert toy == Toy(count=5, ratio=0.5, mode="b", sizes=(2, 4), names=("x", "y"), keep=False, loud=True)


@pytest.mark.parametrize("argv", [["--mode", "c"], ["--count", "many"], ["--hidden", "1"]])
def test_a_value_outside_the_fields_type_or_an_undeclared_field_is_refused(argv, capsys) -> None:
    with pytest.raises(SystemExit):
        _toy(argv)


def test_the_help_says_each_default_as_the_config_holds_it(capsys) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_config_options(parser, Toy)
    text = " ".join(parser.format_help().split())
    for said in ("how many (default 3)", "a ratio (default: none)", "which mode, 3 times (default a)",
                 "sizes (default 1 8)", "a name (repeatable)", "--no-keep drop it", "--loud say more"):  # fmt: skip
        assert said in text
    assert "--hidden" not in text


def test_the_scale_bench_reads_its_sizes_filler_folders_and_vectors_mode() -> None:
    args = build_parser().parse_args(["bench", "library-scale", "--scale", "1", "--scale", "2", "--filler", "/a",
                                      "--filler", "/b", "--vectors", "none", "--work", "/w"])  # fmt: skip
    config = config_from(LibraryScaleConfig, args)
    assert (config.scales, config.filler, config.vectors, config.work) == ((1, 2), ("/a", "/b"), "none", "/w")


def test_a_benchmarks_help_shows_its_configs_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "speculative", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    d = SpecBenchConfig()
    assert f"longest draft (default {d.k_max})" in text
    assert f"batch sizes (default {' '.join(map(str, d.batches))})" in text
