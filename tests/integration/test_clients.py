"""More than one client machine (issue 24, part 6): `bench --segment i/N` splits one seeded schedule across N
clients, `--start-at` starts them together (with a clock-offset check against the server's Date header),
`report --combine` merges the raw records (exact percentiles), and the dashboard's `--peer URL` shows other
clients' /metrics summed with its own, one row per client. The null server on loopback throughout."""
import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest

from measure.core.arrivals import ArrivalSpec, realised_rate
from measure.core.clients import ClientShare, Segment, Tick, offset_from_ticks, parse_segment, parse_start_at
from measure.machine.clock import clock_check
from measure.machine.recorder import read_jsonl
from measure.core.workload import ClosedLoop, Load, RequestMaker
from presets import Workload

CLI = [sys.executable, "-m", "tui.cli"]
NS = 1_000_000_000
KW = dict(rep=0, k=1, b=1, mode="http")
WL = Workload("t", "tiny", prompts=("one", "two", "three", "four", "five"))


def run(args, timeout=300):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(CLI + args, capture_output=True, text=True, timeout=timeout, env=env)


def one_line_error(p, says):
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and says in lines[0], p.stderr
    assert "Traceback" not in p.stderr


@pytest.fixture(scope="module")
def null_server():
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(ttft_ms=5, itl_ms=2)) as srv:
        yield srv.url


# ---- --segment: one schedule split across clients ------------------------------------------------------

def drive(maker: RequestMaker, until_ns: int):
    """Every request a RequestMaker gives up to `until_ns` (its load's time zero at 0 unless anchored)."""
    return maker.due(0, 0, **KW) + maker.due(until_ns, 0, **KW)


@pytest.mark.parametrize("n", [2, 3])
def test_segments_are_the_one_schedule_dealt_round_robin(n):
    """Client i takes the requests whose index ≡ i − 1 (mod N): together the N clients send exactly the one
    client's requests — the same ids, scheduled offsets, prompts — and each share keeps the whole span."""
    spec = ArrivalSpec("gamma", rate=10.0, burstiness=0.5, seed=3)
    whole = RequestMaker()
    whole.set_load(Load(WL, spec.make(25), 8))
    one = drive(whole, 10**15)
    assert [r.request_id for r in one] == list(range(1, 26))
    got = []
    for i in range(1, n + 1):
        m = RequestMaker()
        m.set_load(Load(WL, Segment(spec.make(25), i, n), 8))
        mine = drive(m, 10**15)
        assert [r.request_id for r in mine] == list(range(i, 26, n))  # index ≡ i − 1 (mod N), ids from 1
        got += mine
    key = lambda r: (r.request_id, r.t_scheduled_ns, r.prompt.prompt_id, r.max_tokens)  # noqa: E731
    assert sorted(map(key, got)) == sorted(map(key, one))


def test_segment_anchored_at_a_start_time_and_ids_run_on_after_it():
    """With a time zero (the asked start on this client's clock) nothing is due before it and request i is
    due at t0 + offset_i; the next load's ids continue after the whole schedule's, as one client's would."""
    spec = ArrivalSpec("constant", rate=4.0)
    seg = Segment(spec.make(8), 2, 2, t0_ns=5 * NS)
    assert seg.total == 4 and seg.next_wakeup_ns() == 5 * NS + NS // 4  # index 1, 0.25 s after t0
    m = RequestMaker()
    m.set_load(Load(WL, seg, 8))
    assert m.due(5 * NS, 0, **KW) == []  # index 0 is segment 1's
    got = m.due(7 * NS, 0, **KW)
    assert [(r.request_id, r.t_scheduled_ns) for r in got] == [(2, 5.25e9), (4, 5.75e9), (6, 6.25e9), (8, 6.75e9)]
    assert seg.exhausted()
    m.set_load(Load(WL, ClosedLoop(1, 1), 8))
    assert [r.request_id for r in m.due(8 * NS, 0, **KW)] == [9]


def test_a_closed_loop_waits_for_its_start():
    share = ClientShare((1, 1), t0_ns=3 * NS)
    loop = share.wrap(ClosedLoop(2, 4))
    assert loop.due(2 * NS, 0) == [] and loop.next_wakeup_ns() == 3 * NS
    assert loop.due(3 * NS, 0) == [3 * NS, 3 * NS]
    assert share.wrap(ClosedLoop(2, 4)).due(1, 0) == [1, 1]  # only the first load is anchored


@pytest.mark.parametrize("text, says", [("0/2", "1 … N"), ("3/2", "1 … N"), ("a/b", "i/N"), ("1/0", "1 … N"),
                                        ("2", "i/N")])
def test_bad_segments(text, says):
    with pytest.raises(ValueError, match=says):
        parse_segment(text)


def test_start_at_reads_iso_and_unix_seconds_and_refuses_the_past():
    now = 1_700_000_000.0
    assert parse_start_at("1700000030.5", now=now) == 1_700_000_030.5
    assert parse_start_at("2023-11-14T22:14:00Z", now=now) == 1_700_000_040.0
    assert parse_start_at("2023-11-14T23:14:00+01:00", now=now) == 1_700_000_040.0
    assert parse_start_at("1699999999.5", now=now) == 1_699_999_999.5  # within a second: starts at once
    with pytest.raises(ValueError, match="12 s ago"):
        parse_start_at("1699999988", now=now)
    with pytest.raises(ValueError, match="ISO"):
        parse_start_at("tomorrow", now=now)


# ---- the clock-offset check ------------------------------------------------------------------------------

def test_offset_from_the_date_headers_second_tick():
    """The server's Date ticks from 100 to 101 between two answers: its clock read 101.000 s somewhere between
    the earlier request's send (local 100.4) and the later answer's arrival (local 100.404); so it is 0.598 ±
    0.002 s ahead. Without a tick, one answer bounds it to within a second."""
    ticks = [Tick(100.398, 100.399, 100), Tick(100.400, 100.401, 100), Tick(100.402, 100.404, 101)]
    off, bound = offset_from_ticks(ticks)
    assert off == pytest.approx(0.598) and bound == pytest.approx(0.002)
    off, bound = offset_from_ticks([Tick(100.2, 100.3, 100)])
    assert bound == pytest.approx(0.55) and off == pytest.approx(0.25)


@pytest.mark.parametrize("skew", [0.0, 2.5, -1.25])
def test_clock_check_finds_a_servers_clock_offset(skew):
    """A null server stamping Date from a clock `skew` s off this one's: the check finds the skew within its
    stated bound (on loopback a few ms). On loopback with no skew it can only show ≈ 0."""
    from engines.null_server import Behaviour, NullServer

    with NullServer(Behaviour(clock_skew_s=skew)) as srv:
        c = clock_check(srv.url)
    assert c["offset_s"] == pytest.approx(skew, abs=c["bound_s"] + 0.002), c
    assert c["bound_s"] < 0.05 and "Date" in c["method"]


def test_clock_check_without_a_date_header_says_so():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class NoDate(BaseHTTPRequestHandler):
        def date_time_string(self, timestamp=None):  # noqa: ARG002
            return ""

        def send_header(self, k, v):
            if k.lower() != "date":
                super().send_header(k, v)

        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), NoDate)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = clock_check(f"http://127.0.0.1:{srv.server_address[1]}/v1")
    finally:
        srv.shutdown()
    assert c["offset_s"] is None and "no Date header" in c["why"]
    c = clock_check("http://127.0.0.1:9/v1", timeout_s=1.0)
    assert c["offset_s"] is None and "cannot ask" in c["why"]


# ---- the acceptance: two clients, one schedule, one report ------------------------------------------------

ARGS = ["bench", "--engine", "http", "--tokenizer", "none", "--b", "4", "--rate", "20", "--arrivals", "gamma:0.5",
        "--requests", "24", "--max-tokens", "8", "--seed", "7"]


def records_of(out):
    headers, records, _ = read_jsonl(out / "records.jsonl")
    return headers[0], records


@pytest.fixture(scope="module")
def two_clients(null_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clients")
    # the reference without a warmup: a segment's load starts at its asked instant and takes none (its ids from 1)
    one = run(ARGS + ["--url", null_server, "--warmup", "0", "--out", str(tmp / "one")])
    assert one.returncode == 0, one.stderr
    start = round(time.time() + 10.0, 3)  # both processes up and warmed well before it
    perf_at_start = time.perf_counter_ns() + round((start - time.time()) * NS)  # this process's own mapping
    outs = [tmp / f"client{i}" for i in (1, 2)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen(CLI + ARGS + ["--url", null_server, "--segment", f"{i}/2", "--start-at", str(start),
                                            "--out", str(o)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for i, o in zip((1, 2), outs)]
    said = [p.communicate(timeout=120) for p in procs]
    for p, (_so, se) in zip(procs, said):
        assert p.returncode == 0, se
    rep = run(["report", "--combine", *map(str, outs), "--out", str(tmp / "rep")])
    assert rep.returncode == 0, rep.stderr
    return tmp / "one", outs, start, perf_at_start, said, rep


def test_two_segments_are_the_one_client_schedule(two_clients):
    one, outs, *_ = two_clients
    _, ref = records_of(one)
    t0 = min(r.t_scheduled_ns for r in ref)
    want = sorted((r.request_id, r.t_scheduled_ns - t0, r.prompt_id, r.output_tokens) for r in ref)
    got = []
    for i, o in enumerate(outs, 1):
        h, recs = records_of(o)
        assert h.segment == [i, 2] and all(r.error is None for r in recs)
        assert sorted(r.request_id for r in recs) == list(range(i, 25, 2))
        got += [(r.request_id, r.t_scheduled_ns - h.start_perf_ns, r.prompt_id, r.output_tokens) for r in recs]
    assert len(want) == 24 and sorted(got) == want  # same ids, same scheduled offsets (ns), same requests


def test_both_clients_started_at_the_asked_time(two_clients):
    """Checked on this test process's own clock (perf_counter is system-wide here): each client's time zero is
    the asked instant, and its first request went out within 50 ms of its scheduled time."""
    _, outs, start, perf_at_start, said, _ = two_clients
    for o, (so, _) in zip(outs, said):
        h, recs = records_of(o)
        assert h.start_at_unix == start
        assert abs(h.start_perf_ns - perf_at_start) < 20e6, (h.start_perf_ns - perf_at_start) / 1e6
        first = min(recs, key=lambda r: r.t_scheduled_ns)
        assert 0 <= first.t_submitted_ns - first.t_scheduled_ns < 50e6
        assert first.t_scheduled_ns - perf_at_start < 2 * NS  # its first share of the schedule, not later
        c = h.clock_check
        assert c.offset_s is not None and abs(c.offset_s) <= c.bound_s + 0.005, c  # loopback: ≈ 0
        assert "waiting until" in so and "clock:" in so


def test_combined_report_pools_the_raw_records(two_clients):
    """The combined cell's percentiles are the percentiles over both clients' records pooled (numpy, here),
    not an average of the clients' own; the offered rate is the one schedule's."""
    one, outs, _, _, _, rep = two_clients
    from measure.control.bench.runs import combine, load_run

    both = combine([load_run(o) for o in outs])
    assert not both.warnings, both.warnings
    (cell,) = [c.to_json() for c in both.cells]
    assert cell["completed"] == 24 and cell["clients"] == 2 and cell["segments"] == "1/2 + 2/2"
    pooled = [r for o in outs for r in records_of(o)[1]]
    ttft = [(r.t_first_token_ns - r.t_scheduled_ns) / 1e6 for r in pooled]
    tpot = [(r.token_ns[-1] - r.token_ns[0]) / (len(r.token_ns) - 1) / 1e6 for r in pooled]
    assert cell["median_ttft_ms"] == pytest.approx(np.percentile(ttft, 50), rel=1e-12)
    assert cell["p99_ttft_ms"] == pytest.approx(np.percentile(ttft, 99), rel=1e-12)
    assert cell["median_tpot_ms"] == pytest.approx(np.percentile(tpot, 50), rel=1e-12)
    assert cell["p99_tpot_ms"] == pytest.approx(np.percentile(tpot, 99), rel=1e-12)
    per_client = [c.requests.ttft.p50 for o in outs for c in load_run(o).cells]
    assert len(per_client) == 2
    _, ref = records_of(one)
    assert cell["arrival_rps"] == pytest.approx(realised_rate(sorted(r.t_scheduled_ns for r in ref)), rel=1e-9)
    written = json.loads((one.parent / "rep" / "combined.json").read_text())
    assert written[0]["median_ttft_ms"] == cell["median_ttft_ms"] and written[0]["p99_ttft_ms"] == cell["p99_ttft_ms"]
    md = (one.parent / "rep" / "report.md").read_text()
    assert "segments 1/2 + 2/2 of one schedule" in md and "started at the asked time" in md


def test_combine_warns_when_a_segment_is_missing(two_clients):
    from measure.control.bench.runs import combine, load_run

    _, outs, *_ = two_clients
    a = load_run(outs[0])
    b = load_run(outs[0])
    both = combine([a, b])
    assert any("segment 2/2 is missing" in w for w in both.warnings), both.warnings


@pytest.mark.parametrize("extra, says", [
    (["--segment", "1/2"], "open-loop"),  # closed loop: each client's users set their own times
    (["--segment", "1/2", "--rate", "5", "--b", "1,2"], "one cell"),
    (["--segment", "1/2", "--rate", "5", "--reps", "2"], "one cell"),
    (["--segment", "3/2", "--rate", "5"], "1 … N"),
    (["--start-at", "1000"], "in the past"),
    (["--start-at", "soon"], "ISO"),
])
def test_bad_client_inputs_give_one_line(extra, says, tmp_path):
    p = run(["bench", "--engine", "http", "--url", "http://127.0.0.1:9/v1", "--requests", "8", *extra,
             "--out", str(tmp_path / "o")], timeout=60)
    one_line_error(p, says)


# ---- the dashboard's --peer ------------------------------------------------------------------------------

def test_peers_are_scraped_summed_and_a_dead_one_is_down():
    """Two inference-top exporters (simulated controllers) and a port where nothing listens: the two are read,
    summed with ours, one row each; the third is down and counts in no sum."""
    from conftest import free_port
    from measure.control.live.prometheus import serve
    from measure.control.live.peers import Peers, client_rows
    from sim import run_for, sim_controller

    ctrls, servers, urls = [], [], []
    for k in (1, 2):
        c, fleet, clock = sim_controller(k=k)
        run_for(c, fleet, clock, 6)
        port = free_port()
        servers.append(serve(c, port))
        ctrls.append(c)
        urls.append(f"127.0.0.1:{port}")
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    peers = Peers(urls + [dead], every_s=0.2, timeout_s=0.5)
    peers.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(p.scraped for p in peers.readings()):
            time.sleep(0.05)
        got = peers.readings()
    finally:
        peers.close()
        for s in servers:
            (s[0] if isinstance(s, tuple) else s).shutdown()
    assert [p.up for p in got] == [True, True, False]
    assert "connection refused" in got[2].error.lower() or got[2].error
    for p, c in zip(got, ctrls):
        assert p.tps == pytest.approx(c.snapshot().numbers.agg_tps)
        assert p.requests == c.totals["requests"] and p.errors == c.totals["errors"]
    rows, total = client_rows({"tps": 10.0, "requests": 3, "errors": 1}, got)
    assert [r["label"] for r in rows] == ["this client", *[u for u in urls], "127.0.0.1:" + dead.split(":")[2].split("/")[0]]
    assert rows[-1]["up"] is False
    assert total["tps"] == pytest.approx(10.0 + got[0].tps + got[1].tps)
    assert total["requests"] == 3 + got[0].requests + got[1].requests
    assert total["errors"] == 1 + got[0].errors + got[1].errors
    assert total["clients"] == 3 and total["down"] == 1


@pytest.mark.asyncio
async def test_dashboard_shows_the_clients_rows():
    from conftest import free_port
    from measure.control.live.peers import Peers
    from sim import run_for, sim_controller
    from tui.app import InferenceTop

    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 6)
    peers = Peers([f"127.0.0.1:{free_port()}"], every_s=0.2, timeout_s=0.3)
    peers.start()
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not peers.readings()[0].scraped:
            time.sleep(0.05)
        app = InferenceTop(c, live=False, peers=peers)
        async with app.run_test(size=(160, 48)):
            app.refresh_numbers()
            text = str(app.query_one("#workers").render())
    finally:
        peers.close()
    assert "clients Σ" in text and "this client" in text and "down" in text


def test_peer_flag_reaches_the_dashboard_parser():
    from tui.options import build_parser

    dash, _ = build_parser()
    a = dash.parse_args(["--peer", "http://10.0.0.2:9400", "--peer", "10.0.0.3:9400"])
    assert a.peer == ["http://10.0.0.2:9400", "10.0.0.3:9400"]


def test_peer_url_forms():
    from measure.control.live.peers import peer_url

    assert peer_url("10.0.0.3:9400") == ("http://10.0.0.3:9400/metrics", "10.0.0.3:9400")
    assert peer_url("http://box:9400") == ("http://box:9400/metrics", "box:9400")
    assert peer_url("http://box:9400/metrics") == ("http://box:9400/metrics", "box:9400")
    with pytest.raises(ValueError, match="--peer"):
        peer_url("http://")


def test_exporter_metrics_parse_as_a_peer_reading():
    from measure.control.live.peers import parse_peer_metrics

    text = ('# TYPE inference_top_output_tokens_per_second gauge\n'
            'inference_top_output_tokens_per_second{engine="http",mode="http"} 312.5\n'
            '# TYPE inference_top_requests counter\ninference_top_requests_total{engine="http",mode="http"} 40.0\n'
            '# TYPE inference_top_request_errors counter\n'
            'inference_top_request_errors_total{engine="http",mode="http"} 2.0\n'
            'inference_top_instances{engine="http",mode="http"} 1.0\n')
    assert parse_peer_metrics(text) == {"tps": 312.5, "requests": 40, "errors": 2, "k": 1}
    with pytest.raises(ValueError, match="no inference_top"):
        parse_peer_metrics("vllm:num_requests_running 3\n")


def test_sync_http_is_not_sent_through_a_proxy(null_server, monkeypatch):
    """A peer's scrape, /models, /tokenize and the clock check go straight to the address given, whatever
    HTTP_PROXY says (a scrape of a private address must not leave; the streams' aiohttp session does the same)."""
    import httpx

    from conftest import free_port
    from engines import http_sync
    from engines.http_openai import served_model

    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{null_server}/models", timeout=2)  # a client that reads the environment goes to the proxy
    assert http_sync.get(f"{null_server}/models", 2).status_code == 200
    assert served_model(null_server, null_server, {}, 2) is not None
    assert clock_check(null_server, timeout_s=2)["offset_s"] is not None


def test_start_at_alone_starts_a_closed_loop_at_that_time(null_server, tmp_path):
    """Without --segment, --start-at holds a closed loop's users until the asked instant (and says the clock)."""
    start = round(time.time() + 6.0, 3)
    perf_at_start = time.perf_counter_ns() + round((start - time.time()) * NS)
    p = run(["bench", "--engine", "http", "--url", null_server, "--tokenizer", "none", "--b", "2", "--requests", "4",
             "--max-tokens", "4", "--start-at", str(start), "--out", str(tmp_path / "o")], timeout=120)
    assert p.returncode == 0, p.stderr
    h, recs = records_of(tmp_path / "o")
    assert h.segment is None and h.start_at_unix == start
    first = min(r.t_scheduled_ns for r in recs)
    assert 0 <= first - perf_at_start < 50e6, (first - perf_at_start) / 1e6  # closed loop: scheduled = sent
    assert "clock: the server's clock is within" in p.stdout


def test_clock_offset_between_clients_is_warned(two_clients):
    """Two clients whose checks put the server 0.3 s apart from each other started 0.3 s apart: said."""
    from measure.control.bench.runs import combine, load_run
    from measure.core.clients import describe_clock
    from measure.core.lines import ClockCheck

    _, outs, *_ = two_clients
    a, b = load_run(outs[0]), load_run(outs[1])
    b.header = replace(b.header, clock_check=replace(b.header.clock_check, offset_s=0.3, bound_s=0.002))
    off_a = a.header.clock_check.offset_s  # ≈ 0 on loopback, to about a round trip
    assert any(f"clocks differ by {(0.3 - off_a) * 1e3:.0f} ms" in w for w in combine([a, b]).warnings)
    line = describe_clock(ClockCheck(offset_s=2.5, bound_s=0.002, samples=9))
    assert "2500.0 ± 2.0 ms ahead of" in line and "NTP" in line


def test_local_fleet_waits_for_the_start_and_sends_its_segment(tmp_path, monkeypatch):
    """The process fleet (null engine) through the sweep: a closed loop's users start at t0, not before; then
    a segment 2/2 of a constant 40 req/s schedule anchored 0.5 s ahead goes out at t0 + its offsets."""
    from engines.base import EngineSpec
    from measure.control.bench.sweep import SweepConfig, run_sweep
    from measure.core.records import RunMeta
    from measure.sources.fleet import Fleet

    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path))
    fleet = Fleet(EngineSpec("null", "", threads=1, ctx=1024, options={"ttft_s": 0.005, "itl_s": 0.002}),
                  RunMeta("null", "null", 0, simulated=True), k=1, threads=1, events=False)
    try:
        fleet.start(timeout=120)
        t0 = time.perf_counter_ns() + NS
        _, closed, fleet = run_sweep(fleet, WL, SweepConfig(ks=[1], requests=3, max_tokens=4,
                                                            client=ClientShare((1, 1), t0)), say=lambda m: None)
        t1 = time.perf_counter_ns() + NS // 2
        spec = ArrivalSpec("constant", rate=40.0)
        _, seg, fleet = run_sweep(fleet, WL, SweepConfig(ks=[1], requests=10, max_tokens=4, arrivals=spec,
                                                         client=ClientShare((2, 2), t1)), say=lambda m: None)
    finally:
        fleet.close()
    first = min(r.t_scheduled_ns for r in closed)
    assert 0 <= first - t0 < 50e6, (first - t0) / 1e6
    assert sorted(r.t_scheduled_ns - t1 for r in seg) == [round(i / 40 * NS) for i in range(1, 10, 2)]
    assert max(r.t_submitted_ns - r.t_scheduled_ns for r in seg) < 50e6


# ---- the one split of a load over clients (core/clients.split) ------------------------------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from measure.core.clients import deal, shares, split  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(total=st.integers(0, 400), weights=st.lists(st.integers(1, 6), min_size=1, max_size=9))
def test_split_keeps_every_request_index_exactly_once(total, weights):
    parts = split(total, weights)
    assert len(parts) == len(weights)
    kept = [idx for part in parts for idx in part]
    assert sorted(kept) == list(range(total))  # each index once: none dropped, none twice
    assert all(part == sorted(part) for part in parts)  # each client's share in schedule order
    whole = sum(weights)
    for part, w in zip(parts, weights):  # each client's share is its weight's, within one request
        assert abs(len(part) - total * w / whole) < 1
    owners = deal(weights, total)  # and so is every prefix's (smooth round robin alone: 295 over 1,1,1,1,6,6,6,6,6
    taken = [0] * len(weights)  # gave a weight-1 client 1.06 over its share)
    for dealt, owner in enumerate(owners, 1):
        taken[owner - 1] += 1
        assert all(abs(x - dealt * w / whole) < 1 for x, w in zip(taken, weights))
    for start in range(0, total - whole + 1, whole):  # every run of Σw from the start: exactly w each
        run = owners[start:start + whole]
        assert [run.count(p + 1) for p in range(len(weights))] == list(weights)
    if len(set(weights)) == 1:  # equal clients: round robin, index ≡ p (mod N), as --segment i/N says
        assert parts == [list(range(p, total, len(weights))) for p in range(len(weights))]
    else:  # unequal: the weighted deal's owners
        assert all(owners[idx] == p + 1 for p, part in enumerate(parts) for idx in part)


def test_the_weighted_deal_keeps_a_prefix_within_one_request_where_smooth_round_robin_strayed():
    weights, total = [1, 1, 1, 1, 6, 6, 6, 6, 6], 295  # Hypothesis's find against nginx's smooth round robin
    parts = split(total, weights)
    assert max(abs(len(part) - total * w / 34) for part, w in zip(parts, weights)) < 1  # SWRR: 1.06
    assert [len(part) for part in parts] == [9, 9, 9, 8, 52, 52, 52, 52, 52]  # 295 × 1/34 = 8.68, × 6/34 = 52.06
    assert deal([1, 3], 4) == [2, 1, 2, 2]  # turn 2: client 2 is ahead (1 × 4 > 1 × 3), though its next falls due first
    assert deal([3, 1], 8) == [1, 2, 1, 1, 1, 2, 1, 1]  # by hand: turn 1 to client 1 (due at 1/3, not 1),
    # turn 2 to client 2 (client 1 ahead: 1 × 4 > 1 × 3), turns 3-5 to client 1 (client 2 ahead until 4 × 1 ≥ 1 × 4, then due later)


def test_split_of_streams_and_users_as_the_pool_and_the_ray_clients_take_them():
    assert shares(5, [1, 1]) == [3, 2]  # B = 5 over 2 client processes
    assert split(5, [1, 1, 1]) == [[0, 3], [1, 4], [2]]  # users 0 … 4 over 3 processes
    assert shares(5, [2, 1, 1]) == [3, 1, 1]  # 5 streams over Ray clients weighted 2,1,1
    assert split(0, [1, 2]) == [[], []]
    with pytest.raises(ValueError, match="whole number"):
        split(3, [1, 0])
