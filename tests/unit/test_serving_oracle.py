"""Oracles for the serving verdicts (measure/core/serving.py; docs/design/server-vs-engine.md): every figure a
verdict rests on worked by hand on a tiny case, each threshold tried on both sides, each verdict's reason read for
the figures it must name. Pure: no server, no timing (benchmarks/mutation.py mutates the module against these)."""
from __future__ import annotations

import pytest

from measure.core import serving as S
from measure.core.records import RequestRecord

MS = 1_000_000


def rec(rid, b, started_ms, tokens_ms, *, error=None, prompt=4, running=None, view=None):
    ts = [round(t * MS) for t in tokens_ms]
    return RequestRecord("r", rid, "http", "http", "m", 0, 1, b, prompt_tokens=prompt, output_tokens=len(ts),
                         t_started_ns=None if started_ms is None else round(started_ms * MS),
                         t_first_token_ns=ts[0] if ts else None, t_done_ns=ts[-1] if ts else None, token_ns=ts,
                         error=error, server_view=view if view is not None else
                         (None if running is None else {"running": running}))


# --- the stepping of the streams' tokens ---------------------------------------------------------------------

def test_interleaved_is_at_most_0_7_of_a_batchers_share():
    # a batcher at served 2 steps (2 − 1) ÷ 2 = 0.5 of its cross-stream gaps together; 0.7 × 0.5 = 0.35
    assert S.interleaved(0.35, 2.0) and not S.interleaved(0.3501, 2.0)
    # served 4: 0.7 × 3/4 = 0.525
    assert S.interleaved(0.52, 4.0) and not S.interleaved(0.53, 4.0)
    assert S.interleaved(0.0, 1.01)  # 0.7 × 0.01/1.01 ≈ 0.0069
    assert not S.interleaved(0.0, 1.0)  # one stream served: nothing to take turns between
    assert not S.interleaved(None, 2.0) and not S.interleaved(0.1, None)


def test_steady_tpot_leaves_out_the_stalls():
    assert S.steady_tpot([]) is None and S.steady_tpot([5]) is None
    assert S.steady_tpot([0, 7]) == 7
    assert S.steady_tpot([0, 10, 20, 30]) == 10
    # gaps 10, 10, 10, 90: mean 30, a stall is over 3 × 30 = 90: 90 is kept, mean of all four = 30
    assert S.steady_tpot([0, 10, 20, 30, 120]) == 30
    # gaps 10, 10, 10, 91: mean 30.25, 3 × = 90.75 < 91: left out, the rest's mean 10
    assert S.steady_tpot([0, 10, 20, 30, 121]) == 10


def _pair(offset_ms, n=11, gap_ms=10.0):
    a = [round(i * gap_ms * MS) for i in range(n)]
    return a, [t + round(offset_ms * MS) for t in a]


def test_stepped_share_counts_cross_stream_gaps_under_a_quarter_step():
    # 11 tokens each, 10 ms apart, the second stream 1 ms behind: 21 gaps between the two (a→b 1 ms × 11, b→a
    # 9 ms × 10); short is < 0.5 × 10 ms ÷ 2 served = 2.5 ms: 11 of 21
    a, b = _pair(1.0)
    assert S.stepped_share([a, b], 2.0) == pytest.approx(11 / 21)
    assert S.stepped_share([a, _pair(2.4)[1]], 2.0) == pytest.approx(11 / 21)
    assert S.stepped_share([a, _pair(2.5)[1]], 2.0) == 0.0  # exactly a quarter step: not within it
    # served 1.5: the quarter is 0.5 × 10 ÷ 1.5 = 3.33 ms; served below 1 counts as 1 (5 ms)
    assert S.stepped_share([a, _pair(3.3)[1]], 1.5) == pytest.approx(11 / 21)
    assert S.stepped_share([a, _pair(3.4)[1]], 1.5) == 0.0
    assert S.stepped_share([a, _pair(4.9)[1]], 0.5) == pytest.approx(11 / 21)
    assert S.stepped_share([a, _pair(5.0)[1]], 0.5) == 0.0
    assert S.stepped_share([a, b], 0.0) is None and S.stepped_share([a, b], -1.0) is None


def test_stepped_share_needs_twenty_gaps_between_streams_and_reads_the_median_tpot():
    a, b = _pair(1.0, n=10)  # 19 gaps between the two: too few
    assert S.stepped_share([a, b], 2.0) is None
    a = a + [a[-1] + 10 * MS]  # a0 b0 a1 b1 … a9 b9 a10: 20 gaps, a→b 1 ms (10 short), b→a 9 ms
    assert S.stepped_share([a, b], 2.0) == 0.5
    # a token of one stream after another of its own is not a gap between streams: still 20
    assert S.stepped_share([a + [a[-1] + 3 * MS], b], 2.0) == 0.5
    # the quarter step is the median stream's TPOT: two streams at 10 ms and one at 40 ms → 10 ms, quarter ÷ 3
    # served = 0.5 × 10 ÷ 3 = 1.67 ms; with the mean (20 ms) it would be 3.3 ms
    a, b = _pair(1.0)
    c = [round(200.5 * MS + i * 40 * MS) for i in range(3)]  # far from the others' tokens
    fast = S.stepped_share([a, b], 3.0)
    assert fast == pytest.approx(11 / 21)  # 1 ms < 1.67 ms
    share = S.stepped_share([a, _pair(2.0)[1], c], 3.0)  # 2 ms apart: over 1.67, under 3.3
    assert share == 0.0
    assert S.stepped_share([[], [1]], 2.0) is None  # no TPOT


def test_decoding_concurrency_by_hand():
    streams = [[0, 100], [50, 150]]
    assert S.decoding_concurrency(streams, 0, 200) == pytest.approx(200 / 200)
    # [60, 120): 100 → 40 of the first, 60 of the second: 100 ÷ 60
    assert S.decoding_concurrency(streams, 60, 120) == pytest.approx(100 / 60)
    assert S.decoding_concurrency(streams + [[7]], 0, 200) == pytest.approx(1.0)  # one token: no span
    assert S.decoding_concurrency([[300, 400]], 0, 200) == 0.0  # outside the window
    assert S.decoding_concurrency(streams, 200, 200) is None and S.decoding_concurrency(streams, 201, 200) is None


def test_serving_spans_begin_a_prefill_before_the_first_token_never_before_it_was_sent():
    assert S.serving_spans([rec(1, 2, 300, [400, 410])], 400 * MS) == [[300 * MS, 410 * MS]]
    assert S.serving_spans([rec(1, 2, 300, [400, 410])], 50 * MS) == [[350 * MS, 410 * MS]]
    assert S.serving_spans([rec(1, 2, 300, [400, 410])], 0) == [[400 * MS, 410 * MS]]
    assert S.serving_spans([rec(1, 2, None, [400, 410])], 50 * MS) == [[400 * MS, 410 * MS]]  # sent unknown
    assert S.serving_spans([rec(1, 2, 300, [])], 50 * MS) == []


def test_prefill_of_reads_b1_median_else_the_shortest():
    alone = [rec(i, 1, 0, [t, t + 10]) for i, t in enumerate((100, 300, 200))]
    busy = [rec(9, 2, 0, [50, 60])]
    assert S.prefill_of(alone + busy) == 200 * MS  # B = 1's median, the shorter B = 2 TTFT not read
    assert S.prefill_of(alone[:2]) == 200 * MS  # median of 100 and 300
    assert S.prefill_of([rec(1, 2, 0, [300, 310]), rec(2, 2, 10, [130, 140])]) == 120 * MS  # the shortest
    assert S.prefill_of([rec(1, 2, 0, []), rec(2, 2, None, [5, 6])]) == 0  # none has both ends
    assert S.prefill_of([rec(1, 2, 10, [5, 6])]) == 0  # a first token before it was sent: 0, not negative
    assert S.prefill_of([]) == 0


def test_gauge_of_is_the_median_of_readings_at_least_one_half():
    recs = [rec(i, 2, 0, [1, 2], running=g) for i, g in enumerate((2, 3, 4, 0.49))]
    assert S.gauge_of(recs) == 3.0
    assert S.gauge_of([rec(1, 2, 0, [1, 2], running=0.5)]) == 0.5
    assert S.gauge_of([rec(1, 2, 0, [1, 2], running=0.49)]) is None
    assert S.gauge_of([rec(1, 2, 0, [1, 2], view={"running": "3"}), rec(2, 2, 0, [1, 2])]) is None
    assert S.gauge_of([rec(1, 2, 0, [1, 2], view={"waiting": 3})]) is None


def test_concurrency_of_by_hand():
    # two streams sent at 0 and 50 ms, done at 100 and 150: window [0, 150 ms + 1 ns)
    recs = [rec(1, 2, 0, [40, 100]), rec(2, 2, 50, [90, 150])]
    span = 150 * MS + 1
    opened, served = S.concurrency_of(recs)
    assert opened == pytest.approx((100 + 100) * MS / span)
    assert served == pytest.approx((60 + 60) * MS / span)  # first token → last only
    opened, served = S.concurrency_of(recs, 30 * MS)  # each span begun 30 ms before its first token
    assert served == pytest.approx((90 + 90) * MS / span)  # 10→100 and 60→150
    assert S.concurrency_of(recs, 50 * MS)[1] == pytest.approx((100 + 100) * MS / span)  # never before it was sent
    assert S.concurrency_of([rec(1, 2, None, [1, 2])]) == (None, None)
    assert S.concurrency_of([]) == (None, None)


# --- the live verdict ---------------------------------------------------------------------------------------

def test_batching_live_thresholds():
    assert S.batching(1.79, 1.0, None) is None  # fewer than 1.8 open
    assert S.batching(2.0, 1.0, None, span_s=2.99) is None  # the window too short
    assert S.batching(2.0, None, None) is None and S.batching(2.0, None, 0.49) is None  # nothing to read
    v = S.batching(1.8, 1.26, None)  # 1.26 ≤ 1.3 and ≤ 0.7 × 1.8 = 1.26
    assert v == S.Batching("serialises", 1.26, 1.8, "token timing")
    assert S.batching(1.8, 1.27, None).verdict == "batches"  # over 0.7 of the open
    assert S.batching(4.0, 1.3, None).verdict == "serialises" and S.batching(4.0, 1.31, None).verdict == "batches"
    # the gauge where it is at least the token timing; a gauge under 0.5 is not read
    assert S.batching(2.0, 1.0, 2.0) == S.Batching("batches", 2.0, 2.0, "its /metrics")
    assert S.batching(2.0, 1.0, 1.0) == S.Batching("serialises", 1.0, 2.0, "its /metrics")
    assert S.batching(2.0, 1.9, 1.0) == S.Batching("batches", 1.9, 2.0, "token timing")
    assert S.batching(2.0, 1.0, 0.4) == S.Batching("serialises", 1.0, 2.0, "token timing")
    assert S.batching(2.0, None, 1.9) == S.Batching("batches", 1.9, 2.0, "its /metrics")
    # served at once, its tokens not stepped together: 0.35 ≤ 0.7 × 1/2
    assert S.batching(2.0, 2.0, None, stepped=0.35).verdict == "interleaves"
    assert S.batching(2.0, 2.0, None, stepped=0.36).verdict == "batches"
    assert S.batching(2.0, 1.0, None, stepped=0.0).verdict == "serialises"  # one at a time first


# --- server against engine ------------------------------------------------------------------------------------

def cell(b, tps, ttft=100.0, tpot=10.0, completed=8, errors=0):
    return {"b": b, "output_throughput": tps, "median_ttft_ms": ttft, "median_tpot_ms": tpot, "completed": completed,
            "errors": errors}


def test_rows_pair_the_cells_by_b_with_the_records_figures():
    engine = [cell(1, 50.0, 100.0, 20.0), cell(2, 90.0, 150.0, 22.0)]
    server = [cell(2, 80.0, 300.0, 25.0, completed=7, errors=1), cell(4, 120.0)]
    recs = [rec(1, 2, 0, [40, 100], prompt=5, running=2), rec(2, 2, 50, [90, 150], prompt=6, running=2),
            rec(3, 2, 60, [], prompt=9, error="timeout")]
    mine = [rec(7, 2, 0, [40, 100], prompt=5), rec(8, 2, 50, [90, 150], prompt=6)]
    out = S.rows(engine, server, recs, mine)
    assert [r.b for r in out] == [1, 2, 4]
    one, two, four = out
    assert (one.engine_tps, one.server_tps, one.engine_tpot_ms, one.server_tpot_ms) == (50.0, None, 20.0, None)
    assert (one.server_errors, one.server_requests, one.open, one.served) == (0, 0, None, None)
    assert (two.engine_tps, two.server_tps, two.engine_ttft_ms, two.server_ttft_ms) == (90.0, 80.0, 150.0, 300.0)
    assert (two.engine_tpot_ms, two.server_tpot_ms) == (22.0, 25.0)
    assert (two.server_errors, two.server_requests) == (1, 8)  # 7 completed + 1 failed
    assert two.share == pytest.approx(80 / 90) and one.share is None and four.share is None
    # the prefill: no B = 1 record, the shortest TTFT (40 ms); the failed stream has no token time
    span = 150 * MS + 1
    assert two.open == pytest.approx((100 + 100) * MS / span)  # the failed stream never ended: not counted
    assert two.served == pytest.approx((100 + 100) * MS / span)  # 0→100 and 50→150
    assert two.gauge == 2.0 and two.at_once == 2.0
    assert (two.engine_prompt_tokens, two.server_prompt_tokens) == (11, 11)  # the failed one's 9 left out
    assert (two.engine_output_tokens, two.server_output_tokens) == (4, 4)
    assert four.engine_tps is None and four.server_tps == 120.0 and four.server_prompt_tokens is None
    assert S.rows([{"b": 1, "output_throughput": True}], [])[0].engine_tps is None  # a bool is not a figure


def test_tokens_are_summed_only_when_every_stream_reports_them():
    a, b = rec(1, 2, 0, [1, 2], prompt=5), rec(2, 2, 0, [1, 2], prompt=None)
    assert S._tokens([a], "prompt_tokens") == 5 and S._tokens([a, b], "prompt_tokens") is None
    assert S._tokens([], "prompt_tokens") is None
    assert S._tokens([a, rec(3, 2, 0, [1], prompt=0)], "prompt_tokens") == 5


def row(b, e_tps, s_tps, *, e_ttft=100.0, s_ttft=100.0, errors=0, requests=16, open_=None, served=None,
        gauge=None, stepped=None):
    return S.ServingRow(b, e_tps, s_tps, 10.0, 10.0, e_ttft, s_ttft, errors, requests, open_, served, gauge,
                        stepped=stepped)


def test_at_once_is_the_larger_of_the_gauge_and_the_timing():
    assert row(2, 1, 1, served=1.5, gauge=1.9).at_once == 1.9
    assert row(2, 1, 1, served=1.5, gauge=1.2).at_once == 1.5
    assert row(2, 1, 1, served=1.5).at_once == 1.5 and row(2, 1, 1).at_once is None
    assert row(2, 0.0, 1.0).share is None and row(2, 2.0, None).share is None


def test_verdict_fails_streams_over_a_tenth():
    ok = [row(1, 50, 50), row(2, 90, 88, errors=1, requests=10)]  # 1 of 10 is not over 0.1 × 10
    assert S.batching_verdict(ok)[0] == "batches fully"
    v, why = S.batching_verdict([row(1, 50, 50), row(2, 90, 88, errors=2, requests=10)])
    assert (v, why) == ("fails streams", "B=2: 2 of 10 streams failed")
    v, _ = S.batching_verdict([row(1, 50, 50, errors=1, requests=0)])  # no requests counted: 0.1 × 1
    assert v == "fails streams"


def test_verdict_undecided_without_both_ends():
    need = ("undecided", "needs B = 1 and a B ≥ 2 measured on both sides")
    assert S.batching_verdict([row(2, 90, 88)]) == need
    assert S.batching_verdict([row(1, 50, 50)]) == need
    assert S.batching_verdict([row(1, 50, 50), row(2, 90, None)]) == need
    assert S.batching_verdict([row(1, None, 50), row(2, 90, 80)]) == need


def test_verdict_batches_fully_and_with_overhead():
    v, why = S.batching_verdict([row(1, 50, 49), row(2, 90, 81), row(4, 160, 150)])
    assert v == "batches fully" and why == "≥ 90% of the engine's tok/s at every B ≥ 2"  # 81/90 = 0.9
    # at B = 4, 120 of 160: 75 %, overhead 25 %; server ×120/50 = 2.40, engine ×160/50 = 3.20
    v, why = S.batching_verdict([row(1, 50, 50), row(2, 90, 85), row(4, 160, 120)])
    assert v == "batches with 25% overhead"
    assert why == "75% of the engine's tok/s at B=4 (×2.40 from B=1; the engine ×3.20)"
    v, _ = S.batching_verdict([row(1, 50, 50), row(2, 90, 80.9)])  # 0.899 of it
    assert v == "batches with 10% overhead"


def test_verdict_serialises_from_its_records_and_from_the_queue():
    timed = [row(1, 50, 50, s_ttft=100), row(2, 90, 50, s_ttft=250, open_=2.0, served=1.0),
             row(4, 160, 51, s_ttft=500, open_=4.0, served=1.1, gauge=1.0)]
    v, why = S.batching_verdict(timed)
    assert v == "serialises"
    assert why == ("served at once 1.0 of 2.0 open (B=2), 1.1 of 4.0 open (B=4); TTFT p50 ×2.5 at B=2 (the engine "
                   "×1.0), ×5.0 at B=4 (the engine ×1.0) (the queue)")
    # one B that batches: not serialising at every B
    assert S.batching_verdict([timed[0], timed[1], row(4, 160, 51, open_=4.0, served=3.9)])[0] != "serialises"
    # no records: flat tok/s (×1.02 < 1.25) while the engine rises, its TTFT rising ≥ 1.5 × the engine's
    flat = [row(1, 50, 50, s_ttft=100, e_ttft=100), row(2, 90, 51, s_ttft=300, e_ttft=200)]
    v, why = S.batching_verdict(flat)
    assert v == "serialises"  # ×3.0 ≥ 1.5 × ×2.0
    assert why == ("server tok/s ×1.02 from B=1 to B=2 (the engine ×1.80); TTFT p50 ×3.0 at B=2 (the engine ×2.0) "
                   "(the queue)")
    v, why = S.batching_verdict([flat[0], row(2, 90, 51, s_ttft=299, e_ttft=200)])  # ×2.99 < 3.0
    assert v == "batches with 43% overhead"  # 51 of 90: 57 %


def test_verdict_interleaves_by_its_stepping_or_flat_tok_s():
    # served 2 of 2, 20 % of its tokens within a step (≤ 0.35): takes turns, whatever the engine does
    turns = [row(1, 50, 50), row(2, 90, 90, open_=2.0, served=2.0, stepped=0.2)]
    v, why = S.batching_verdict(turns)
    assert v == "interleaves"
    assert why == ("server tok/s ×1.80 from B=1 to B=2 (the engine ×1.80); its streams overlap (served at once 2.0 "
                   "of 2.0 open (B=2)) but their tokens never come out of one step (20% at B=2): it takes turns; TTFT p50 ×1.0 "
                   "at B=2 (the engine ×1.0)")
    assert S.batching_verdict([turns[0], row(2, 90, 90, open_=2.0, served=2.0, stepped=0.5)])[0] == "batches fully"
    # overlapping, its tok/s flat (×1.20) while the engine's rises: interleaves without a stepping read
    v, why = S.batching_verdict([row(1, 50, 50), row(2, 90, 60, open_=2.0, served=1.9)])
    assert v == "interleaves"
    assert why == ("server tok/s ×1.20 from B=1 to B=2 (the engine ×1.80); its streams overlap (served at once 1.9 of "
                   "2.0 open (B=2)) without more tok/s; TTFT p50 ×1.0 at B=2 (the engine ×1.0)")
    assert S.batching_verdict([row(1, 50, 50), row(2, 90, 62.5, open_=2.0, served=1.9)])[0] == \
        "batches with 31% overhead"  # ×1.25: not flat; 62.5 of 90 = 69 %


def test_verdict_when_the_engine_does_not_scale():
    # the engine ×1.2 (< 1.25): the server's own evidence or nothing
    v, why = S.batching_verdict([row(1, 50, 40), row(2, 60, 60, open_=2.0, served=2.0, gauge=2.0)])
    assert v == "batches"
    assert why == ("server tok/s ×1.50 from B=1 to B=2 (the engine ×1.20); served at once 2.0 of 2.0 open (B=2, its "
                   "gauge); the engine itself does not scale here, so no share of its batching is named")
    v, why = S.batching_verdict([row(1, 50, 40), row(2, 60, 48, open_=2.0, served=2.0)])
    assert (v, why) == ("undecided", "the engine itself does not scale here (B=2: ×1.20 of B=1)")
    assert S.batching_verdict([row(1, 50, 40), row(2, 60, 60)])[0] == "undecided"  # no records
    assert S.batching_verdict([row(1, 50, 40), row(2, 62.5, 56)])[0] == "batches with 10% overhead"  # ×1.25 scales


def test_ttft_rise_by_hand():
    known = [row(1, 50, 50, s_ttft=100, e_ttft=80), row(2, 90, 90, s_ttft=150, e_ttft=100),
             row(4, 160, 150, s_ttft=300, e_ttft=160)]
    # B=2: ×1.5 (the engine ×1.25; 1.5 < 1.875), B=4: ×3.0 (the engine ×2.0; 3.0 ≥ 3.0): the queue
    assert S.ttft_rise(known) == "; TTFT p50 ×1.5 at B=2 (the engine ×1.2), ×3.0 at B=4 (the engine ×2.0) (the queue)"
    assert S.ttft_rise(known[:2]) == "; TTFT p50 ×1.5 at B=2 (the engine ×1.2)"
    assert S.ttft_rise(known[:2], only_queued=True) == ""
    assert S.ttft_rise(known, only_queued=True).endswith("(the queue)")
    assert S.ttft_rise(known[1:]) == ""  # no B = 1
    assert S.ttft_rise([row(1, 50, 50, s_ttft=0), known[1]]) == "" and S.ttft_rise([row(1, 50, 50, e_ttft=0),
                                                                                    known[1]]) == ""
    assert S.ttft_rise([known[0], row(2, 90, 90, s_ttft=None)]) == ""  # a B without a TTFT is skipped
    assert S.ttft_rise([known[0]]) == ""


def test_edges_the_figures_rest_on():
    # a span is first → last token, not first → second
    assert S.decoding_concurrency([[0, 50, 100]], 0, 200) == 0.5
    assert S.serving_spans([rec(1, 2, 0, [40, 50, 100])], 10 * MS) == [[30 * MS, 100 * MS]]
    assert S.prefill_of([rec(1, 1, 10, [10, 20])]) == 0  # a B = 1 TTFT of 0 is 0
    # the window ends 1 ns after the last token, exactly; no prefill unless asked
    recs = [rec(1, 2, 0, [40, 100]), rec(2, 2, 50, [90, 150])]
    assert S.concurrency_of(recs) == (200 * MS / (150 * MS + 1), 120 * MS / (150 * MS + 1))
    # streams 1 ns apart: a TPOT of 1 ns is still a TPOT (the quarter step 0.25 ns: only ties are within it)
    a = list(range(11))
    assert S.stepped_share([a, a], 2.0) == pytest.approx(11 / 21)
    # a gauge of exactly one half is read; a token timing of 0 is 0 served, not 1
    assert S.batching(2.0, None, 0.5) == S.Batching("serialises", 0.5, 2.0, "its /metrics")
    assert S.batching(2.0, 0.0, None) == S.Batching("serialises", 0.0, 2.0, "token timing")


def test_rows_read_the_stepping_of_each_bs_streams():
    a, b = _pair(1.0)
    mine = [rec(1, 2, 0, [t / MS for t in a]), rec(2, 2, 0, [t / MS for t in b])]
    (two,) = S.rows([cell(2, 90.0)], [cell(2, 80.0)], mine)
    assert two.stepped == pytest.approx(11 / 21)  # served ≈ 2 (both 0 → 100 ms): quarter step 2.5 ms
    assert S.rows([cell(2, 90.0)], [cell(2, 80.0)], [])[0].stepped is None  # no records: no stepping


def test_verdict_edges():
    # a gauge that says two are served keeps a B out of 'serialises', whatever the token timing read
    gauged = [row(1, 50, 50), row(2, 90, 85, open_=2.0, served=1.0, gauge=2.0)]
    assert S.batching_verdict(gauged)[0] == "batches fully"
    # two Bs failing, two Bs stepping apart: each named, comma-separated
    v, why = S.batching_verdict([row(1, 50, 50), row(2, 90, 88, errors=2, requests=10),
                                 row(4, 160, 150, errors=3, requests=8)])
    assert why == "B=2: 2 of 10 streams failed, B=4: 3 of 8 streams failed"
    v, why = S.batching_verdict([row(1, 50, 50, s_ttft=None), row(2, 90, 90, open_=2.0, served=2.0, stepped=0.2),
                                 row(4, 160, 150, open_=4.0, served=4.0, stepped=0.1)])
    assert v == "interleaves" and why.endswith("(20% at B=2, 10% at B=4): it takes turns")
    # a server at 0.5 tok/s at B = 1 scales ×120 to 60 (not ÷ 1)
    v, why = S.batching_verdict([row(1, 50, 0.5), row(2, 55, 30, open_=2.0, served=None, gauge=0.6),
                                 row(4, 60, 60, open_=4.0, served=3.9)])
    assert v == "batches" and why.startswith("server tok/s ×120.00 from B=1 to B=4 (the engine ×1.20)")
    # the gauge named where the timing has none (B = 2 alone would serialise; B = 4 does not)
    assert "served at once 0.6 of 2.0 open (B=2, its gauge), 3.9 of 4.0 open (B=4)" in why
    v, why = S.batching_verdict([row(1, 50, 40), row(2, 60, 50, open_=0.0, served=None)])  # ×1.25: batches
    assert v == "batches" and "served at once 0.0 of 0.0 open (B=2)" in why
    # ×1.25 is not flat: a queue in the TTFT does not make it serialising
    v, _ = S.batching_verdict([row(1, 50, 40, s_ttft=100), row(2, 90, 50, s_ttft=400)])
    assert v == "batches with 44% overhead"  # 50 of 90
    # B = 1's share is not a B ≥ 2 share
    assert S.batching_verdict([row(1, 50, 40), row(2, 90, 85)])[0] == "batches fully"
    # a server that answers nothing at the largest B
    assert S.batching_verdict([row(1, 50, 50, s_ttft=None), row(2, 90, 0.0, s_ttft=None)])[0] == \
        "batches with 100% overhead"
