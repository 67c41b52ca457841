"""``minions bench speculative``: plain vs speculative decoding of the same jobs on the same model, same process.

Settings: ``extraction`` (Minions-style JSON jobs over FinanceBench excerpts, greedy, the engine benchmark's
job set) and ``freeform`` (prose answers about the same excerpts, greedy), each at batch 1 and batch 8; and
settings whose prompts the caller writes (``prompts``: the CLI's ``written``, a local model's written answer from
quotes of each excerpt, which copies figures and names from its prompt). A
pair's runs are the same jobs through two engines over the same model, one decoding plainly
(``run(speculate=False)``, the baseline) and one speculating, and they run at the same time, taking the cores
in turns of a quarter of a second (``turn``): whatever else the machine does falls on both alike. Every
speculative run starts with fresh drafters and a fresh speed gate (it learns only from the jobs of its own
run), so no run gains from having seen another run's replies, and every run starts with no cached prompts. One
JSON line per setting:

- ``plain_tok_s`` / ``spec_tok_s``: generated tokens per second of decode steps (drafting, the verify call and
  sampling included; prefill excluded), and ``speedup``: the median of ``repeats`` pairs run in turn (all of
  them in ``speedups``);
- ``wall_speedup``: the median over the pairs of the plain run's prompts and decoding over the speculative
  run's, and ``prefill_s`` of the median pair: a draft model computes every prompt too (``prefill``), which
  decode speed leaves out and the wall time counts;
- ``acceptance`` (accepted / drafted), ``tokens_per_step`` (tokens per decode step of the speculative run),
  ``depths`` (how often each draft length was chosen) and ``cost_ratios`` (the measured ``T(n)/T(batch)`` it chose
  them with);
- ``gate``: the speed gate at the end of the speculative run (``speculation.speculator.SpeedGate``): the measured
  gain of its speculative steps over its plain ones, the steps it made plain, and how often speculation lost;
- ``plain_vs_plain`` (with ``noise``): a third run in every pair, plain again, against the first: the ratios
  that the same work gives, so speedups within their spread are not told apart from 1.0; the speedup is then
  over the geometric mean of the two plain runs;
- ``identical_outputs``: jobs whose token ids equal plain decoding's; the others are ``near_ties`` when the two
  tokens at the first difference are within ``tie_eps`` in logits recomputed alone, else ``mismatches``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from subprocess import DEVNULL
from typing import TYPE_CHECKING, Any

from minions.backends.speculation.speculator import K_MAX
from minions.types import ChatRequest, ChatResult, Message, SamplingParams

from .options import option

if TYPE_CHECKING:
    from minions.backends.llamacpp.engine import Engine

__all__ = ["SpecBenchConfig", "speculative_bench"]

FREEFORM = (
    "In two or three sentences, what does the excerpt say about the company's sales or revenue? Quote it.",
    "In two or three sentences, which risks does the excerpt describe? Quote it.",
)

WRITTEN = (
    "What were the company's sales or revenue, and how did they change?",
    "What does the excerpt say about the company's costs, income or cash?",
)


@dataclass(frozen=True, slots=True)
class SpecBenchConfig:
    model: str | None = option(None, "GGUF file to measure, a hybrid one too", shown="the shipped SmolLM2")
    """The GGUF to measure; None: the shipped SmolLM2. A hybrid model (LFM2, Granite 4.0-H, ...) adds its rollback
    cost to the line (``rollback_s``, ``rollbacks``, ``redo_tokens``)."""
    draft: str | None = option(None, "a draft model (same vocabulary; with --target: SmolLM2)", metavar="PATH")
    """A draft model (a GGUF with the model's vocabulary): one more drafter of the speculative runs."""
    document: str = option("3M_2018_10K.pdf", "PDF in the data folder")
    chunks: int = option(4, "excerpts")
    chunk_tokens: int = 500
    jobs_per_chunk: int = 2
    max_tokens: int = option(128, "reply token limit per job")
    batches: tuple[int, ...] = option((1, 8), "batch sizes")
    settings: tuple[str, ...] = option(
        ("extraction", "freeform"),
        "jobs to decode: JSON extraction, free-form prose, or the written answer from quotes (where prompt lookup "
        "and a draft model pay)",
        choices=("extraction", "freeform", "written"),
    )
    prompts: tuple[tuple[str, Callable[[str, str], Sequence[Message]]], ...] = ()
    """Settings whose prompts a caller writes: a name and the messages of a job from an excerpt and one of
    ``FREEFORM``'s questions (the CLI's ``written``: the local model's written answer from quotes of the
    excerpt, ``protocols.evidence.written``'s prompt, decoded greedily up to ``max_tokens``)."""
    n_threads: int | None = option(None, "CPU threads", shown="all cores")
    """None: all cores. On a machine shared with other work, 1 avoids llama.cpp's threads waiting on each other."""
    k_max: int = option(K_MAX, "longest draft")
    depth: int | None = option(
        None, "draft this many tokens at every speculative step, speed gate off", shown="adaptive"
    )
    """A fixed draft length for every speculative step (``EngineConfig.draft_depth``), the speed gate off: what
    drafts of that length gain where the adaptive choice would pick others; None: adaptive."""
    repeats: int = option(3, "plain/speculative pairs per setting")
    """Pairs of plain and speculative runs per setting (plain first, then speculative first, and so on); the
    line reports the median pair (by speedup)."""
    background_load: int = option(0, "busy processes, one core each, kept running while it measures")
    """Busy processes (each spinning one core) kept running through the measurement: a loaded machine made on
    purpose, so that "on a loaded machine" is something to measure again, not a load that happened to be there."""
    noise: bool = option(
        False, "a second plain run in every pair: plain against plain (the noise), speedups over both plain runs"
    )
    """Also run a second plain run in every pair (``plain_vs_plain``: its ratio to the first, in alternating
    order): the spread two runs of the same work show on this machine, beside the speedups."""
    turn: float = option(
        0.25, "seconds each run of a pair holds the cores before the other's turn; 0: one after another"
    )
    """Seconds each run of a pair holds the cores before the next one's turn: the runs alternate, each in its own
    engine, driven step by step (``Engine.steps``) from one thread until all are done; 0 runs them one after
    another. Load on this machine comes and goes over seconds: two plain runs of the same work one after another
    differ by up to 25% here (50% under load)."""
    tie_eps: float = 1.0
    """A verify call's logits differ from a one-token call's by up to ~1.0 at a quarter of steps (llama.cpp's CPU
    kernels round a call over several tokens differently): plain top-2 gaps under this may flip."""


def _jobs(setting: str, chunks: Sequence[str], c: SpecBenchConfig) -> list[ChatRequest]:
    from .engine import INSTRUCTIONS, BenchConfig, bench_jobs

    if setting == "extraction":
        cfg = BenchConfig(instructions=INSTRUCTIONS[: c.jobs_per_chunk], max_tokens=c.max_tokens)
        return bench_jobs(chunks, cfg)
    params = SamplingParams(max_tokens=c.max_tokens)
    written = dict(c.prompts)
    if setting in written:
        return [ChatRequest(list(written[setting](chunk, q)), params)
                for chunk in chunks for q in WRITTEN[: c.jobs_per_chunk]]  # fmt: skip
    return [ChatRequest([Message("user", f"Excerpt:\n{chunk}\n\n{q}")], params)
            for chunk in chunks for q in FREEFORM[: c.jobs_per_chunk]]  # fmt: skip


def _compare(engine: Engine, plain: Sequence[ChatResult], spec: Sequence[ChatResult], eps: float) -> dict[str, int]:
    from .engine import divergence_report

    pairs = [(list(r.stats["token_ids"]), list(g.stats["token_ids"])) for r, g in zip(plain, spec, strict=True)]
    report = divergence_report(
        pairs, lambda i, k: engine.logits_after([*plain[i].stats["prompt_ids"], *pairs[i][0][:k]]), eps
    )
    return {key: report[key] for key in ("identical_outputs", "near_ties", "mismatches")}


def _tok_s(results: Sequence[ChatResult]) -> float:
    b = results[0].stats["batch"]
    return float(b["decode_tokens"] / max(1e-9, b["decode_s"]))


def _seconds(results: Sequence[ChatResult]) -> float:
    """The run's prompts and decoding (a draft model's prompts count with the prompts)."""
    b = results[0].stats["batch"]
    return float(b["prefill_s"] + b["decode_s"])


def _emitted(results: Sequence[ChatResult]) -> int:
    """Tokens emitted by verify steps: all sampled tokens but the first, which the prompt's last chunk gives."""
    return sum(max(0, len(r.stats["token_ids"]) - 1) for r in results)


def _steps(results: Sequence[ChatResult]) -> int:
    return sum(r.stats["verify_steps"] for r in results)


def _mean(depths: dict[int, int]) -> float:
    steps = sum(depths.values())
    return round(sum(k * n for k, n in depths.items()) / steps, 3) if steps else 0.0


def _by_drafter(results: Sequence[ChatResult]) -> dict[str, float]:
    drafted: dict[str, int] = {}
    accepted: dict[str, float] = {}
    for r in results:
        for name, n in r.stats["drafted_by_drafter"].items():
            drafted[name] = drafted.get(name, 0) + n
            accepted[name] = accepted.get(name, 0.0) + n * r.stats["acceptance_by_drafter"].get(name, 0.0)
    return {name: round(accepted[name] / n, 3) for name, n in drafted.items() if n}


def speculative_bench(
    data: str | os.PathLike[str] | None, config: SpecBenchConfig | None = None
) -> list[dict[str, Any]]:
    """Run every setting at every batch size; one flat dict each (the CLI prints them as JSON lines)."""
    from minions.backends.llamacpp.cost_table import load_or_measure_cost_table
    from minions.backends.llamacpp.engine import Engine, EngineConfig
    from minions.backends.llamacpp.quantize import default_local_model

    from ..financebench import find_filing
    from .engine import BenchConfig, load_chunks

    c = config or SpecBenchConfig()
    pdf = find_filing(c.document, data)  # before minutes of measuring: missing data fails at once
    model = c.model or default_local_model()
    sides = ("plain", "spec", "again") if c.noise else ("plain", "spec")
    cfg = EngineConfig(max_seqs=max(c.batches), n_threads=c.n_threads, k_max=c.k_max, learn_drafts=False,
                       draft_model=c.draft, draft_depth=c.depth)  # fmt: skip
    engines: list[Engine] = []
    spinners: list[subprocess.Popen[bytes]] = []
    lines = []
    try:
        for _ in sides:  # an engine for each run of a pair, so that they can take turns
            engines.append(Engine(model, cfg))
        engine = engines[0]
        n_threads = engine.config.threads
        cost = load_or_measure_cost_table(engine.model, n_threads=n_threads, max_seqs=max(c.batches), refresh=True)
        for e in engines:
            e.speculator.cost = cost
        chunks = load_chunks(pdf, engine.model, BenchConfig(chunks=c.chunks, chunk_tokens=c.chunk_tokens))
        spinners = [_spin() for _ in range(c.background_load)]
        for setting in c.settings:
            jobs = _jobs(setting, chunks, c)
            for batch in c.batches:
                load = os.getloadavg()[0]
                start = time.perf_counter()
                runs, noise = [], []
                for r in range(max(1, c.repeats)):
                    # who goes first alternates (a load burst hits both), and the runs change engines (one may sit
                    # in memory that is a little faster)
                    roles = {side: engines[(k + r) % len(engines)] for k, side in enumerate(sides)}
                    order = sides if r % 2 == 0 else sides[::-1]
                    done = _pair({side: roles[side] for side in order}, jobs, batch, c.turn)
                    speculator = roles["spec"].speculator
                    gate = speculator.gate.to_dict() if speculator.gate is not None else {}
                    plain, spec = done["plain"], done["spec"]
                    baseline = _tok_s(plain)
                    if c.noise:  # the geometric mean of both plain runs: it cancels a drift through the pair
                        again = _tok_s(done["again"])
                        noise.append(round(again / baseline, 3))
                        baseline = math.sqrt(baseline * again)
                    runs.append((baseline, _tok_s(spec), plain, spec, gate, _seconds(plain) / _seconds(spec)))
                runs.sort(key=lambda r: r[1] / r[0])
                plain_tok_s, spec_tok_s, plain, spec, gate, _ = runs[len(runs) // 2]  # the median pair by speedup
                walls = sorted(r[5] for r in runs)
                b = spec[0].stats["batch"]
                curve = cost.at(batch)
                lines.append({
                    "setting": setting,
                    "batch": batch,
                    "plain_tok_s": round(plain_tok_s, 1),
                    "spec_tok_s": round(spec_tok_s, 1),
                    "speedup": round(spec_tok_s / plain_tok_s, 3),
                    "speedups": [round(r[1] / r[0], 3) for r in runs],
                    "wall_speedup": round(walls[len(walls) // 2], 3),
                    "prefill_s": {"plain": round(plain[0].stats["batch"]["prefill_s"], 2),
                                  "spec": round(spec[0].stats["batch"]["prefill_s"], 2)},
                    **({"plain_vs_plain": noise, "noise_median": sorted(noise)[len(noise) // 2]} if c.noise else {}),
                    "acceptance": round(b["accepted"] / b["drafted"], 3) if b["drafted"] else None,
                    "acceptance_by_drafter": _by_drafter(spec),
                    "tokens_per_step": round(_emitted(spec) / max(1, _steps(spec)), 3),
                    **_compare(engine, plain, spec, c.tie_eps),
                    "jobs": len(jobs),
                    "generated_tokens": b["decode_tokens"],
                    "fixed_depth": c.depth,
                    "mean_depth": _mean(b["depths"]),
                    "depths": b["depths"],
                    "cost_ratios": {n: round(curve(n) / curve(batch), 3) for n in (2 * batch, 4 * batch, 9 * batch)},
                    "gate": gate,
                    "memory": engine.model.memory,
                    "rollback_s": cost.rollback_s,
                    "rollbacks": b["rollbacks"],
                    "redo_tokens": b["redo_tokens"],
                    "n_threads": n_threads,
                    "background_load": c.background_load,
                    "load_before": round(load, 2),
                    "load_after": round(os.getloadavg()[0], 2),
                    "seconds": round(time.perf_counter() - start, 1),
                })  # fmt: skip
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        for e in engines:
            e.close()
    return lines


def _pair(engines: dict[str, Engine], jobs: list[ChatRequest], batch: int, turn: float) -> dict[str, list[ChatResult]]:
    """Run ``jobs`` through each engine (``"spec"`` speculates), fresh: no cached prompts, no learnt drafts
    or speed gate. With ``turn`` > 0 the runs take the cores in turns of about that many seconds (a step is never
    cut), in the order given, so a load that comes and goes falls on all of them alike; else one after another.
    One thread drives them all: llama.cpp's OpenMP threads are much slower here when several threads of a process
    start parallel regions (a plain run in a second thread decoded at 46 tokens/s where the main thread's did 73)."""
    runs: dict[str, Generator[None, None, list[ChatResult]]] = {}
    for side, engine in engines.items():
        engine.clear_cache()
        engine.speculator.reset()
        runs[side] = engine.steps(jobs, speculate=side == "spec", max_active=batch, trace_tokens=True)
    done: dict[str, list[ChatResult]] = {}
    try:
        while len(done) < len(runs):
            for side, steps in runs.items():
                start = time.perf_counter()
                while side not in done and (turn <= 0 or time.perf_counter() - start < turn):
                    try:
                        next(steps)
                    except StopIteration as end:
                        done[side] = end.value
    finally:
        for steps in runs.values():
            steps.close()  # a run that has not ended (another one raised) frees what its jobs hold
    return done


def _spin() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy until it is killed, or until the bench is gone (killed itself, it
    cannot kill its spinners: they must not load the machine on)."""
    code = f"import os\nwhile os.getppid() == {os.getpid()}: pass"
    return subprocess.Popen([sys.executable, "-c", code], stdin=DEVNULL, stdout=DEVNULL, stderr=DEVNULL)
