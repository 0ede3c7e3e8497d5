"""The live figures and a cell's timing against tiny cases worked by hand (issue 56): the step table's settling, its
goodput over the settled window and its ★; the live level's request figures; a cell's per-rep, per-period and
combined-clients timing, its endpoints' figures and its TTFT by class; the warmup's rule and prompts; the HTTP
client's count of packed, reasoning and delta-counted chunks. Fast: benchmarks/mutation.py's test command."""
from __future__ import annotations

import numpy as np
import pytest

from measure.control.bench import cell as C
from measure.control.live import stats as S
from measure.control.live import steps as ST
from measure.core.records import RequestRecord
from presets import SLO, Workload

MS = 1_000_000
NS = 1_000_000_000


def rec(rid, sched, start, tokens, done, *, worker=0, error=None, rep=0, prompt_id="p", extra=None, out=None):
    return RequestRecord(run_id="r", request_id=rid, mode="instances", engine="t", model="m", model_bytes=1, k=1, b=1,
                         worker=worker, t_scheduled_ns=sched, t_submitted_ns=sched, t_started_ns=start,
                         t_first_token_ns=tokens[0] if tokens else None, t_done_ns=done, token_ns=list(tokens),
                         output_tokens=len(tokens) if out is None else out, error=error, rep=rep,
                         prompt_id=prompt_id, extra=extra)


# ---- the step table -----------------------------------------------------------------------------------------
def test_step_goodput_over_the_settled_window():
    now = S.Counts(10, 6, 100, 50)
    base = S.Counts(4, 3, 40, 20)
    g = ST.settled_goodput(20.0, now, base)  # since base: 6 finished, 3 met, 60 tokens, 30 met → share 30/60 of 20 tok/s
    assert (g.rps, g.tps, g.attainment, g.met, g.finished) == pytest.approx((3 * 20 / 60, 30 * 20 / 60, 0.5, 3, 6))
    g = ST.settled_goodput(20.0, now, S.Counts(10, 6, 100, 50))  # nothing finished since: over the level so far
    assert (g.tps, g.attainment) == pytest.approx((50 * 20 / 100, 0.6))
    assert ST.settled_goodput(20.0, S.Counts(0, 0, 0, 0), None) is None
    assert ST.settled_goodput(20.0, S.Counts(2, 1, 0, 0), None).tps == 0.0
    assert now.since(base) == S.Counts(6, 3, 60, 30)
    assert ST._trend([1.0, 1.0, 2.0, 2.0]) == pytest.approx((2 - 1) / 1.5)
    assert ST._trend([5.0]) == 0.0 and ST._trend([0.0, 0.0]) == 0.0
    assert ST._trend([1.0, 9.0, 2.0]) == pytest.approx((2.0 - 1.0) / 4.0)  # halves of one: the middle left out


def _figures(n_good, tpot_s=0.01, ttft_s=0.05, slo=None):
    f = S.LevelFigures(slo)
    for i in range(n_good):
        t0 = i * 10 * MS
        first = t0 + round(ttft_s * NS)
        f.add(rec(i, t0, t0, [first, first + round(tpot_s * NS)], first + round(tpot_s * NS)))
    return f


def test_a_level_settles_by_the_stated_rule_and_its_row_is_the_means():
    t = ST.StepTable()
    lv = ST.StepLevel("K=1 B=1 instances", "instances", 1, 1, 0)
    fig = _figures(ST.SETTLE_REQUESTS)
    rows = []
    for i in range(40):  # 2 Hz readings, tok/s 100 ± 1
        now = i * NS // 2
        rows.append(t.tick(lv, ST.StepReading(now, True, fig, 100.0 + (i % 2), 2.0 + (i % 2))))
    first = next(i for i, r in enumerate(rows) if r.settled)
    # from 5 s on (reading 10) the readings count; 10 of them: reading 19 is the first settled
    assert first == 2 * ST.SETTLE_AFTER_S + ST.SETTLE_SAMPLES - 1
    r = rows[-1]
    assert r.agg_tps == pytest.approx(100.5) and r.concurrency == pytest.approx(2.5)
    assert r.tpot_p50 == pytest.approx(0.01) and r.per_user_tps == pytest.approx(100.0)
    assert (r.ttft_p50, r.ttft_p99) == pytest.approx((0.05, 0.05)) and r.requests == ST.SETTLE_REQUESTS
    assert "0/10 readings" in rows[0].progress and "5 s of warmup" in rows[0].progress
    few = ST.StepTable().tick(lv, ST.StepReading(30 * NS, True, _figures(3), 100.0, 1.0))
    assert not few.settled and "3/8 requests" in few.progress


@pytest.mark.parametrize("tps,word", [([100.0, 150.0] * 10, "CV"), ([100.0 + 2 * i for i in range(20)], "rising"),
                                      ([140.0 - 2 * i for i in range(20)], "falling")])
def test_a_noisy_or_ramping_level_does_not_settle(tps, word):
    t = ST.StepTable()
    lv = ST.StepLevel("L", "instances", 1, 1, 0)
    fig = _figures(10)
    for i, x in enumerate(tps):
        r = t.tick(lv, ST.StepReading(10 * NS + i * NS // 2, True, fig, x, 1.0))
    assert not r.settled and word in r.progress


def test_a_level_left_keeps_its_row_and_the_star_goes_to_the_best_settled():
    t = ST.StepTable()
    fig = _figures(10)
    a, b = ST.StepLevel("A", "instances", 1, 1, 0), ST.StepLevel("B", "instances", 2, 1, 20 * NS)
    for i in range(40):
        t.tick(a, ST.StepReading(i * NS // 2, True, fig, 100.0, 1.0))
    for i in range(4):  # B: not settled yet
        t.tick(b, ST.StepReading(20 * NS + i * NS // 2, True, _figures(10), 300.0, 2.0))
    rows = t.table()
    assert [r.level for r in rows] == ["A", "B"] and [r.best for r in rows] == [True, False]
    assert rows[0].settled and not rows[1].settled


# ---- the live level's request figures ------------------------------------------------------------------------
def test_level_figures_and_request_numbers_by_hand():
    st = S.LiveStats(window_s=5.0, slo=SLO("s", "s", ttft_s=0.1))
    st.load_started(0)
    a = rec(1, 0, 10 * MS, [50 * MS, 56 * MS, 58 * MS], 60 * MS)  # TTFT 50 ms, gaps 6, 2
    b = rec(2, 5 * MS, 5 * MS, [205 * MS, 206 * MS], 210 * MS)  # TTFT 200 ms (misses the SLO), gap 1
    c = rec(3, 7 * MS, 7 * MS, [], 20 * MS, error="x")
    for r in (a, b, c):
        st.add_record(r)
    f = st.figures
    assert (f.finished, f.errors, f.good, f.met, f.tokens, f.met_tokens) == (3, 1, 2, 1, 5, 3)
    n = st.request_numbers()
    assert (n["ttft_p50"], n["ttft_p99"]) == pytest.approx((0.125, float(np.percentile([0.05, 0.2], 99))))
    assert (n["ttft_engine_p50"], n["ttft_engine_p99"]) == pytest.approx(
        (float(np.median([0.04, 0.2])), float(np.percentile([0.04, 0.2], 99))))
    assert n["itl_p50"] == pytest.approx(0.002) and (n["requests"], n["errors"]) == (2, 1)  # 6, 2, 1 ms
    assert st.request_numbers() is n  # unchanged: not recomputed
    st.new_level("K=2", 300 * MS)
    assert st.levels[-1]["level"] == "start" and st.levels[-1]["end_ns"] == 300 * MS
    assert st.levels[-1]["requests"] == 2 and st.figures.good == 0
    st.add_record(rec(4, 100 * MS, 100 * MS, [150 * MS], 160 * MS))  # scheduled before the step: the old level's
    assert st.figures.version == 0
    assert len(st.records()) == 4
    st.reset(400 * MS)
    assert st.records() == [] and st.level_label == "K=2"


# ---- a cell's timing -----------------------------------------------------------------------------------------
def _two_reps():
    # rep 0: 4 tokens over 0 → 40 ms; rep 1: 2 tokens over 100 → 120 ms
    return [rec(1, 0, 0, [10 * MS, 20 * MS], 30 * MS), rec(2, 0, 5 * MS, [30 * MS, 40 * MS], 40 * MS, worker=1),
            rec(3, 100 * MS, 100 * MS, [110 * MS, 115 * MS], 120 * MS, rep=1)]


def test_per_rep_timing_by_hand():
    recs = _two_reps()
    t = C.PerRep().time(recs)
    tps0, tps1 = 4 / (40 * MS + 1) * NS, 2 / (20 * MS + 1) * NS
    assert t.per_rep == pytest.approx([tps0, tps1]) and t.throughput == pytest.approx((tps0 + tps1) / 2)
    conc0, conc1 = (30 + 35) / 40, 20 / 20
    assert t.concurrency == pytest.approx((conc0 + conc1) / 2, rel=1e-6)
    assert t.goodput_s == pytest.approx(0.040 + 0.020)
    good, windows, secs = t.batch
    assert len(good) == 3 and windows is None and secs == pytest.approx(0.120)
    cell = C.Cell.measure(recs, C.Spec(2, 1, 1000, slo=SLO("s", "s", ttft_s=0.012)))
    assert cell.output_throughput == pytest.approx((tps0 + tps1) / 2) and cell.reps == 2
    assert cell.goodput.rps == pytest.approx(2 / 0.060) and cell.goodput.attainment == pytest.approx(2 / 3)
    assert cell.cv == pytest.approx(float(np.std([tps0, tps1], ddof=1) / np.mean([tps0, tps1])))


def test_periods_and_clients_timing_by_hand():
    recs = _two_reps()
    t = C.Periods([(0, 25 * MS), (100 * MS, 120 * MS)], recs).time(recs)
    # tokens inside: 10, 20 (rep 0) and 110, 115: 4 over 45 ms
    assert t.throughput == pytest.approx(4 / 0.045) and t.per_rep == [t.throughput]
    busy = (25 + 20) + (20)  # rec 1 0→25, rec 2 5→25 (20), rec 3 100→120
    assert t.concurrency == pytest.approx(busy / 45) and t.goodput_s == pytest.approx(0.045)
    assert t.note.periods == [[0, 25 * MS], [100 * MS, 120 * MS]] and t.note.seconds == pytest.approx(0.045)
    assert C.Periods([], recs).time(recs).throughput == C.PerRep().time(recs).throughput
    c = C.Clients([10.0, 30.0], [1.0, 2.0]).time(recs)
    assert (c.throughput, c.concurrency, c.goodput_s) == pytest.approx((40.0, 3.0, 6 / 40.0))
    assert c.note.clients == 2 and C.Clients([10.0, None], [1.0, 2.0]).time(recs).throughput is None


def test_endpoint_figures_and_ttft_by_class_by_hand():
    recs = [rec(1, 0, 0, [10 * MS, 12 * MS], 20 * MS, worker=0, prompt_id="long-1", extra={"endpoint": "a"}),
            rec(2, 0, 0, [30 * MS, 34 * MS, 38 * MS], 40 * MS, worker=1, extra={"endpoint": "b", "url": "u"}),
            rec(3, 10 * MS, 10 * MS, [30 * MS, 31 * MS], 40 * MS, worker=1, prompt_id="long-2", error=None)]
    eps = C.endpoint_figures(recs, weight_bytes=1000)
    assert [e["endpoint"] for e in eps] == ["a", "b"] and [e["requests"] for e in eps] == [1, 2]
    assert eps[0]["output_throughput"] == pytest.approx(2 / 0.040) and eps[1]["output_throughput"] == \
        pytest.approx(5 / 0.040)
    assert eps[0]["median_tpot_ms"] == pytest.approx(2.0) and eps[1]["median_tpot_ms"] == pytest.approx(2.5)
    assert eps[1]["bandwidth_gbps"] == pytest.approx(1000 / 0.0025 / 1e9) and eps[1]["url"] == "u"
    assert C.endpoint_figures(recs[:1]) == []
    by = C.ttft_by_class(recs)
    assert by["long"]["n"] == 2 and by["long"]["median_ttft_ms"] == pytest.approx(15.0)
    assert by["short"] == {"n": 1, "median_ttft_ms": pytest.approx(30.0), "p99_ttft_ms": pytest.approx(30.0)}
    cell = C.Cell.measure(recs, C.Spec(2, 1, 1000, mode="http"))
    assert cell.bandwidth.gbps == pytest.approx((1000 / 0.002 + 1000 / 0.0025) / 1e9)
    assert cell.requests.ttft_by_class is not None and cell.bandwidth.endpoints == eps


def test_scaling_against_k1_and_b1():
    cells = [C.Cell(k=1, b=1, output_throughput=10.0), C.Cell(k=2, b=1, output_throughput=18.0),
             C.Cell(k=1, b=4, output_throughput=30.0), C.Cell(k=2, b=4, output_throughput=None)]
    C.add_scaling(cells)
    assert [(c.scaling.vs_k1, c.scaling.vs_b1) for c in cells] == [(1.0, 1.0), (1.8, 1.0), (1.0, 3.0), (None, None)]


# ---- the warmup's rule and prompts ---------------------------------------------------------------------------
def test_warmup_rule_and_prompts():
    from measure.sources.warmup import WARMUP_LINE, Warmup, warmup_workload

    assert Warmup.parse(" Auto ") == Warmup() and Warmup.parse("3") == Warmup(requests=3)
    assert Warmup.parse("2.5s") == Warmup(seconds=2.5) and Warmup.parse("0") .off and Warmup.parse("0s").off
    for bad in ("-1", "x", "inf s", "nans", "-2s", "1.5"):
        with pytest.raises(ValueError):
            Warmup.parse(bad)
    assert Warmup().describe() == "one request per stream per level, not recorded"
    assert Warmup(requests=1).describe() == "1 request per level, not recorded"
    assert Warmup(requests=2).describe() == "2 requests per level, not recorded"
    assert Warmup(seconds=5.0).describe() == "rounds of one request per stream for 5 s per level, not recorded"
    assert Warmup(requests=0).describe() == "none" and not Warmup().off
    wl = Workload("w", "d", prompts=("alpha beta", "gamma"))
    w = warmup_workload(wl, 3)
    assert w.key == "w-warmup" and len(w.prompts) == 3
    assert w.prompts[0] == f"{WARMUP_LINE.format(i=1)} alpha beta" and w.prompts[2].endswith(" alpha beta")
    assert len(warmup_workload(wl, 0).prompts) == 1


# ---- the client's count of packed, reasoning and delta-counted chunks -------------------------------------------
def _count(chunks, on_tokens=None):
    from engines.http_openai import StreamResult, _Counter

    res = StreamResult()
    c = _Counter(res, on_tokens)
    for i, ch in enumerate(chunks):
        c.chunk(ch, (i + 1) * 1000)
    c.finish()
    return res


def _d(**delta):
    return {"choices": [{"index": 0, "delta": delta}]}


def test_reasoning_chunks_are_tokens_and_the_first_answer_is_stamped():
    usage = {"prompt_tokens": 2, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 3},
             "prompt_tokens_details": {"cached_tokens": 1}}
    res = _count([_d(reasoning_content=" a"), _d(reasoning=" b"), _d(content=" c"), _d(content=" d"),
                  {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage, "timings": {"x": 1}}])
    # 5 by the characters (2 each): 1.25, 2.5, 3.75, 5 rounded to 1, 2, 4, 5: the third chunk holds two
    assert res.token_ns == [1000, 2000, 3000, 3000, 4000] and res.token_count == "chunks+final-usage"
    assert res.t_first_answer_ns == 3000 and res.reasoning_tokens == 3 and res.text == " c d"
    assert (res.prompt_tokens, res.server_output_tokens, res.cached_tokens, res.finish_reason, res.timings) == \
        (2, 5, 1, "stop", {"x": 1})


def test_packed_chunks_by_a_running_usage_or_a_delta():
    seen: list[list[int]] = []
    res = _count([{"choices": [{"text": " a b", "index": 0}], "usage": {"completion_tokens": 2}},
                  {"choices": [{"text": " c", "index": 0}], "usage": {"completion_tokens": 3}},
                  {"choices": [{"text": " d e f", "index": 0, "finish_reason": "length"}],
                   "usage": {"completion_tokens": 6}}], seen.append)
    assert res.token_ns == [1000, 1000, 2000, 3000, 3000, 3000] and res.token_count == "continuous-usage"
    assert seen == [[1000, 1000], [2000], [3000, 3000, 3000]]
    res = _count([{"choices": [{"text": "ab", "index": 0}], "usage": {"completion_tokens_delta": 2}},
                  {"choices": [{"text": "c", "index": 0}], "usage": {"completion_tokens_delta": 0}}])
    assert res.token_ns == [1000, 1000, 2000] and res.token_count == "chunks"


def test_a_final_count_is_spread_by_the_characters_each_chunk_carried():
    res = _count([_text("aaaaaa"), _text("bb"), {"choices": [], "usage": {"completion_tokens": 8}}])
    assert res.token_ns == [1000] * 6 + [2000] * 2  # 6 : 2 characters
    res = _count([_text(""), _text("x"), {"choices": [], "usage": {"completion_tokens": 1}}])
    assert res.token_ns == [2000] and res.token_count == "chunks"


def _text(t):
    return {"choices": [{"text": t, "index": 0}]}


def test_a_running_usage_that_does_not_rise_counts_no_token():
    res = _count([{"choices": [{"text": " a", "index": 0}], "usage": {"completion_tokens": 1}},
                  {"choices": [{"text": "b", "index": 0}], "usage": {"completion_tokens": 1}},  # a split token
                  {"choices": [{"text": " c", "index": 0}], "usage": {"completion_tokens": 2, "prompt_tokens": 4}},
                  {"choices": [], "usage": {"prompt_tokens": 4}}])  # a last usage without a completion count
    assert res.token_ns == [1000, 3000] and res.token_count == "continuous-usage"
    assert (res.server_output_tokens, res.prompt_tokens) == (2, 4)


def test_the_first_content_chunk_decides_the_count():
    # no usage on the first: one a chunk from then on, a running usage later only read as the server's count
    res = _count([_text(" a"), {"choices": [{"text": " b", "index": 0}],
                                "usage": {"completion_tokens": 5, "prompt_tokens": 3}}, _text(" c")])
    assert res.token_count == "chunks+final-usage" and len(res.token_ns) == 5
    assert res.prompt_tokens == 3
    res = _count([{"choices": [{"text": "a", "index": 0}], "usage": {"completion_tokens_delta": 1}},
                  {"choices": [{"text": "b", "index": 0}], "usage": {"completion_tokens": 7}}])
    assert res.token_count == "chunks+final-usage" and len(res.token_ns) == 7


def test_a_share_below_a_chunks_count_spreads_the_missing_tokens_evenly():
    # 1 and 9 characters, 5 tokens: by the characters the first chunk would hold 0 (below its 1): evenly instead,
    # the 3 missing as 1 and 2
    seen: list[list[int]] = []
    res = _count([_text("a"), _text("bbbbbbbbb"), {"choices": [], "usage": {"completion_tokens": 5}}], seen.append)
    assert res.token_ns == [1000, 1000, 2000, 2000, 2000] and res.token_count == "chunks+final-usage"
    assert seen[-1] == [1000, 2000, 2000]  # the tokens the final count added, told as they were added


def test_thinking_packed_several_a_chunk_is_counted_from_the_final_usage():
    seen: list[list[int]] = []
    res = _count([_d(reasoning_content=" a b"), _d(reasoning_content=" c d"), _d(content=" e f", reasoning=" g h"),
                  {"choices": [], "usage": {"completion_tokens": 8}}], seen.append)
    # characters 4, 4, 8 of 16: 2, 2, 4 tokens; the two thinking chunks' 4 are its reasoning tokens (no details sent)
    assert res.token_ns == [1000] * 2 + [2000] * 2 + [3000] * 4
    assert res.reasoning_tokens == 4 and res.t_first_answer_ns == 3000
    assert seen[-1] == [1000, 2000, 3000, 3000, 3000]


def test_the_live_window_keeps_tokens_by_their_time_whatever_order_they_came_in():
    st = S.LiveStats(window_s=1.0)
    w = st.window(5 * NS)  # no load yet: an empty window
    assert (w.span_s, w.agg_tps, w.tpots, w.per_worker_tps, w.steps_per_s, w.concurrency) == (0.0, 0.0, [], {}, {},
                                                                                               0.0)
    st.add_tokens(0, 1, [])  # nothing
    st.load_started(0)
    st.load_started(10 * NS)  # the load's start is its first
    assert st.load_start_ns == 0
    st.add_tokens(0, 1, [300 * MS])
    st.add_tokens(0, 1, [100 * MS, 200 * MS])  # a batch that came late: older than the last token held
    st.add_tokens(1, 2, [400 * MS])
    st.add_tokens(1, 2, [500 * MS])  # in order: appended
    st.add_tokens(1, 2, [450 * MS])  # one token, late
    w = st.window(500 * MS)  # a load 0.5 s old: its window is 0.5 s, not 1
    assert w.span_s == pytest.approx(0.5) and w.per_worker_tps == pytest.approx({0: 6.0, 1: 6.0})
    assert w.agg_tps == pytest.approx(6 / 0.500000001)
    assert sorted(w.tpots) == pytest.approx([0.05, 0.1])  # (500 − 400) ÷ 2 and (300 − 100) ÷ 2
    w = st.window(350 * MS)  # a reading before the last tokens (a replay's): the later ones left out
    assert w.per_worker_tps == pytest.approx({0: 3 / 0.35})
    st2 = S.LiveStats(window_s=1.0)
    st2.load_started(0)
    st2.add_tokens(2, 7, [1000 * MS, 1500 * MS])
    st2.add_tokens(3, 7, [1600 * MS])  # the stream moved (a request resent elsewhere): its tokens are the last's
    w = st2.window(2000 * MS)  # [1 s, 2 s]: the token at 1 s, the window's first instant, stays
    assert w.per_worker_tps == pytest.approx({3: 3.0}) and w.steps_per_s == pytest.approx({3: 3.0})
    st2.add_started(9, 1200 * MS)
    st2.add_record(rec(8, 0, 500 * MS, [600 * MS], 1000 * MS))  # ended at the window's first instant: in it
    w = st2.window(2000 * MS)
    assert w.concurrency == pytest.approx(0.8, rel=1e-6)  # request 9, 1.2 → 2 s; request 8: 0 s inside


def _cell_records():
    """Three requests of one rep on workers 0 and 1 (ms): two short prompts, one long; request 3 failed."""
    a = rec(1, 0, 2 * MS, [10 * MS, 12 * MS, 16 * MS], 20 * MS, worker=0, prompt_id="p1")
    b = rec(2, 4 * MS, 5 * MS, [30 * MS, 31 * MS], 34 * MS, worker=1, prompt_id="long-1")
    c = rec(3, 6 * MS, 8 * MS, [], 9 * MS, worker=1, error="boom")
    for r, sub, rss in ((a, 1 * MS, 100), (b, 6 * MS, 300), (c, 6 * MS, 200)):
        r.t_submitted_ns, r.worker_rss_bytes, r.pid, r.k = sub, rss, r.worker, 2
    a.finish_reason, b.finish_reason = "length", "stop"
    return [a, b, c]


def test_every_request_figure_of_a_cell_against_its_records():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import truth_matrix as T

    recs = _cell_records()
    cell = C.Cell.measure(recs, C.Spec(2, 3, 10**9, bandwidth_gbps=100.0, max_tokens=3, ignore_eos=True,
                                       slo=SLO("s", "s", ttft_s=0.015)))
    want = T.recomputed(recs)
    rq = cell.requests
    for name, dist in (("ttft", rq.ttft), ("tpot", rq.tpot)):
        assert (dist.mean, dist.p50, dist.p90, dist.p99) == pytest.approx(want[name], abs=1e-9), name
    for name, dist in (("ttft_engine", rq.ttft_engine), ("itl", rq.itl), ("e2el", rq.e2el)):
        assert (dist.p50, dist.p99) == pytest.approx((want[name][1], want[name][3]), abs=1e-9), name
    assert rq.queue_wait.p50 == pytest.approx(float(np.median([2.0, 1.0])))
    assert (rq.ttfat.p50, rq.ttfat.p99) == pytest.approx((rq.ttft.p50, rq.ttft.p99))
    assert (rq.completed, rq.errors, rq.total_output_tokens, rq.reasoning_tokens) == (2, 1, 5, 0)
    assert rq.per_stream_tps == pytest.approx(1000.0 / rq.tpot.p50) and rq.stopped_early == 1
    assert rq.ttft_by_class == {"long": {"n": 1, "median_ttft_ms": pytest.approx(26.0),
                                         "p99_ttft_ms": pytest.approx(26.0)},
                                "short": {"n": 1, "median_ttft_ms": pytest.approx(10.0),
                                          "p99_ttft_ms": pytest.approx(10.0)}}
    # the cell's level, timing and load
    span = 34 * MS + 1
    assert (cell.k, cell.b, cell.reps, cell.mode, cell.status) == (2, 3, 1, "instances", "ok")
    assert cell.output_throughput == pytest.approx(5 / span * NS) and cell.output_throughput_per_rep == \
        pytest.approx([5 / span * NS])
    assert cell.achieved_concurrency == pytest.approx((18 + 29 + 1) * MS / span)
    assert cell.cv is None and cell.noisy is False
    assert cell.load.lateness == C.Dist(p50=pytest.approx(1.0), p99=pytest.approx(float(np.percentile([1, 2, 0], 99))),
                                        max=pytest.approx(2.0))
    assert cell.load.behind_schedule is False and cell.load.arrival_rps == pytest.approx(2 / 0.006)
    assert cell.load.client_waited is None and cell.load.client_procs is None
    assert cell.machine.rss_gb_sum == pytest.approx(400 / 1e9) and cell.machine.k_served_min is None  # 100 + max(300, 200)
    assert (cell.prediction.by, cell.prediction.tpot_ms) == ("K·W/β", pytest.approx(20.0))  # 2 × 1 GB ÷ 100 GB/s
    assert cell.bandwidth.gbps == pytest.approx(cell.output_throughput * 10**9 / 1e9)
    assert cell.bandwidth.formula == "aggregate tok/s × W (each stream reads W per token), W = model file bytes"
    g = cell.goodput  # request 1 met TTFT 10 ms ≤ 15; request 2 (26 ms) did not; the failed one finished
    assert (g.slo, g.attainment) == ("s: TTFT ≤ 15 ms", pytest.approx(1 / 3))
    assert (g.rps, g.tps) == pytest.approx((1 / 0.034, 3 / 0.034))
    assert cell.timing == C.TimingNote() and cell.cost is None and cell.turns == C.Turns()
    failed = C.Cell.measure([recs[2]], C.Spec(1, 1, 0))
    assert failed.status == "failed" and failed.prediction.by is None and failed.bandwidth.gbps is None


def test_an_http_cells_load_and_bandwidth():
    recs = _cell_records()
    for r in recs:
        r.mode = "http"
        r.extra = {"proc": r.worker, "client_queue_ms": 3.0} if r.request_id == 2 else {"proc": r.worker}
    r.k = 1
    cell = C.Cell.measure(recs, C.Spec(2, 1, 2_000, mode="http", endpoint_gbps=[50.0, None]))
    assert cell.load.client_waited == 1 and cell.load.client_wait.max == pytest.approx(3.0)
    assert cell.load.client_wait.p50 == pytest.approx(0.0) and cell.load.client_procs == 2
    assert cell.machine.k_served_min == 1  # a record served by K = 1 in a cell of 2
    eps = cell.bandwidth.endpoints
    assert [e["endpoint"] for e in eps] == ["0", "1"] and cell.bandwidth.gbps == pytest.approx(
        (2_000 / 0.003 + 2_000 / 0.001) / 1e9)
    assert cell.prediction.by is None  # one β of the two endpoints unknown: no K·W/β
    one = C.Cell.measure(recs[:1], C.Spec(1, 1, 2_000, mode="http"))
    assert one.bandwidth.endpoints is None and one.bandwidth.gbps == pytest.approx(2_000 / 0.003 / 1e9)


def test_a_batch_cells_steps_and_kv():
    a = rec(1, 0, 0, [10 * MS, 20 * MS], 20 * MS)
    b = rec(2, 0, 0, [10 * MS, 20 * MS, 30 * MS], 40 * MS)
    for r, p in ((a, 4), (b, 2)):
        r.prompt_tokens, r.pid = p, 7
    cell = C.Cell.measure([a, b], C.Spec(1, 2, 1_000, mode="batch", kv_bytes_per_token=10.0))
    steps_s = 3 / 0.040  # steps at 10, 20, 30 ms over the span 0 → 40 ms
    kv_s = ((4 + 0) + (4 + 1) + (2 + 0) + (2 + 1) + (2 + 2)) * 10.0 / 0.040
    assert cell.bandwidth.steps_per_s == pytest.approx(steps_s)
    assert cell.bandwidth.kv_read_gbps == pytest.approx(kv_s / 1e9)
    assert cell.bandwidth.gbps == pytest.approx((steps_s * 1_000 + kv_s) / 1e9)
    none = C.Cell.measure([rec(3, 5, 5, [], 5, error="x")], C.Spec(1, 2, 1_000, mode="batch"))
    assert none.bandwidth.gbps is None and none.bandwidth.steps_per_s is None


def test_a_step_pending_keeps_the_settled_row_and_heat_settles_the_level_again():
    t = ST.StepTable()
    lv = ST.StepLevel("A", "instances", 1, 1, 0)
    fig = _figures(10)
    for i in range(30):
        settled = t.tick(lv, ST.StepReading(i * NS // 2, True, fig, 100.0, 1.0, thermal="nominal"))
    assert settled.settled and settled.agg_tps == pytest.approx(100.0)
    # a step pending (workers warming): the row stays as it stood settled, whatever the warmup reads
    kept = t.tick(lv, ST.StepReading(15 * NS, False, fig, 5.0, 9.0, thermal="nominal"))
    assert kept is settled
    # hotter: the readings before are another machine's; the level settles again on those after
    hot = t.tick(lv, ST.StepReading(16 * NS, True, fig, 80.0, 1.0, thermal="throttled (fair)"))
    assert not hot.settled and "thermal state now throttled" in hot.progress and "1/10 readings" in hot.progress
    # the next level: A, left before it settled again, keeps its row as it last stood, marked so (never the ★)
    b = ST.StepLevel("B", "instances", 2, 1, 20 * NS)
    t.tick(b, ST.StepReading(20 * NS, True, _figures(10), 200.0, 2.0))
    assert [r.level for r in t.rows] == ["A"] and not t.rows[0].settled
    assert t.rows[0].progress.startswith(f"{ST.LEFT_UNSETTLED}: thermal state now throttled")
    assert t.rows[0].agg_tps == pytest.approx(80.0)
    assert [r.best for r in t.table()] == [False, False]
