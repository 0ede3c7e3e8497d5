"""The load's figures against tiny cases worked by hand (issue 56): the arrival schedules (their offsets, resume,
the trace's replay, the load generator's lateness and the client's wait), a --find level's offered rate, TTFT trend
and users in flight, the knee search on a level function whose capacity is known, and the record built from what a
source saw. Fast: benchmarks/mutation.py runs these as mutmut's test command."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engines.base import Prompt
from measure.control.bench import knee as K
from measure.control.bench.cell import Cell, CellGoodput, Dist, KneeLevel, Requests
from measure.core import arrivals as A
from measure.core.records import Outcome, Request, RequestRecord, RunMeta, ServedBy, build_record, is_remote, shifted
from presets import SLO

MS = 1_000_000
NS = 1_000_000_000


def rec(rid, sched, start, tokens, done, *, sub=None, error=None, rep=0, extra=None):
    return RequestRecord(run_id="r", request_id=rid, mode="http", engine="t", model="m", model_bytes=1, k=1, b=1,
                         t_scheduled_ns=sched, t_submitted_ns=sched if sub is None else sub, t_started_ns=start,
                         t_first_token_ns=tokens[0] if tokens else None, t_done_ns=done, token_ns=list(tokens),
                         output_tokens=len(tokens), error=error, rep=rep, extra=extra)


def drain(sched, until_ns=10**15):
    return sched.due(0, 0) + sched.due(until_ns, 0)


# ---- the schedules -------------------------------------------------------------------------------------------
def test_constant_and_trace_offsets_by_hand():
    assert drain(A.ArrivalSpec("constant", rate=4.0).make(4)) == [0, NS // 4, NS // 2, 3 * NS // 4]
    tr = A.ArrivalSpec("trace", times_s=(0.0, 0.5, 2.0), speed=2.0).make(5)
    # ÷ 2, then the trace again one mean gap (1 s) after its last: period 3 s
    assert drain(tr) == [0, NS // 4, NS, 3 * NS // 2, 7 * NS // 4]
    assert A.ArrivalSpec("trace", times_s=(0.0, 0.5, 2.0)).mean_rate() == pytest.approx(1.0)
    assert A.ArrivalSpec("trace", times_s=(0.0, 0.5, 2.0), speed=2.0).mean_rate() == pytest.approx(2.0)
    assert A.ArrivalSpec("ramp", ramp=(2.0, 6.0)).mean_rate() == 4.0
    assert A.ArrivalSpec("gamma", rate=3.0, burstiness=0.5).mean_rate() == 3.0


def test_a_level_offers_exactly_its_rate_and_a_ramp_climbs():
    for spec in (A.ArrivalSpec("poisson", rate=8.0, seed=1), A.ArrivalSpec("gamma", rate=8.0, burstiness=2.0, seed=1),
                 A.ArrivalSpec("constant", rate=8.0)):
        t = drain(spec.make(9))
        assert len(t) == 9 and t == sorted(t) and t[-1] == pytest.approx(NS, abs=2)  # 8 gaps ÷ 8 req/s
    t = drain(A.ArrivalSpec("ramp", ramp=(2.0, 6.0), seed=4).make(41))
    assert t[-1] / NS == pytest.approx(2 * 40 / 8)  # T = 2(n − 1) ÷ (r0 + r1)
    first, last = np.diff(t[:21]).mean(), np.diff(t[20:]).mean()
    assert last < first  # the rate rises
    with pytest.raises(ValueError):
        A.ArrivalSpec("ramp", ramp=(1.0, 2.0)).make(None)
    assert drain(A.ArrivalSpec("ramp", ramp=(1.0, 2.0)).make(1)) == [0]
    flat = drain(A.ArrivalSpec("ramp", ramp=(4.0, 4.0), seed=2).make(5))
    assert flat[-1] == pytest.approx(NS, abs=2)


def test_schedule_due_wakeup_resume_and_total():
    s = A.Schedule(iter([0, 10, 20, 30]), 3, "x")
    assert s.next_wakeup_ns() is None and s.describe() == "open loop, x"
    assert s.due(100, 0) == [100]  # t0 = the first call
    assert s.next_wakeup_ns() == 110 and not s.exhausted()
    assert s.due(109, 0) == [] and s.due(110, 0) == [110]
    s.resume(500)  # paused: the rest moves on by the pause, no burst
    assert s.next_wakeup_ns() == 500 and s.due(10**6, 0) == [500] and s.exhausted()
    assert s.next_wakeup_ns() is None and s.due(10**7, 0) == []
    endless = A.ArrivalSpec("constant", rate=1000.0).make(None)
    assert endless.due(0, 0) == [0] and endless.due(3 * MS, 0) == [MS, 2 * MS, 3 * MS]


def test_describe_and_parse():
    assert A.ArrivalSpec("poisson", rate=2.0).describe() == "Poisson 2 req/s"
    assert A.ArrivalSpec("constant", rate=2.5).describe() == "constant 2.5 req/s"
    assert A.ArrivalSpec("gamma", rate=2.0, burstiness=0.25).describe() == "gamma 2 req/s, burstiness 0.25 (CV 2.00)"
    assert A.ArrivalSpec("ramp", ramp=(1.0, 8.0)).describe() == "ramp 1 → 8 req/s (Poisson)"
    assert A.ArrivalSpec("trace", times_s=(0.0, 3.0)).describe() == "trace replay, 2 requests over 3 s"
    assert A.ArrivalSpec("trace", times_s=(0.0, 3.0), speed=2.0).describe() == \
        "trace replay, 2 requests over 3 s at ×2 speed"
    assert A.parse_arrivals(None, None) is None
    assert A.parse_arrivals(None, 3.0, seed=4) == A.ArrivalSpec("poisson", rate=3.0, seed=4)
    assert A.parse_arrivals("gamma:0.5", 2.0) == A.ArrivalSpec("gamma", rate=2.0, burstiness=0.5)
    assert A.parse_arrivals("Ramp:0-8", None) == A.ArrivalSpec("ramp", ramp=(0.0, 8.0))
    assert A.parse_arrivals("constant", 5.0) == A.ArrivalSpec("constant", rate=5.0)
    assert A.parse_arrivals(None, None, trace_times=[0.0, 1.0], speed=3.0).speed == 3.0
    for text, rate, kw in (("ramp:1", None, {}), ("ramp:2-1x", None, {}), ("ramp:0-0", None, {}),
                           ("ramp:1-2", 3.0, {}), ("zipf", 1.0, {}), ("gamma:0", 1.0, {}), ("gamma:x", 1.0, {}),
                           ("constant:2", 1.0, {}), ("poisson", None, {}), (None, None, {"speed": 2.0}),
                           ("poisson", 1.0, {"trace_times": [0.0, 1.0]})):
        with pytest.raises(ValueError):
            A.parse_arrivals(text, rate, **kw)


def test_lateness_rate_and_the_clients_wait():
    recs = [rec(1, 0, 0, [1], 2, sub=1 * MS), rec(2, 100 * MS, 0, [1], 2, sub=100 * MS),
            rec(3, 300 * MS, 0, [1], 2, sub=320 * MS), rec(4, 0, 0, [1], 2, sub=0, rep=1),
            rec(5, 500 * MS, 0, [1], 2, sub=500 * MS, rep=1)]
    f = A.lateness_figures(recs)
    late = [1.0, 0.0, 20.0, 0.0, 0.0]
    # rec 4 was submitted at 0 = its schedule: a t_submitted of 0 reads "not stamped", left out
    stamped = [1.0, 0.0, 20.0, 0.0]
    assert f["lateness_p50_ms"] == pytest.approx(float(np.percentile(stamped, 50)))
    assert f["lateness_p99_ms"] == pytest.approx(float(np.percentile(stamped, 99)))
    assert f["lateness_max_ms"] == max(late) and f["behind_schedule"] is True  # p99 19.4 > 10
    assert f["arrival_rps"] == pytest.approx((2 / 0.3 + 1 / 0.5) / 2)  # per rep, meaned
    assert A.lateness_figures([rec(1, 5, 0, [1], 2, sub=0)])["lateness_p50_ms"] is None
    assert A.lateness_figures([rec(1, 0, 0, [1], 2, sub=5 * MS)])["behind_schedule"] is False
    assert A.realised_rate([0, NS // 2, NS]) == 2.0 and A.realised_rate([5]) is None
    assert A.realised_rate([5, 5]) is None
    w = A.client_wait_figures([rec(1, 0, 0, [1], 2, extra={"client_queue_ms": 8.0}), rec(2, 0, 0, [1], 2),
                               rec(3, 0, 0, [1], 2, extra={"client_queue_ms": 2.0})])
    assert w == pytest.approx({"client_waited": 2, "client_wait_p50_ms": 2.0,
                               "client_wait_p99_ms": float(np.percentile([8.0, 0.0, 2.0], 99)),
                               "client_wait_max_ms": 8.0})
    assert A.client_wait_figures([rec(1, 0, 0, [1], 2)]) == {}


# ---- a --find level's figures and the search --------------------------------------------------------------------
def test_rate_figures_and_users_in_flight_by_hand():
    # 5 requests 1 s apart; TTFT 0.1, 0.1, 0.3, 0.5, 0.7 s: the later half's median TTFT − the earlier's (0.6 − 0.1)
    # over the later half's median schedule − the earlier's (3.5 − 0.5 s)
    ttfts = [0.1, 0.1, 0.3, 0.5, 0.7]
    recs = [rec(i, i * NS, i * NS, [i * NS + round(t * NS)], i * NS + round(t * NS) + MS) for i, t in enumerate(ttfts)]
    f = K.rate_figures(recs)
    assert f["offered_rps"] == pytest.approx(4 / 4.0) and f["arrivals_s"] == pytest.approx(4.0)
    assert f["ttft_trend"] == pytest.approx((0.6 - 0.1) / 3.0)
    assert K.rate_figures(recs[:3])["ttft_trend"] is None  # fewer than 2 a half
    assert K.rate_figures(recs[:1]) == {"offered_rps": None, "arrivals_s": 0.0, "ttft_trend": None}
    # in flight: scheduled → done; started → done
    a = rec(1, 0, 5, [6], 10)
    b = rec(2, 2, 8, [9], 12)
    c = rec(3, 10, 11, [11], 20)  # starts as a ends: they never overlap (the end counts first)
    assert K.peak_in_flight([a, b, c]) == 2 and K.peak_in_flight([a, b, c], "t_started_ns") == 2
    assert K.peak_in_flight([a, rec(4, 1, 9, [9], 11)], "t_started_ns") == 2
    assert K.peak_in_flight([a, rec(4, 1, 10, [10], 11)], "t_started_ns") == 1
    assert K.peak_in_flight([rec(5, 0, None, [], None)]) == 0


def _level_of(capacity: float, what: str = "users"):
    calls: list[float] = []

    def run(level: float) -> K.Level:
        calls.append(level)
        return K.Level(level, level <= capacity, None, "")

    return run, calls


@pytest.mark.parametrize("capacity,start,want_pass,want_fail", [(5, 1, 5, 6), (1, 1, 1, 2), (64, 1, 64, 72),
                                                                (3, 4, 3, 4)])
def test_the_knee_search_brackets_a_known_capacity(capacity, start, want_pass, want_fail):
    run, calls = _level_of(capacity)
    knee = K.find_knee(run, "users", start=start, limit=512)
    assert (knee.passed.level if knee.passed else None, knee.failed.level if knee.failed else None) == \
        (want_pass, want_fail), calls
    assert knee.levels and all(lv.level in calls for lv in knee.levels)


def test_the_rate_search_ends_within_a_tenth_and_a_first_failure_is_run_twice():
    run, calls = _level_of(3.3, "rate")
    knee = K.find_knee(run, "rate", start=1, limit=64)
    assert knee.passed.level <= 3.3 < knee.failed.level and knee.failed.level - knee.passed.level <= 0.1 * 4
    assert calls[:5] == [1, 2, 4, 4, 3.0]  # 4 failed: run once more before the bisection
    run, calls = _level_of(1000)
    knee = K.find_knee(run, "users", start=1, limit=16)
    assert knee.failed is None and knee.passed.level == 16 and calls == [1, 2, 4, 8, 16]
    run, calls = _level_of(1000)
    assert len(K.find_knee(run, "users", start=1, limit=10**9, max_levels=4).levels) == 4


def test_a_stall_at_the_first_failure_is_forgiven_once():
    seen: list[float] = []

    def run(level: float) -> K.Level:
        seen.append(level)
        ok = level <= 6 or (level == 8 and seen.count(8) == 2)  # 8 failed once (a stall), then passed
        return K.Level(level, ok if level != 8 or seen.count(8) == 2 else False, None, "slow")

    knee = K.find_knee(run, "users", start=1, limit=8)
    assert knee.passed.level == 8 and "on a second run" in knee.passed.why and seen == [1, 2, 4, 8, 8]


def _cell(att, *, ok=True, trend=None, offered=None, arrivals=None, ttft99=100.0, queue50=0.0, ttft50=50.0,
          tpot50=10.0, n=10):
    return Cell(k=1, b=1, status="ok" if ok else "wall", reason=None if ok else "memory wall",
                requests=Requests(completed=n, ttft=Dist(p50=ttft50, p99=ttft99), queue_wait=Dist(p50=queue50),
                                  tpot=Dist(p50=tpot50)),
                goodput=CellGoodput("s", None, None, att), knee=KneeLevel(offered_rps=offered, ttft_trend=trend,
                                                                      arrivals_s=arrivals))


def test_judge_by_hand():
    slo = SLO("s", "s", ttft_s=0.5, tpot_s=0.02)
    # (64: twelve levels at most, 1 … 128, 128 again, 96, 80, 72; start 4 over capacity 3: 4 twice, then 2, 3)
    assert K.judge(_cell(0.90), slo, "users", 4).ok and not K.judge(_cell(0.8999), slo, "users", 4).ok
    assert K.judge(_cell(0.95), slo, "users", 4, target=0.95).ok and not K.judge(_cell(0.94), slo, "users", 4, 0.95).ok
    wall = K.judge(_cell(None, ok=False), slo, "users", 4)
    assert (wall.ok, wall.stop, wall.why) == (False, "wall", "memory wall")
    q = K.judge(_cell(1.0, trend=0.5, offered=6.0, arrivals=10.0), slo, "rate", 6)
    assert not q.ok and q.why == "its queue grows: TTFT rises 5.00 s over its 10 s of arrivals (it serves ≈ 4 of " \
                                 "the 6 req/s offered)"
    assert K.judge(_cell(1.0, trend=K.QUEUE_TREND, offered=6.0, arrivals=10.0), slo, "rate", 6).ok
    why = K.judge(_cell(0.5, ttft99=900.0, queue50=40.0, ttft50=60.0, tpot50=30.0), slo, "users", 8).why
    assert why == "TTFT p99 is ≈0.90 s (queue) and TPOT p50 is 30 ms (each decode step) (50% within it)"
    why = K.judge(_cell(0.5, ttft99=900.0, queue50=10.0, ttft50=60.0), slo, "users", 8).why
    assert why.startswith("TTFT p99 is ≈0.90 s (prefill) (")
    assert K.judge(_cell(0.5), slo, "users", 8).why == "only 50% of requests meet the SLO (50% within it)"


def test_exact_poisson_offers_its_rate():
    p = K.ExactPoisson(5.0, 11, seed=3)
    t = p.due(0, 0) + p.due(10**15, 0)
    assert len(t) == 11 and (t[-1] - t[0]) / NS == pytest.approx(2.0, abs=1e-8)
    assert len(set(np.diff(t).tolist())) > 5  # gaps drawn, not constant


# ---- the record built from what a source saw ----------------------------------------------------------------------
def test_build_record_and_shift():
    req = Request(7, Prompt("p7", text="x"), 4, True, t_scheduled_ns=100, t_submitted_ns=105, rep=2, k=3, b=4,
                  mode="http", session=1, turn=2)
    meta = RunMeta(engine="e", model="m", model_bytes=9, simulated=True)
    out = Outcome(token_ns=[150, 160, 170], t_started_ns=120, t_done_ns=180, prompt_tokens=5, finish_reason="length")
    r = build_record(req, meta, "run", out, ServedBy(worker=0, pid=11, threads=2, rss=99, model="served"),
                     extra={"a": 1})
    assert (r.request_id, r.t_scheduled_ns, r.t_submitted_ns, r.t_started_ns, r.t_first_token_ns, r.t_done_ns) == \
        (7, 100, 105, 120, 150, 180)
    assert (r.output_tokens, r.token_ns, r.finish_reason, r.error, r.prompt_tokens) == (3, [150, 160, 170], "length",
                                                                                         None, 5)
    assert (r.worker, r.pid, r.threads, r.worker_rss_bytes, r.model, r.model_bytes) == (0, 11, 2, 99, "served", 9)
    assert (r.rep, r.k, r.b, r.mode, r.session, r.turn, r.simulated, r.extra) == (2, 3, 4, "http", 1, 2, True,
                                                                                 {"a": 1})
    assert r.prompt_id == "p7" and r.run_id == "run" and r.engine == "e"
    failed = build_record(req, meta, "run", Outcome([], 120, 130, error="boom", finish_reason="stop"), ServedBy(None))
    assert (failed.t_first_token_ns, failed.finish_reason, failed.error, failed.model) == (None, "error", "boom", "m")
    d = r.to_dict()  # a copy one level down: its list and dict are not the record's
    d["token_ns"].append(1)
    d["extra"]["a"] = 2
    assert r.token_ns == [150, 160, 170] and r.extra == {"a": 1}
    r.t_first_answer_ns = 165
    s = shifted(r, 1000)
    assert s.t_first_answer_ns == 1165
    assert (s.t_scheduled_ns, s.t_submitted_ns, s.t_started_ns, s.t_first_token_ns, s.t_done_ns, s.token_ns) == \
        (1100, 1105, 1120, 1150, 1180, [1150, 1160, 1170])
    unsent = shifted(rec(1, 5, None, [], None, sub=0), 10)
    assert (unsent.t_submitted_ns, unsent.t_started_ns, unsent.t_done_ns) == (0, None, None)
    assert RequestRecord.from_dict({**r.to_dict(), "unknown": 1}) == r
    assert is_remote("http") and not is_remote("instances") and not is_remote("batch")
    assert math.isclose(1.0, 1.0)


def test_the_seeding_and_labels_are_what_the_doc_says():
    """A level's gaps are random.Random(seed × 1 000 003 + rep)'s draws scaled to (n − 1) ÷ rate: worked out here."""
    import random

    rng = random.Random(3 * 1_000_003 + 2)
    gaps = [rng.expovariate(8.0) for _ in range(4)]
    want, t = [0], 0.0
    for g in gaps:
        t += g * (4 / 8.0) / sum(gaps)
        want.append(round(t * NS))
    spec = A.ArrivalSpec("poisson", rate=8.0, seed=3)
    assert drain(spec.make(5, rep=2)) == want
    assert drain(spec.make(5)) == drain(spec.make(5, rep=0)) != drain(spec.make(5, rep=1))
    assert spec.make(5).describe() == "open loop, Poisson 8 req/s"
    assert spec.make(None).describe() == "open loop, Poisson 8 req/s"
    assert A.ArrivalSpec("ramp", ramp=(1.0, 3.0)).make(3).describe() == "open loop, ramp 1 → 3 req/s (Poisson)"
    assert A.ArrivalSpec("trace", times_s=(0.0, 1.0)).make(2).describe() == \
        "open loop, trace replay, 2 requests over 1 s"
    assert A.ArrivalSpec("trace", times_s=()).describe() == "trace replay, 0 requests over 0 s"
    assert A.ArrivalSpec("trace", times_s=(0.0, 1.0, 4.0)).describe() == "trace replay, 3 requests over 4 s"
    s = A.ArrivalSpec("trace", times_s=(0.0, 1.0), after=(-1, 0)).make(2)
    assert isinstance(s, A.TraceSessions) and s.total == 2 and s.after == (-1, 0)
    assert s.describe() == "open loop, trace replay, 2 requests over 1 s, follow-ups after their parents' answers"


@pytest.mark.parametrize("pattern", ["poisson", "gamma", "constant"])
def test_an_endless_schedule_keeps_its_rate(pattern):
    """Without a count (the dashboard) the gaps are not scaled: their own mean must be 1 ÷ rate."""
    spec = A.ArrivalSpec(pattern, rate=50.0, burstiness=2.0 if pattern == "gamma" else None, seed=5)
    s = spec.make(None)
    t = s.due(0, 0) + s.due(40 * NS, 0)
    assert len(t) / 40.0 == pytest.approx(50.0, rel=0.06)


def test_short_schedules_and_the_trace_period():
    assert len(drain(A.ArrivalSpec("ramp", ramp=(1.0, 3.0), seed=1).make(2))) == 2
    assert drain(A.ArrivalSpec("ramp", ramp=(1.0, 3.0), seed=1).make(2))[-1] == pytest.approx(NS // 2, abs=2)  # 2 ÷ 4
    empty = A.Schedule(iter([]), 3, "x")
    assert empty.exhausted() and empty.due(5, 0) == [] and empty.next_wakeup_ns() is None
    s = A.Schedule(iter([0, 10]), None, "x")
    s.resume(5)  # before its start: nothing to move
    assert s.due(100, 0) == [100] and s.next_wakeup_ns() == 110
    # one time only, or a trace that spans 0 s: the next pass 1 s after
    assert drain(A.ArrivalSpec("trace", times_s=(0.0,)).make(3)) == [0, NS, 2 * NS]
    assert drain(A.ArrivalSpec("trace", times_s=(0.0, 0.0)).make(3)) == [0, 0, NS]
    # three times over 0.5 s: the next pass one mean gap (0.25 s) after the last
    assert drain(A.ArrivalSpec("trace", times_s=(0.0, 0.25, 0.5)).make(4))[-1] == 3 * NS // 4
    assert A.ArrivalSpec("trace", times_s=(0.0,)).mean_rate() is None
    assert A.ArrivalSpec("trace", times_s=()).mean_rate() is None
    assert A.ArrivalSpec("trace", times_s=(0.0, 0.0)).mean_rate() is None
    assert A.ArrivalSpec("trace", times_s=(0.0, 0.5)).mean_rate() == 2.0
    assert A.realised_rate([0, NS, 3 * NS]) == 2 / 3 and A.realised_rate([2 * NS, 3 * NS]) == 1.0


def test_lateness_keys_without_stamps_and_waits_of_zero():
    f = A.lateness_figures([rec(1, 0, 0, [1], 2, sub=0), rec(2, NS, 0, [1], 2, sub=0)])
    assert f == {"lateness_p50_ms": None, "lateness_p99_ms": None, "lateness_max_ms": None,
                 "behind_schedule": False, "arrival_rps": 1.0}
    assert A.lateness_figures([rec(1, 0, 0, [1], 2, sub=0)])["arrival_rps"] is None
    w = A.client_wait_figures([rec(1, 0, 0, [1], 2, extra={"client_queue_ms": 0.0}), rec(2, 0, 0, [1], 2)])
    assert w["client_waited"] == 1 and w["client_wait_max_ms"] == 0.0 and w["client_wait_p50_ms"] == 0.0


def test_knee_figures_at_their_edges():
    two = [rec(1, 5 * NS, 5 * NS, [6 * NS], 7 * NS), rec(2, 7 * NS, 7 * NS, [8 * NS], 9 * NS)]
    f = K.rate_figures(two)  # not from 0: first → last scheduled
    assert (f["offered_rps"], f["arrivals_s"]) == pytest.approx((0.5, 2.0)) and f["ttft_trend"] is None
    same = [rec(1, 5 * NS, 0, [6 * NS], 7 * NS), rec(2, 5 * NS, 0, [6 * NS], 7 * NS)]
    assert K.rate_figures(same)["offered_rps"] is None
    # four requests at once then none: the halves' schedules tie, no trend
    tied = [rec(i, NS, NS, [NS + i * MS], 2 * NS) for i in range(4)]
    assert K.rate_figures(tied)["ttft_trend"] is None
    # a short level (its halves 0.5 s apart) keeps its trend
    short = [rec(i, i * NS // 4, 0, [i * NS // 4 + (i + 1) * 100 * MS], NS * 2) for i in range(4)]
    assert K.rate_figures(short)["ttft_trend"] == pytest.approx(0.2 / 0.5)
    flight = [rec(1, 0, 0, [1], 1), rec(2, 2, 2, [3], 10), rec(3, 3, 3, [4], 10), rec(4, 4, 4, [5], 10)]
    assert K.peak_in_flight(flight) == 3
    p = K.ExactPoisson(5.0, 11, seed=3)
    t = p.due(0, 0) + p.due(10**15, 0)
    assert len(set(t)) == 11


def test_the_searchs_levels_exactly():
    run, calls = _level_of(5)
    knee = K.find_knee(run, "users", start=1, limit=512)
    assert calls == [1, 2, 4, 8, 8, 6, 5] and knee.what == "users" and len(knee.levels) == 7
    assert (knee.passed.level, knee.failed.level) == (5, 6)
    run, calls = _level_of(3.0)
    knee = K.find_knee(run, "rate", start=1, limit=64)
    assert calls == [1, 2, 4, 4, 3.0, 3.5, 3.25] and knee.what == "rate"  # to a tenth of the failed rate
    run, calls = _level_of(1)
    assert K.find_knee(run, "users", start=2, limit=64).passed.level == 1 and calls == [2, 2, 1]
    stops: list[float] = []

    def client(level: float) -> K.Level:
        stops.append(level)
        return K.Level(level, level < 4, None if level < 4 else "client", "late")

    knee = K.find_knee(client, "rate", start=1, limit=64)  # the client's limit, twice: the search ends
    assert stops == [1, 2, 4, 4] and knee.failed.stop == "client" and knee.passed.level == 2
    walls: list[float] = []

    def wall(level: float) -> K.Level:
        walls.append(level)
        return K.Level(level, level < 4, None if level < 4 else "wall", "wall")

    knee = K.find_knee(wall, "users", start=1, limit=64)  # a wall: not run twice, the search ends
    assert walls == [1, 2, 4] and knee.failed.stop == "wall"
    bis: list[float] = []

    def wall_in_bisection(level: float) -> K.Level:
        bis.append(level)
        return K.Level(level, level < 3, "wall" if level == 3 else None, "x")

    knee = K.find_knee(wall_in_bisection, "users", start=1, limit=64)
    assert bis == [1, 2, 4, 4, 3] and knee.failed.stop == "wall" and knee.passed.level == 2
    seen: list[float] = []

    def once(level: float) -> K.Level:
        seen.append(level)
        return K.Level(level, level != 8 or seen.count(8) > 1, None, "slow")

    assert K.find_knee(once, "users", start=1, limit=8).passed.why == \
        "slow (on a second run; the first was out: slow)"


def test_judge_says_which_level_and_keeps_its_cell():
    slo = SLO("s", "s", ttft_s=0.5, tpot_s=0.02)
    c = _cell(0.95)
    lv = K.judge(c, slo, "users", 4)
    assert (lv.level, lv.ok, lv.stop, lv.why, lv.cell) == (4, True, None, "95% of requests within the SLO", c)
    c = _cell(None)
    lv = K.judge(c, slo, "users", 4)
    assert (lv.level, lv.ok, lv.stop, lv.why, lv.cell) == (4, False, None, "no request finished", c)
    c = _cell(1.0, trend=0.5, offered=None, arrivals=10.0)
    lv = K.judge(c, slo, "rate", 6)
    assert (lv.level, lv.ok, lv.stop, lv.cell) == (6, False, None, c) and "the 6 req/s offered" in lv.why
    assert K.judge(c.to_json(), slo, "rate", 6).why == lv.why  # summary.json's cell judged alike
    lv = K.judge(_cell(0.5, ttft99=900.0, queue50=30.0, ttft50=60.0), slo, "users", 8)
    assert lv.why.startswith("TTFT p99 is ≈0.90 s (prefill)")  # a queue of half the TTFT: not the queue's
    lv = K.judge(_cell(0.5, ttft99=500.0, tpot50=20.0), slo, "users", 8)
    assert lv.why == "only 50% of requests meet the SLO (50% within it)"  # at its bounds: not over them
    lv = K.judge(_cell(0.5, ttft99=1500.0, queue50=None, ttft50=None, n=200), slo, "users", 8)
    assert lv.why.startswith("TTFT p99 is 1.50 s (prefill)")  # neither known: no queue said
    lv = K.judge(_cell(0.5, ttft99=1500.0, queue50=0.4, ttft50=None, n=200), slo, "users", 8)
    assert lv.why.startswith("TTFT p99 is 1.50 s (queue)")
