"""A bench cell's figures against cases worked by hand, to the last bit where a unit could slip (issue 56: mutmut's
survivors in control/bench/cell.py): the per-rep, per-period and combined-clients timing (GB and seconds of 1e9
exactly: relative 1e-12), the bandwidth product from the bytes a token reads (a model of fixed predictions stands in
for the roofline: its interface only), the endpoints' rows in their order, the HTTP server's figures, cost, goodput
without a span, sessions' turns and what is only an HTTP cell's. Fast: benchmarks/mutation.py's test command."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_figure_oracles_live import rec

from measure.control.bench import cell as C
from measure.core import metrics as M
from measure.core.cost import Cost, joules_per_token
from presets import SLO

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import truth_matrix as T  # noqa: E402

MS = 1_000_000
NS = 1_000_000_000
EXACT = 1e-12  # a GB or a second of 1e9 + 1 moves a figure by 1e-9


def exact(x: float) -> object:
    return pytest.approx(x, rel=EXACT, abs=0)  # no absolute slack: a figure of 1e-5 is compared to 1e-17


class FixedRoof:
    """Stands in for a roofline: its work model (the bytes a token reads) and fixed predictions for every level.
    SIMULATED predictions; the cell only reads `work` and `level()`."""

    def __init__(self, work):
        self.work = work

    def level(self, mode, k, b, threads, prompt_tokens, output_tokens):
        return SimpleNamespace(tpot_s=0.004, aggregate_tps=500.0, binding="bandwidth", oversubscribed=False,
                               caveat=lambda: "")


def _reps():
    """rep 0 (ms): 10 → 50 and 15 → 40 on workers 0 and 1; rep 1: 100 → 130."""
    return [rec(1, 10 * MS, 10 * MS, [20 * MS, 30 * MS], 50 * MS), rec(2, 15 * MS, 15 * MS, [25 * MS, 35 * MS], 40 * MS,
                                                                          worker=1),
            rec(3, 100 * MS, 100 * MS, [110 * MS, 115 * MS], 130 * MS, rep=1)]


def test_per_rep_timing_to_the_last_bit():
    t = C.PerRep().time(_reps())
    assert t.goodput_s == exact(0.040 + 0.030)  # the reps' spans summed
    good, windows, secs = t.batch
    assert secs == exact(0.120) and windows is None  # the cell's span, 10 → 130 ms
    # Little's law over each rep's span [first scheduled, last done + 1 ns)
    assert t.concurrency == exact((65e6 / (40e6 + 1) + 30e6 / (30e6 + 1)) / 2)
    assert C._achieved([]) is None
    # one request whose span is 0 ns: no batch span (nothing to divide by)
    flat = C.Cell.measure([rec(1, 5, 5, [5], 5)], C.Spec(1, 2, 1000, mode="batch"))
    assert flat.bandwidth == C.CellBandwidth(None, M.bandwidth_product("batch", 1000).formula)


def _periods_case():
    recs = _reps()
    spans = [(0, 25 * MS), (100 * MS, 120 * MS), (200 * MS, 210 * MS)]  # the last: nobody in service
    return recs, spans


def test_periods_timing_to_the_last_bit():
    recs, spans = _periods_case()
    t = C.Periods(spans, recs).time(recs)
    secs = (25 + 20 + 10) * MS / 1e9
    assert t.goodput_s == exact(secs) and t.note.seconds == exact(secs)
    busy = (15 + 10 + 20) * MS  # 10 → 25, 15 → 25; 100 → 120; none in 200 → 210
    assert t.concurrency == exact(busy / (secs * 1e9))
    assert t.note.throughput_rule == "tokens inside this level's periods ÷ their length"
    cell = C.Cell.measure(recs, C.Spec(1, 2, 1000, mode="batch"), C.Periods(spans, recs))
    assert cell.timing == t.note
    # batch steps inside the periods [a, b) only: 20 ms (25 is the first one's end), 110 and 115: 3 over 55 ms
    assert cell.bandwidth.steps_per_s == exact(3 / secs) and cell.bandwidth.gbps == exact(3 / secs * 1000 / 1e9)


def test_clients_timing_and_goodput_without_a_span():
    recs = _reps()
    c = C.Clients([10.0, 30.0], [1.0, None]).time(recs)
    assert c.concurrency is None and c.per_rep == []
    assert c.note == C.TimingNote(clients=2, clients_throughput=[10.0, 30.0],
                                  throughput_rule="Σ over clients of each client's output tokens ÷ its own span")
    cell = C.Cell.measure(recs, C.Spec(1, 2, 1000, mode="batch", slo=SLO("s", "s", ttft_s=1.0)),
                          C.Clients([10.0, 30.0], [1.0, 2.0]))
    assert cell.output_throughput_per_rep == [] and cell.cv is None and cell.output_throughput == 40.0
    # the batch steps over the cell's own span (10 → 130 ms): 20, 25, 30, 35, 110, 115
    assert cell.bandwidth.steps_per_s == exact(6 / 0.120)
    assert cell.goodput.rps == exact(3 / (6 / 40.0))  # 6 tokens ÷ 40 tok/s: the seconds goodput is per
    none = C.Cell.measure(recs, C.Spec(1, 1, 1000, slo=SLO("s", "s", ttft_s=1.0)), C.Clients([None, 5.0], [1.0, 1.0]))
    assert none.goodput == C.CellGoodput("s: TTFT ≤ 1000 ms", None, None, None)


def test_a_cells_machine_cost_and_noise():
    recs = _reps()
    for r, rss in zip(recs, (1_500_000_001, 2_000_000_000, 1_000_000_000)):
        r.worker_rss_bytes, r.pid = rss, r.worker
    cell = C.Cell.measure(recs, C.Spec(3, 1, 1000, cost=Cost(price_per_hour=3.6)))
    assert cell.machine.rss_gb_sum == exact(3.500000001)  # the largest of each worker: 1.5… + 2
    tps = cell.output_throughput
    assert cell.cost == C.CostFigures(None, None, exact(3.6 / (tps * 3600) * 1e6))
    per = [4 / (40 * MS + 1) * NS, 2 / (30 * MS + 1) * NS]  # the reps' tok/s: far apart, noisy
    assert cell.cv == exact(float(np.std(per, ddof=1) / np.mean(per))) and cell.noisy is True
    watts = C.Cell.measure(recs, C.Spec(3, 1, 1000, cost=Cost(), watts=50.0))  # no price, a draw: J/token only
    assert watts.cost == C.CostFigures(50.0, exact(joules_per_token(50.0, tps)), None)
    owned = C.Cell.measure(recs, C.Spec(3, 1, 1000, cost=Cost(hardware_cost=100.0, lifetime_hours=10.0,
                                                               kwh_price=1.0), watts=500.0))
    assert owned.cost.usd_per_mtok == exact((10.0 + 0.5) / (tps * 3600) * 1e6)
    assert C.Cell.measure(recs, C.Spec(3, 1, 1000, cost=Cost())).cost is None  # nothing to price
    empty = C.Cell.measure([], C.Spec(2, 1, 1000))
    assert (empty.status, empty.machine.k_served_min) == ("failed", None)


def _http(recs, **extra):
    for r in recs:
        r.mode = "http"
        r.extra = dict(r.extra or {}, **extra)
    return recs


def test_only_an_http_cell_has_a_client_wait_processes_and_server_figures():
    recs = _reps()
    for r, (wait, cached, prompt) in zip(recs, ((4.0, 6, 10), (None, 0, 10), (1.0, 10, 20))):
        r.prompt_tokens = prompt
        r.extra = {"proc": r.worker, "cached_tokens": cached} | ({} if wait is None else {"client_queue_ms": wait})
    local = C.Cell.measure(recs, C.Spec(1, 2, 1000))
    assert local.load.client_waited is None and local.load.client_procs is None and local.server == C.Server()
    http = C.Cell.measure(_http(recs), C.Spec(1, 2, 1000, mode="http"))
    assert http.load.client_wait == C.Dist(p50=exact(1.0), p99=exact(float(np.percentile([4.0, 0.0, 1.0], 99))),
                                           max=4.0)
    assert (http.load.client_waited, http.load.client_procs) == (2, 2)
    assert http.server.prefix_cache_hit_rate == exact(16 / 40) and http.server.prefix_cache_tokens == 40
    one = C.Cell.measure(_http(_reps()), C.Spec(1, 2, 1000, mode="http"))  # no pool of processes
    assert one.load.client_procs is None and one.server == C.Server()


def test_the_k_w_beta_prediction_of_an_http_cell_from_its_endpoints():
    recs = _http(_reps())
    cell = C.Cell.measure(recs, C.Spec(2, 1, 2 * 10**9, mode="http", endpoint_gbps=[50.0, 150.0]))
    assert cell.prediction == C.CellPrediction("K·W/β", exact(2 * 2e9 / 200e9 * 1e3))  # K·W ÷ Σβ: 20 ms


def test_the_roofline_prediction_stands_where_it_has_one():
    recs = _reps()
    cell = C.Cell.measure(recs, C.Spec(1, 2, 1000, bandwidth_gbps=10.0, roofline=FixedRoof(T.moe_work())))
    p = cell.prediction
    assert (p.by, p.tpot_ms, p.output_throughput, p.binding) == ("roofline", exact(4.0), 500.0, "bandwidth")
    assert p.error_tpot == exact((4.0 - cell.requests.tpot.p50) / cell.requests.tpot.p50)


def test_the_bandwidth_of_a_batch_cell_from_the_bytes_a_step_reads():
    work = T.moe_work()
    recs = _reps()
    for r in recs:
        r.prompt_tokens, r.pid = 3, 1
    cell = C.Cell.measure(recs, C.Spec(1, 2, 1000, mode="batch", roofline=FixedRoof(work), kv_bytes_per_token=100.0))
    steps_s = 6 / 0.120  # 20 25 30 35 110 115 ms over the cell's span 10 → 130
    tps = cell.output_throughput
    kv_s = 100.0 * (3 + 4) * 3 / 0.120  # each request: prompt 3 + 0, then 3 + 1 tokens of KV
    assert cell.bandwidth.steps_per_s == exact(steps_s) and cell.bandwidth.kv_read_gbps == exact(kv_s / 1e9)
    assert cell.bandwidth.gbps == exact((steps_s * work.read_bytes(tps / steps_s) + kv_s) / 1e9)
    assert cell.bandwidth.formula == M.read_bandwidth("batch", work, agg_tps=1.0, steps_per_s=[1.0],
                                                      kv_read_bps=1.0).formula
    no_kv = C.Cell.measure(recs, C.Spec(1, 2, 1000, mode="batch"))
    assert no_kv.bandwidth == C.CellBandwidth(exact(steps_s * 1000 / 1e9), M.bandwidth_product(
        "batch", 1000, steps_per_s=[1.0]).formula, None, exact(steps_s), None)


def test_an_http_cells_bandwidth_from_the_served_models_work():
    work = T.moe_work()
    recs = _http(_reps())
    cell = C.Cell.measure(recs, C.Spec(2, 1, 0, mode="http", served=work))
    eps = cell.bandwidth.endpoints
    span_s = 0.120
    want = 0.0
    for e, (tokens, tp) in zip(eps, ((4, float(np.median([0.010, 0.005]))), (2, 0.010))):
        tps = tokens / span_s
        assert e["output_throughput"] == exact(tps) and e["median_tpot_ms"] == exact(tp * 1e3)
        step = work.read_bytes(max(1.0, tps * tp)) / tp / 1e9
        assert e["bandwidth_gbps"] == exact(step)
        want += step
    assert cell.bandwidth.gbps == exact(want)
    assert cell.bandwidth.formula == M.http_read_bandwidth(work, []).formula
    one = _http([rec(1, 10 * MS, 10 * MS, [20 * MS, 30 * MS, 35 * MS], 50 * MS)])
    cell = C.Cell.measure(one, C.Spec(1, 1, 0, mode="http", served=work))
    tps, tp = 3 / 0.040 * (40 * MS) / (40 * MS + 1), 0.0075
    assert cell.bandwidth.gbps == exact(work.read_bytes(max(1.0, tps * tp)) / tp / 1e9)
    assert cell.bandwidth.endpoints is None


def test_endpoint_rows_in_order_by_hand():
    recs = [rec(1, 100 * MS, 100 * MS, [110 * MS], 120 * MS, worker=None),
            rec(2, 100 * MS, 100 * MS, [110 * MS, 114 * MS, 116 * MS], 140 * MS, worker=1),
            rec(3, 110 * MS, 110 * MS, [130 * MS, 131 * MS], 150 * MS, worker=0, error=None)]
    eps = C.endpoint_figures(recs)
    assert [e["endpoint"] for e in eps] == ["0", "1", "None"]  # by worker id, the unknown one last
    assert eps[1] == {"endpoint": "1", "url": None, "requests": 1, "errors": 0,
                      "output_throughput": exact(3 / 0.050), "median_ttft_ms": exact(10.0),
                      "median_tpot_ms": exact(3.0), "bandwidth_gbps": None}  # W not given: no product
    assert eps[2]["median_tpot_ms"] is None and eps[2]["bandwidth_gbps"] is None  # one token: no TPOT
    order = [rec(1, 0, 0, [MS], 2 * MS, worker=2), rec(2, 0, 0, [MS], 2 * MS, worker=1)]
    assert [e["endpoint"] for e in C.endpoint_figures(order)] == ["1", "2"]
    zero = [rec(1, 0, 0, [MS], 2 * MS, worker=1), rec(2, 0, 0, [MS], 2 * MS, worker=0)]
    assert [e["endpoint"] for e in C.endpoint_figures(zero)] == ["0", "1"]
    # no span to divide by: no tok/s (all at one instant, or none done)
    at_once = [rec(1, 5 * MS, 5 * MS, [5 * MS], 5 * MS, worker=0), rec(2, 5 * MS, 5 * MS, [5 * MS], 5 * MS, worker=1)]
    assert [e["output_throughput"] for e in C.endpoint_figures(at_once)] == [None, None]
    undone = [rec(1, 0, 0, [], None, worker=0, error="x"), rec(2, 0, 0, [], None, worker=1, error="x")]
    assert [e["output_throughput"] for e in C.endpoint_figures(undone)] == [None, None]


def test_request_classes_stopped_early_and_turns():
    recs = _reps()[:2] + [rec(3, 100 * MS, 100 * MS, [110 * MS], 130 * MS, rep=1)]
    for r, reason in zip(recs, ("stop", "length", "stop")):
        r.finish_reason = reason
    # with EOS ignored, an answer that stopped at its 2-token limit is not early; one that stopped at 1 is
    assert C.Cell.measure(recs, C.Spec(1, 1, 1000, max_tokens=2, ignore_eos=True)).requests.stopped_early == 1
    plain = C.Cell.measure(recs, C.Spec(1, 1, 1000, max_tokens=2))
    assert plain.requests.stopped_early is None and plain.requests.ttft_by_class is None  # one class: none
    for r, p in zip(recs, ("long-1", "long-2", "p")):
        r.prompt_id = p
    recs[1].t_scheduled_ns = 5 * MS
    by = C.ttft_by_class(recs)  # long: 10 and 20 ms; short: 10 ms
    assert by["long"] == {"n": 2, "median_ttft_ms": exact(15.0),
                          "p99_ttft_ms": exact(float(np.percentile([10.0, 20.0], 99)))}
    for r, turn in zip(recs, (1, 2, 1)):
        r.session, r.turn = r.request_id, turn
        r.extra = {"prefix_cache": "on: each session's turns share their prefix"}
    cell = C.Cell.measure(recs, C.Spec(1, 1, 1000))
    assert cell.turns.prefix_cache == "on"
    assert cell.turns.ttft_by_turn["1"]["n"] == 2 and cell.turns.ttft_by_turn["1"]["median_ttft_ms"] == exact(10.0)
    assert cell.turns.ttft_by_turn["2"]["median_ttft_ms"] == exact(20.0)
