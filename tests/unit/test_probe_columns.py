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


class Vocab(Timed):
    """Timed, with Gemma 3's vocabulary: a row of logits 1 MiB, held twice while a prompt asks it (2 MiB)."""

    n_vocab = 262_144


def test_the_widths_whose_rows_fit_the_room() -> None:
    row = ceilings.LOGITS_ROW_COPIES * 4 * Vocab.n_vocab
    assert row == 2 << 20
    assert ceilings.logits_widths(None, row) == ceilings.LOGITS_WIDTHS  # no room read: every width
    # 100 MiB left, 32 of them spare: 68 MiB hold 34 rows, so the widths up to 32
    assert ceilings.logits_widths(100 << 20, row) == (2, 3, 4, 8, 16, 32)
    assert ceilings.logits_widths((32 + 2 * 128) << 20, row) == ceilings.LOGITS_WIDTHS  # 128 rows exactly
    assert ceilings.logits_widths((32 + 2 * 128 - 1) << 20, row)[-1] == 64
    assert ceilings.logits_widths(40 << 20, row) == (2, 3, 4)
    assert ceilings.logits_widths(10 << 20, row) == ()
    e = Vocab()
    assert list(ceilings.logits_times(e, list(range(128)), room=100 << 20) or {}) == ["2", "3", "4", "8", "16", "32"]
    assert max(e.calls) == 32  # the unmeasured first run too: no row past the room is ever asked
    assert ceilings.logits_times(Vocab(), list(range(128)), room=37 << 20) is None  # one width: no difference
    # an engine that says no vocabulary: its rows are 0 B, every width where the spare fits
    assert len(ceilings.logits_times(Timed(), list(range(128)), room=64 << 20) or {}) == len(ceilings.LOGITS_WIDTHS)


def test_the_probes_note_on_widths_cut_by_the_room() -> None:
    engine = {"logits_s": {"2": 0.02, "3": 0.03, "4": 0.04, "8": 0.05}, "logits_room_bytes": 60 << 20}
    assert ceilings.logits_note(engine) == ("a prompt with every row's logits timed at 2, 3, 4, 8 tokens in the 60 MiB "
                                            "of memory left to it, not 128: a batch's columns past 8 take the price "
                                            "of the last width")
    assert ceilings.logits_note({"logits_room_bytes": 20 << 20}) == (
        "a prompt with every row's logits was not timed in the 20 MiB of memory left to it: a batch past B = 8 is "
        "priced by the probe's batches' line")


def test_a_stage_that_paged_keeps_none_of_its_rates() -> None:
    """In a 400 MiB memory cgroup the probe's batch stage took 3,347 major faults and read 5.6 steps/s where the
    engine outside read 44 and 23.5; its decode and prefill took none. A stage over PAGED_FAULTS drops its rates."""
    e = {"model": "m", "decode_tps": {"1": 60.0}, "prefill_tps": 700.0, "batch_steps_per_s": {"2": 5.9, "8": 5.6},
         "logits_s": {"2": 0.1, "3": 0.2}, "major_faults": {"load": 8, "decode": 0, "prefill": 0, "batch": 3347,
                                                             "logits": 26}}
    kept, said = ceilings.drop_paged(e, "the cgroup v1 memory.limit_in_bytes of 0.39 GiB")
    assert kept == {k: v for k, v in e.items() if k != "batch_steps_per_s"}  # 26 faults: not past PAGED_FAULTS
    assert said == ["the engine's batch stage paged against the cgroup v1 memory.limit_in_bytes of 0.39 GiB (3347 "
                    "major faults): its rates are not kept (measure them outside the limit once: `inference-top probe`)"]
    at = dict(e, major_faults={"batch": 0, "logits": ceilings.PAGED_FAULTS + 1})
    assert "logits_s" not in ceilings.drop_paged(at, "x")[0] and "batch_steps_per_s" in ceilings.drop_paged(at, "x")[0]
    edge = dict(e, major_faults={"logits": ceilings.PAGED_FAULTS})
    assert ceilings.drop_paged(edge, "x") == (edge, [])  # not past it
    # decode or prefill paged: no engine (the roofline needs both)
    assert ceilings.drop_paged(dict(e, major_faults={"prefill": 400}), "x")[0] == {}
    assert ceilings.drop_paged(dict(e, major_faults={"decode": 51}), "x")[0] == {}
    assert ceilings.drop_paged({"decode_tps": {"1": 1.0}, "prefill_tps": 1.0}, "x") == (
        {"decode_tps": {"1": 1.0}, "prefill_tps": 1.0}, [])  # an older probe's engine: no faults said
