"""Issue 13: numbers a user can trust. Each test states the hand-computed case it checks."""
import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import presets
from measure.control.live.controller import LiveController, LiveHooks, LiveSettings
from measure.control.bench.runs import cells_from_records
from measure.control.bench.cell import Cell, Spec
from measure.core import metrics as M
from measure.core.lines import RunHeader, Sample
from measure.core.records import RequestRecord, RunMeta
from measure.core.units import NS, parse_size
from measure.core.workload import ClosedLoop, Load, PrefixCache, RequestMaker
from measure.sources.base import Capabilities, Finished, LoadStarted, Tokens, WorkerInfo, WorkerState
from sim import FakeClock, FixedProbe, NoProcesses, run_for, sim_controller

WL = presets.workload("default")


class Scripted:
    """A load source whose events the test puts on its queue by hand (the LoadSource protocol)."""

    def __init__(self, k=1, b=1, mode="instances"):
        self.meta = RunMeta("scripted", "m", 1_000_000_000, mode, b, simulated=True)
        self.run_id, self.events, self.mode, self.target_k, self.b, self.rep = "s", queue.Queue(), mode, k, b, 0

    def capabilities(self):
        return Capabilities("scripted", 1_000_000_000, ("instances", "batch"), True, True, 16, False, True)

    def workers(self):
        return [WorkerInfo(1, WorkerState.SERVING, ready_ns=1)]

    def server_view(self):
        return None

    def start(self, wait_ready=True, timeout=0): pass
    def wait_ready(self, timeout=0): pass
    def scale_to(self, k): self.target_k = k
    def set_batch(self, mode, b, b_cap=None, seq_ctx=None): self.mode, self.b = mode, b
    def set_load(self, load): pass
    def set_users(self, users): pass
    def pause(self, paused=True): pass
    def run_requests(self, load, timeout=None, should_stop=None): return []
    def close(self, grace=0): pass


def scripted_controller():
    clock = FakeClock()
    clock.now = 0
    src = Scripted()
    c = LiveController(src, WL, LiveSettings(window_s=5.0),
                       hooks=LiveHooks(sys_probe=FixedProbe(), procs_probe=NoProcesses(), clock=clock))
    return c, src, clock


def rec(rid, sched_s, start_s, tokens_s, k=1, b=1, mode="instances", rep=0, worker=1):
    ts = [int(t * NS) for t in tokens_s]
    return RequestRecord(run_id="r", request_id=rid, mode=mode, engine="e", model="m", model_bytes=1_000_000_000,
                         k=k, b=b, worker=worker, prompt_id=f"p{rid}", prompt_tokens=10, output_tokens=len(ts),
                         t_scheduled_ns=int(sched_s * NS), t_submitted_ns=int(sched_s * NS),
                         t_started_ns=int(start_s * NS), t_first_token_ns=ts[0] if ts else None,
                         t_done_ns=ts[-1] if ts else int(start_s * NS), token_ns=ts, finish_reason="length", rep=rep)


# ---- 1. the live window is kept by timestamp ----------------------------------------------------------------
def test_window_counts_by_timestamp_not_by_arrival_order():
    """Two streams at 10 tok/s each. Stream B's tokens (t = 5.0 … 9.9 s) arrive as they happen; stream A's
    (t = 0.0 … 9.9 s) arrive all at once when it ends, after B's. At t = 10 s the 5 s window holds 50 + 50
    tokens: 20 tok/s. Popping only from the front of an arrival-ordered queue kept A's 50 old tokens too
    (30 tok/s)."""
    c, src, clock = scripted_controller()
    src.events.put(LoadStarted(0))
    src.events.put(Tokens(2, 2, [int((5 + i / 10) * NS) for i in range(50)]))
    src.events.put(Tokens(1, 1, [int(i / 10 * NS) for i in range(100)]))
    clock.now = 10 * NS
    assert c.tick().numbers.agg_tps == pytest.approx(20.0)


def test_early_window_counts_from_the_load_start():
    """The load starts 10 s after the controller (workers loading). 100 tok/s from then: at t = 11 s the
    window holds 1 s of tokens and reads 100 tok/s, not 100 ÷ 5 s = 20."""
    c, src, clock = scripted_controller()
    src.events.put(LoadStarted(10 * NS))
    src.events.put(Tokens(1, 1, [int((10 + i / 100) * NS) for i in range(100)]))
    clock.now = 11 * NS
    assert c.tick().numbers.agg_tps == pytest.approx(100.0)


# ---- 5. request figures are the current level's -------------------------------------------------------------
def test_ttft_after_a_step_is_the_new_levels_only():
    """A request scheduled before the K step with a 2 s TTFT, then one after with 0.05 s: after the step
    the panel's TTFT p99 is 0.05 s (one request), and the old level is kept as a row."""
    c, src, clock = scripted_controller()
    src.events.put(LoadStarted(0))
    src.events.put(Finished(rec(1, 0.0, 0.0, [2.0, 2.1])))
    clock.now = 3 * NS
    assert c.tick().numbers.ttft_p99 == pytest.approx(2.0)
    c.set_k(2)
    src.events.put(Finished(rec(2, 3.5, 3.5, [3.55, 3.6], k=2)))
    clock.now = 4 * NS
    n = c.tick().numbers
    assert n.ttft_p99 == pytest.approx(0.05) and n.requests == 1 and n.level == "K=2 B=1 instances"
    assert [lv["level"] for lv in c.stats.levels] == ["K=1 B=1 instances"]
    assert c.stats.levels[0]["ttft_p99"] == pytest.approx(2.0)


# ---- 6. achieved concurrency, never the nominal K × B ---------------------------------------------------
def test_achieved_concurrency_and_bandwidth_by_hand():
    """Two requests: A busy 0 → 4 s, B busy 2 → 4 s; over [0, 4 s): (4 + 2) ÷ 4 = 1.5 streams. 8 tokens in
    4 s = 2 tok/s; instances-mode bandwidth = 2 tok/s × 1 GB = 2 GB/s, whatever K was asked (here 4)."""
    a = rec(1, 0.0, 0.0, [1.0, 2.0, 3.0, 4.0], k=4)
    b = rec(2, 2.0, 2.0, [2.5, 3.0, 3.5, 4.0], k=4)
    assert M.achieved_concurrency([a, b], 0, 4 * NS) == pytest.approx(1.5)
    cell = Cell.measure([a, b], Spec(4, 1, 1_000_000_000))
    assert cell.achieved_concurrency == pytest.approx(6 / (4 + 1e-9), rel=1e-6)
    assert cell.bandwidth.gbps == pytest.approx(8 / (4 + 1e-9), rel=1e-6)


def test_bench_refuses_fewer_requests_than_k_times_b():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--k", "1,4", "--requests", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "fewer than K × B = 4" in p.stderr and len(p.stderr.strip().splitlines()) == 1


# ---- 7. the prompt sequence restarts with every load ----------------------------------------------------
def test_prompt_order_restarts_per_cell_and_rep():
    """Each set_load (a sweep's cell or rep) starts at the workload's first prompt, so cells at different K
    get the same prompt mix; request ids run on."""
    m = RequestMaker()
    seqs = []
    for users in (3, 2):
        m.set_load(Load(WL, ClosedLoop(users, total=users), 8))
        reqs = m.due(0, 0, rep=0, k=users, b=1, mode="instances")
        seqs.append([r.prompt.prompt_id for r in reqs])
    assert seqs == [["default-1", "default-2", "default-3"], ["default-1", "default-2"]]
    assert m.due(0, 0, rep=0, k=1, b=1, mode="instances") == []


# ---- 8. a recording's levels are timed period by period ---------------------------------------------------
def test_report_times_each_level_by_its_own_periods():
    """K=1 for 60 s at 9.5 tok/s, K=2 for 60 s at 12 tok/s, K=1 again for 60 s at 9.5 tok/s, with a 30 s pause
    in the middle of the second K=1. K=1 reads 9.5 tok/s over its three periods (120 s); first scheduled →
    last done gave 1140 tokens ÷ 210 s = 5.4 tok/s."""
    samples, records, rid = [], [], 0
    plan = [(1, 0, 60, 9.5), (2, 60, 120, 12.0), (1, 120, 150, 9.5), (None, 150, 180, 0), (1, 180, 210, 9.5)]
    for k, a, e, rate in plan:
        for i in range(int((e - a) * 2)):
            t = a + i / 2
            samples.append(Sample(t_ns=int(t * NS), k=k or 1, b=1, mode="instances", paused=k is None, system={}))
        if k is None:
            continue
        n = int((e - a) * rate)
        rid += 1
        records.append(rec(rid, a, a, [a + i / rate for i in range(n)], k=k))
    samples.append(Sample(t_ns=210 * NS, k=1, b=1, mode="instances", paused=False, system={}))
    cells = {c.k: c for c in cells_from_records(records, RunHeader(model_bytes=1), samples)}
    assert cells[1].output_throughput == pytest.approx(9.5, rel=0.01)
    assert cells[2].output_throughput == pytest.approx(12.0, rel=0.01)
    assert len(cells[1].timing.periods) == 3 and cells[1].timing.seconds == pytest.approx(120.0)


# ---- 9. units ----------------------------------------------------------------------------------------------
def test_sizes_are_binary_as_ram_is_sold():
    """Audit 22 item 14 changed this: a memory size is binary whatever its suffix (tests/unit/test_units_audit.py)."""
    assert parse_size("48G") == 48 * 2**30 == parse_size("48GB")
    assert parse_size("48GiB") == 48 * 2**30 and parse_size("512M") == 512 * 2**20


def test_a100_80gb_pcie_is_not_the_sxm_card():
    assert presets.match_chip("NVIDIA A100 80GB PCIe").bandwidth_gbps == 1935
    assert presets.match_chip("NVIDIA A100-PCIE-80GB").bandwidth_gbps == 1935
    assert presets.match_chip("NVIDIA A100-SXM4-80GB").bandwidth_gbps == 2039


# ---- 2, 3, 10: the HTTP path -------------------------------------------------------------------------------
class Capture(BaseHTTPRequestHandler):
    """An OpenAI-compatible stream that sends no usage, and keeps every request body it got."""

    bodies: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = b'{"data": [{"id": "capture"}]}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        Capture.bodies.append(json.loads(self.rfile.read(int(self.headers.get("content-length", 0)))))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for _ in range(2):
            self.wfile.write(b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n')
        self.wfile.write(b'data: {"choices": [{"text": "", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n')


@pytest.fixture
def capture():
    Capture.bodies = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def http_source(url, prefix="off", b=1):
    from measure.sources.http import HttpSource

    return HttpSource(url, RunMeta("http", "?", 0), b=b, prefix_cache=PrefixCache.parse(prefix), events=False)


@pytest.mark.parametrize("policy", ["off", "on", "shared:8"])
def test_prefix_cache_policy_and_warmup(capture, policy):
    """off: every prompt unique at its start and cache_prompt false; on: the same text twice, cache on;
    shared:8: eight shared words, then the unique part. Before the first measured request, one warmup per
    stream (B = 2: two), outside the records. The server sent no usage: prompt_tokens is unknown, not 0."""
    src = http_source(capture, policy, b=2)
    src.start()
    src.wait_ready(30)
    assert len(Capture.bodies) == 2  # the warmups
    recs = src.run_requests(Load(presets.Workload("one", "", ("Same text.",)), ClosedLoop(2, total=2), 2),
                            timeout=30)
    src.close()
    sent = [b["prompt"] for b in Capture.bodies[2:]]
    assert len(recs) == 2 and all(r.prompt_tokens is None and r.output_tokens == 2 for r in recs)
    assert all(b["cache_prompt"] is (policy != "off") for b in Capture.bodies)
    if policy == "on":
        assert sent == ["Same text.", "Same text."]
    else:
        assert len(set(sent)) == 2 and all(s.endswith("Same text.") for s in sent)
        assert all(r.extra["prompt_prefix"] and any(s.startswith(r.extra["prompt_prefix"]) for s in sent)
                   for r in recs)
    if policy == "shared:8":
        assert all(s.startswith("shared " * 8) for s in sent)


def test_bad_prefix_cache_is_one_line():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", "http://127.0.0.1:9/v1",
                        "--prefix-cache", "shared:x"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "shared:N" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_http_tokens_reach_the_window_while_the_stream_runs():
    """A 40-token stream at 50 ms per token (2 s): its tokens are on the event queue before it ends, so the
    live window sees them as they come (they used to arrive all at once at the end)."""
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=20, itl_ms=50, usage="continuous")) as srv:
        src = HttpSource(srv.url, RunMeta("http", "?", 0), b=1)
        src.start()
        src.wait_ready(30)
        src.set_load(Load(WL, ClosedLoop(1, total=1), 40))
        seen_tokens_before_end, got = 0, None
        end = time.monotonic() + 20
        while got is None and time.monotonic() < end:
            try:
                ev = src.events.get(timeout=0.2)
            except queue.Empty:
                continue
            if isinstance(ev, Tokens):
                seen_tokens_before_end += len(ev.token_ns)
            elif isinstance(ev, Finished):
                got = ev.record
        src.close()
    assert got is not None and got.output_tokens == 40 and seen_tokens_before_end == 40
    assert got.extra["token_count"] == "continuous-usage" and got.prompt_tokens is not None


def test_several_tokens_per_chunk_are_counted_from_the_final_usage():
    """The server packs 3 tokens per chunk and sends usage only at the end: 24 tokens, not 8 chunks."""
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=10, itl_ms=5, tokens_per_chunk=3, usage="final")) as srv:
        src = http_source(srv.url)
        src.start()
        recs = src.run_requests(Load(WL, ClosedLoop(1, total=1), 24), timeout=30)
        src.close()
    assert recs[0].output_tokens == 24 and recs[0].extra["token_count"] == "chunks+final-usage"


def test_sim_dashboard_level_and_concurrency_shown():
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 4)
    c.set_k(2)
    run_for(c, fleet, clock, 4)
    n = c.snapshot().numbers
    assert n.level == "K=2 B=1 instances" and 0 < n.concurrency <= 2.0


# ---- 4. the same prompt ids as the local engines, where the server's vocabulary is ours ----------------
class NullTokenizer:
    """The null engine's tokenizer in engines/tokenizer.py's shape (the null server's /tokenize agrees)."""

    def __init__(self):
        from engines.base import EngineSpec
        from engines.null import NullEngine, text_ids

        self.engine, self._text_ids = NullEngine(EngineSpec("null", "")), text_ids

    def __call__(self, prompt):
        return self.engine.tokenize(prompt)

    def text_ids(self, text):
        return self._text_ids(text, bos=False)


def test_prompt_ids_go_to_a_server_that_tokenizes_as_we_do():
    """The null server's /tokenize gives our ids for the probe: prompts go as ids (BOS, the unique prefix's
    ids over the prompt's first ones), prompt_tokens = their count: a synthetic prompt of 12 tokens stays 12
    (issue 58: the prefix made it 14, more prefill than a local engine's for the same prompt)."""
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=5, itl_ms=2, usage="none")) as srv:
        src = HttpSource(srv.url, RunMeta("http", "?", 0), b=1, events=False, tokenizer=NullTokenizer())
        src.start()
        recs = src.run_requests(Load(presets.workload("synthetic:12"), ClosedLoop(1, total=2), 3), timeout=30)
        src.close()
    assert src.send_ids and all(r.extra["prompt_sent_as"] == "token ids" for r in recs)
    assert [r.prompt_tokens for r in recs] == [12, 12]  # "[request <run>-<id>] " (2 words) over 2 of its 12


def test_prompts_go_as_text_where_the_server_cannot_say(capture):
    src = http_source(capture)
    src.tokenizer = NullTokenizer()
    src.start()
    recs = src.run_requests(Load(WL, ClosedLoop(1, total=1), 2), timeout=30)
    src.close()
    assert not src.send_ids and recs[0].extra["prompt_sent_as"] == "text"
    assert isinstance(Capture.bodies[-1]["prompt"], str)
