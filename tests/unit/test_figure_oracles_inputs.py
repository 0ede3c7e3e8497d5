"""What a load is made from, against cases worked by hand (issue 56: mutmut's survivors in core/arrivals.py and
sources/warmup.py): each --arrivals / --rate / --speed / trace input and the exact line a wrong one gets, the ramp's
times against its rate function Λ, the trace's replay period, a schedule's count, the lateness at its bound, and
the warmup's rule, prompts and the loads it leaves alone. Fast: benchmarks/mutation.py's test command."""
from __future__ import annotations

import random
import re
from collections.abc import Sequence

import pytest

from measure.core import arrivals as A
from measure.core.clients import Segment
from measure.core.records import RequestRecord
from measure.core.workload import ClosedLoop, Load
from measure.sources import warmup as W
from presets import Workload

MS = 1_000_000
NS = 1_000_000_000
KNOWN = ("write constant, poisson, gamma:B (with --rate; burstiness B: 1 is Poisson, below 1 burstier, e.g. "
         "gamma:0.5) or ramp:FROM-TO (req/s, e.g. ramp:1-8)")


def _refused(line: str, *args, **kw) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(line) + "$"):
        A.parse_arrivals(*args, **kw)


def drain(sched: A.Schedule) -> list[int]:
    return sched.due(0, 0) + sched.due(10**15, 0)


def test_each_wrong_arrivals_input_gets_its_line():
    _refused("a trace brings its own arrival times: drop --rate and --arrivals (--speed 2 replays it twice as fast)",
             None, 2.0, trace_times=[0.0, 1.0])
    _refused("a trace brings its own arrival times: drop --rate and --arrivals (--speed 2 replays it twice as fast)",
             "poisson", None, trace_times=[0.0, 1.0])
    _refused("--speed scales a trace's times: it applies to --workload trace:FILE", "poisson", 2.0, speed=2.0)
    _refused("--arrivals 'ramp:5': a ramp is ramp:FROM-TO in req/s, e.g. ramp:1-8 (FROM may be 0)", "ramp:5", None)
    _refused("--arrivals 'ramp:1-8' names its own rates: drop --rate", "ramp:1-8", 3.0)
    _refused(f"--arrivals 'Zipf': unknown pattern; {KNOWN}", "Zipf", 1.0)
    _refused("--arrivals 'gamma:-1': gamma needs its burstiness, a number above 0: gamma:0.5 is burstier than "
             "Poisson, gamma:1 is Poisson, gamma:4 more even", "gamma:-1", 1.0)
    _refused(f"--arrivals 'poisson:2': poisson takes no parameter; {KNOWN}", "poisson:2", 1.0)
    _refused("--arrivals constant needs --rate R (requests per second)", "constant", None)
    with pytest.raises(ValueError, match="^" + re.escape("a ramp climbs over a level's requests: it needs bench "
                                                         "--requests N") + "$"):
        A.ArrivalSpec("ramp", ramp=(1.0, 2.0)).make(None)


class _Lazy(Sequence):
    """A trace's times read as needed (core/traces.py): kept as given, never copied into a tuple."""

    def __init__(self, xs: list[float]) -> None:
        self.xs = xs

    def __getitem__(self, i):  # type: ignore[override]
        return self.xs[i]

    def __len__(self) -> int:
        return len(self.xs)


def test_each_arrivals_input_is_the_spec_it_names():
    spec = A.parse_arrivals(None, None, trace_times=[0.0, 1.5], seed=7, trace_after=[-1, 0])
    assert spec == A.ArrivalSpec("trace", times_s=(0.0, 1.5), speed=1.0, seed=7, after=[-1, 0])
    assert isinstance(spec.times_s, tuple)  # a list given is copied (a spec is frozen)
    lazy = _Lazy([0.0, 2.0])
    assert A.parse_arrivals(None, None, trace_times=lazy).times_s is lazy
    assert A.parse_arrivals(" Poisson ", 2.0, seed=3) == A.ArrivalSpec("poisson", rate=2.0, seed=3)
    assert A.parse_arrivals("gamma:2", 4.0, seed=5) == A.ArrivalSpec("gamma", rate=4.0, burstiness=2.0, seed=5)
    assert A.parse_arrivals("ramp:1-8", None, seed=9) == A.ArrivalSpec("ramp", ramp=(1.0, 8.0), seed=9)
    # a ramp may start or end at 0 and climb under 1 req/s; not both ends 0
    assert A.parse_arrivals("ramp:4-0", None).ramp == (4.0, 0.0)
    assert A.parse_arrivals("ramp:0-0.5", None).ramp == (0.0, 0.5)
    _refused("--arrivals 'ramp:0-0': a ramp is ramp:FROM-TO in req/s, e.g. ramp:1-8 (FROM may be 0)", "ramp:0-0", None)


def test_scaled_gaps_and_a_schedules_count():
    assert A._scaled([1.0, 3.0], 2.0) == [0.5, 1.5]
    assert A._scaled([0.0, 0.0], 2.0) == [1.0, 1.0]  # no spread to scale: even
    assert A._scaled([], 2.0) == []
    for spec in (A.ArrivalSpec("ramp", ramp=(1.0, 3.0), seed=1), A.ArrivalSpec("poisson", rate=3.0, seed=1),
                 A.ArrivalSpec("constant", rate=3.0)):
        s = spec.make(6)
        assert s.total == 6 and len(drain(s)) == 6


def test_a_ramp_from_zero_keeps_to_its_rate_function():
    # ramp:0-4 over 21 requests: T = 2 × 20 ÷ 4 = 10 s, Λ(t) = a·t² with a = 4 ÷ (2T); the unit-rate arrivals u
    # (the same draws: seed 3, rep 0), scaled to end at u = 20, map to the t with Λ(t) = u: t = √(u ÷ a)
    spec = A.ArrivalSpec("ramp", ramp=(0.0, 4.0), seed=3)
    t = drain(spec.make(21))
    rng = random.Random(3 * 1_000_003)
    g = [rng.expovariate(1.0) for _ in range(20)]
    u = [0.0]
    for x in g:
        u.append(u[-1] + x * 20 / sum(g))
    a = 4.0 / 20.0
    assert [x / NS for x in t] == pytest.approx([(v / a) ** 0.5 for v in u], abs=2e-9)
    assert t[-1] == 10 * NS


def test_a_ramp_written_with_exponents_and_a_slow_climb_from_zero():
    # FROM-TO split at the first '-': the TO may carry its own exponent's sign (8e-1 = 0.8 req/s)
    assert A.parse_arrivals("ramp:1-8e-1", None) == A.ArrivalSpec("ramp", ramp=(1.0, 0.8))
    spec = A.parse_arrivals("ramp:0-2e-6", None)
    assert spec == A.ArrivalSpec("ramp", ramp=(0.0, 2e-6))
    # 2 requests from 0 to 2e-6 req/s: T = 2 × 1 ÷ 2e-6 = 1e6 s and a = 2e-6 ÷ (2T) = 1e-12 (exactly, as floats),
    # Λ(t) = a·t²; the one gap is scaled to u = 1: t = √(u ÷ a) = √(1e12) = 1e6 s = 10^15 ns. A ramp from 0 is never
    # the flat u ÷ r0 (it would divide by 0), however small its climb
    assert drain(spec.make(2)) == [0, 10**15]

def test_the_trace_replays_one_mean_gap_after_its_end():
    assert drain(A.ArrivalSpec("trace", times_s=(2.0,)).make(3)) == [2 * NS, 5 * NS, 8 * NS]  # one time: 1 s after
    assert drain(A.ArrivalSpec("trace", times_s=(0.0, 4.0)).make(4)) == [0, 4 * NS, 8 * NS, 12 * NS]
    # three times over 3 s, the first two together: the mean gap is 1.5 s
    assert drain(A.ArrivalSpec("trace", times_s=(0.0, 0.0, 3.0)).make(4)) == [0, 0, 3 * NS, 9 * NS // 2]
    assert A.ArrivalSpec("trace", times_s=(2.0,)).mean_rate() is None  # one request: no rate


def test_rates_and_lateness_at_their_edges():
    assert A.realised_rate([0, 0, 5 * NS]) == pytest.approx(2 / 5)  # two together, then one 5 s later

    def rec(rid, sched, sub, rep=0):
        return RequestRecord(run_id="r", request_id=rid, mode="http", engine="t", model="m", model_bytes=1, k=1, b=1,
                             t_scheduled_ns=sched, t_submitted_ns=sub, rep=rep)

    # none stamped: the rate of each rep (2 req/s and 4 req/s), meaned
    f = A.lateness_figures([rec(1, 0, 0), rec(2, NS // 2, 0), rec(3, 0, 0, 1), rec(4, NS // 4, 0, 1)])
    assert f["arrival_rps"] == pytest.approx(3.0) and f["lateness_p99_ms"] is None
    # every request exactly LATE_MS late: p99 at the bound is not behind it
    f = A.lateness_figures([rec(i, i * NS, i * NS + round(A.LATE_MS * MS)) for i in range(1, 4)])
    assert f["lateness_p99_ms"] == A.LATE_MS and f["behind_schedule"] is False


# ---- the warmup ----------------------------------------------------------------------------------------------
def test_a_bad_warmup_gets_its_line():
    with pytest.raises(ValueError, match="^" + re.escape(
            "--warmup 'ten': write N requests (0: none), a time such as 5s, or auto (one request per stream of each "
            "level, the default)") + "$"):
        W.Warmup.parse("ten")


def test_the_warmup_prompts_of_a_synthetic_workload():
    five = W.warmup_workload(Workload("s", "d", synthetic_tokens=5), 2)
    # the words the HTTP source sends for a synthetic prompt of 5 tokens (sources/http.py): four "hello"
    assert five.prompts == ("Warm-up request 1, not measured. hello hello hello hello",
                            "Warm-up request 2, not measured. hello hello hello hello")
    assert (five.key, five.description) == ("s-warmup", "the warmup of s")
    one = W.warmup_workload(Workload("o", "d", synthetic_tokens=1), 1)
    assert one.prompts == ("Warm-up request 1, not measured. hello",)


def test_a_load_with_an_absolute_start_is_not_warmed():
    wl = Workload("w", "d", prompts=("a",))
    loop = ClosedLoop(2, 4)
    assert not W._absolute_start(Load(wl, loop, 8))
    loop.start_ns = 5 * NS  # --start-at: the clients start together
    assert W._absolute_start(Load(wl, loop, 8))
    sched = A.ArrivalSpec("constant", rate=2.0).make(4)
    assert not W._absolute_start(Load(wl, sched, 8))  # a schedule: no start_ns at all
    seg = Segment(A.ArrivalSpec("constant", rate=2.0).make(4), 1, 2)
    assert W._absolute_start(Load(wl, seg, 8))
