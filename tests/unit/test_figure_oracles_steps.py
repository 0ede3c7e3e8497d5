"""The live step table's rows against cases worked by hand (issue 56: mutmut's survivors in control/live/steps.py):
every field of a settled row with an SLO and a cost, goodput counted from the first settled reading and again from a
new statistics window, the exact words of what a level waits for at each edge of the settling rule (warmup, CV and
trend exactly at their bounds, no tokens flowing), the thermal state's changes, the requests counted since one,
and the ★ by goodput. Fast: benchmarks/mutation.py's test command."""
from __future__ import annotations

import numpy as np
import pytest
from test_figure_oracles_live import rec

from measure.control.live import stats as S
from measure.control.live import steps as ST
from measure.core.cost import Cost
from presets import SLO

MS = 1_000_000
NS = 1_000_000_000


def _add(f: S.LevelFigures, rid: int, ttft_ms: float, tpot_ms: float, tokens: int = 4, t0: int = 0) -> None:
    """One request scheduled at t0: its first token ttft_ms later, then one every tpot_ms."""
    first = t0 + round(ttft_ms * MS)
    ts = [first + round(i * tpot_ms * MS) for i in range(tokens)]
    f.add(rec(rid, t0, t0, ts, ts[-1]))


def _reading(now_s: float, f: S.LevelFigures, tps: float, conc: float = 1.0, *, steady: bool = True,
             thermal: str | None = None, **more) -> ST.StepReading:
    return ST.StepReading(round(now_s * NS), steady, f, tps, conc, thermal=thermal, **more)


def _settle(t: ST.StepTable, lv: ST.StepLevel, f: S.LevelFigures, first_s: float, n: int, tps: float = 100.0,
            thermal: str | None = None) -> ST.StepRow:
    """n readings at 2 Hz from first_s on, tok/s constant: the last row."""
    for i in range(n):
        row = t.tick(lv, _reading(first_s + i / 2, f, tps, thermal=thermal))
    return row


def test_goodput_with_no_tokens_counted_is_zero_and_the_trend_compares_halves():
    g = ST.settled_goodput(20.0, S.Counts(2, 1, 0, 0), None)  # finished, but no output token counted: no rate
    assert (g.rps, g.tps, g.attainment) == (0.0, 0.0, 0.5)
    # six readings: halves of three (1 2 3 | 4 5 6), their means 2 and 5 over the mean 3.5
    assert ST._trend([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == pytest.approx(3 / 3.5)


def test_every_field_of_a_settled_row_with_an_slo_and_a_cost():
    slo = SLO("s", "s", ttft_s=0.1)
    cost = Cost(hardware_cost=1000.0, lifetime_hours=1000.0, kwh_price=0.5)  # $1/h + 200 W × $0.5/kWh = $1.1/h
    t = ST.StepTable(slo=slo, cost=cost)
    lv = ST.StepLevel("K=2 B=1 http", "http", 2, 1, 100 * NS)  # a level that began 100 s into the run
    f = S.LevelFigures(slo)
    for i in range(8):  # before it may settle: 6 met the TTFT bound (40 + i ms), 2 did not (150 + i ms)
        _add(f, i, 40 + i if i < 6 else 150 + i, 10 + i)
    extra = dict(mem_used=7_000, bw_gbps=12.5, predicted_tps=240.0, wall="bandwidth", watts=200.0,
                 predicted_range=(180.0, 300.0))
    rows = []
    for i in range(20):  # 100 s → 109.5 s at 2 Hz; tok/s 190 / 210, concurrency 1.5 / 2.5
        if i == 12:  # after the first settled-window reading (105 s): 1 met, 3 missed, 4 tokens each
            for j, ttft in enumerate((60, 160, 170, 180)):
                _add(f, 8 + j, ttft, 18 + j)
        rows.append(t.tick(lv, _reading(100 + i / 2, f, 190.0 + 20 * (i % 2), 1.5 + (i % 2), **extra)))
    r = rows[-1]
    tpots = [(10 + i) / 1e3 for i in range(12)]
    ttfts = [(40 + i) / 1e3 for i in range(6)] + [0.156, 0.157, 0.060, 0.160, 0.170, 0.180]
    # the settled window's goodput: since 105 s 4 finished (16 tokens), 1 met (4 tokens), × 200 tok/s
    want = ST.StepRow("K=2 B=1 http", "http", 2, 1, True, "settled", 2.0, 200.0, 1 / float(np.median(tpots)),
                      float(np.median(tpots)), float(np.median(ttfts)), float(np.percentile(ttfts, 99)), 12,
                      1 * 200 / 16, 4 * 200 / 16, 1 / 4, 7_000, 12.5, 240.0, "bandwidth", 200.0,
                      1.1 / (200.0 * 3600) * 1e6, predicted_low=180.0, predicted_high=300.0)
    assert _same(r, want)
    assert [x.settled for x in rows].index(True) == 19  # 10 readings from 105 s: 109.5 s
    # settled, the row goes on with the readings: the next one counts (the last 10 of 190/210 and one 250)
    r2 = t.tick(lv, _reading(110.0, f, 250.0, 2.0, **extra))
    assert r2.agg_tps == pytest.approx((4 * 190 + 5 * 210 + 250) / 10) and r2.settled


def _same(got: ST.StepRow, want: ST.StepRow) -> bool:
    for name in ST.StepRow.__dataclass_fields__:
        a, b = getattr(got, name), getattr(want, name)
        if isinstance(b, float):
            assert a == pytest.approx(b, rel=1e-9), name
        else:
            assert a == b, name
    return True


def test_goodput_starts_again_with_a_new_statistics_window_and_its_figures_are_the_new_ones():
    slo = SLO("s", "s", ttft_s=0.1)
    t = ST.StepTable(slo=slo)
    lv = ST.StepLevel("L", "instances", 1, 1, 0)
    f1 = S.LevelFigures(slo)
    for i in range(12):
        _add(f1, i, 50, 10)
    assert _settle(t, lv, f1, 0.0, 20).settled
    f2 = S.LevelFigures(slo)  # statistics reset (the `r` key): a new window, as many requests, slower and late
    for i in range(12):
        _add(f2, 100 + i, 200, 30)
    row = t.tick(lv, _reading(10.0, f2, 100.0))
    assert row.tpot_p50 == pytest.approx(0.030) and row.ttft_p50 == pytest.approx(0.200)
    assert row.goodput_tps == 0.0 and row.attainment == 0.0  # since f2's first reading: none met, none since
    for j in range(4):  # then 4 more, 2 of them met: counted since the new window's first reading
        _add(f2, 200 + j, 50 if j < 2 else 200, 30)
    row = t.tick(lv, _reading(10.5, f2, 100.0))
    assert (row.goodput_rps, row.goodput_tps, row.attainment) == pytest.approx((2 * 100 / 16, 8 * 100 / 16, 0.5))


def test_a_new_level_recomputes_its_request_figures_whatever_their_object_and_version():
    t = ST.StepTable()
    f = S.LevelFigures()
    for i in range(8):
        _add(f, i, 50, 10)
    a = t.tick(ST.StepLevel("A", "instances", 1, 1, 0), _reading(1.0, f, 100.0))
    assert a.tpot_p50 == pytest.approx(0.010)
    # the next level's figures at the same address and version (CPython reuses a freed object's id): refilled
    g = S.LevelFigures()
    for i in range(8):
        _add(g, i, 80, 20)
    f.__dict__.update(g.__dict__)
    b = t.tick(ST.StepLevel("B", "instances", 2, 1, 2 * NS), _reading(2.0, f, 100.0))
    assert b.tpot_p50 == pytest.approx(0.020) and b.ttft_p50 == pytest.approx(0.080)


def test_request_figures_are_recomputed_only_when_a_request_ended(monkeypatch):
    t = ST.StepTable()
    lv = ST.StepLevel("A", "instances", 1, 1, 0)
    f = S.LevelFigures()
    for i in range(8):
        _add(f, i, 50, 10)
    calls = []
    real = ST.M.percentile
    monkeypatch.setattr(ST.M, "percentile", lambda xs, q: calls.append(q) or real(xs, q))
    for i in range(4):
        t.tick(lv, _reading(i / 2, f, 100.0))
    assert calls == [50, 50, 99]  # TPOT p50, TTFT p50 and p99: once
    row = t.current
    assert (row.goodput_rps, row.goodput_tps, row.attainment) == (None, None, None)  # no SLO: no goodput
    assert (row.predicted_low, row.predicted_high) == (None, None)  # a measured chip: no range
    _add(f, 9, 50, 10)
    t.tick(lv, _reading(2.0, f, 100.0))
    assert calls == [50, 50, 99] * 2


def test_what_a_level_waits_for_in_words_at_each_edge():
    few, eight = S.LevelFigures(), S.LevelFigures()
    for i in range(3):
        _add(few, i, 50, 10)
    for i in range(8):
        _add(eight, i, 50, 10)
    lv = ST.StepLevel("L", "instances", 1, 1, 100 * NS)
    assert ST.StepTable().tick(lv, _reading(101.0, few, 100.0)).progress == \
        "settling: 4 s of warmup, 3/8 requests, 0/10 readings"
    # not every worker ready 10 s in (none settled yet): the warmup still pending, its seconds none left
    assert ST.StepTable().tick(lv, _reading(110.0, few, 100.0, steady=False)).progress == \
        "settling: 0 s of warmup, 3/8 requests, 0/10 readings"
    assert ST.StepTable().tick(lv, _reading(105.0, eight, 100.0)).progress == "settling: 1/10 readings"  # 5 s: done
    assert _settle(ST.StepTable(), lv, eight, 105.0, 10, tps=0.0).progress == "settling: tokens flowing"


def _progress(tps: list[float]) -> str:
    t = ST.StepTable()
    lv = ST.StepLevel("L", "instances", 1, 1, 0)
    f = S.LevelFigures()
    for i in range(8):
        _add(f, i, 50, 10)
    for i, x in enumerate(tps):
        row = t.tick(lv, _reading(5.0 + i / 2, f, x))
    return row.progress


def test_cv_and_trend_exactly_at_their_bounds_still_wait():
    # deviations ±15 twice over a mean of 100: sample stdev √(900 ÷ 9) = 10, CV 0.10 = SETTLE_CV exactly
    assert _progress([115.0, 85.0, 115.0, 85.0] + [100.0] * 6) == "settling: tok/s CV 0.10 ≥ 0.10"
    # halves 97.5 and 102.5 over the mean 100: a trend of 5 % = SETTLE_TREND exactly (CV 0.026)
    assert _progress([97.5] * 5 + [102.5] * 5) == "settling: tok/s rising 5% over the last 10 readings"
    assert _progress([102.5] * 5 + [97.5] * 5) == "settling: tok/s falling 5% over the last 10 readings"
    assert _progress([100.0] * 10) == "settled"


def test_an_unknown_thermal_state_then_a_known_one_is_not_a_change():
    t = ST.StepTable()
    lv = ST.StepLevel("L", "instances", 1, 1, 0)
    f = S.LevelFigures()
    for i in range(8):
        _add(f, i, 50, 10)
    first = t.tick(lv, _reading(1.0, f, 100.0, thermal="nominal (no warning recorded)"))
    assert "thermal" not in first.progress  # the first reading is not a change
    t2 = ST.StepTable()
    _settle(t2, lv, f, 0.0, 14, thermal="unknown")  # no sensor until 7 s
    row = _settle(t2, lv, f, 7.0, 6, thermal="nominal (CPU speed limit 100 %)")
    assert row.settled  # 9.5 s: 10 readings from 5 s, none of them another machine's
    # the detail in brackets changes, the state does not: no change either
    row = _settle(t2, lv, f, 10.0, 2, thermal="nominal (no warning recorded)")
    assert row.settled


def test_a_thermal_change_counts_the_requests_after_it_and_waits_its_seconds():
    t = ST.StepTable()
    lv = ST.StepLevel("L", "instances", 1, 1, 0)
    f = S.LevelFigures()
    for i in range(10):
        _add(f, i, 50, 10)
    for i in range(2):  # good, one token: no TPOT (good 12, TPOTs 10)
        _add(f, 10 + i, 50, 10, tokens=1)
    assert _settle(t, lv, f, 0.0, 20, thermal="nominal").settled
    hot = t.tick(lv, _reading(10.0, f, 100.0, thermal="throttled (CPU speed limit 60 %)"))
    assert (hot.requests, hot.tpot_p50, hot.per_user_tps, hot.ttft_p50, hot.ttft_p99) == (0, None, None, None, None)
    for i, (ttft, tpot) in enumerate(((80, 30), (90, 30), (85, 31))):
        _add(f, 20 + i, ttft, tpot)
    _add(f, 30, 70, 10, tokens=1)
    row = t.tick(lv, _reading(11.0, f, 100.0, thermal="throttled (CPU speed limit 60 %)"))
    assert row.progress.startswith("settling: thermal state now throttled (1 s ago)")
    assert row.requests == 4 and row.tpot_p50 == pytest.approx(0.030)
    assert (row.ttft_p50, row.ttft_p99) == pytest.approx((0.0825, float(np.percentile([80, 90, 85, 70], 99)) / 1e3))
    at5 = t.tick(lv, _reading(15.0, f, 100.0, thermal="throttled (CPU speed limit 60 %)"))
    assert "thermal" not in at5.progress  # 5 s after the change: no longer waited for
    # a change at the very start of the next level: all of that level's readings come after it
    nxt = t.tick(ST.StepLevel("M", "instances", 2, 1, 20 * NS), _reading(20.0, f, 100.0, thermal="nominal"))
    assert "thermal" not in nxt.progress


def test_the_star_by_goodput_a_level_none_of_whose_tokens_met_the_slo_is_not_best():
    slo = SLO("s", "s", ttft_s=0.1)
    t = ST.StepTable(slo=slo)
    assert t.table() == []
    fa, fb = S.LevelFigures(slo), S.LevelFigures(slo)
    for i in range(10):
        _add(fa, i, 500, 10)  # every one missed: goodput 0 at 300 tok/s
        _add(fb, i, 50 if i == 0 else 500, 10)  # one of ten met: 0.1 of 5 tok/s
    _settle(t, ST.StepLevel("A", "instances", 1, 1, 0), fa, 0.0, 20, tps=300.0)
    _settle(t, ST.StepLevel("B", "instances", 2, 1, 20 * NS), fb, 20.0, 20, tps=5.0)
    rows = t.table()
    assert [(r.level, r.goodput_tps, r.best) for r in rows] == [("A", 0.0, False), ("B", pytest.approx(0.5), True)]


def test_a_level_left_unsettled_keeps_its_own_prediction_while_the_next_step_is_pending():
    """`+` asks K = 2: the controller predicts K = 2 (51 tok/s) at once, while the K = 1 level goes on until the new
    worker is ready (readings not steady). The K = 1 row, left before it settled, shows K = 1's 43, not 51; the
    K = 2 row takes its own from its first reading."""
    t = ST.StepTable()
    one = ST.StepLevel("K=1 B=1 instances", "instances", 1, 1, 0)
    f = S.LevelFigures(None)
    _add(f, 0, 40.0, 23.0)
    for i in range(4):  # 2 s of steady readings: too soon to settle
        row = t.tick(one, _reading(i / 2, f, 42.0, predicted_tps=43.0, predicted_range=(40.0, 46.0)))
    assert not row.settled and row.predicted_tps == 43.0
    row = t.tick(one, _reading(2.0, f, 42.0, steady=False, predicted_tps=51.0, predicted_range=(48.0, 54.0)))
    assert (row.predicted_tps, row.predicted_low, row.predicted_high) == (43.0, 40.0, 46.0)
    two = ST.StepLevel("K=2 B=1 instances", "instances", 2, 1, round(2.5 * NS))
    new = t.tick(two, _reading(2.5, S.LevelFigures(None), 0.0, steady=False, predicted_tps=51.0,
                               predicted_range=(48.0, 54.0)))
    assert [r.predicted_tps for r in t.rows] == [43.0] and t.rows[0].progress.startswith(ST.LEFT_UNSETTLED)
    assert (new.predicted_tps, new.predicted_low, new.predicted_high) == (51.0, 48.0, 54.0)
