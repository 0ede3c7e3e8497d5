"""An HTTP cell's warmup (measure/sources/warmup.py): a server's cold first request lands before the cell's figures,
not in them, and the cell and the records header count it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import presets
from engines.null_server import Behaviour, NullServer
from measure.core.records import RunMeta
from measure.core.workload import ClosedLoop, Load
from measure.sources.http import HttpSource
from measure.sources.http_pool import HttpPool
from measure.sources.warmup import Warmup

META = RunMeta("http", "null", 0, simulated=True)
COLD_MS = 400.0  # the planted cold first request: its TTFT is this much over the set 5 ms
# the client's own per-stream warmup asks 2 tokens (sources/http.py WARMUP_TOKENS): the cold path lies past it, as
# llama_cpp.server's did (its first real request was a B = 1 cell's TTFT p99, 3.55 s)
COLD = dict(ttft_ms=5, itl_ms=2, cold_first=(COLD_MS, 2))


def test_the_warmup_rule_is_read_from_its_option():
    assert Warmup.parse("auto") == Warmup() and not Warmup().off
    assert Warmup.parse("3") == Warmup(requests=3) and Warmup.parse(" 5S ") == Warmup(seconds=5.0)
    assert Warmup.parse("0").off and Warmup.parse("0s").off
    for bad in ("-1", "1.5", "x", "s", "-2s", "nans", "infs", ""):
        with pytest.raises(ValueError, match="--warmup"):
            Warmup.parse(bad)
    assert "per stream" in Warmup().describe() and Warmup(requests=0).describe() == "none"


def _cell(url: str, warmup: Warmup, b: int = 1, pool: bool = False):
    kept: list = []
    src = (HttpPool(url, META, b=b, procs=2, events=False, on_record=kept.append, warmup=warmup) if pool
           else HttpSource(url, META, b=b, events=False, on_record=kept.append, warmup=warmup))
    try:
        src.start(timeout=60)
        def load():
            return Load(presets.workload("synthetic:16"), ClosedLoop(b, total=4 * b), 8)
        recs = src.run_requests(load(), timeout=60)
        again = src.run_requests(load(), timeout=60)  # a second rep of the same level: not warmed again
    finally:
        src.close()
    return recs, again, kept, src.warmup_requests


def _worst_ttft_ms(recs) -> float:
    return max((r.t_first_token_ns - r.t_scheduled_ns) / 1e6 for r in recs)


@pytest.mark.parametrize("pool", [False, True], ids=["one loop", "two processes"])
def test_a_cold_first_request_lands_in_the_warmup_not_in_the_cell(pool):
    b = 2 if pool else 1
    # no warmup: the cold request is the cell's worst TTFT (the planted fault seen)
    with NullServer(Behaviour(**COLD)) as srv:
        recs, _, kept, warmed = _cell(srv.url, Warmup(requests=0), b, pool)
    assert _worst_ttft_ms(recs) >= COLD_MS and warmed == 0 and len(kept) == 8 * b
    with NullServer(Behaviour(**COLD)) as srv:
        recs, again, kept, warmed = _cell(srv.url, Warmup(), b, pool)  # auto: one request per stream
    assert len(recs) == 4 * b and not [r.error for r in recs if r.error]
    assert _worst_ttft_ms(recs) < COLD_MS / 2, "the cold first request is in the cell's figures"
    assert warmed == b  # counted once: the second rep of the level is not warmed again
    assert len(kept) == 8 * b and {r.request_id for r in kept} == {r.request_id for r in recs + again}


def test_a_timed_warmup_runs_rounds_until_its_seconds_are_up():
    with NullServer(Behaviour(ttft_ms=5, itl_ms=2)) as srv:
        recs, _, kept, warmed = _cell(srv.url, Warmup(seconds=0.3), b=2)
    # a round of 2 requests of 8 tokens takes ≈ 20 ms: 0.3 s is several rounds, none of them recorded
    assert warmed >= 6 and warmed % 2 == 0 and len(recs) == 8 and len(kept) == 16


def test_bench_warms_each_http_level_by_default_and_says_so(tmp_path):
    """bench --engine http: the cold request is out of the cell's TTFT p99 by default; the header says the rule,
    the cell the count (summary.json warmup_requests), the records file holds the cell's requests only; with
    --warmup 0 the cold request is the cell's p99 again."""
    def bench(out, *extra):
        with NullServer(Behaviour(**COLD)) as srv:
            p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                                "--b", "1,2", "--requests", "4", "--max-tokens", "8", "--client-procs", "1",
                                "--tokenizer", "none", "--out", str(out), *extra], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        lines = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
        return lines[0], [x for x in lines[1:] if x.get("kind") == "request"], json.loads(
            (out / "summary.json").read_text()), p.stdout

    head, reqs, cells, table = bench(tmp_path / "auto")
    assert "per stream" in head["warmup"] and len(reqs) == 8
    assert [c["warmup_requests"] for c in cells] == [1, 2]
    assert max(c["p99_ttft_ms"] for c in cells) < COLD_MS / 2 and "after 1 warmup requests" in table
    head, reqs, cells, _ = bench(tmp_path / "none", "--warmup", "0")
    assert head["warmup"] == "none" and len(reqs) == 8 and "warmup_requests" not in cells[0]
    assert cells[0]["p99_ttft_ms"] > COLD_MS / 2  # (p99 of 4 requests: interpolated, a little under the cold one)


@pytest.mark.parametrize("argv, says", [
    (["--engine", "http", "--url", "http://127.0.0.1:9/v1", "--warmup", "soon"], "--warmup 'soon'"),
    (["--engine", "llama", "--warmup", "2"], "--warmup applies to --engine http"),
])
def test_a_bad_warmup_is_one_line_and_a_usage_exit(argv, says, tmp_path):
    p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", *argv, "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_warmup_leaves_nothing_in_the_prefix_cache_the_cell_could_hit(tmp_path):
    """--warmup auto --prefix-cache on against the null server's prefix counters (vLLM's, blocks of 8 tokens: no
    two of the prompts share one): a cell of the default workload's 12 distinct prompts reads a hit rate of
    0.000 (the warmup's prompts begin
    with a line of their own; sent as the load's first prompts, the measured prompts 1 and 2 hit the cache). A
    second run of the same prompts on the same server, its warmup off, hits them: the counters see a repeat."""
    from measure.sources.warmup import warmup_workload

    w = presets.workload("default")
    warm = warmup_workload(w, 3)
    assert len(warm.prompts) == 3 and all(p.endswith(q) for p, q in zip(warm.prompts, w.prompts))
    assert not any(m.startswith(p.split(".")[0]) for p in warm.prompts for m in w.prompts)

    def bench(srv, out, *extra):
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                            "--b", "2", "--requests", "12", "--max-tokens", "10", "--client-procs", "1",
                            "--tokenizer", "none", "--prefix-cache", "on", "--out", str(out), *extra],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads((out / "summary.json").read_text())[0]

    with NullServer(Behaviour(ttft_ms=5, itl_ms=50, prefix_block=8)) as srv:  # a cell of ≈ 3 s: scraped in it
        cell = bench(srv, tmp_path / "warm", "--warmup", "auto")
        assert cell["warmup_requests"] == 2
        assert cell["prefix_cache_hit_rate"] == 0.0, cell
        again = bench(srv, tmp_path / "again", "--warmup", "0")
        assert again["prefix_cache_hit_rate"] > 0.5, again  # the counters do see a repeated prompt
