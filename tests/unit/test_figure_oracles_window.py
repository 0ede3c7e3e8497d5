"""The live statistics against cases worked by hand (issue 56: mutmut's survivors in control/live/stats.py): a level's
counts and its kept lists (KEEP to 2 × KEEP), the window of a load younger than the window with tokens from before
it, the streams decoding at once from a prefill before their first token, the stepping read over the last 2 s and
at most 64 tokens a stream, the records kept slimmed, the levels' rows and what a reset or an SLO changes. Fast:
benchmarks/mutation.py's test command."""
from __future__ import annotations

from array import array

import pytest
from test_figure_oracles_live import rec

from measure.control.live import stats as S
from measure.core import metrics as M
from measure.core import serving
from presets import SLO

MS = 1_000_000
NS = 1_000_000_000
SLO_100 = SLO("s", "s", ttft_s=0.1)


def test_a_levels_counts_by_hand():
    f = S.LevelFigures(SLO_100)
    assert f.counts() == S.Counts(0, 0, 0, 0) and f.version == 0
    versions = []
    for i, (ttft, n) in enumerate(((50, 3), (60, 2), (300, 4))):  # two met the 100 ms bound (5 tokens), one not
        f.add(rec(i, 0, 0, [ttft * MS + j * MS for j in range(n)], (ttft + n) * MS))
        versions.append(f.version)
    f.add(rec(3, 0, 0, [10 * MS, 12 * MS], 20 * MS, error="cut"))  # failed with tokens: finished, not good
    f.add(rec(4, 0, 0, [], 5 * MS, error="refused"))
    versions.append(f.version)
    assert versions == sorted(set(versions))  # rises with every request added
    assert f.counts() == S.Counts(5, 2, 3 + 2 + 4 + 2 + 0, 5)
    assert (f.errors, f.good, f.tpot_added, len(f.tpot), len(f.ttft)) == (2, 3, 3, 3, 3)
    assert f.tpot == pytest.approx([0.001, 0.001, 0.001]) and f.ttft == pytest.approx([0.05, 0.06, 0.3])
    f.add(rec(5, 0, 0, [7 * MS], 8 * MS))  # one token: good, no TPOT
    assert (f.good, f.tpot_added) == (4, 3)


def test_the_last_20_prompt_lengths_and_the_last_100_requests_gaps():
    f = S.LevelFigures()
    for i in range(25):
        r = rec(i, 0, 0, [MS, 2 * MS], 3 * MS)
        r.prompt_tokens = 100 + i
        f.add(r)
    assert list(f.prompt_tokens) == list(range(105, 125))
    st = S.LiveStats(window_s=5.0)
    st.load_started(0)
    for i in range(250):  # 150 requests with a 100 ms gap, then 100 with 1 ms: the ITL pools the last 100
        gap = 100 if i < 150 else 1
        st.add_record(rec(i, 0, 0, [MS, (1 + gap) * MS], (2 + gap) * MS))
    assert st.request_numbers()["itl_p50"] == pytest.approx(0.001)


def test_the_lists_and_the_records_hold_the_last_keep_to_twice_keep():
    st = S.LiveStats(window_s=5.0)
    st.load_started(0)
    k = S.KEEP
    for i in range(2 * k):
        st.add_record(rec(i, 0, 0, [i * MS + MS, i * MS + 3 * MS], i * MS + 4 * MS))
    f = st.figures
    assert len(st.records()) == len(f.ttft) == len(f.ttft_engine) == len(f.tpot) == 2 * k  # not trimmed yet
    st.add_record(rec(2 * k, 0, 0, [MS, 2 * MS], 3 * MS))
    assert len(st.records()) == len(f.ttft) == len(f.ttft_engine) == len(f.tpot) == k  # over: the last KEEP
    assert [r.request_id for r in st.records()] == list(range(k + 1, 2 * k + 1))
    assert f.ttft[0] == pytest.approx((k + 1) * 1e-3 + 1e-3) and f.tpot_added == 2 * k + 1
    assert f.counts().finished == 2 * k + 1  # the counts are over every request


def test_records_are_kept_slimmed():
    st = S.LiveStats(window_s=5.0)
    r = rec(1, 0, 0, [MS, 2 * MS], 3 * MS, extra={"endpoint": "a"})
    r.server_view = {"running": 2}
    st.add_record(r)
    (kept,) = st.records()
    assert isinstance(kept.token_ns, array) and list(kept.token_ns) == [MS, 2 * MS]
    assert kept.extra is None and kept.server_view is None and kept.request_id == 1
    assert r.extra == {"endpoint": "a"} and r.token_ns == [MS, 2 * MS]  # the record given is left as it was


def test_the_first_level_starts_with_the_load_unless_a_step_came_first():
    st = S.LiveStats(window_s=5.0)
    st.load_started(3 * NS)
    assert st.level_start_ns == 3 * NS
    st2 = S.LiveStats(window_s=5.0)
    st2.new_level("K=2", 2 * NS)  # a step before the load started (nothing finished yet: no row)
    assert st2.levels == [] and st2.level_start_ns == 2 * NS
    st2.load_started(3 * NS)
    assert st2.level_start_ns == 2 * NS and st2.load_start_ns == 3 * NS


def test_levels_rows_reset_and_the_slo_carry_on():
    st = S.LiveStats(window_s=5.0, slo=SLO_100)
    st.load_started(0)
    st.add_record(rec(1, 0, 0, [50 * MS, 51 * MS], 52 * MS))
    n1 = st.request_numbers()
    assert n1["ttft_p50"] == pytest.approx(0.05) and st.figures.met == 1
    st.new_level("K=2", 100 * MS)
    assert st.levels[-1]["start_ns"] == 0 and st.levels[-1]["end_ns"] == 100 * MS
    st.add_record(rec(2, 200 * MS, 200 * MS, [290 * MS, 291 * MS], 292 * MS))  # the new level's SLO still judges
    assert st.figures.met == 1 and st.figures.version == 1
    assert st.request_numbers()["ttft_p50"] == pytest.approx(0.09)  # same version, a new level: recomputed
    st.set_slo(SLO("t", "t", ttft_s=0.01))
    st.add_record(rec(3, 300 * MS, 300 * MS, [350 * MS], 351 * MS))  # 50 ms: misses the new bound
    st.add_record(rec(5, 300 * MS, 300 * MS, [305 * MS], 306 * MS))  # 5 ms: meets it
    assert st.figures.met == 2 and st.figures.finished == 3
    st.reset(400 * MS)
    assert st.level_start_ns == 400 * MS
    st.add_record(rec(4, 500 * MS, 500 * MS, [505 * MS], 506 * MS))  # judged by the SLO set, counted after the reset
    assert (st.figures.finished, st.figures.met, len(st.records())) == (1, 1, 1)


def test_a_level_of_failed_requests_has_no_itl():
    st = S.LiveStats(window_s=5.0)
    st.add_record(rec(1, 0, 0, [], 5 * MS, error="x"))
    n = st.request_numbers()
    assert (n["itl_p50"], n["ttft_p50"], n["requests"], n["errors"]) == (None, None, 0, 1)


def _window_case() -> tuple[S.LiveStats, S.Window]:
    """A load that began at 10 s, read at 12 s with a 5 s window (so its span is 2 s, from 10 s). In ms:
    a request of the level (scheduled 10 000, first token 10 300: the level's prefill is 300 ms) ended 10 400;
    stream 1 (worker 0) sent at 10 500, tokens 10 700 · 10 800 · 10 900, still open; stream 2 (worker 0) tokens
    10 750 · 10 950; stream 3 (worker 1) tokens 9 500 (before the load began) · 10 200, a batch of two that came
    out of order; stream 4 (worker 1) 11 000 · 11 100; stream 6 (worker 2) sent at 10 000, tokens 10 600 · 10 650."""
    st = S.LiveStats(window_s=5.0)
    st.load_started(10 * NS)
    st.add_record(rec(9, 10_000 * MS, 10_000 * MS, [10_300 * MS, 10_400 * MS], 10_400 * MS))
    st.add_started(1, 10_500 * MS)
    st.add_tokens(0, 1, [10_700 * MS])
    st.add_tokens(0, 1, [10_800 * MS, 10_900 * MS])
    st.add_tokens(0, 2, [10_750 * MS, 10_950 * MS])
    st.add_tokens(1, 3, [9_500 * MS])
    st.add_tokens(1, 4, [11_000 * MS])
    st.add_tokens(1, 4, [11_100 * MS])
    st.add_tokens(1, 3, [10_200 * MS, 9_900 * MS])  # after 9 500, out of order within the batch
    st.add_started(5, 11_500 * MS)  # in service, no token yet
    st.add_started(6, 10_000 * MS)
    st.add_tokens(2, 6, [10_600 * MS, 10_650 * MS])
    return st, st.window(12_000 * MS)


def test_the_window_of_a_young_load_by_hand():
    st, w = _window_case()
    assert w.span_s == pytest.approx(2.0)
    every = [10_700, 10_800, 10_900, 10_750, 10_950, 9_500, 9_900, 10_200, 11_000, 11_100, 10_600, 10_650]
    # tokens from the load's start (10 s) on: 9 500 and 9 900 are in the window's 5 s, not in its 2 s span
    assert w.agg_tps == M.aggregate_tps_from_times([t * MS for t in every], 10_000 * MS, 12_000 * MS + 1)
    assert w.agg_tps == pytest.approx(10 / 2.0)
    assert w.per_worker_tps == pytest.approx({0: 5 / 2.0, 1: 5 / 2.0, 2: 2 / 2.0})
    assert w.steps_per_s == pytest.approx({0: 5 / 2.0, 1: 5 / 2.0, 2: 2 / 2.0})
    # TPOT per stream: 0.1, 0.2, (10 200 − 9 500) ÷ 2 = 0.35, 0.1, 0.05
    assert sorted(w.tpots) == pytest.approx([0.05, 0.1, 0.1, 0.2, 0.35])
    assert w.tpot_by_worker == pytest.approx({0: 0.15, 1: 0.225, 2: 0.05})
    # in service over [10 s, 12 s): the request 10 000 → 10 400, stream 1 from 10 500 on, request 5 from 11 500,
    # stream 6 from 10 000
    assert w.concurrency == pytest.approx((0.4 + 1.5 + 0.5 + 2.0) / 2.0)
    # decoding: each stream from 300 ms (the level's prefill) before its first token, never before it was sent (its
    # first token where that is not known), to its last, inside the span: stream 1 from 10 500 (sent) to 10 900;
    # 2 from 10 750; 3 from 9 500 (clipped to 10 000) to 10 200; 4 from 11 000; 6 from 10 300 (its prefill) to 10 650
    assert w.decoding == pytest.approx((0.4 + 0.2 + 0.2 + 0.1 + 0.35) / 2.0)
    assert w.stepped is None  # under MIN_GAPS gaps between two streams' tokens


def test_decoding_without_a_level_request_counts_from_the_first_token():
    st = S.LiveStats(window_s=5.0)
    st.load_started(0)
    st.add_started(1, 500 * MS)
    st.add_tokens(0, 1, [700 * MS, 900 * MS])
    w = st.window(1_000 * MS)
    assert w.decoding == pytest.approx(0.2) and w.concurrency == pytest.approx(0.5)
    assert S.LiveStats(window_s=5.0).window(NS).decoding == 0.0  # no load: nothing
    st2 = S.LiveStats(window_s=5.0)
    st2.load_started(0)
    st2.add_tokens(0, 1, [100 * MS])
    w2 = st2.window(NS)
    assert (w2.decoding, w2.concurrency, w2.stepped) == (0.0, 0.0, None)  # one token: no TPOT, nothing in service


def test_the_stepping_is_read_over_the_last_2_s_and_64_tokens_a_stream():
    # two streams, a token each every 20 ms over 5 s: B 10 ms after A (turns) until 3 720 ms, then 1 ms after
    # (one step); the last 2 s hold 100 tokens of each, the last 64 only the steps shared
    st = S.LiveStats(window_s=5.0)
    st.load_started(0)
    a = [i * 20 * MS for i in range(250)]
    b = [t + (10 if t < 3_720 * MS else 1) * MS for t in a]
    st.add_tokens(0, 1, a)
    st.add_tokens(1, 2, b)
    w = st.window(5_000 * MS)
    recent = [[t for t in a if t >= 3_720 * MS], [t for t in b if t >= 3_721 * MS]]
    assert [len(x) for x in recent] == [S.STEPPED_TOKENS] * 2
    assert serving.steady_tpot(recent[0]) == serving.steady_tpot(recent[1]) == 20 * MS
    want = serving.stepped_share(recent, w.decoding)
    assert want == pytest.approx(64 / 127) and w.stepped == pytest.approx(want)  # 1 ms short, 19 ms not
    assert w.decoding == pytest.approx((a[-1] - a[0] + b[-1] - b[0]) / (5_000 * MS))


def test_the_stepping_is_judged_against_the_median_tpot():
    # three streams in the last 2 s: A a token every 10 ms, B every 20 ms (7 ms after A's), C two tokens 1 s apart:
    # TPOTs 10, 20 and 1 000 ms, their median 20 ms (a p51 would be 39.6 ms and call every gap a shared step)
    st = S.LiveStats(window_s=5.0)
    st.load_started(0)
    a = [1_000 * MS + i * 10 * MS for i in range(100)]
    b = [1_007 * MS + i * 20 * MS for i in range(50)]
    c = [0, 1_000 * MS]
    for wid, (rid, ts) in enumerate(((1, a), (2, b), (3, c))):
        st.add_tokens(wid, rid, ts)
    w = st.window(2_000 * MS)
    assert sorted(w.tpots) == pytest.approx([0.01, 0.02, 1.0])
    want = serving.stepped_share([a[-S.STEPPED_TOKENS:], b, c], w.decoding)  # steady TPOTs 10, 20, 1 000 ms
    assert w.stepped == pytest.approx(want) and want < 0.5  # the 7 ms gaps are not one step's


def test_a_request_that_ended_at_the_windows_first_instant_stays_for_an_earlier_reading():
    st = S.LiveStats(window_s=1.0)
    st.load_started(0)
    st.add_record(rec(1, 0, 500 * MS, [600 * MS], 1_000 * MS))  # in service 0.5 → 1 s
    assert st.window(2_000 * MS).concurrency == 0.0  # [1 s, 2 s]: it ended at the first instant
    # a replay's reading back at 1.5 s ([0.5 s, 1.5 s]): the request is still there, 0.5 s of it in service
    assert st.window(1_500 * MS).concurrency == pytest.approx(0.5, rel=1e-6)


def test_a_record_that_never_ended_adds_no_time_in_service():
    st = S.LiveStats(window_s=1.0)
    st.load_started(0)
    st.add_started(1, 500 * MS)
    st.add_record(rec(1, 0, 500 * MS, [600 * MS], None, error="cut"))  # ended without a t_done: no span
    assert st.window(1_000 * MS).concurrency == 0.0
