"""The null engine and the null server: a fixed schedule with no model, the harness's calibration."""
import asyncio
import os
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from engines.base import EngineError, EngineSpec, Prompt
from engines.registry import make_engine
from engines.http_lean import LeanSession
from engines.http_openai import endpoint_body, new_session, stream_one
from engines.null import NullEngine
from engines.null_server import Behaviour, NullApp, NullServer, free_port

MS = 1_000_000


def _run(gen):
    """Drain a generate() generator: (list of (id, t_ns), finish reason)."""
    out = []
    try:
        while True:
            out.append(next(gen))
    except StopIteration as stop:
        return out, stop.value


def _null(ttft_s=0.02, itl_s=0.01, **kw) -> NullEngine:
    return make_engine(EngineSpec("null", "", options={"ttft_s": ttft_s, "itl_s": itl_s}, **kw))


# --- the engine ---------------------------------------------------------------------------------------
def test_tokenize_is_deterministic_and_never_empty():
    e = _null()
    assert isinstance(e, NullEngine)
    assert len(e.tokenize(Prompt("s", synthetic_tokens=37))) == 37
    assert e.tokenize(Prompt("s", synthetic_tokens=5))[0] == 2
    ids = e.tokenize(Prompt("t", text="the quick brown fox"))
    assert len(ids) == 5 and ids[0] == 2 and ids == _null().tokenize(Prompt("t", text="the  quick brown\nfox"))
    assert e.tokenize(Prompt("e", text="")) == [2] and e.tokenize(Prompt("n")) == [2]


def test_generate_keeps_the_schedule():
    e = _null(ttft_s=0.02, itl_s=0.005)
    e.warmup()
    ttfts, itls = [], []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        out, reason = _run(e.generate([2, 5, 6], 20, True))
        ts = [t for _, t in out]
        assert reason == "length" and len(out) == 20 and ts == sorted(ts)
        ttfts.append(ts[0] - t0)
        itls += [b - a for a, b in zip(ts, ts[1:])]
        assert all(t >= t0 + 20 * MS + i * 5 * MS for i, t in enumerate(ts))  # never early
    assert abs(statistics.median(ttfts) - 20 * MS) < 2 * MS, ttfts
    assert abs(statistics.median(itls) - 5 * MS) < 2 * MS


def test_context_is_enforced():
    e = _null(ctx=16)
    with pytest.raises(EngineError, match="exceeds"):
        _run(e.generate([2] * 10, 10, True))


def test_batch_steps_share_a_time_and_admit_mid_batch():
    e = _null(ttft_s=0.012, itl_s=0.005)
    b = e.batch(4)
    assert b.b_cap == 4 and b.active() == 0
    assert b.step()[1:] == ([], [])  # an empty batch returns at once
    b.add("a", [2, 3], 6, True)
    steps = []
    while b.active():
        if len(steps) == 4:
            t_add_b = time.perf_counter_ns()
            b.add("b", [2], 3, True)
        steps.append(b.step())
    got = {"a": [], "b": []}
    for t, toks, _ in steps:
        for key, _tok in toks:
            got[key].append(t)
    assert len(got["a"]) == 6 and len(got["b"]) == 3
    assert got["b"][0] >= t_add_b + 12 * MS  # b starts after its TTFT, mid-batch
    assert set(got["a"]) & set(got["b"])  # steps that emit both share one timestamp
    both = [toks for _, toks, _ in steps if len(toks) == 2]
    assert both and all({k for k, _ in toks} == {"a", "b"} for toks in both)
    fins = [f for _, _, fs in steps for f in fs]
    assert sorted(fins) == [("a", "length"), ("b", "length")] and b.seqs == {}
    gaps = [b2[0] - b1[0] for b1, b2 in zip(steps, steps[1:])]
    assert min(gaps) >= 5 * MS  # a step takes itl_s whatever the batch size
    b.add("c", [2], 1, True)
    with pytest.raises(EngineError, match="exceeds"):
        b.add("d", [2] * 5000, 1, True)


# --- the server ---------------------------------------------------------------------------------------
def _stream(url, body, on_tokens=None):
    async def go():
        async with new_session() as client:
            t0 = time.perf_counter_ns()
            res = await stream_one(client, url, body, {}, stall_s=5.0, on_tokens=on_tokens)
            return t0, res, time.perf_counter_ns()

    return asyncio.run(go())



@pytest.mark.parametrize("make", [new_session, LeanSession], ids=["aiohttp", "lean"])
def test_a_streams_requests_one_after_another_keep_one_connection(make):
    """Five streams in turn on one session: each read to its end, so all go over one kept-alive connection
    (a connection closed after each would put a TCP handshake into every TTFT)."""
    async def go(url):
        async with make() as client:
            return [await stream_one(client, url + "/completions", endpoint_body("completions", None, "a b", 3, True),
                                     {}, stall_s=5.0) for _ in range(5)]

    with NullServer(Behaviour(ttft_ms=1, itl_ms=1)) as srv:
        results = asyncio.run(go(srv.url))
        made = srv.app.connections_total
    assert [(r.error, len(r.token_ns)) for r in results] == [(None, 3)] * 5
    assert made == 1


class _DropsSecondRequest:
    """Reads a request line through: on a connection's second request, the end of the stream instead, so the
    server closes that kept-alive connection without answering (what a keep-alive timeout racing a request does)."""

    def __init__(self, reader):
        self.reader, self.requests = reader, 0

    async def readline(self):
        line = await self.reader.readline()
        if line.startswith((b"POST ", b"GET ")):
            self.requests += 1
            if self.requests == 2:
                return b""
        return line

    def __getattr__(self, name):
        return getattr(self.reader, name)


@pytest.mark.parametrize("make", [new_session, LeanSession], ids=["aiohttp", "lean"])
def test_a_request_on_a_connection_the_server_closed_is_sent_again_on_a_new_one(make):
    """The second request on a kept-alive connection is dropped unanswered by the server: stream_one sends it once
    more on a new connection (resent, its tokens all there); a server that drops every attempt is the error."""
    async def go(url, n):
        async with make() as client:
            return [await stream_one(client, url + "/completions", endpoint_body("completions", None, "a b", 3, True),
                                     {}, stall_s=5.0) for _ in range(n)]

    srv = NullServer(Behaviour(ttft_ms=1, itl_ms=1))
    real = srv.app.handle
    srv.app.handle = lambda reader, writer: real(_DropsSecondRequest(reader), writer)
    with srv:
        first, second, third = asyncio.run(go(srv.url, 3))
        made = srv.app.connections_total
    assert (first.error, first.resent, len(first.token_ns)) == (None, False, 3)
    assert (second.error, second.resent, len(second.token_ns)) == (None, True, 3), second.error
    assert (third.error, third.resent) == (None, True) and made == 3

    class _DropsAll(_DropsSecondRequest):
        async def readline(self):
            line = await self.reader.readline()
            return b"" if line.startswith(b"POST ") else line

    srv = NullServer(Behaviour(ttft_ms=1, itl_ms=1))
    real = srv.app.handle
    srv.app.handle = lambda reader, writer: real(_DropsAll(reader), writer)
    with srv:
        (res,) = asyncio.run(go(srv.url, 1))
    assert res.error and res.unreachable and res.resent and not res.token_ns

def test_continuous_usage_counts_packed_tokens():
    with NullServer(Behaviour(ttft_ms=10, itl_ms=3, tokens_per_chunk=3, usage="continuous")) as srv:
        _, res, _ = _stream(srv.url + "/completions", endpoint_body("completions", None, "a b c", 10, True))
        _, chat, _ = _stream(srv.url + "/chat/completions", endpoint_body("chat", None, "hi", 5, True))
    assert res.error is None and res.finish_reason == "length"
    assert (len(res.token_ns), res.server_output_tokens, res.token_count) == (10, 10, "continuous-usage")
    assert res.prompt_tokens == 4
    # each chunk's tokens share its arrival time: the groups end at chunk boundaries (3, 6, 9, 10), though two
    # chunks a few ms apart can arrive in one read on a busy machine and share a time ([3, 3, 4])
    groups = [res.token_ns.count(t) for t in sorted(set(res.token_ns))]
    ends = {sum(groups[:i + 1]) for i in range(len(groups))}
    assert ends <= {3, 6, 9, 10} and 10 in ends and len(groups) >= 2, groups
    assert chat.error is None and (len(chat.token_ns), chat.token_count) == (5, "continuous-usage")


def test_final_usage_is_spread_over_the_chunks():
    with NullServer(Behaviour(ttft_ms=10, itl_ms=3, tokens_per_chunk=3, usage="final")) as srv:
        _, res, _ = _stream(srv.url + "/completions", endpoint_body("completions", None, "a b c", 10, True))
        _, chat, _ = _stream(srv.url + "/chat/completions", endpoint_body("chat", None, "hi there", 7, True))
    assert res.error is None and res.token_count == "chunks+final-usage"
    assert len(res.token_ns) == res.server_output_tokens == 10 and res.token_ns == sorted(res.token_ns)
    assert len(set(res.token_ns)) == 4  # every extra timestamp is one of the 4 chunks' times
    assert chat.error is None and len(chat.token_ns) == 7 and chat.prompt_tokens == 3


def test_no_usage_counts_chunks():
    with NullServer(Behaviour(ttft_ms=5, itl_ms=2, tokens_per_chunk=2, usage="none")) as srv:
        _, res, _ = _stream(srv.url + "/completions", endpoint_body("completions", None, "x", 5, True))
    assert res.error is None
    assert (len(res.token_ns), res.token_count, res.server_output_tokens) == (3, "chunks", None)


def test_prompt_ids_and_on_tokens_as_chunks_arrive():
    calls = []
    with NullServer(Behaviour(ttft_ms=10, itl_ms=5, tokens_per_chunk=3, usage="continuous")) as srv:
        body = endpoint_body("completions", "null", list(range(100, 137)), 10, True)
        assert body["cache_prompt"] is False and body["stream_options"]["continuous_usage_stats"] is True
        _, res, t_end = _stream(srv.url + "/completions", body,
                                on_tokens=lambda ts: calls.append((time.perf_counter_ns(), list(ts))))
    assert res.error is None and res.prompt_tokens == 37
    assert [len(ts) for _, ts in calls] == [3, 3, 3, 1]
    assert [t for _, ts in calls for t in ts] == res.token_ns
    assert calls[0][0] < res.token_ns[-1] - 10 * MS < t_end  # seen while the stream ran, not at its end
    with pytest.raises(ValueError):
        endpoint_body("chat", None, [1, 2], 4, True)


def test_server_side_endpoints():
    with NullServer() as srv, httpx.Client() as c:
        base = srv.url[:-3]
        assert c.get(srv.url + "/models").json()["data"][0]["id"] == "null"
        assert len(c.post(base + "/tokenize", json={"content": "a b c"}).json()["tokens"]) == 3
        assert c.get(base + "/health").json() == {"status": "ok"} and c.get(base + "/nope").status_code == 404
        r = c.post(srv.url + "/completions", json={"prompt": "x", "max_tokens": 2})
        assert r.status_code == 400 and "stream" in r.json()["error"]["message"]
        assert c.post(srv.url + "/completions", json={"prompt": [[1]], "stream": True}).status_code == 400
        assert "null:requests_total 0" in c.get(base + "/metrics").text


def test_64_concurrent_streams_through_the_http_source():
    """`python -m engines.null_server` and inference-top's HTTP source at B = 64: every stream completes with
    its 12 tokens, all 64 were open at once, nothing is left running on the server. (How close TTFT stays to
    the schedule is measured by benchmarks/harness_overhead.py, not asserted here.)"""
    from measure.core.records import RunMeta
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.http import HttpSource
    import presets

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "engines.null_server", "--port", str(port), "--ttft-ms", "20",
                             "--itl-ms", "20", "--usage", "continuous"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            try:
                if httpx.get(url + "/models", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        src = HttpSource(url, RunMeta("http", "null", 0, simulated=True), b=64, events=False)
        src.start()
        src.wait_ready(60)
        recs = src.run_requests(Load(presets.workload("synthetic:8"), ClosedLoop(64, total=64), 12), timeout=60)
        src.close()
        metrics = httpx.get(url[:-3] + "/metrics").text
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert len(recs) == 64 and all(r.error is None and r.output_tokens == 12 for r in recs)
    assert max(r.t_started_ns for r in recs) < min(r.t_done_ns for r in recs)  # 64 open at once
    assert "null:requests_running 0" in metrics and "null:requests_total 128" in metrics  # 64 warmups + 64
    # the server's side of each request, on the one clock the client's records use (another process here)
    for r in recs:
        t = r.server_view["timings"]
        assert t["null_first_due_ns"] == t["null_arrival_ns"] + 20 * MS
        assert r.t_started_ns < t["null_arrival_ns"] < t["null_first_due_ns"] <= t["null_first_sent_ns"]
        assert t["null_first_sent_ns"] < r.t_first_token_ns


def test_the_step_clock_puts_every_stream_on_the_same_steps():
    """--step-clock (Behaviour.step_clock): a batching server's streams step together: each stream's first token is
    due at the first step (a multiple of ITL since the server started) at or after its arrival + TTFT, so two
    requests that arrive 3 ms apart with ITL 10 ms are due a whole number of steps apart, within one ITL after their
    TTFT (the server's own schedule, from its `timings`: no client timing read). Without it each keeps its own phase;
    a mode it cannot serve is refused."""
    def due(srv):
        return _stream(srv.url + "/completions", endpoint_body("completions", None, "a b", 3, True))[1].timings

    for clock in (True, False):
        with NullServer(Behaviour(ttft_ms=10, itl_ms=10, step_clock=clock)) as srv:
            first = due(srv)
            time.sleep(0.003)
            second = due(srv)
        for t in (first, second):
            assert 10 * MS <= t["null_first_due_ns"] - t["null_arrival_ns"] < (20 if clock else 10.001) * MS
        apart = (second["null_first_due_ns"] - first["null_first_due_ns"]) % (10 * MS)
        assert (apart == 0) == clock, apart
    for bad in (dict(serve="serialising"), dict(serve="interleaving"), dict(itl_cv=0.5), dict(itl_ms=0)):
        with pytest.raises(ValueError, match="step_clock needs"):
            NullApp(Behaviour(step_clock=True, **bad))


@pytest.mark.parametrize("usage", ["continuous", "final", "none"])
def test_the_last_event_says_when_the_request_arrived_and_its_first_chunk_went_out(usage):
    """A server-side split of TTFT: the null server's `timings` (its own keys only, so bench.server_check,
    which compares llama-server's, leaves them alone)."""
    from measure.control.bench.server_check import server_check
    from measure.core.records import RequestRecord

    with NullServer(Behaviour(ttft_ms=10, itl_ms=2, usage=usage)) as srv:
        t0, res, t_end = _stream(srv.url + "/completions", endpoint_body("completions", None, "a b", 3, True))
        _, chat, _ = _stream(srv.url + "/chat/completions", endpoint_body("chat", None, "hi", 1, True))
    for r in (res, chat):
        assert r.error is None and set(r.timings) == {"null_arrival_ns", "null_first_due_ns", "null_first_sent_ns"}
    t = res.timings
    assert t0 < t["null_arrival_ns"] < t["null_first_sent_ns"] < res.token_ns[0] < t_end
    assert t["null_first_due_ns"] - t["null_arrival_ns"] == 10 * MS <= t["null_first_sent_ns"] - t["null_arrival_ns"]
    rec = RequestRecord(run_id="r", request_id=1, mode="http", engine="http", model="null", model_bytes=0, k=1, b=1,
                        worker=0, prompt_tokens=3, output_tokens=3, t_scheduled_ns=t0, t_submitted_ns=t0,
                        t_started_ns=t0,
                        t_first_token_ns=res.token_ns[0], t_done_ns=t_end, token_ns=res.token_ns,
                        server_view={"timings": t})
    assert server_check([rec]) is None


def test_the_servers_lateness_quantiles_are_the_upper_edge_of_the_true_ones_bin():
    """The null server counts chunk lateness in bins (1 µs to 1 ms, 10 µs to 10 ms, 1 ms to 1 s): a quantile is
    the upper edge of the bin that holds the exact one, so at most one bin above it, never below."""
    import random

    from engines.null_server import LateHistogram

    rng = random.Random(3)
    xs = [rng.choice([rng.randint(0, 999_999), rng.randint(10**6, 10**7 - 1), rng.randint(10**7, 10**9 - 1)])
          for _ in range(5000)] + [-5, 0, 999, 1000, 10**6, 10**7]
    h = LateHistogram()
    for x in xs:
        h.add(x)
    exact = sorted(max(0, x) for x in xs)
    for f in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        true = exact[min(len(exact) - 1, int(f * len(exact)))]
        step = 1_000 if true < 10**6 else 10_000 if true < 10**7 else 10**6
        assert true < h.quantile(f) <= true + step, (f, true, h.quantile(f))
    assert (h.count, h.total_ns) == (len(xs), sum(exact)) and LateHistogram().quantile(0.5) == 0


def _harness_overhead():
    """benchmarks/harness_overhead.py as a module (benchmarks/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "harness_overhead.py"
    spec = importlib.util.spec_from_file_location("bench_harness_overhead", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_harness_overhead_splits_a_ttft_bias_into_its_four_parts_by_hand():
    """benchmarks/harness_overhead.py's bias_split on two records worked by hand (ms from the due time 0,
    TTFT 20): A started at 0.1, reached the server at 0.6, its first chunk was due at 20.6 and sent at 20.8,
    and the client stamped it at 21.2: dispatch 0.1, request 0.5, server 0.2, response 0.4 (bias 1.2);
    B: 0.3, 1.5, 0.0, 0.2 (bias 2.0). Medians of two: the means. A record with no null timings is left out."""
    from measure.core.records import RequestRecord

    bench = _harness_overhead()

    def rec(started, arrival, sent, first, timings=True):
        us = 1_000
        t = {"null_arrival_ns": arrival * us, "null_first_due_ns": (arrival + 20_000) * us,
             "null_first_sent_ns": sent * us} if timings else None
        return RequestRecord(run_id="r", request_id=1, mode="http", engine="http", model="null", model_bytes=0, k=1,
                             b=1, t_scheduled_ns=0, t_started_ns=started * us, t_first_token_ns=first * us,
                             server_view={"timings": t} if t else None)

    split = bench.bias_split([rec(100, 600, 20_800, 21_200), rec(300, 1_800, 21_800, 22_000),
                              rec(0, 0, 0, 99_000, timings=False)])
    assert split == {"dispatch": 0.2, "request": 1.0, "server": 0.1, "response": 0.3}
    assert bench.bias_split([rec(0, 0, 0, 1, timings=False)]) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="placing processes on CPUs needs Linux and two CPUs")
def test_harness_overhead_places_the_null_server_and_the_client_apart_and_back():
    """harness_overhead.apart: inside, every thread of the server process on the last CPU this process may use and
    every thread of this one on the others (a thread started inside inherits it); after, both may use them all
    again; asked not to, it places nothing and says so ("")."""
    import threading

    bench = _harness_overhead()
    cpus = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with bench.apart(child.pid, False) as placed:
            assert placed == "" and os.sched_getaffinity(child.pid) == set(cpus)
        with bench.apart(child.pid, True) as placed:
            seen = []
            t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
            t.start()
            t.join()
            assert os.sched_getaffinity(child.pid) == {cpus[-1]}
            assert os.sched_getaffinity(0) == set(cpus[:-1]) == seen[0]
            assert placed == f"server on CPU {cpus[-1]}, client on {','.join(map(str, cpus[:-1]))}"
        assert os.sched_getaffinity(child.pid) == set(cpus) == os.sched_getaffinity(0)
    finally:
        child.kill()
        child.wait()


def test_the_http_sources_loop_starts_its_tasks_eagerly():
    """The HTTP source's loop runs a new task at once to its first wait, so a request taken up is written in
    that turn of the loop (aiohttp writes a body from a task of its own); one turn later cost 0.5–1 ms of TTFT at
    8–64 streams on 3.12, and two on 3.11 5.4 ms at 64 (benchmarks/harness_overhead.py, docs/design/client-processes.md;
    the factory itself: tests/integration/test_loop_turns.py)."""
    from measure.core.records import RunMeta
    from measure.sources.http import HttpSource
    from measure.sources.loop_turns import eager_task_factory

    with NullServer(Behaviour(ttft_ms=1, itl_ms=1)) as srv:
        src = HttpSource(srv.url, RunMeta("http", "null", 0, simulated=True), b=1, events=False)
        src.start()
        try:
            assert src._loop.get_task_factory() is eager_task_factory()
        finally:
            src.close()


@pytest.mark.parametrize("make", [new_session, LeanSession], ids=["aiohttp", "lean"])
def test_a_chunk_is_stamped_when_it_came_off_the_socket_not_when_the_loop_got_to_it(make):
    """The client's loop is held from +40 to +70 ms (a callback that sleeps), so the first chunk, sent at
    +50 ms, waits in the socket; a second callback falls due meanwhile, so the turn after the hold reads the
    chunk first and then sleeps 50 ms more before the reading coroutine's turn. The chunk's time is the read's,
    before that second sleep (it was the coroutine's, after it)."""
    marks = {}

    def hold(name, s):
        marks[name] = time.perf_counter_ns()
        time.sleep(s)
        marks[name + " end"] = time.perf_counter_ns()

    async def go(url):
        loop = asyncio.get_running_loop()
        body = endpoint_body("completions", None, "a b", 1, True)
        async with make() as client:
            await stream_one(client, url, body, {}, stall_s=5.0)  # a kept-alive connection
            t = loop.time()
            loop.call_at(t + 0.040, hold, "first", 0.030)
            loop.call_at(t + 0.060, hold, "second", 0.050)
            return await stream_one(client, url, body, {}, stall_s=5.0)

    with NullServer(Behaviour(ttft_ms=50, itl_ms=100)) as srv:
        res = asyncio.run(go(srv.url + "/completions"))
    assert res.error is None and len(res.token_ns) == 1
    assert marks["first end"] <= res.token_ns[0] < marks["second"] < marks["second end"]


# --- gaps that vary and every SSE shape (issue 56) -------------------------------------------------------------
def test_gap_schedule_draws_by_position_and_sets_the_first_apart():
    from engines.null import gap_schedule, offsets_ns

    assert gap_schedule(0.002, 4) == [0.002, 0.002, 0.002] and gap_schedule(0.002, 1) == []
    g = gap_schedule(0.002, 200, first_s=0.006, cv=0.5, seed=0)
    assert g == gap_schedule(0.002, 200, first_s=0.006, cv=0.5, seed=0) != gap_schedule(0.002, 200, cv=0.5, seed=1)
    assert g[0] == 0.006 and len(g) == 199
    rest = g[1:]
    assert statistics.fmean(rest) == pytest.approx(0.002, rel=0.12)  # gamma of mean ITL …
    assert statistics.stdev(rest) / statistics.fmean(rest) == pytest.approx(0.5, rel=0.2)  # … and CV 0.5
    assert offsets_ns(2 * MS, 3, None) == [0, 2 * MS, 4 * MS]
    assert offsets_ns(2 * MS, 3, [0.006, 0.001]) == [0, 6 * MS, 7 * MS]


def test_the_null_engine_keeps_gaps_that_vary_and_a_first_unlike_the_rest():
    e = make_engine(EngineSpec("null", "", options={"ttft_s": 0.005, "itl_s": 0.004, "itl_cv": 0.5,
                                                    "first_gap_s": 0.015, "gap_seed": 2}))
    from engines.null import gap_schedule, offsets_ns

    t0 = time.perf_counter_ns()
    out, reason = _run(e.generate([2, 5], 6, True))
    ts = [t for _, t in out]
    due = offsets_ns(4 * MS, 6, gap_schedule(0.004, 6, first_s=0.015, cv=0.5, seed=2))
    assert reason == "length" and len(ts) == 6
    assert all(t >= t0 + 5 * MS + d for t, d in zip(ts, due)), (ts, due)  # each token never before its own due
    assert due[1] == 15 * MS and due[2] - due[1] < 15 * MS  # the first gap unlike the rest


@pytest.mark.parametrize("usage", ["continuous", "final", "none"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_every_sse_shape_with_empty_chunks_counts_the_servers_tokens(usage, endpoint):
    """Empty chunks before every token (and a first one with no text), usage in every chunk, only in a last chunk
    of its own, or none: the client counts the tokens the server sent, each at its own chunk, the gaps drawn."""
    b = Behaviour(ttft_ms=5, itl_ms=3, usage=usage, empty_chunks=True, itl_cv=0.5, first_gap_ms=12.0, gap_seed=1)
    with NullServer(b) as srv:
        path = "/chat/completions" if endpoint == "chat" else "/completions"
        _, res, _ = _stream(srv.url + path, endpoint_body(endpoint, None, "a b", 6, True))
    assert res.error is None and res.finish_reason == "length"
    assert len(res.token_ns) == 6 and res.token_ns == sorted(res.token_ns), res.token_ns
    assert res.server_output_tokens == (None if usage == "none" else 6)
    # (the gaps themselves: a loaded machine stretches and merges them here; the truth matrix's cells check them)
