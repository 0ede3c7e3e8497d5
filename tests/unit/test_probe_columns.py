"""ceilings.column_tps by hand: a prompt's further tokens with every row's logits, from an engine's timings."""
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


def test_column_rate_from_half_and_all_of_the_prompt() -> None:
    e = Timed()
    # (128 − 64) tokens ÷ (0.404 − 0.212) s = 333.3 tok/s: the 20 ms fixed part cancels, the first run is not counted
    assert ceilings.column_tps(e, list(range(128))) == pytest.approx(64 / 0.192)
    assert e.calls == [128] + [64] * ceilings.LOGITS_RUNS + [128] * ceilings.LOGITS_RUNS


def test_no_column_rate_without_the_call_or_a_longer_prompt_that_costs_no_more() -> None:
    assert ceilings.column_tps(object(), list(range(128))) is None
    assert ceilings.column_tps(Timed(per_token=0.0), list(range(128))) is None


def test_a_slow_prompt_is_timed_once_at_each_length() -> None:
    # 20 ms + 10 ms a token: the unmeasured run of 128 tokens takes 1.5 s (≥ LOGITS_LONG_S), so one run each:
    # 64 ÷ (1.3 − 0.66) = 100 tok/s
    e = Timed(per_token=0.01)
    assert ceilings.column_tps(e, list(range(128))) == pytest.approx(100.0)
    assert e.calls == [128, 64, 128]
