"""The knee search, the metrics' heat and byte figures and the HTTP client's count at the edges mutmut found
(issue 56: its survivors in control/bench/knee.py, core/metrics.py and engines/http_openai.py): the search's
defaults and each way it stops, a verdict's words at its bounds, exact Poisson offsets, burst and sustained speed
at their windows' first and last instants, the bytes a step of two tokens reads, the running usage's prompt count,
thinking chunks counted one by one and every choice's characters. Fast: benchmarks/mutation.py's test command."""
from __future__ import annotations

import random
import re

import pytest
from test_figure_oracles_live import _count, _d
from test_figure_oracles_load import _cell, _level_of, rec

from measure.control.bench import knee as K
from measure.core import metrics as M
from measure.core.work import Experts, WorkModel
from presets import SLO

MS = 1_000_000
NS = 1_000_000_000


# ---- the knee search -------------------------------------------------------------------------------------------
def test_the_searchs_defaults():
    run, calls = _level_of(10**6)
    knee = K.find_knee(run)  # users from 1, doubling up to 512
    assert calls == [2**i for i in range(10)] and knee.what == "users" and knee.failed is None
    run, calls = _level_of(10**6)
    K.find_knee(run, start=513 / 512)  # its tenth doubling, 513, is over the limit of 512
    assert calls[-1] == pytest.approx(256.5) and len(calls) == 9


def _fixed(calls, ok, stop=None, why=""):
    def run(level: float) -> K.Level:
        calls.append(level)
        return K.Level(level, ok(level), None if ok(level) else stop(level) if callable(stop) else stop,
                       why.format(n=len(calls)))
    return run


def test_each_way_the_search_stops():
    calls: list[float] = []
    knee = K.find_knee(_fixed(calls, lambda lv: False, "wall", "wall"), "users")
    assert (calls, knee.passed, knee.failed.stop) == ([1], None, "wall")  # nothing passed
    calls = []
    K.find_knee(_fixed(calls, lambda lv: lv <= 2), "users", max_levels=3)  # the third level is the last
    assert calls == [1, 2, 4]
    calls = []
    knee = K.find_knee(_fixed(calls, lambda lv: lv <= 4, lambda lv: "client" if lv == 6 else None), "users")
    assert calls == [1, 2, 4, 8, 8, 6, 6] and knee.failed.stop == "client"  # the client's limit: run twice, then ends
    calls = []
    knee = K.find_knee(_fixed(calls, lambda lv: lv <= 2, None, "slow {n}"), "users")
    # 4 out twice: the second run's words as they were, no "on a second run" (that is for one that passed)
    assert [lv.why for lv in knee.levels] == [f"slow {n}" for n in range(1, 6)] and calls == [1, 2, 4, 4, 3]
    calls = []
    knee = K.find_knee(_fixed(calls, lambda lv: False), "users", start=1.5)  # (0 + 1.5) // 2 = 0: no level 0
    assert calls == [1.5, 1.5] and knee.passed is None and knee.failed.level == 1.5


def test_the_bisection_by_whole_users_and_to_a_tenth_of_a_rate():
    run, calls = _level_of(10)
    knee = K.find_knee(run, "users", start=3)
    assert calls == [3, 6, 12, 12, 9, 10, 11] and (knee.passed.level, knee.failed.level) == (10, 11)  # (9+12)//2
    run, calls = _level_of(9.2)
    knee = K.find_knee(run, "rate", start=1)
    assert calls == [1, 2, 4, 8, 16, 16, 12, 10, 9]  # 9 to 10 is a tenth of 10: close enough, no 9.5
    assert (knee.passed.level, knee.failed.level) == (9, 10)


def test_a_level_out_of_its_slo_says_why_at_each_bound():
    c = _cell(0.5, ttft99=900.0)
    lv = K.judge(c, SLO("s", "s", ttft_s=0.5), "users", 8)
    assert (lv.level, lv.ok, lv.stop, lv.cell) == (8, False, None, c) and lv.ok is False

    def why(slo: SLO, **kw) -> str:
        return K.judge(_cell(0.5, n=200, **kw), slo, "users", 8).why

    only = "only 50% of requests meet the SLO (50% within it)"
    assert why(SLO("s", "s", ttft_s=0.0005), ttft99=None) == only  # no p99 to compare: not over a bound
    assert why(SLO("s", "s", ttft_s=0.5), ttft99=500.2) == "TTFT p99 is 0.50 s (prefill) (50% within it)"
    assert why(SLO("s", "s", ttft_s=0.5), ttft99=2006.0) == "TTFT p99 is 2.01 s (prefill) (50% within it)"
    assert why(SLO("s", "s", tpot_s=0.0005), tpot50=None) == only
    assert why(SLO("s", "s", tpot_s=0.02), tpot50=20.01) == "TPOT p50 is 20 ms (each decode step) (50% within it)"


def test_exact_poisson_offsets_by_hand():
    for seed, kw in ((0, {}), (3, {"seed": 3})):
        p = K.ExactPoisson(5.0, 11, **kw)
        rng = random.Random(seed)
        gaps = [rng.expovariate(5.0) for _ in range(10)]
        want, t = [0], 0
        for g in gaps:
            t += round(g * (10 / 5.0 / sum(gaps)) * NS)
            want.append(t)
        assert p.due(0, 0) + p.due(10**15, 0) == want
    one = K.ExactPoisson(5.0, 1)
    assert one.due(0, 0) + one.due(10**15, 0) == [0]
    assert K.rate_figures([rec(i, t, t, [t + MS], t + 2 * MS) for i, t in enumerate((0, 0, 5 * NS))])[
        "offered_rps"] == pytest.approx(2 / 5)  # two together, then one 5 s later


# ---- the metrics -------------------------------------------------------------------------------------------------
def test_a_missing_time_says_so_in_full():
    line = "a record's time is None where it must be set (an ok, or finished, request's)"
    with pytest.raises(TypeError, match="^" + re.escape(line) + "$"):
        M.e2e(rec(6, 0, 0, [1], None))


def test_burst_and_sustained_at_their_windows_first_and_last_instants():
    a = 100 * NS
    b = a + 35 * NS + 3  # first = a + 7 s (35 s + 3 ns over 5, whole ns); last = a + 17.5 s + 1 ns
    last = a + 17_500_000_001
    one = rec(1, a, a, [a + i * NS for i in range(1, 8)], a + 8 * NS)  # tokens 1 … 7 s: the one at 7 s is out
    two = rec(2, a + 10 * NS, a + 10 * NS, sorted([a + (10 + i) * NS for i in range(26)] + [last]), b)
    conc = (8 * NS + (b - a - 10 * NS)) / (b + 1 - a)
    burst, sustained = M.burst_sustained([one, two])
    assert burst == pytest.approx(6 / 7 * conc, rel=1e-9)
    # from `last` on: the token at it and those at 18 … 35 s, over the 17.5 s + 2 ns the second was in service
    assert sustained == pytest.approx(19 / ((b + 1 - last - 1) / NS) * conc, rel=1e-9)
    # a first fifth in which a stream was in service for 0.5 s only: its speed all the same
    short = rec(3, a, a, [a + NS // 10, a + NS // 5], a + NS // 2)
    burst, _ = M.burst_sustained([short, two])
    conc = (NS // 2 + (b - a - 10 * NS)) / (b + 1 - a)
    assert burst == pytest.approx(2 / 0.5 * conc, rel=1e-9)


def test_the_bytes_a_step_of_one_token_reads_in_the_formula():
    untied = WorkModel("u", "t", params=1, file_bytes=1, weight_bytes=10**9, embd_row_bytes=2e6, matmul_params=1,
                       layers=1, heads=1, kv_heads=1, head_dim=1)
    assert M.read_formula(untied) == "W = bytes read per token (1.002 GB)"  # a row a token: 2 tokens read 1.004
    moe = WorkModel("m", "t", params=1, file_bytes=3 * 10**9, weight_bytes=10**9, embd_row_bytes=0.0,
                    matmul_params=1, layers=1, heads=1, kv_heads=1, head_dim=1, experts=Experts(8, 2, 3e6, 1.0))
    assert M.read_formula(moe) == ("W = bytes read per token: 1.000 GB always + 2 of 8 experts × 3.0 MB = 1.006 GB "
                                   "(the file: 3.000 GB); a batch step reads the distinct experts its tokens are "
                                   "routed to")
    # a TPOT of 2 s and no tok/s: one token a step, not 2 s × 1
    assert M.http_read_bandwidth(untied, [(2.0, None)]).gbps == pytest.approx(1.002e9 / 2.0 / 1e9, rel=1e-12)
    assert M.bandwidth_product("batch", 1000).formula == M.BANDWIDTH_FORMULA_BATCH_NO_KV


# ---- the HTTP client's count ---------------------------------------------------------------------------------------
def _text(t, **choice):
    return {"choices": [{"text": t, "index": 0, **choice}]}


def test_a_usage_without_the_prompt_keeps_the_prompt_count_it_had():
    res = _count([{"choices": [{"text": " a", "index": 0}], "usage": {"prompt_tokens": 4, "completion_tokens": 1}},
                  {"choices": [{"text": " b", "index": 0}], "usage": {"completion_tokens": 2}}])
    assert (res.prompt_tokens, res.server_output_tokens, len(res.token_ns)) == (4, 2, 2)


def test_thinking_chunks_are_counted_one_by_one_without_a_usage():
    res = _count([_d(reasoning_content="a"), _d(reasoning_content="b"), _d(reasoning="c"), _d(content="d")])
    assert res.reasoning_tokens == 3 and res.t_first_answer_ns == 4000 and res.token_ns == [1000, 2000, 3000, 4000]


def test_every_choices_characters_count_in_the_spread():
    res = _count([{"choices": [{"index": 0, "delta": {"content": "aaaa"}}, {"index": 1, "delta": {"content": "bb"}}]},
                  _text("cc"), {"choices": [], "usage": {"completion_tokens": 8}}])
    assert res.token_ns == [1000] * 6 + [2000] * 2  # 6 : 2 characters
