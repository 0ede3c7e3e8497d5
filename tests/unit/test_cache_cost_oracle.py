"""Oracles for what a server says about its caches (measure/core/server_cache.py) and for the cost of a token
(measure/core/cost.py): each figure worked by hand on a tiny case, each source's precedence and each refusal (a
figure a server does not give is absent, never 0) tried. Pure (benchmarks/mutation.py mutates both against these)."""
from __future__ import annotations

import pytest

from measure.core.cost import Cost, joules_per_token
from measure.core.records import RequestRecord
from measure.core.server_cache import cache_figures, cache_note, live_rates

MS = 1_000_000


def rec(rid, *, done_ms=100, prompt=100, cached=None, timings=None, view=None, error=None, first=True):
    extra = None if cached is None else {"cached_tokens": cached}
    sv = dict(view or {})
    if timings is not None:
        sv["timings"] = timings
    return RequestRecord("r", rid, "http", "http", "m", 0, 1, 2, prompt_tokens=prompt, output_tokens=2,
                         t_started_ns=0, t_first_token_ns=10 * MS if first else None, t_done_ns=done_ms * MS,
                         token_ns=[10 * MS, done_ms * MS] if first else [], error=error, extra=extra,
                         server_view=sv or None)


# --- the prefix cache ---------------------------------------------------------------------------------------------

def test_hit_rate_from_each_responses_usage_first():
    recs = [rec(1, prompt=100, cached=30), rec(2, prompt=50, cached=0),
            rec(3, prompt=0, cached=9), rec(4, prompt=None, cached=9),  # no prompt count: not read
            rec(5, prompt=40, cached="12"),  # not an int: not read
            rec(6, prompt=500, cached=500, error="timeout"), rec(7, prompt=500, cached=500, first=False),  # not ok
            rec(8, prompt=20, timings={"cache_n": 20, "prompt_n": 0})]  # llama-server's: usage comes first
    out = cache_figures(recs)
    assert out == {"prefix_cache_hit_rate": 30 / 150, "prefix_cache_tokens": 150,
                   "prefix_cache_source": "usage.prompt_tokens_details.cached_tokens"}


def test_hit_rate_from_llama_servers_timings():
    recs = [rec(1, timings={"cache_n": 30, "prompt_n": 70}), rec(2, timings={"cache_n": 10, "prompt_n": 40}),
            rec(3, timings={"cache_n": 5.0, "prompt_n": 5}), rec(4, timings={"prompt_n": 5}), rec(5, timings="x")]
    out = cache_figures(recs)
    assert out == {"prefix_cache_hit_rate": 40 / 150, "prefix_cache_tokens": 150,
                   "prefix_cache_source": "llama-server timings.cache_n"}
    assert cache_figures([rec(1, timings={"cache_n": 0, "prompt_n": 0})]) == {}  # no tokens: no rate


def _counters(**kw):
    return {k: float(v) for k, v in kw.items()}


def test_hit_rate_from_vllms_counters_rise():
    # scrapes carried by the records, ordered by when each ended: the rise from the first to the last
    recs = [rec(2, done_ms=300, view=_counters(prefix_cache_hits_total=40, prefix_cache_queries_total=200)),
            rec(1, done_ms=100, view=_counters(prefix_cache_hits_total=10, prefix_cache_queries_total=100)),
            rec(3, done_ms=200, view=_counters(prefix_cache_hits_total=99, prefix_cache_queries_total=999))]
    out = cache_figures(recs)
    assert out == {"prefix_cache_hit_rate": 30 / 100, "prefix_cache_tokens": 100,
                   "prefix_cache_source": "vllm:prefix_cache_hits_total / queries_total"}
    # the scrape before the load, where a record carries it, is the start: one record is then enough
    start = _counters(prefix_cache_hits_total=0, prefix_cache_queries_total=40)
    one = [rec(1, view={**_counters(prefix_cache_hits_total=30, prefix_cache_queries_total=100), "load_start": start})]
    assert cache_figures(one)["prefix_cache_hit_rate"] == 30 / 60
    assert cache_figures(one[:1] + recs)["prefix_cache_hit_rate"] == 40 / 160  # from the load's start to the last
    assert cache_figures(recs[:1]) == {}  # one scrape and no start: no rise
    flat = [rec(1, done_ms=100, view=_counters(prefix_cache_hits_total=5, prefix_cache_queries_total=100)),
            rec(2, done_ms=200, view=_counters(prefix_cache_hits_total=5, prefix_cache_queries_total=100))]
    assert cache_figures(flat) == {}  # no query between the scrapes
    missing = [rec(1, done_ms=100, view=_counters(prefix_cache_queries_total=100)),
               rec(2, done_ms=200, view=_counters(prefix_cache_hits_total=5, prefix_cache_queries_total=150))]
    assert cache_figures(missing) == {}  # a counter absent from one end


# --- speculative decoding, the KV cache ---------------------------------------------------------------------------

def test_draft_acceptance_from_llama_servers_timings_then_vllms_counters():
    recs = [rec(1, timings={"draft_n_accepted": 6, "draft_n": 10}), rec(2, timings={"draft_n_accepted": 3, "draft_n": 5}),
            rec(3, timings={"draft_n": 4}), rec(4, timings={"draft_n_accepted": 1, "draft_n": 2}, error="boom")]
    out = cache_figures(recs)
    assert (out["spec_acceptance_rate"], out["spec_draft_tokens"]) == (9 / 15, 15)
    assert out["spec_source"] == "llama-server timings.draft_n_accepted / draft_n"
    assert "spec_mean_acceptance_length" not in out
    vllm = [rec(1, done_ms=100, view=_counters(spec_decode_accepted_tokens_total=10, spec_decode_draft_tokens_total=20,
                                               spec_decode_drafts_total=5)),
            rec(2, done_ms=200, view=_counters(spec_decode_accepted_tokens_total=40, spec_decode_draft_tokens_total=80,
                                               spec_decode_drafts_total=25))]
    # a response whose timings drafted nothing does not stop the counters being read
    zero = rec(3, done_ms=50, view=vllm[0].server_view, timings={"draft_n_accepted": 0, "draft_n": 0})
    out = cache_figures(vllm + [zero])
    # 30 accepted of 60 drafted, in 20 drafts: 1 + 30 ÷ 20 = 2.5 tokens a step
    assert (out["spec_acceptance_rate"], out["spec_draft_tokens"], out["spec_mean_acceptance_length"]) == (0.5, 60, 2.5)
    assert out["spec_source"] == "vllm:spec_decode_num_accepted_tokens_total / num_draft_tokens_total"
    same_drafts = [vllm[0], rec(2, done_ms=200, view=_counters(spec_decode_accepted_tokens_total=40,
                                                               spec_decode_draft_tokens_total=80,
                                                               spec_decode_drafts_total=5))]
    out = cache_figures(same_drafts)
    assert out["spec_acceptance_rate"] == 0.5 and "spec_mean_acceptance_length" not in out
    no_drafts = [vllm[0], rec(2, done_ms=200, view=_counters(spec_decode_accepted_tokens_total=10,
                                                             spec_decode_draft_tokens_total=20,
                                                             spec_decode_drafts_total=9))]
    assert cache_figures(no_drafts) == {}


def test_kv_use_is_the_highest_any_record_carried():
    recs = [rec(1, view={"kv_cache_usage": 0.25}), rec(2, view={"kv_cache_usage": 0.75}, error="late"),
            rec(3, view={"kv_cache_usage": "0.9"}), rec(4)]
    assert cache_figures(recs) == {"kv_cache_usage_max": 0.75}  # a failed request's scrape still says the KV
    assert cache_figures([rec(1, view={"kv_cache_usage": 0})]) == {"kv_cache_usage_max": 0}
    assert cache_figures([]) == {}


def test_live_rates_from_one_scrape():
    assert live_rates(None) == {} and live_rates({}) == {}
    v = {"kv_cache_usage": 1, "prefix_cache_queries_total": 200.0, "prefix_cache_hits_total": 50.0,
         "spec_decode_draft_tokens_total": 40.0, "spec_decode_accepted_tokens_total": 30.0}
    assert live_rates(v) == {"kv_cache_usage": 1.0, "prefix_cache_hit_rate": 0.25, "spec_acceptance_rate": 0.75}
    assert live_rates({"prefix_cache_queries_total": 10.0, "spec_decode_draft_tokens_total": 4.0}) == {
        "prefix_cache_hit_rate": 0.0, "spec_acceptance_rate": 0.0}  # a counter not yet exported reads 0
    assert live_rates({"prefix_cache_queries_total": 0.0, "spec_decode_draft_tokens_total": 0.0,
                       "kv_cache_usage": "x"}) == {}


class _Server:
    def __init__(self, hit=None, acc=None, kv=None):
        self.prefix_cache_hit_rate, self.spec_acceptance_rate, self.kv_cache_usage_max = hit, acc, kv


def test_cache_note_names_what_the_server_gave():
    assert cache_note(_Server()) == ""
    assert cache_note(_Server(0.304, 0.5, 0.875)) == " prefix-cache hits 30% draft acceptance 50% KV max 88%"
    assert cache_note(_Server(kv=0.0)) == " KV max 0%"
    assert cache_note(_Server(acc=1.0)) == " draft acceptance 100%"


# --- the cost of a token ------------------------------------------------------------------------------------------

def test_rented_and_owned_by_hand():
    rented = Cost(price_per_hour=2.5, hardware_cost=9999.0, lifetime_hours=1.0, kwh_price=1.0, watts=500.0)
    assert rented.set and rented.usd_per_hour() == 2.5 and rented.usd_per_hour(1000.0) == 2.5
    # $2.50 an hour at 100 tok/s: 360,000 tokens an hour → $6.944 per million
    assert rented.usd_per_mtok(100.0) == pytest.approx(2.5 / 360_000 * 1e6)
    assert rented.describe() == "rented at $2.5/h"
    # owned: $2000 over 10,000 h = $0.20/h, + 300 W × $0.20/kWh = $0.06/h
    owned = Cost(hardware_cost=2000.0, lifetime_hours=10_000.0, kwh_price=0.2, watts=300.0)
    assert owned.set
    assert owned.usd_per_hour() == pytest.approx(0.26)
    assert owned.usd_per_hour(100.0) == pytest.approx(0.22)  # a meter's reading over the given draw
    assert owned.usd_per_hour(0.0) == pytest.approx(0.20)  # a meter reading 0 W is 0 W, not the given draw
    assert owned.usd_per_mtok(50.0) == pytest.approx(0.26 / (50 * 3600) * 1e6)
    assert owned.describe() == "owned: $2000 over 10000 h + electricity $0.2/kWh"
    no_power = Cost(hardware_cost=2000.0, lifetime_hours=10_000.0)
    assert no_power.usd_per_hour(300.0) == pytest.approx(0.20)  # no kWh price: no energy cost
    assert Cost(hardware_cost=2000.0, lifetime_hours=10_000.0, kwh_price=0.2).usd_per_hour() == pytest.approx(0.20)
    assert no_power.describe() == "owned: $2000 over 10000 h"


def test_no_cost_is_absent_not_zero():
    for c in (Cost(), Cost(hardware_cost=2000.0), Cost(hardware_cost=2000.0, lifetime_hours=0.0),
              Cost(lifetime_hours=100.0, kwh_price=0.3, watts=100.0)):
        assert not c.set and c.usd_per_hour() is None and c.usd_per_mtok(100.0) is None
        assert c.describe() == "no cost given (--price-per-hour, or --hardware-cost and --lifetime)"
    assert Cost(price_per_hour=0.0).set and Cost(price_per_hour=0.0).usd_per_hour() == 0.0
    assert Cost(price_per_hour=1.0).usd_per_mtok(0.0) is None and Cost(price_per_hour=1.0).usd_per_mtok(None) is None


def test_joules_per_token():
    assert joules_per_token(300.0, 100.0) == 3.0
    assert joules_per_token(0.0, 100.0) is None and joules_per_token(300.0, 0.0) is None
    assert joules_per_token(None, 100.0) is None and joules_per_token(300.0, None) is None


def test_the_smallest_rise_counts_and_a_malformed_start_is_not_one():
    one = [rec(1, done_ms=100, view=_counters(prefix_cache_hits_total=0, prefix_cache_queries_total=10,
                                              spec_decode_accepted_tokens_total=0, spec_decode_draft_tokens_total=0,
                                              spec_decode_drafts_total=0)),
           rec(2, done_ms=200, view=_counters(prefix_cache_hits_total=1, prefix_cache_queries_total=11,
                                              spec_decode_accepted_tokens_total=1, spec_decode_draft_tokens_total=1,
                                              spec_decode_drafts_total=1))]
    out = cache_figures(one)  # one query, one draft token in one draft: each a figure
    assert (out["prefix_cache_hit_rate"], out["prefix_cache_tokens"]) == (1.0, 1.0)
    assert (out["spec_acceptance_rate"], out["spec_draft_tokens"], out["spec_mean_acceptance_length"]) == (1.0, 1.0, 2.0)
    # a load_start that is empty or not a scrape is not the start: the rise is from the first record's scrape
    for bad in ({}, "x"):
        first = rec(1, done_ms=100, view={**one[0].server_view, "load_start": bad})
        assert cache_figures([first, one[1]])["prefix_cache_hit_rate"] == 1.0
