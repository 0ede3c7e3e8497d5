"""Issue 16: many endpoints behind one queue (three loopback null servers): routing, down and rejoin, K as
the endpoints in use, the urls file, per-endpoint rows and figures."""
import json
import subprocess
import sys
import time

import pytest

from conftest import NullServerProcess
from measure.control.builder import PlanOptions, http_endpoints
from measure.control.plan import StartError
from measure.core.records import RunMeta
from measure.core.workload import ClosedLoop, Load
from measure.sources.http import Endpoint, HttpSource
from presets import Workload

WL = Workload("t", "tiny", prompts=("Hello there",))


def Server(itl_ms: float = 20.0):
    return NullServerProcess(ttft_ms=5.0, itl_ms=itl_ms)


@pytest.fixture
def servers():
    made = [Server() for _ in range(3)]
    yield made
    for s in made:
        s.kill()


def source(servers, routing="least", b=2, events=True):
    eps = [Endpoint(s.url, label=f"mac-{i}") for i, s in enumerate(servers)]
    return HttpSource(eps, RunMeta(engine="http", model="?", model_bytes=0, mode="http"), b=b,
                      routing=routing, events=events)


def drain(src):
    out = []
    while src.events is not None and not src.events.empty():
        out.append(src.events.get_nowait())
    return out


def test_one_queue_feeds_three_endpoints_evenly(servers):
    """Round robin hands 24 requests out in turn (8 each); least outstanding keeps them busy alike too."""
    for routing in ("round-robin", "least"):
        src = source(servers, routing, b=2, events=False)
        try:
            src.start()
            recs = src.run_requests(Load(WL, ClosedLoop(6, 24), 4, True), timeout=60)
        finally:
            src.close()
        per = {w: sum(1 for r in recs if r.worker == w) for w in range(3)}
        assert len(recs) == 24 and not any(r.error for r in recs)
        if routing == "round-robin":
            assert per == {0: 8, 1: 8, 2: 8}, per
        else:
            assert min(per.values()) >= 6, per
        assert {r.extra["endpoint"] for r in recs} == {"mac-0", "mac-1", "mac-2"}
        assert all(r.extra["routing"] == routing for r in recs)


def test_an_endpoint_killed_mid_run_is_marked_down_and_rejoins(servers):
    """Kill one of three while streams run: it is marked down within 2 s, its in-flight requests are
    recorded as failed, the other two go on serving; started again on its port, it warms up and rejoins."""
    src = source(servers, "least", b=2)
    victim = servers[1]
    recs = []
    try:
        src.start()
        src.set_load(Load(WL, ClosedLoop(6), 30, True))
        time.sleep(1.5)
        t_kill = time.monotonic()
        victim.kill()
        while src.workers()[1].state != "down" and time.monotonic() - t_kill < 5:
            time.sleep(0.05)
        assert src.workers()[1].state == "down"
        assert time.monotonic() - t_kill < 2.0
        time.sleep(2.0)
        served_while_down = [r for r in (e.record for e in drain(src) if type(e).__name__ == "Finished")]
        recs += served_while_down
        victim.start()
        end = time.monotonic() + 10
        while time.monotonic() < end and src.workers()[1].state in ("down", "warming"):
            time.sleep(0.1)
        time.sleep(2.0)
        recs += [e.record for e in drain(src) if type(e).__name__ == "Finished"]
        logs = [w for w in src.workers()]
    finally:
        src.close()
    failed = [r for r in recs if r.error]
    assert failed and all(r.worker == 1 for r in failed), [(r.worker, r.error) for r in failed]
    assert len(failed) <= 2  # only what it held: later requests went to the others
    ok_others = [r for r in served_while_down if not r.error and r.worker in (0, 2)]
    assert len(ok_others) >= 4  # the run went on
    t_fail = max(r.t_done_ns for r in failed)
    assert any(r.worker == 1 and not r.error and r.t_scheduled_ns > t_fail for r in recs)  # it rejoined
    assert logs[1].state in ("idle", "serving") and logs[1].errors == len(failed)


def test_k_counts_endpoints_in_use(servers):
    """scale_to(1) retires the last two (they finish what they hold), scale_to(3) brings them back."""
    src = source(servers, "least", b=1, events=False)
    try:
        src.start()
        assert src.capabilities().scales_k and src.capabilities().max_k == 3
        src.scale_to(1)
        recs = src.run_requests(Load(WL, ClosedLoop(1, 4), 3, True), timeout=30)
        assert {r.worker for r in recs} == {0} and all(r.k == 1 for r in recs)
        assert [w.state for w in src.workers()][1:] == ["retired", "retired"]
        src.scale_to(3)
        src.wait_ready(30)
        recs = src.run_requests(Load(WL, ClosedLoop(3, 9), 3, True), timeout=30)
        assert {r.worker for r in recs} == {0, 1, 2} and all(r.k == 3 for r in recs)
    finally:
        src.close()


def test_bench_over_three_endpoints_writes_per_endpoint_figures(servers, tmp_path):
    """bench --url ×3 --k 1,3: K=3 has an endpoints table (each with requests, tok/s, TTFT, and W ÷ TPOT where
    --model-bytes gives W); the header names the endpoints and the routing."""
    out = tmp_path / "eps"
    argv = [sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--tokenizer", "none", "--k", "1,3",
            "--b", "2", "--requests", "12", "--max-tokens", "6", "--model-bytes", "1e9", "--out", str(out)]
    for s in servers:
        argv += ["--url", s.url]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    cells = json.loads((out / "summary.json").read_text())
    assert [c["k"] for c in cells] == [1, 3]
    assert "endpoints" not in cells[0]
    eps = cells[1]["endpoints"]
    assert len(eps) == 3 and sum(e["requests"] for e in eps) == 12
    for e in eps:
        # W ÷ TPOT: the null server's 20 ms per token and W = 1 GB read per step → ≈ 50 GB/s
        assert e["bandwidth_gbps"] == pytest.approx(1e9 / (e["median_tpot_ms"] / 1e3) / 1e9)
        assert 35 < e["bandwidth_gbps"] < 55
    assert cells[1]["bandwidth_gbps"] == pytest.approx(sum(e["bandwidth_gbps"] for e in eps))
    header = json.loads((out / "records.jsonl").read_text().splitlines()[0])
    assert header["routing"] == "least" and len(header["endpoints"]) == 3


def test_urls_file_and_bad_endpoint_inputs(tmp_path):
    f = tmp_path / "urls.txt"
    f.write_text("# the fleet\nhttp://10.0.0.1:8080/v1 apple-m2-max studio-1\n\nhttp://10.0.0.2:8080/v1 - plain\n"
                 "http://10.0.0.3:8080/v1\n")
    args = PlanOptions(url=["http://127.0.0.1:9/v1"], urls=str(f), chip=None)
    eps = http_endpoints(args)
    assert [e.name() for e in eps] == ["127.0.0.1:9", "studio-1", "plain", "10.0.0.3:8080"]
    assert eps[1].bandwidth_gbps == 400 and eps[2].bandwidth_gbps is None
    bad = {
        "not-a-url m2": "line 1: 'not-a-url' is not a URL",
        "http://a:1/v1 no-such-chip": "line 1",
        "http://a:1/v1\nhttp://a:1/v1/": "given twice",
        "# nothing\n": "lists no endpoint",
    }
    for text, msg in bad.items():
        f.write_text(text)
        with pytest.raises(StartError, match=msg) as e:
            http_endpoints(PlanOptions(url=None, urls=str(f), chip=None))
        assert "\n" not in str(e.value)
    with pytest.raises(StartError, match="cannot read"):
        http_endpoints(PlanOptions(url=None, urls=str(tmp_path / "missing"), chip=None))


def test_k_above_the_endpoints_is_refused_with_one_line(tmp_path):
    p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", "http://127.0.0.1:9/v1",
                        "--url", "http://127.0.0.1:10/v1", "--k", "1,3", "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "only 2 endpoints" in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_two_clients_started_together_combine_into_one_report(tmp_path):
    """Two inference-top processes drive one null server at once (as two client machines would); `report
    --combine` sums their throughput per cell and pools their latencies. By hand: a request of 10 tokens takes
    5 ms + 9 × 20 ms = 185 ms on the null server's schedule, so a client's B=4 cell serves at most 4 × 10 ÷
    0.185 = 216 tok/s, and the combined cell at most 432; it is the sum of the two clients' figures."""
    srv = Server(itl_ms=20)
    try:
        outs = [tmp_path / f"client{i}" for i in range(2)]
        procs = [subprocess.Popen([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", srv.url,
                                   "--tokenizer", "none", "--b", "1,4", "--requests", "8", "--max-tokens", "10",
                                   "--out", str(o)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for o in outs]
        for p in procs:
            assert p.wait(timeout=120) == 0, p.stderr.read()
    finally:
        srv.kill()
    p = subprocess.run([sys.executable, "-m", "tui.cli", "report", "--combine", *map(str, outs), "--out",
                        str(tmp_path / "rep")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    from measure.control.bench.runs import combine, load_run

    runs = [load_run(o) for o in outs]
    both = combine(runs)
    assert [c.timing.clients for c in both.cells] == [2, 2]
    for c in both.cells:
        parts = [x.output_throughput for r in runs for x in r.cells if x.b == c.b]
        assert c.output_throughput == pytest.approx(sum(parts))
        assert c.requests.completed == 16
    assert 300 < both.cells[1].output_throughput <= 2 * 4 * 10 / 0.185  # 432.4: the schedule's ceiling
    assert not any("apart" in w for w in both.warnings)
    assert "combined from 2 clients" in (tmp_path / "rep" / "report.md").read_text()


def test_a_recording_over_endpoints_replays_with_its_endpoint_rows(servers, tmp_path):
    """A dashboard session over three endpoints (no --model: the header's model is null) replays: the
    recording loads, and its samples give one row per endpoint with labels."""
    from measure.control.live.replay import Recording, ReplayController
    from measure.control.builder import make_plan
    from tui.options import plan_options
    from measure.control.wiring import make_source
    from measure.machine.recorder import Recorder
    from measure.control.live.controller import LiveController, LiveSettings
    from tui.options import build_parser

    dash, _ = build_parser()
    argv = ["--engine", "http", "--tokenizer", "none", "--b", "1", "--k", "3", "--max-tokens", "4"]
    for s in servers:
        argv += ["--url", s.url]
    plan = make_plan(plan_options(dash.parse_args(argv)), default_max_tokens=4)
    rec_path = tmp_path / "eps.jsonl"
    src = make_source(plan, k=3)
    src.start()
    c = LiveController(src, plan.workload, LiveSettings.from_plan(plan), recorder=Recorder(rec_path, plan.header({})))
    try:
        c.start(thread=False)
        end = time.monotonic() + 20
        while time.monotonic() < end and c.totals["requests"] < 6:
            c.tick()
            time.sleep(0.2)
        c.tick()
    finally:
        c.close()
    rec = Recording.load(rec_path)
    assert rec.header.model is None and len(rec.header.endpoints) == 3
    r = ReplayController(rec, 1.0)
    r.start(thread=False)
    try:
        r.advance_to(rec.end_ns)
        labels = {w.label for w in r.snapshot().workers}
    finally:
        r.close()
    assert labels == {"127.0.0.1:" + s.url.split(":")[2].split("/")[0] for s in servers}
