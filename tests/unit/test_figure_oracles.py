"""Each figure class against an independent recompute on a tiny case worked by hand, or against numpy (issue 56;
docs/design/metrics.md): percentiles, ITL with each request's first gap, TPOT, users in flight by their time average,
the arrival processes against their nominal distributions, the bandwidth product against the bytes a token reads ×
the rate, the live window's aggregation over every worker id (0 included), the first and last record of a window,
the step table's ★, and the HTTP client's token count against every SSE shape. Fast (well under a second each):
benchmarks/mutation.py runs these as mutmut's test command."""
from __future__ import annotations

import math
import random
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

from measure.core import metrics as M
from measure.core.records import RequestRecord
from presets import SLO

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import truth_matrix as T  # noqa: E402

MS = 1_000_000


def rec(rid, sched, start, tokens, done, *, worker=0, error=None, rep=0, out=None, pid=None, prompt=0):
    return RequestRecord(run_id="r", request_id=rid, mode="instances", engine="t", model="m", model_bytes=1000,
                         k=1, b=1, worker=worker, t_scheduled_ns=sched, t_submitted_ns=sched, t_started_ns=start,
                         t_first_token_ns=tokens[0] if tokens else None, t_done_ns=done, token_ns=list(tokens),
                         output_tokens=len(tokens) if out is None else out, error=error, rep=rep, pid=pid,
                         prompt_tokens=prompt)


# Two requests worked by hand (ms): A scheduled 0, started 10, tokens 40 · 46 · 48 · 49, done 50 (gaps 6, 2, 1: the
# first unlike the rest); B scheduled 5, started 20, tokens 30 · 30 · 34, done 36 (two tokens in one chunk).
A = rec(1, 0, 10 * MS, [40 * MS, 46 * MS, 48 * MS, 49 * MS], 50 * MS)
B = rec(2, 5 * MS, 20 * MS, [30 * MS, 30 * MS, 34 * MS], 36 * MS, worker=1)


def test_itl_pools_every_gap_the_first_included_and_one_gap_for_a_shared_stamp():
    assert M.itl_gaps(A.token_ns).tolist() == pytest.approx([0.006, 0.002, 0.001])
    assert M.itl_gaps(B.token_ns).tolist() == pytest.approx([0.004])  # 30 · 30 · 34: one wait of 4 ms
    assert sorted(M.itls([A, B])) == pytest.approx([0.001, 0.002, 0.004, 0.006])
    assert M.itl_gaps([]).tolist() == [] and M.itl_gaps([5]).tolist() == []
    s = M.summarize([A, B])
    assert s["median_itl_ms"] == pytest.approx(3.0)  # 1 2 4 6: (2 + 4) ÷ 2
    assert s["p99_itl_ms"] == pytest.approx(float(np.percentile([1, 2, 4, 6], 99)))


def test_tpot_ttft_e2e_by_hand():
    assert M.tpot(A) == pytest.approx(0.003)  # (49 − 40) ÷ 3
    assert M.tpot(B) == pytest.approx(0.002)  # (34 − 30) ÷ 2: every token counts
    assert M.tpot_of_times([7]) is None and M.tpot_of_times([]) is None
    assert M.tpot_of_times([0, 2 * MS]) == pytest.approx(0.002)
    assert (M.ttft(A), M.ttft(B)) == pytest.approx((0.040, 0.025))
    assert (M.ttft_engine(A), M.ttft_engine(B)) == pytest.approx((0.030, 0.010))
    assert (M.queue_wait(A), M.queue_wait(B)) == pytest.approx((0.010, 0.015))
    assert (M.e2e(A), M.e2e(B)) == pytest.approx((0.050, 0.031))
    with pytest.raises(TypeError):
        M.ttft(rec(3, 0, 0, [], None))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 12, 100, 999, 1000, 1001, 1500])
def test_percentiles_are_numpys_to_the_bit(n):
    rng = random.Random(n)
    xs = [rng.expovariate(1.0) for _ in range(n)]
    for p in (0, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 100):
        assert M.percentile(xs, p) == float(np.percentile(xs, p)), (n, p)
    assert M.percentile(np.asarray(xs), 50) == float(np.percentile(xs, 50))
    assert M.percentile([], 50) is None
    assert math.isnan(M.percentile([1.0, float("nan")], 50))
    assert M.percentile([3.0, 1.0], 50) == 2.0 and M.percentile([3.0, 1.0], -5) == 1.0  # a p below 0: the least


def test_summarize_against_numpy_over_the_records_stamps():
    recs = [A, B, rec(3, 1 * MS, 2 * MS, [9 * MS, 12 * MS], 13 * MS), rec(4, 0, 1 * MS, [], 3 * MS, error="x")]
    s = M.summarize(recs)
    got = T.recomputed(recs)
    for name, key in (("ttft", "ttft"), ("tpot", "tpot")):
        mean, p50, p90, p99 = got[name]
        assert (s[f"mean_{key}_ms"], s[f"median_{key}_ms"], s[f"p90_{key}_ms"], s[f"p99_{key}_ms"]) == \
            pytest.approx((mean, p50, p90, p99), abs=1e-9)
    assert (s["median_itl_ms"], s["p99_itl_ms"]) == pytest.approx((got["itl"][1], got["itl"][3]), abs=1e-9)
    assert (s["median_e2el_ms"], s["p99_e2el_ms"]) == pytest.approx((got["e2el"][1], got["e2el"][3]), abs=1e-9)
    assert (s["median_ttft_engine_ms"], s["p99_ttft_engine_ms"]) == pytest.approx(
        (got["ttft_engine"][1], got["ttft_engine"][3]), abs=1e-9)
    assert s["median_queue_wait_ms"] == pytest.approx(float(np.median([10, 15, 1])))
    assert (s["completed"], s["errors"], s["total_output_tokens"]) == (3, 1, 9)
    assert s["median_ttfat_ms"] == s["median_ttft_ms"] and s["p99_ttfat_ms"] == s["p99_ttft_ms"]
    assert s["reasoning_tokens"] == 0


def test_windows_count_their_first_and_last_token():
    # tokens of A and B in [30, 46): B's 30, 30, 34 and A's 40; 46 is the next window's
    assert M.tokens_in_window([A, B], 30 * MS, 46 * MS) == 4
    assert M.aggregate_tps([A, B], 30 * MS, 46 * MS) == pytest.approx(4 / 0.016)
    assert M.aggregate_tps([A, B], 46 * MS, 46 * MS) == 0.0 and M.aggregate_tps([A], 5, 4) == 0.0
    times = [t for r in (A, B) for t in r.token_ns]
    assert M.aggregate_tps_from_times(times, 30 * MS, 46 * MS) == pytest.approx(4 / 0.016)
    assert M.aggregate_tps_from_times(times, 9, 9) == 0.0
    assert M.run_span_ns([A, B]) == (0, 50 * MS) and M.run_span_ns([]) is None
    assert M.run_span_ns([rec(9, 5, None, [], None)]) is None
    # the run's tok/s: every token, the first scheduled's and the last done's included
    assert M.output_throughput([A, B]) == pytest.approx(7 / 0.050)
    assert M.output_throughput([rec(9, 5, 5, [5], 5)]) is None


def test_users_in_service_by_time_average_not_the_peak():
    # Little's law over [0, 50): A in service 10 → 50 (40 ms), B 20 → 36 (16 ms): 56 ÷ 50
    assert M.achieved_concurrency([A, B], 0, 50 * MS) == pytest.approx(56 / 50)
    assert M.achieved_concurrency([A, B], 30 * MS, 40 * MS) == pytest.approx(16 / 10)  # both inside
    # pairs: one still in service counts to b; one never started not at all; b ≤ a: none
    assert M.achieved_concurrency([(10 * MS, None), (None, 5 * MS), (0, 20 * MS)], 0, 40 * MS) == \
        pytest.approx((30 + 20) / 40)
    assert M.achieved_concurrency([A], 5, 5) is None
    assert M.achieved_concurrency([rec(5, 0, 0, [1], None)], 0, 10) == 0.0  # a record not ended: not counted
    # the matrix's own recompute of users in flight (scheduled → done): (50 + 31) ÷ 50
    assert T.users_mean([A, B]) == pytest.approx(81 / 50)


def test_goodput_and_slo_by_hand():
    slo = SLO("t", "t", ttft_s=0.035, tpot_s=0.0025, e2e_s=0.040)
    assert not M.meets_slo(A, slo)  # TTFT 40 > 35
    assert M.meets_slo(B, slo)  # TTFT 25, TPOT 2, E2E 31
    assert not M.meets_slo(B, SLO("t", "t", tpot_s=0.0019)) and M.meets_slo(B, SLO("t", "t", tpot_s=0.002))
    assert not M.meets_slo(B, SLO("t", "t", e2e_s=0.030)) and M.meets_slo(B, SLO("t", "t", e2e_s=0.031))
    assert M.meets_slo(B, SLO("t", "t", ttft_s=0.025)) and not M.meets_slo(B, SLO("t", "t", ttft_s=0.0249))
    assert not M.meets_slo(rec(7, 0, 0, [], 5, error="x"), SLO("t", "t"))
    assert M.meets_slo(rec(7, 0, 0, [3 * MS], 5 * MS), SLO("t", "t", tpot_s=1e-9))  # one token: TPOT not bounded
    g = M.goodput([A, B, rec(8, 0, 0, [], None)], slo, 0.5)
    assert (g.rps, g.tps, g.attainment, g.met, g.finished) == pytest.approx((2.0, 6.0, 0.5, 1, 2))
    assert M.goodput([A], slo, 0.0) is None and M.goodput([rec(8, 0, 0, [], None)], slo, 1.0) is None


def test_mean_cv_noisy():
    assert M.mean([1.0, 2.0, 6.0]) == 3.0 and M.mean([]) is None
    assert M.cv([2.0, 4.0]) == pytest.approx(statistics.stdev([2.0, 4.0]) / 3.0)
    assert M.cv([1.0]) is None and M.cv([0.0, 0.0]) is None
    assert not M.is_noisy(0.10) and M.is_noisy(0.1001) and not M.is_noisy(None)
    assert M.p99_mark(99) == "≈" and M.p99_mark(100) == "" and M.p99_mark(0) == "" and M.p99_mark(None) == ""


def test_bandwidth_against_the_bytes_a_token_reads_times_the_rate():
    work = T.moe_work()
    assert work.read_bytes(1) == pytest.approx(400_000)  # 0.3 MB + 2 of 8 experts × 50 kB, not the 1 MB file
    bw = M.read_bandwidth("instances", work, agg_tps=50.0)
    assert bw.gbps == pytest.approx(50.0 * 400_000 / 1e9)
    assert M.read_bandwidth("instances", work).gbps is None
    # batch: 10 steps/s of 4 tokens each: 10 × read_bytes(4), + the KV read
    b4 = work.read_bytes(4)
    assert b4 == pytest.approx(300_000 + 8 * (1 - 0.75 ** 4) * 50_000)  # 4 independent tokens: 5.47 experts
    assert M.read_bandwidth("batch", work, agg_tps=40.0, steps_per_s=[6.0, 4.0], kv_read_bps=1e6).gbps == \
        pytest.approx((10 * b4 + 1e6) / 1e9)
    assert M.read_bandwidth("batch", work, agg_tps=40.0).gbps is None
    assert M.bandwidth_product("instances", 1_000, agg_tps=3.0).gbps == pytest.approx(3e-6)
    assert M.bandwidth_product("instances", 1_000).gbps is None
    assert M.bandwidth_product("batch", 1_000, steps_per_s=[2.0, 3.0], kv_read_bps=500.0).gbps == \
        pytest.approx((5 * 1_000 + 500) / 1e9)
    assert M.bandwidth_product("batch", 1_000).gbps is None
    assert M.http_bandwidth(1_000, [0.01, None, 0.02]).gbps == pytest.approx((100 + 50) * 1_000 / 1e9)
    assert M.http_bandwidth(0, [0.01]).gbps is None and M.http_bandwidth(1_000, []).gbps is None
    assert M.sum_gbps([1.0, 2.5]) == 3.5 and M.sum_gbps([1.0, None]) is None and M.sum_gbps([]) is None
    assert M.predicted_tpot(2, 1_000_000_000, 100.0) == pytest.approx(0.02)
    assert M.kwb_tpot(2, 10**9, 100.0) == pytest.approx(0.02) and M.kwb_tpot(1, 0, 100.0) is None
    assert M.kwb_tpot(2, 10**9, None, "http", [100.0, 50.0, 25.0]) == pytest.approx(2e9 / 150e9)
    assert M.kwb_tpot(3, 10**9, 40.0, "http") == pytest.approx(10**9 / 40e9)  # one server: K does not apply
    assert M.kv_bytes_per_token(2, 3, 4, 2.0) == 96.0


def test_the_cells_bandwidth_product_reads_the_work_not_the_file():
    from measure.control.bench.cell import Cell, Spec

    recs = [A, B]
    cell = Cell.measure(recs, Spec(1, 1, 1_000_000, mode="instances", roofline=T._WorkOnly(T.moe_work())))
    assert cell.bandwidth.gbps == pytest.approx(cell.output_throughput * 400_000 / 1e9)
    plain = Cell.measure(recs, Spec(1, 1, 1_000_000, mode="instances"))
    assert plain.bandwidth.gbps == pytest.approx(plain.output_throughput * 1_000_000 / 1e9)


def test_batch_reads_count_distinct_steps_and_kv():
    r1 = rec(1, 0, 0, [10, 20, 30], 30, worker=0, pid=1, prompt=5)
    r2 = rec(2, 0, 0, [20, 30], 30, worker=0, pid=1, prompt=1)
    r3 = rec(3, 0, 0, [20], 30, worker=1, pid=2, prompt=0)
    assert M.batch_reads([r1, r2, r3], None) == (4, None)  # (0,1)×{10,20,30} and (1,2)×{20}
    steps, kv = M.batch_reads([r1, r2, r3], [(15, 25)], kv_bytes_per_token=2.0)
    assert steps == 2 and kv == pytest.approx(((5 + 1) + (1 + 0) + 0) * 2.0)


def test_stopped_early_and_rss():
    a = rec(1, 0, 0, [1, 2], 3)
    a.finish_reason = "stop"
    b = rec(2, 0, 0, [1, 2, 3], 4)
    b.finish_reason = "length"
    assert M.stopped_early([a, b]) == 1 and M.stopped_early([a, b], max_tokens=2) == 0
    a.server_output_tokens = 1
    assert M.stopped_early([a], max_tokens=3) == 1
    a.worker_rss_bytes, b.worker_rss_bytes = 100, 300
    c = rec(3, 0, 0, [1], 2, worker=0)
    c.worker_rss_bytes = 150
    assert M.rss_sum_bytes([a, b, c]) == 300  # one worker (0, no pid): its largest
    d = rec(4, 0, 0, [1], 2, worker=5)
    d.worker_rss_bytes = 7
    assert M.rss_sum_bytes([a, b, c, d]) == 307


# ---- the arrival processes against their nominal distributions ------------------------------------------------
@pytest.mark.parametrize("pattern", ["poisson", "gamma", "ramp", "constant"])
@pytest.mark.parametrize("seed", [3, 11])
def test_arrivals_follow_their_nominal_process(pattern, seed):
    """2000 arrivals of each pattern: the rate asked exactly (a level is conditioned on its count), the gaps'
    CV the process's, and a Kolmogorov–Smirnov test (α = 0.01) against its distribution."""
    from measure.core.arrivals import ArrivalSpec, realised_rate

    n, rate = 2000, T.RATE
    spec = {"poisson": ArrivalSpec("poisson", rate=rate, seed=seed),
            "gamma": ArrivalSpec("gamma", rate=rate, burstiness=0.5, seed=seed),
            "ramp": ArrivalSpec("ramp", ramp=T.RAMP, seed=seed),
            "constant": ArrivalSpec("constant", rate=rate)}[pattern]
    sched = spec.make(n)
    times_ns = sched.due(0, 0) + []
    assert not times_ns or times_ns == [0]
    times_ns = [0] + sched.due(10**15, 0)
    assert len(times_ns) == n
    assert realised_rate(times_ns) == pytest.approx(spec.mean_rate(), rel=1e-9)
    times = [t / 1e9 for t in times_ns]
    gaps = np.diff(times)
    cv = float(np.std(gaps) / np.mean(gaps))
    if pattern == "constant":
        assert cv < 1e-6
        return
    unit, cdf = T.nominal_unit_gaps(pattern, times, rate)
    assert T.ks_distance(unit, cdf) <= T.ks_critical(len(unit))
    want_cv = {"poisson": 1.0, "gamma": 1 / math.sqrt(0.5)}.get(pattern)
    if want_cv is not None:
        assert cv == pytest.approx(want_cv, rel=0.12)


def test_the_ks_test_refuses_a_constant_rate_as_poisson():
    times = [i / T.RATE for i in range(12)]
    unit, cdf = T.nominal_unit_gaps("poisson", times, T.RATE)
    assert T.ks_distance(unit, cdf) > T.ks_critical(len(unit))


# ---- the live window over every worker id, 0 included ------------------------------------------------------
def test_live_window_aggregates_every_worker_zero_included():
    from measure.control.live.stats import LiveStats

    st = LiveStats(window_s=1.0)
    st.load_started(0)
    # worker 0: 4 tokens; worker 1: 2; worker None (one process): 1; all inside the window (0, 1 s]
    st.add_tokens(0, 1, [100 * MS, 200 * MS])
    st.add_tokens(0, 2, [300 * MS, 400 * MS])
    st.add_tokens(1, 3, [500 * MS, 700 * MS])
    st.add_tokens(None, 4, [600 * MS])
    w = st.window(1000 * MS)
    assert w.per_worker_tps == pytest.approx({0: 4.0, 1: 2.0, None: 1.0})
    assert w.agg_tps == pytest.approx(7 / 1.000000001)
    assert sum(w.per_worker_tps.values()) == pytest.approx(7.0)
    assert w.steps_per_s == pytest.approx({0: 4.0, 1: 2.0, None: 1.0})
    assert sorted(w.tpots) == pytest.approx([0.1, 0.1, 0.2])
    assert w.tpot_by_worker == pytest.approx({0: 0.1, 1: 0.2})
    # a token older than the window leaves it, and one at its very start stays
    w2 = st.window(1300 * MS)
    assert w2.per_worker_tps == pytest.approx({0: 2.0, 1: 2.0, None: 1.0})  # [300, 1300]: 100 and 200 left


def test_live_concurrency_counts_every_request_in_service():
    from measure.control.live.stats import LiveStats

    st = LiveStats(window_s=1.0)
    st.load_started(0)
    st.add_started(1, 0)
    st.add_started(2, 500 * MS)
    r = rec(3, 0, 200 * MS, [300 * MS], 600 * MS)
    st.add_started(3, 200 * MS)
    st.add_record(r)
    w = st.window(1000 * MS)
    # request 1: 0 → now (1 s), 2: 0.5 s, 3: 0.4 s, over 1 s
    assert w.concurrency == pytest.approx((1000 + 500 + 400) / 1000, rel=1e-6)


# ---- the step table's ★ ------------------------------------------------------------------------------------
def test_the_star_is_the_settled_row_of_most_goodput_or_tok_s():
    from dataclasses import replace

    from measure.control.live.steps import StepTable

    def row(level, settled, tps, gp):
        from measure.core.lines import StepRow

        fields = StepRow.__dataclass_fields__
        base = {f: None for f in fields}
        base.update(level=level, mode="instances", k=1, b=1, settled=settled, progress="", agg_tps=tps,
                    goodput_tps=gp, best=False)
        return StepRow(**{k: v for k, v in base.items() if k in fields})

    for slo, want in ((None, "b"), (SLO("t", "t", ttft_s=1.0), "c")):
        t = StepTable(slo=slo)
        t.rows = [row("a", True, 10.0, 9.0), row("b", True, 30.0, 1.0), row("x", False, 99.0, 99.0)]
        t.current = row("c", True, 20.0, 15.0)
        best = [r.level for r in t.table() if r.best]
        assert best == [want], (slo, best)
        t.current = replace(t.current, settled=False)
        assert [r.level for r in t.table() if r.best] == (["b"] if slo is None else ["a"])


# ---- the HTTP client's token count over every SSE shape ------------------------------------------------------
def _count(chunks):
    from engines.http_openai import StreamResult, _Counter

    res = StreamResult()
    c = _Counter(res, None)
    for i, ch in enumerate(chunks):
        c.chunk(ch, (i + 1) * 1000)
    c.finish()
    return res


def _text(t, usage=None, finish=None):
    out = {"choices": [{"index": 0, "text": t, "finish_reason": finish}]}
    if usage is not None:
        out["usage"] = {"prompt_tokens": 3, "completion_tokens": usage}
    return out


@pytest.mark.parametrize("shape", ["continuous", "final", "none", "role-first", "empty-deltas"])
def test_tokens_counted_against_the_servers_usage_in_every_sse_shape(shape):
    """Three tokens, each in a chunk of its own, sent in each shape real servers use: the count is 3 whatever the
    shape, each stamped at its chunk's arrival; a chunk carrying no token counts none."""
    if shape == "continuous":  # vLLM's continuous_usage_stats: usage in every chunk, then a usage-only last one
        chunks = [_text(" a", 1), _text(" b", 2), _text(" c", 3, "length"), {"choices": [], "usage":
                                                                           {"prompt_tokens": 3, "completion_tokens": 3}}]
    elif shape == "final":  # OpenAI's include_usage: a last chunk of usage alone, its choices empty
        chunks = [_text(" a"), _text(" b"), _text(" c", finish="length"),
                  {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}]
    elif shape == "none":
        chunks = [_text(" a"), _text(" b"), _text(" c", finish="length")]
    elif shape == "role-first":  # a chat stream's role-only first chunk
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
                  *({"choices": [{"index": 0, "delta": {"content": t}}]} for t in (" a", " b")),
                  {"choices": [{"index": 0, "delta": {"content": " c"}, "finish_reason": "length"}]}]
    else:  # empty deltas and empty texts between the tokens
        chunks = [_text(""), _text(" a"), {"choices": [{"index": 0, "delta": {}}]}, _text(" b"), _text(""),
                  _text(" c", finish="length"), {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}]
    res = _count(chunks)
    assert len(res.token_ns) == 3, (shape, res.token_ns)
    stamps = [(i + 1) * 1000 for i, ch in enumerate(chunks)
              if any(c.get("text") or (c.get("delta") or {}).get("content") for c in ch.get("choices") or [])]
    assert res.token_ns == stamps
    assert res.finish_reason == "length"
    if shape in ("continuous", "final", "empty-deltas"):
        assert res.server_output_tokens == 3


def test_a_final_usage_above_the_chunks_spreads_the_missing_tokens():
    res = _count([_text(" a b"), _text(" c d", finish="length"),
                  {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}])
    assert res.token_ns == [1000, 1000, 2000, 2000] and res.token_count == "chunks+final-usage"


def test_http_bandwidth_reads_what_a_steps_tokens_read():
    work = T.moe_work()
    bw = M.http_read_bandwidth(work, [(0.01, 200.0), (None, 5.0), (0.02, 10.0)])
    # 1 ÷ TPOT steps a second, each of tok/s × TPOT tokens (at least one): 2 tokens a step, then 1
    assert bw.gbps == pytest.approx((work.read_bytes(2) / 0.01 + work.read_bytes(1) / 0.02) / 1e9)
    assert work.read_bytes(2) == pytest.approx(300_000 + 8 * (1 - 0.75 ** 2) * 50_000)
    assert M.http_read_bandwidth(work, [(None, 3.0)]).gbps is None


def test_burst_and_sustained_speed_by_hand():
    s = 1_000_000_000
    # one stream 0 → 40 s: a token a second for 20 s, then one every 2 s (throttled): burst (first fifth) 1 tok/s,
    # sustained (last half) 0.5
    toks = [int((i + 0.5) * s) for i in range(20)] + [(21 + 2 * i) * s for i in range(10)]
    r = rec(1, 0, 0, toks, 40 * s)
    burst, sustained = M.burst_sustained([r])
    assert burst == pytest.approx(1.0, rel=1e-6) and sustained == pytest.approx(0.5, rel=1e-6)
    assert M.burst_sustained([rec(2, 0, 0, [s], 29 * s)]) is None  # under HEAT_MIN_S


def test_bandwidth_formulas_and_units_exactly():
    """GB is 1e9 bytes exactly, a missing KV read adds nothing, and each product says the formula that made it."""
    work = T.moe_work()
    dense = M.WorkModel("d", "t", params=1, file_bytes=2_000_000_000, weight_bytes=2_000_000_000, embd_row_bytes=0.0,
                        matmul_params=1, layers=1, heads=1, kv_heads=1, head_dim=1)
    exact = pytest.approx  # relative 1e-12: a GB of 1e9 + 1 bytes moves the figure by 1e-9
    assert M.read_formula(work) == ("W = bytes read per token: 0.000 GB always + 2 of 8 experts × 0.1 MB = 0.000 GB "
                                    "(the file: 0.001 GB); a batch step reads the distinct experts its tokens are "
                                    "routed to")
    assert M.read_formula(dense) == "W = bytes read per token (2.000 GB)"
    assert M.read_formula(work).startswith("W = bytes read per token: 0.000 GB always + 2 of 8 experts × 0.1 MB")
    assert M.read_formula(work).endswith("(the file: 0.001 GB); a batch step reads the distinct experts its tokens "
                                         "are routed to")
    b = M.read_bandwidth("instances", dense, agg_tps=3.0)
    assert b.gbps == exact(6.0, rel=1e-12) and b.formula == "aggregate tok/s × W, W = bytes read per token (2.000 GB)"
    assert M.read_bandwidth("instances", dense).formula == "aggregate tok/s × W, W = bytes read per token (2.000 GB)"
    b = M.read_bandwidth("batch", dense, agg_tps=8.0, steps_per_s=[2.0])
    assert b.gbps == exact(4.0, rel=1e-12)
    assert b.formula == "Σ workers steps/s × W(tokens a step), W = bytes read per token (2.000 GB)"
    b = M.read_bandwidth("batch", dense, agg_tps=8.0, steps_per_s=[2.0], kv_read_bps=0.0)
    assert b.formula == "Σ workers steps/s × W(tokens a step) + KV read, W = bytes read per token (2.000 GB)"
    assert M.read_bandwidth("batch", dense).formula == \
        "Σ workers steps/s × W(tokens a step), W = bytes read per token (2.000 GB)"
    assert M.bandwidth_product("instances", 2_000_000_000, agg_tps=3.0).gbps == exact(6.0, rel=1e-12)
    b = M.bandwidth_product("batch", 2_000_000_000, steps_per_s=[1.0, 1.0])
    assert b.gbps == exact(4.0, rel=1e-12) and b.formula == M.BANDWIDTH_FORMULA_BATCH_NO_KV
    assert M.bandwidth_product("batch", 2_000_000_000, steps_per_s=[1.0], kv_read_bps=0.0).formula == \
        M.BANDWIDTH_FORMULA_BATCH
    assert M.BANDWIDTH_FORMULA_BATCH_NO_KV == "Σ workers steps/s × W, W = model file bytes (KV reads not counted)"
    assert M.BANDWIDTH_FORMULA_BATCH == \
        "Σ workers steps/s × W + KV bytes read per step × steps/s, W = model file bytes"
    assert M.BANDWIDTH_FORMULA_INSTANCES == \
        "aggregate tok/s × W (each stream reads W per token), W = model file bytes"
    assert M.bandwidth_product("instances", 1).formula == M.BANDWIDTH_FORMULA_INSTANCES
    h = M.bandwidth_product("http", 2_000_000_000, steps_per_s=[0.5, 1.5])
    assert h.gbps == exact(4.0, rel=1e-12) and h.formula == M.BANDWIDTH_FORMULA_HTTP_W
    assert M.bandwidth_product("http", 0) == M.Bandwidth(None, M.BANDWIDTH_FORMULA_HTTP)
    assert M.bandwidth_product("http", 5) == M.Bandwidth(None, M.BANDWIDTH_FORMULA_HTTP_W)
    assert M.BANDWIDTH_FORMULA_HTTP == "n/a: the weights are read on the server (--model-bytes W to estimate it)"
    assert M.predicted_tpot(2, 10**9, 100.0) == 0.02 and M.kwb_tpot(2, 10**9, 100.0) == 0.02


def test_slo_and_counts_at_their_edges():
    failed_with_tokens = rec(9, 0, 0, [1 * MS, 2 * MS], 3 * MS, error="cut")
    assert not M.meets_slo(failed_with_tokens, SLO("t", "t"))
    assert M.p99_mark(1) == "≈"
    a, b = rec(1, 0, 0, [1], 2), rec(2, 0, 0, [1], 2, worker=3)
    a.worker_rss_bytes, b.worker_rss_bytes = 0, 0
    assert M.rss_sum_bytes([a, b]) == 0
    r1 = rec(1, 0, 0, [10, 20], 30, worker=0, pid=1)
    assert M.batch_reads([r1], [(10, 20)]) == (1, None)  # a window [a, b): its first token in, its last out
    assert M.batch_reads([r1], [(11, 21)]) == (1, None)


def test_time_to_the_first_answer_token_by_hand():
    r = rec(1, 0, 0, [10 * MS, 20 * MS, 30 * MS], 40 * MS)
    assert M.ttfat(r) == M.ttft(r) == pytest.approx(0.010)  # no reasoning: TTFT
    r.reasoning_tokens, r.t_first_answer_ns = 2, 30 * MS
    assert M.ttfat(r) == pytest.approx(0.030)
    assert M.meets_slo(r, SLO("t", "t", ttft_s=0.030)) and not M.meets_slo(r, SLO("t", "t", ttft_s=0.029))
    cut = rec(2, 5 * MS, 5 * MS, [10 * MS], 12 * MS)
    cut.reasoning_tokens = 1  # cut while thinking: never answered
    assert M.ttfat(cut) is None and not M.meets_slo(cut, SLO("t", "t", ttft_s=10.0))
    assert M.meets_slo(cut, SLO("t", "t"))  # no TTFT bound: nothing to miss
    s = M.summarize([r, cut])
    assert s["median_ttfat_ms"] == pytest.approx(30.0) and s["p99_ttfat_ms"] == pytest.approx(30.0)
    assert s["reasoning_tokens"] == 3 and s["mean_ttft_ms"] == pytest.approx((10 + 5) / 2)
    assert s["p90_ttft_ms"] == pytest.approx(float(np.percentile([10, 5], 90)))
    assert M.summarize([])["completed"] == 0 and M.summarize([])["median_ttft_ms"] is None


def test_metrics_at_their_exact_edges():
    s = 1_000_000_000
    # two alike streams scheduled at 10 s, 40 s long: a token a second for 20 s, then one every 2 s. Burst (the first
    # fifth, [10, 18) s): each stream's 8 tokens over its 8 s in service, times the 2 streams in flight; sustained
    # (the last half, [30 s, 50 s + 1 ns)): 10 tokens over the 20 s each is in service inside it
    toks = [10 * s + int((i + 0.5) * s) for i in range(20)] + [(31 + 2 * i) * s for i in range(10)]
    rs = [rec(i, 10 * s, 10 * s, toks, 50 * s) for i in (1, 2)]
    conc = 2 * 40 * s / (40 * s + 1)
    burst, sustained = M.burst_sustained(rs)
    assert burst == pytest.approx(16 / 16 * conc, rel=1e-12)
    assert sustained == pytest.approx(20 / 40 * conc, rel=1e-12)
    assert M.burst_sustained([rec(3, 10 * s, 10 * s, [11 * s], 40 * s - 1)]) is None  # under HEAT_MIN_S (30 s)
    assert M.burst_sustained([rec(3, 10 * s, 10 * s, [11 * s], 40 * s)]) is not None  # 30 s: not under it
    idle = rec(4, 0, None, [], 31 * s)  # never started: no stream-seconds, no speed
    assert M.burst_sustained([idle]) == (0.0, 0.0)
    assert M.achieved_concurrency([(0, 10)], 100, 200) == 0.0  # wholly before the window: nothing, not 1 ns
    assert M.itl_gaps([0, 1, 3]).tolist() == [1e-9, 2e-9]  # a gap of one ns is a gap
    failed_with_tokens = rec(9, 0, 0, [1, 2], 3, error="cut")
    assert M.ok([failed_with_tokens]) == []
    r = rec(5, 7 * MS, 7 * MS, [9 * MS], 10 * MS)
    r.reasoning_tokens, r.t_first_answer_ns = 1, 9 * MS
    assert M.ttfat(r) == pytest.approx(0.002)
    with pytest.raises(TypeError, match="a record's time is None where it must be set"):
        M.e2e(rec(6, 0, 0, [1], None))
    assert M.kwb_tpot(1, 10**9, None, "http", [100.0, 50.0]) == pytest.approx(0.01)  # the first K endpoints
    recs = [rec(i, 0, 0, [0, t * MS], t * MS) for i, t in enumerate((2, 3, 5, 7, 11), 1)]
    su = M.summarize(recs)
    assert su["p90_tpot_ms"] == pytest.approx(float(np.percentile([2, 3, 5, 7, 11], 90)))
    assert su["p99_tpot_ms"] == pytest.approx(float(np.percentile([2, 3, 5, 7, 11], 99)))


def test_formulas_round_the_figures_they_show():
    from measure.core.work import Experts

    # 1 000 500 001 B is 1.001 GB (a GB of 1e9 + 1 bytes would show 1.000)
    dense = M.WorkModel("d", "t", params=1, file_bytes=1, weight_bytes=1_000_500_001, embd_row_bytes=0.0,
                        matmul_params=1, layers=1, heads=1, kv_heads=1, head_dim=1)
    assert M.read_formula(dense) == "W = bytes read per token (1.001 GB)"
    untied = M.WorkModel("d", "t", params=1, file_bytes=1, weight_bytes=1_000_000_000, embd_row_bytes=600_000.0,
                         matmul_params=1, layers=1, heads=1, kv_heads=1, head_dim=1)
    assert M.read_formula(untied) == "W = bytes read per token (1.001 GB)"  # one row a token, not two (1.001 2)
    moe = M.WorkModel("m", "t", params=1, file_bytes=2_000_500_001, weight_bytes=1_000_500_001, embd_row_bytes=0.0,
                      matmul_params=1, layers=1, heads=1, kv_heads=1, head_dim=1,
                      experts=Experts(8, 2, 500_000.0, 1.0))
    assert M.read_formula(moe) == ("W = bytes read per token: 1.001 GB always + 2 of 8 experts × 0.5 MB = 1.002 GB "
                                   "(the file: 2.001 GB); a batch step reads the distinct experts its tokens are "
                                   "routed to")
    bw = M.http_read_bandwidth(dense, [(2.0, None)])  # no tok/s: one token a step, not 2 s × 1
    assert bw.gbps == pytest.approx(dense.read_bytes(1) / 2.0 / 1e9, rel=1e-12)
    assert bw.formula == ("Σ endpoints W(tokens a step) ÷ TPOT p50 (a batching server reads once a step what its "
                          "streams' tokens read; tokens a step = tok/s × TPOT p50), W = bytes read per token "
                          "(1.001 GB)")
    assert M.http_read_bandwidth(dense, []).formula == bw.formula


def test_a_median_halfway_is_lerped_from_the_upper_end_as_numpy_does():
    a, b = 0.926506623785866, 417.10644551813203  # (b − a) ÷ 2 from a and from b differ in the last bit here
    assert M.percentile([a, b], 50) == float(np.percentile([a, b], 50)) == b - (b - a) * 0.5 != a + (b - a) * 0.5
