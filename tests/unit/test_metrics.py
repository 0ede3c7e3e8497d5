"""Metrics on records computed by hand (docs/design/metrics.md)."""
import math

import numpy as np
import pytest

from measure.core import metrics as M
from measure.core.records import RequestRecord

MS = 1_000_000  # ns


def rec(rid, sched, start, tokens, done, error=None, rep=0, worker=1, rss=None):
    return RequestRecord(
        run_id="r", request_id=rid, mode="instances", engine="test", model="m", model_bytes=1_000_000_000,
        k=1, b=1, worker=worker, t_scheduled_ns=sched, t_submitted_ns=sched, t_started_ns=start,
        t_first_token_ns=tokens[0] if tokens else None, t_done_ns=done, token_ns=tokens,
        output_tokens=len(tokens), error=error, rep=rep, worker_rss_bytes=rss,
    )


# Request A: scheduled 0, started 10 ms, tokens at 50, 70, 100 ms, done 100 ms.
# Request B: scheduled 20 ms, started 100 ms, tokens at 160, 170, 180, 190 ms, done 195 ms.
A = rec(1, 0, 10 * MS, [50 * MS, 70 * MS, 100 * MS], 100 * MS, rss=300)
B = rec(2, 20 * MS, 100 * MS, [160 * MS, 170 * MS, 180 * MS, 190 * MS], 195 * MS, rss=350)


def test_ttft_definitions():
    assert M.ttft(A) == pytest.approx(0.050)  # 50 − 0
    assert M.ttft(B) == pytest.approx(0.140)  # 160 − 20: waiting in the queue counts
    assert M.ttft_engine(B) == pytest.approx(0.060)  # 160 − 100
    assert M.queue_wait(B) == pytest.approx(0.080)  # 100 − 20


def test_tpot_itl_e2e():
    assert M.tpot(A) == pytest.approx(0.025)  # (100 − 50) / 2
    assert M.tpot(B) == pytest.approx(0.010)  # (190 − 160) / 3
    assert M.tpot(rec(3, 0, 0, [5 * MS], 5 * MS)) is None  # one token: undefined
    assert sorted(M.itls([A, B])) == pytest.approx([0.010, 0.010, 0.010, 0.020, 0.030])
    assert M.e2e(B) == pytest.approx(0.175)  # 195 − 20


def test_aggregate_window_and_run_throughput():
    # tokens in [50, 100) ms: 50 and 70 → 2 tokens / 0.05 s = 40 tok/s
    assert M.aggregate_tps([A, B], 50 * MS, 100 * MS) == pytest.approx(40.0)
    # run: 7 tokens over first scheduled (0) → last done (195 ms)
    assert M.output_throughput([A, B]) == pytest.approx(7 / 0.195, rel=1e-6)


def test_percentiles_linear_interpolation():
    vals = [1.0, 2.0, 3.0, 4.0]
    assert M.percentile(vals, 50) == pytest.approx(2.5)
    assert M.percentile(vals, 90) == pytest.approx(3.7)  # 1 + 0.9 × 3 = 3.7 → between 3 and 4
    assert M.percentile(vals, 99) == pytest.approx(3.97)
    assert M.percentile([], 50) is None


def test_cv_and_noisy_flag():
    assert M.cv([10.0, 12.0]) == pytest.approx(math.sqrt(2) / 11)  # stdev √2 over mean 11
    assert M.is_noisy(M.cv([10.0, 12.0]))  # 0.129 > 0.10
    assert not M.is_noisy(M.cv([10.0, 10.5]))
    assert M.cv([5.0]) is None


def test_bandwidth_product_and_prediction():
    # 2 streams at 50 tok/s each = 100 tok/s × 0.253 GB = 25.3 GB/s
    bw = M.bandwidth_product("instances", 253_000_000, agg_tps=100.0)
    assert bw.gbps == pytest.approx(25.3) and bw.formula == M.BANDWIDTH_FORMULA_INSTANCES
    # TPOT(K=3) = 3 × 4 GB / 400 GB/s = 30 ms
    assert M.predicted_tpot(3, 4_000_000_000, 400.0) == pytest.approx(0.030)
    # batch: 2 workers at 10 steps/s reading 1 GB weights, + 5 GB/s of KV reads = 25 GB/s
    bw = M.bandwidth_product("batch", 1_000_000_000, steps_per_s=[10.0, 10.0], kv_read_bps=5e9)
    assert bw.gbps == pytest.approx(25.0) and "KV" in bw.formula
    assert M.bandwidth_product("http", 1_000_000_000).gbps is None


def test_kv_bytes_per_token_llama_31_8b():
    assert M.kv_bytes_per_token(32, 8, 128, 2) == 131_072  # 128 KiB


def test_summary_and_errors():
    failed = rec(3, 0, 5 * MS, [], 30 * MS, error="worker died")
    s = M.summarize([A, B, failed])
    assert s["completed"] == 2 and s["errors"] == 1
    assert s["median_ttft_ms"] == pytest.approx(95.0)  # median of 50 and 140
    assert s["median_tpot_ms"] == pytest.approx(17.5)  # median of 25 and 10
    assert s["median_itl_ms"] == pytest.approx(10.0)
    assert M.rss_sum_bytes([A, B]) == 350  # one worker: its largest RSS
    A2 = rec(4, 0, 0, [1], 1, worker=2, rss=100)
    assert M.rss_sum_bytes([A, B, A2]) == 450


def test_goodput_by_hand():
    """Four requests over 10 s against TTFT ≤ 450 ms, TPOT ≤ 40 ms: A (TTFT 0.2 s, TPOT 30 ms) meets both; B (TTFT
    0.5 s) misses TTFT; C (TPOT 50 ms) misses TPOT; D failed. Goodput = 1 request ÷ 10 s = 0.1 req/s, its 5 tokens
    ÷ 10 s = 0.5 tok/s; attainment 1 of 4 = 25 %."""
    import presets

    def req(rid, sched, first, gap, n=5, error=None):
        ts = [int((first + i * gap) * 1e9) for i in range(n)] if error is None else []
        return RequestRecord(run_id="r", request_id=rid, mode="instances", engine="e", model="m", model_bytes=1,
                             k=1, b=1, t_scheduled_ns=int(sched * 1e9), t_started_ns=int(sched * 1e9),
                             t_first_token_ns=ts[0] if ts else None, t_done_ns=ts[-1] if ts else int(sched * 1e9),
                             token_ns=ts, output_tokens=len(ts), error=error)

    recs = [req(1, 0.0, 0.2, 0.030), req(2, 1.0, 1.5, 0.030), req(3, 2.0, 2.1, 0.050), req(4, 3.0, 0, 0, error="x")]
    slo = presets.slo("interactive")
    assert [M.meets_slo(r, slo) for r in recs] == [True, False, False, False]
    g = M.goodput(recs, slo, 10.0)
    assert (g.rps, g.tps, g.attainment, g.met, g.finished) == (0.1, 0.5, 0.25, 1, 4)
    assert M.meets_slo(recs[1], presets.slo("server")) and M.meets_slo(recs[2], presets.slo("ttft=1s,e2e=1s"))


def test_cost_arithmetic_by_hand(tmp_path):
    """Rented at $2/h serving 500 tok/s: 1.8 Mtok an hour → $1.111 per Mtok. Owned: $3000 over 3 years (26,280 h)
    = $0.114/h, + 100 W at $0.30/kWh = $0.03/h → $0.144/h; at 50 tok/s (0.18 Mtok/h) → $0.801/Mtok; 100 W at
    50 tok/s = 2 J per token. A RAPL counter that rises 5,000,000 µJ in the interval reads as 5 J ÷ the interval."""
    from measure.core.cost import Cost, joules_per_token
    from measure.machine.power import PowerMeter

    assert Cost(price_per_hour=2.0).usd_per_mtok(500.0) == pytest.approx(2.0 / 1.8)
    owned = Cost(hardware_cost=3000.0, lifetime_hours=3 * 8760, kwh_price=0.30)
    assert owned.usd_per_hour(100.0) == pytest.approx(3000 / 26280 + 0.03)
    assert owned.usd_per_mtok(50.0, 100.0) == pytest.approx((3000 / 26280 + 0.03) / 0.18)
    assert joules_per_token(100.0, 50.0) == 2.0 and Cost().usd_per_mtok(50.0) is None
    dom = tmp_path / "intel-rapl:0"
    dom.mkdir()
    (dom / "energy_uj").write_text("1000000")
    meter = PowerMeter(root=str(tmp_path), nvml=False)  # RAPL alone, whatever GPU the test box has
    assert meter.source == "RAPL (intel-rapl:0)" and meter.sample() is None
    (dom / "energy_uj").write_text("6000000")
    w = meter.sample()
    assert w is not None and w > 0  # 5 J over the (tiny) interval since the first reading
    assert PowerMeter(fixed_watts=65.0, root=str(tmp_path / "none"), nvml=False).sample() == 65.0


def test_cv_by_hand_in_floats():
    # values 2, 4, 4, 4, 5, 5, 7, 9: mean 5, squared deviations sum 32, sample variance 32/7
    from measure.core.metrics import cv
    assert cv([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx((32 / 7) ** 0.5 / 5, rel=1e-15)
    assert cv([3.0]) is None and cv([0.0, 0.0]) is None


def test_a_small_percentile_is_numpys_to_the_bit():
    """Below SMALL_N values percentile sorts in Python (a live tick's figures): the same float as numpy's linear
    method for every size and p, ties, negatives and integers included."""
    import random

    rng = random.Random(7)
    for n in (1, 2, 3, 4, 7, 10, 99, 100, 101, 257, M.SMALL_N):
        for kind in range(3):
            xs = ([rng.randint(0, 9) for _ in range(n)] if kind == 0 else
                  [rng.lognormvariate(-3, 1) for _ in range(n)] if kind == 1 else
                  [rng.uniform(-1e6, 1e6) for _ in range(n)])
            for p in (0, 1, 12.5, 50, 90, 99, 99.9, 100, rng.uniform(0, 100)):
                assert M.percentile(xs, p) == float(np.percentile(np.asarray(xs, dtype=float), p)), (n, kind, p)
    assert math.isnan(M.percentile([1.0, math.nan, 2.0], 50))
