"""ceilings.logits_times by hand: a prompt with every row's logits at each of the probe's widths, from an engine's
timings (a batch step of as many columns: docs/design/kernels.md, "The CPU")."""
from __future__ import annotations

import pytest

from measure.machine import ceilings


class Timed:
    """An engine whose prompt with every row's logits takes 20 ms + 3 ms a token; the first call 15 % slower."""

    def __init__(self, per_token: float = 0.003) -> None:
        self.per_token, self.calls = per_token, []

    def prompt_logits_s(self, tokens: list[int]) -> float:
        self.calls.append(len(tokens))
        t = 0.02 + self.per_token * len(tokens)
        return t * 1.15 if len(self.calls) == 1 else t


def test_each_width_timed_in_turn_after_one_unmeasured_run_of_the_widest() -> None:
    e = Timed()
    # 2 tokens: 20 + 6 = 26 ms … 128: 20 + 384 = 404 ms; the first run (of 128, 15 % slow) is not counted
    times = ceilings.logits_times(e, list(range(128)))
    assert times == pytest.approx({"2": 0.026, "3": 0.029, "4": 0.032, "8": 0.044, "16": 0.068, "32": 0.116, "64": 0.212,
                                   "128": 0.404})
    assert e.calls == [128] + list(ceilings.LOGITS_WIDTHS) * ceilings.LOGITS_RUNS
    # a shorter prompt: the widths it holds
    assert list(ceilings.logits_times(Timed(), list(range(40))) or {}) == ["2", "3", "4", "8", "16", "32"]


def test_no_times_without_the_call_or_two_widths() -> None:
    assert ceilings.logits_times(object(), list(range(128))) is None
    assert ceilings.logits_times(Timed(), [1, 2]) is None


def test_a_slow_prompt_is_timed_once_at_each_width() -> None:
    # 20 ms + 10 ms a token: the unmeasured run of 128 tokens takes 1.5 s (≥ LOGITS_LONG_S), so one run each
    e = Timed(per_token=0.01)
    assert ceilings.logits_times(e, list(range(128)))["64"] == pytest.approx(0.66)
    assert e.calls == [128, *ceilings.LOGITS_WIDTHS]


def test_the_median_of_three_runs_at_each_width() -> None:
    class Noisy(Timed):
        def prompt_logits_s(self, tokens: list[int]) -> float:  # the second round 50 % slow: the median drops it
            t = super().prompt_logits_s(tokens)
            return t * 1.5 if len(ceilings.LOGITS_WIDTHS) < len(self.calls) <= 2 * len(ceilings.LOGITS_WIDTHS) else t

    assert ceilings.logits_times(Noisy(), list(range(128)))["16"] == pytest.approx(0.068)


class Batched:
    """A batch context whose step of n sequences takes 10 ms + 5 ms a sequence (B = 2: 20 ms, 50 steps/s; B = 8: 50
    ms, 20 steps/s), the runs of round `slow` (1-based) 50 % slower, and each run's first 5 steps (its prompts) 4 times
    as long: a rate is read from the steps whose timestamps come after them (the 5th timestamp on)."""

    def __init__(self, slow: int = 0) -> None:
        self.clock, self.seqs, self.runs, self.slow, self.steps = 0, {}, [], slow, 0

    def batch(self, b_cap: int, ctx: int) -> Batched:
        assert (b_cap, ctx) == (max(ceilings.BATCH_BS), 256)
        return self

    def add(self, key: int, prompt: list[int], tokens: int, ignore_eos: bool) -> None:
        if not self.seqs:
            self.runs.append(0)
            self.steps = 0
        self.seqs[key] = tokens
        self.runs[-1] = len(self.seqs)

    def active(self) -> int:
        return len(self.seqs)

    def step(self) -> tuple[int, list, list]:
        rnd = (len(self.runs) - 1) // len(ceilings.BATCH_BS) + 1
        prompt = 4.0 if self.steps < 5 else 1.0
        self.steps += 1
        self.clock += round((0.010 + 0.005 * len(self.seqs)) * (1.5 if rnd == self.slow else 1.0) * prompt * 1e9)
        self.seqs = {k: n - 1 for k, n in self.seqs.items() if n > 1}
        return self.clock, [], []


def test_the_batches_timed_in_turn_each_the_median_of_its_runs() -> None:
    e = Batched()
    assert ceilings.batch_rates(e, [[1, 2]] * 8) == pytest.approx({"2": 50.0, "8": 20.0})
    assert e.runs == list(ceilings.BATCH_BS) * ceilings.BATCH_RUNS  # B = 2, 8, 2, 8 …: in turn
    # the second round 50 % slower (an EPYC VM's single run of B = 8 read 10–15 % slow): the median drops it
    assert ceilings.batch_rates(Batched(slow=2), [[1]] * 8) == pytest.approx({"2": 50.0, "8": 20.0})
