"""The speed gate: speculation backs off when the run's own steps measure slower than plain ones, and stays on
when they measure faster. Simulated machines (step times given), through the real ``Speculator``; no model."""

from __future__ import annotations

from collections import deque

import pytest

from minions.backends.speculation import CostCurve, CostTable, ScriptedDrafter, Speculator
from minions.backends.speculation.speculator import SpeedGate, size_class

# One sequence: 10 ms a plain call; eight: 30 ms.
TABLE = CostTable((1, 8), (CostCurve((1, 2, 9), (0.010, 0.014, 0.040)), CostCurve((8, 16, 72), (0.030, 0.050, 0.200))))


def _speculator() -> Speculator:
    spec = Speculator([ScriptedDrafter(lambda seq, tokens, k: [7] * k)], lambda: TABLE, k_max=3)
    spec.cost = TABLE
    return spec


def _run(spec: Speculator, steps: int, gain_of_step: float, seqs: int = 8, slowdown: float = 1.0) -> dict[str, float]:
    """``steps`` decode steps on a machine where a speculative step emits 2 tokens per sequence and takes
    ``2 / gain_of_step`` plain steps' time; everything ``slowdown`` times slower than the table (load).
    Returns the drafted share of steps and the tokens per second relative to plain decoding throughout."""
    plain_s = TABLE.at(seqs)(seqs) * slowdown
    drafted = tokens = 0
    seconds = 0.0
    for _ in range(steps):
        drafting = spec.drafting(seqs)
        if drafting:
            drafted += 1
            emitted, took = 2 * seqs, plain_s * 2 / gain_of_step
        else:
            emitted, took = seqs, plain_s
        spec.observe_step(seqs, emitted, took, drafted=drafting)
        tokens += emitted
        seconds += took
    return {"drafted": drafted / steps, "speedup": (tokens / seconds) / (seqs / plain_s)}


def test_losing_speculation_backs_off_to_plain_decoding() -> None:
    spec = _speculator()
    result = _run(spec, 600, gain_of_step=0.8, slowdown=3.0)
    assert spec.gate.losses >= 2
    assert result["drafted"] < 0.1
    assert result["speedup"] > 0.96  # a trial of 8 steps in every back-off, no more


def test_winning_speculation_stays_on() -> None:
    spec = _speculator()
    result = _run(spec, 600, gain_of_step=1.5)
    assert spec.gate.losses == 0
    assert result["drafted"] > 0.9  # plain only on the probes that keep the plain pace current
    assert result["speedup"] > 1.4
    assert spec.gate.gain == pytest.approx(1.5, rel=0.01)


def test_the_gate_follows_the_machine_as_it_changes() -> None:
    """Speculation wins, then load makes it lose (the gate backs off), then it wins again (the gate returns)."""
    spec = _speculator()
    _run(spec, 200, gain_of_step=1.3)
    losing = _run(spec, 300, gain_of_step=0.7, slowdown=2.0)
    assert losing["drafted"] < 0.2 and spec.gate.losses >= 1
    winning = _run(spec, 600, gain_of_step=1.3, seqs=1)
    assert winning["speedup"] > 1.1


def test_each_batch_size_is_judged_apart() -> None:
    """Speculation that wins for one sequence and loses for eight stays on for one and goes off for eight, in
    one run that mixes both (a batch whose jobs end one by one)."""
    spec = _speculator()
    for _ in range(10):
        _run(spec, 30, gain_of_step=1.5, seqs=1)
        _run(spec, 30, gain_of_step=0.8, seqs=8)
    assert spec.gate.trials[8].losses >= 2 and spec.gate.trials[1].losses == 0
    alone, eight = _run(spec, 200, gain_of_step=1.5, seqs=1), _run(spec, 200, gain_of_step=0.8, seqs=8)
    assert alone["drafted"] > 0.9 and eight["drafted"] < 0.1


def test_size_classes() -> None:
    assert [size_class(s) for s in (0, 1, 2, 3, 4, 7, 8, 15, 16)] == [1, 1, 2, 2, 4, 4, 8, 8, 16]


def test_a_fixed_depth_always_drafts_and_no_table_no_judgement() -> None:
    spec = Speculator([ScriptedDrafter(lambda seq, tokens, k: [7] * k)], lambda: TABLE, k_max=3, depth=2)
    assert all(spec.drafting() for _ in range(100))
    adaptive = Speculator([ScriptedDrafter(lambda seq, tokens, k: [7] * k)], lambda: TABLE, k_max=3)
    for _ in range(50):
        adaptive.drafting()
        adaptive.observe_step(8, 1, 10.0, drafted=True)  # awful, but the table was never needed: not measured
    assert adaptive.gate.gain is None and adaptive.gate.losses == 0
    adaptive.cost = TABLE
    adaptive.reset()
    assert adaptive.gate.step == 0


def test_one_slow_step_does_not_make_a_winning_speculation_lose() -> None:
    """A job's first draft indexes its prompt, and a loaded machine deschedules a thread now and then: one step in
    a trial taking three times as long must not turn a measured win into a back-off."""
    gate = _warm(SpeedGate())
    for _ in range(8):
        gate.observe(False, 1.0, 1.0)
    for pace in (3.0, *[1.2] * 7):  # 1.5 tokens a step in 1.2 plain steps' time: a 1.25x win, one step slowed
        gate.observe(True, 1.5, pace)
    assert gate.losses == 0 and gate.gain == pytest.approx(12 / 11.4)


def test_a_trial_is_judged_by_its_tokens_per_second_not_its_typical_step() -> None:
    """Most speculative steps win a little, two cost far more (a long draft rejected early at a batch's
    widest shape): the run got fewer tokens per second, whatever the median step says."""
    gate = _warm(SpeedGate())
    for pace in (1.5, 3.5) * 4:  # plain steps at batch 8 take one table step or two and more, in turn
        gate.observe(False, 1.0, pace)
    for work, pace in [(1.2, 2.2)] * 6 + [(1.0, 8.0)] * 2:
        gate.observe(True, work, pace)
    assert gate.losses == 1  # 9.2 plain steps' work in 29.2 table steps, against 1 in 2.5: 0.79x


def test_a_step_over_more_sequences_counts_for_more_of_a_trial() -> None:
    """A trial is ``min_steps`` sequence-steps: a loss over eight sequences is judged after two speculative
    steps (a batch's steps of eight may be a dozen in all), over one after eight."""
    for seqs, judged_after in ((8, 2), (4, 2), (2, 4), (1, 8)):
        gate = _warm(SpeedGate(), seqs)
        gate.observe(False, 1.0, 1.0, seqs)
        for step in range(1, judged_after + 1):
            assert gate.losses == 0, (seqs, step)
            gate.observe(True, 1.5, 2.0, seqs)  # 0.75x of plain
        assert gate.losses == 1 and not gate.speculate(seqs), seqs


def test_a_size_class_first_speculative_step_is_not_judged() -> None:
    """The first speculative step over a batch size runs shapes no call has run (llama.cpp plans and allocates
    them then): a trial at 8 sequences is 2 steps, and a first one at 3.4 plain steps put off speculation that
    paid 1.3x for a whole run. It is left out; the steps after it decide."""
    gate = SpeedGate()
    gate.observe(False, 1.0, 1.0, 8)
    gate.observe(True, 2.0, 3.4, 8)  # cold
    for _ in range(4):
        gate.observe(True, 2.0, 1.5, 8)
    assert gate.losses == 0 and gate.gain == pytest.approx(2.0 / 1.5)
    gate.observe(True, 2.0, 3.4, 1)  # one sequence is a class of its own: its first step is cold too
    assert gate.trials[1].rates == deque() and gate.trials[8].warm


def _warm(gate: SpeedGate, seqs: int = 1) -> SpeedGate:
    """A gate past its size class's first speculative step (which is not judged)."""
    gate.observe(True, 1.0, 1.0, seqs)
    return gate


def test_a_back_off_counts_sequence_steps() -> None:
    """A back-off lasts ``backoff_steps`` sequence-steps: 32 steps of one sequence, 4 of eight. Counted in steps, a
    loss at eight sequences made the rest of a batch's run plain (its 40-token replies are some 15 steps)."""
    for seqs, plain_steps in ((1, 32), (8, 4)):
        gate = _warm(SpeedGate(), seqs)
        gate.observe(False, 1.0, 1.0, seqs)
        while gate.losses == 0:
            gate.observe(True, 1.5, 2.0, seqs)  # 0.75x of plain
        assert [gate.speculate(seqs) for _ in range(plain_steps + 1)] == [False] * plain_steps + [True], seqs
