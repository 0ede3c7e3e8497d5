"""Issue 22, items 1, 2 and 5: `bench --find` measures the levels it names and stops at the first wall; and a
step-table level that is still ramping is not "settled".

Servers with a known capacity: the null server (engines/null_server.py) and the null engine keep a fixed
schedule, so what a level can serve follows from it — a server with `slots` streams, each request taking
TTFT + (N − 1) × ITL, completes at most slots ÷ (TTFT + (N − 1) × ITL) requests a second.
"""
import heapq
import subprocess
import sys

import pytest

import presets
from measure.control.bench.knee import KneeResult, find_knee, measure_levels
from measure.machine.recorder import read_jsonl
from measure.control.bench.sweep import SweepConfig
from measure.core.records import RequestRecord, RunMeta
from measure.core.workload import Poisson
from measure.sources.base import Capabilities

NS = 1_000_000_000
WL = presets.workload("synthetic:8")


class ScheduleServer:
    """The null server's schedule served by `slots` streams in arrival order, computed rather than slept:
    the records such a server gives (first token `ttft_s` after a stream takes the request, then one every
    `itl_s`), without the wall-clock time. Open-loop loads only."""

    def __init__(self, slots: int, ttft_s: float, itl_s: float):
        self.slots, self.ttft_ns, self.itl_ns = slots, round(ttft_s * NS), round(itl_s * NS)
        self.meta = RunMeta("null", "null (computed schedule)", 0, mode="http", simulated=True)
        self.oom_killed, self.rep, self.levels = [], 0, []

    def capacity(self, max_tokens: int) -> float:
        return self.slots * NS / (self.ttft_ns + (max_tokens - 1) * self.itl_ns)

    def capabilities(self):
        return Capabilities("null", 0, ("http",), False, False, 1 << 30, False, True)

    def scale_to(self, k): pass

    def set_batch(self, mode, b, b_cap=None, seq_ctx=None): pass

    def set_users(self, users): pass

    def wait_ready(self, timeout=0): pass

    def workers(self):
        return []

    def run_requests(self, load, timeout=None, should_stop=None):
        arr = load.arrivals
        assert isinstance(arr, Poisson), "open loop only"
        t0 = 10**12
        times = arr.due(t0, 0) + arr.due(10**18, 0)
        free = [t0] * self.slots
        recs = []
        for i, t in enumerate(times):
            start = max(t, heapq.heappop(free))
            toks = [start + self.ttft_ns + j * self.itl_ns for j in range(load.max_tokens)]
            heapq.heappush(free, toks[-1])
            recs.append(RequestRecord("schedule", i, "http", "null", "null", 0, 1, self.slots, prompt_tokens=9,
                                      output_tokens=len(toks), t_scheduled_ns=t, t_submitted_ns=t,
                                      t_started_ns=start, t_first_token_ns=toks[0], t_done_ns=toks[-1],
                                      token_ns=toks, finish_reason="length", simulated=True))
        self.levels.append(arr.rate)
        return recs


def rate_search(src, max_tokens: int, start: float, limit: float, slo: str = "server"):
    cfg = SweepConfig(mode="http", bs=[64], max_tokens=max_tokens, slo=presets.slo(slo), cell_timeout_s=120)
    return find_knee(measure_levels(src, WL, "rate", cfg, lambda m: None), "rate", start=start, limit=limit)


# ---- item 1: a rate level keeps up when its queue does not grow -----------------------------------------
@pytest.mark.parametrize("max_tokens", [8, 256])
def test_rate_knee_of_an_infinitely_fast_server_is_the_top_level(max_tokens):
    """Every request served the moment it arrives (64 streams, 1 µs a token): every level from 2 to 32 req/s
    keeps up. The old rule (completed ÷ first scheduled → last done ≥ 0.98 λ, with one seed-0 Poisson draw
    realising 0.84–0.91 of λ) failed every one: knee 1.875 req/s."""
    src = ScheduleServer(64, 1e-6, 1e-6)
    knee = rate_search(src, max_tokens, 2, 32)
    assert knee.failed is None, knee.failed.why
    assert knee.passed.level == 32 and src.levels == [2, 4, 8, 16, 32]


@pytest.mark.parametrize("slots,ttft_s,itl_s,max_tokens", [(4, 0.02, 0.01, 8), (8, 0.1, 0.02, 64),
                                                           (16, 0.2, 0.03, 256)])
def test_rate_knee_of_a_server_with_a_capacity_lies_near_it(slots, ttft_s, itl_s, max_tokens):
    """A server of capacity μ = slots ÷ (TTFT + (N − 1) × ITL) (44, 5.9 and 2.0 req/s; the last one's requests
    take 7.9 s, so its levels run 5 of them, 39 s): the knee lies within 0.8–1.1 μ (the search's 10 % steps,
    the rule's 5 % tolerance), and the first level out says its queue grows. The old rule: 1.875, 1.25 and
    0.22 req/s (0.04, 0.21 and 0.11 μ)."""
    src = ScheduleServer(slots, ttft_s, itl_s)
    mu = src.capacity(max_tokens)
    knee = rate_search(src, max_tokens, 1, 4096)
    assert 0.8 * mu <= knee.passed.level <= 1.1 * mu, (mu, [(s.level, s.ok, s.why) for s in knee.levels])
    assert knee.failed.level > knee.passed.level and "queue grows" in knee.failed.why


def test_rate_knee_holds_over_other_arrival_draws(monkeypatch):
    """The same 4-slot server (μ = 44.4 req/s, ≈ 440 arrivals a level near it) under ten other Poisson draws:
    every knee lies within 0.85–1.1 μ."""
    import measure.control.bench.knee as K

    base = K.ExactPoisson.__init__
    knees = []
    for seed in range(1, 11):
        monkeypatch.setattr(K.ExactPoisson, "__init__", lambda self, rate, total, s=0, _s=seed: base(self, rate,
                                                                                                   total, _s))
        src = ScheduleServer(4, 0.02, 0.01)
        knees.append(rate_search(src, 8, 1, 4096).passed.level / src.capacity(8))
    assert 0.85 <= min(knees) and max(knees) <= 1.1, knees


def test_a_rate_level_offers_the_rate_it_is_named_for():
    """Each level's arrivals realise its rate: (n − 1) ÷ (first → last scheduled) = λ (the seed-0 draw of 20
    requests at 2 req/s realised 1.74)."""
    src = ScheduleServer(64, 1e-6, 1e-6)
    knee = rate_search(src, 8, 2, 16)
    for st in knee.levels:
        assert st.cell.knee.offered_rps == pytest.approx(st.level, rel=1e-6)


def test_rate_knee_over_http_on_the_null_server():
    """Through the HTTP source against the null server in this process: 1 ms to the first token, none after
    (infinitely fast at this scale), 32 streams: every level from 4 to 16 req/s keeps up."""
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=1, itl_ms=0)) as srv:
        src = HttpSource(srv.url, RunMeta("http", "null", 0, simulated=True), b=32, events=False)
        src.start()
        try:
            knee = rate_search(src, 8, 4, 16)
        finally:
            src.close()
    assert knee.failed is None and knee.passed.level == 16, [(s.level, s.why) for s in knee.levels]


def test_a_rate_level_held_back_by_the_clients_streams_says_so():
    """Over HTTP an open loop capped by the client (--b asked as its cap: cap_open_loop) goes through its B streams:
    with B = 1 against the null server (which serves any number at once) the queue is the client's, and the level
    that fails says so. (Uncapped, the default, it is not held back: tests/integration/test_seams.py.)"""
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=20, itl_ms=10)) as srv:
        src = HttpSource(srv.url, RunMeta("http", "null", 0, simulated=True), b=1, events=False, cap_open_loop=True)
        src.start()
        try:
            cfg = SweepConfig(mode="http", bs=[1], max_tokens=8, slo=presets.slo("server"), cell_timeout_s=60)
            step = measure_levels(src, WL, "rate", cfg, lambda m: None)(16)
        finally:
            src.close()
    assert not step.ok and "queue grows" in step.why and "all 1 of this client's streams were busy" in step.why


# ---- item 2: --find users over HTTP runs the users it names ---------------------------------------------
def _peak_in_flight(records) -> int:
    ev = sorted([(r.t_scheduled_ns, 1) for r in records] + [(r.t_done_ns, -1) for r in records])
    now = peak = 0
    for _, d in ev:
        now += d
        peak = max(peak, now)
    return peak


def _users_search(src, max_b: int, limit: int):
    """--find users as bench runs it over HTTP (K = 1), each level's records kept by level."""
    cfg = SweepConfig(mode="http", bs=[1], max_tokens=4, slo=presets.slo("interactive"), cell_timeout_s=60,
                      max_b=max_b, requests=8)
    got: dict = {}
    src._sink.on_record = lambda r: got.setdefault(current[0], []).append(r)
    run = measure_levels(src, WL, "users", cfg, lambda m: None)
    current = [None]

    def level(lv):
        current[0] = lv
        return run(lv)

    return find_knee(level, "users", start=1, limit=limit), got


def test_find_users_over_http_runs_every_user_it_names():
    """--max-b 4 over HTTP, users 1 … 16 on the null server: each level's records show as many users in
    flight at once, and as many distinct streams, as the level names (it ran 4 streams for 8 and 16 users
    and still said "serves 16 concurrent users")."""
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=2, itl_ms=1)) as srv:
        src = HttpSource(srv.url, RunMeta("http", "null", 0, simulated=True), b=1, events=False)
        src.start()
        try:
            knee, got = _users_search(src, 4, 16)
        finally:
            src.close()
    assert knee.passed.level == 16 and knee.failed is None
    for lv, recs in got.items():
        assert _peak_in_flight(recs) == lv, (lv, _peak_in_flight(recs))
        assert len({r.extra["slot"] for r in recs}) == lv
        assert {r.b for r in recs} == {lv}


def test_find_users_stops_with_one_line_when_the_source_runs_fewer():
    """A source that opens at most 4 streams, whatever is asked, its users following its streams (what the HTTP
    source did with B capped at --max-b): the search stops at 8 users with a line saying only 4 ran, and does
    not claim 8 or more."""
    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    class FourStreams(HttpSource):
        def set_batch(self, mode, b, b_cap=None, seq_ctx=None):
            super().set_batch(mode, min(b, 4), b_cap, seq_ctx)

        def set_users(self, users):
            super().set_users(None)

    with NullServer(Behaviour(ttft_ms=2, itl_ms=1)) as srv:
        src = FourStreams(srv.url, RunMeta("http", "null", 0, simulated=True), b=1, events=False)
        src.start()
        try:
            knee, _ = _users_search(src, 64, 64)
        finally:
            src.close()
    assert knee.passed.level == 4 and knee.failed.level == 8 and knee.failed.stop == "short"
    assert [s.level for s in knee.levels] == [1, 2, 4, 8]
    s = knee.sentence("interactive")
    assert "serves 4 concurrent users" in s and "only 4 of the 8 users" in s


def test_bench_find_users_over_http_says_the_users_it_ran(tmp_path):
    """The command line: bench --find users --url (the null server), --max-b 2: the sentence names the level
    the records show (its peak users in flight), beyond --max-b."""
    from conftest import serve

    proc, url = serve(["engines.null_server", "--ttft-ms", "2", "--itl-ms", "1"])
    try:
        p = subprocess.run([sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--tokenizer", "none",
                            "--url", url, "--find", "users",
                            "--max-b", "2", "--max-tokens", "4", "--requests", "8", "--slo", "ttft=5s,tpot=1s",
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=240)
    finally:
        proc.terminate()
        proc.wait(10)
    assert p.returncode == 0, p.stderr[-2000:]
    knee = KneeResult.read(tmp_path / "knee.json")
    by_b: dict = {}
    for r in read_jsonl(tmp_path / "records.jsonl").records:
        by_b.setdefault(r.b, []).append(r)
    assert knee.knee == 256, knee
    assert all(st.peak_users == st.level for st in knee.steps), knee.steps
    assert _peak_in_flight(by_b[256]) == 256
    assert "serves 256 concurrent users" in p.stdout


# ---- item 5: the memory wall ends the search --------------------------------------------------------------
class WallFromLevel:
    """System readings: plenty of memory until `armed`, then 3 % available (guard.detect_wall's < 5 %)."""

    def __init__(self):
        self.armed = False

    def sample(self):
        from measure.core.readings import SystemSample

        avail = 3 if self.armed else 60
        return SystemSample(0, 100 * 2**30, (100 - avail) * 2**30, avail * 2**30, 0, 0, 0.0, 0.0, "none", None,
                            10.0)


def test_the_memory_wall_ends_a_users_search_with_its_sentence(tmp_path, monkeypatch):
    """The null engine in one batching worker; from 4 users on the machine reads 3 % available memory: the
    search ends at 4 with the wall's reason. It went on bisecting against the fleet the wall had paused (3
    users: a timeout), so the knee sentence named a timeout, not the wall."""
    from engines.base import EngineSpec
    from measure.sources.fleet import Fleet

    monkeypatch.setenv("INFERENCE_TOP_LOGS", str(tmp_path / "logs"))
    probe = WallFromLevel()
    monkeypatch.setattr("measure.control.bench.sweep.SystemProbe", lambda thermal=None: probe)  # each level runs as a sweep cell
    fleet = Fleet(EngineSpec("null", "", options={"ttft_s": 0.01, "itl_s": 0.05}),
                  RunMeta("null", "null", 0, simulated=True), k=1, threads=1, events=False)
    fleet.start()
    cfg = SweepConfig(mode="batch", bs=[1], max_tokens=20, slo=presets.slo("server"), cell_timeout_s=8,
                      max_b=16, requests=4)
    try:
        run = measure_levels(fleet, WL, "users", cfg, lambda m: None)

        def level(lv):
            probe.armed = lv >= 4
            return run(lv)

        knee = find_knee(level, "users", start=1, limit=64)
    finally:
        fleet.close()
    assert [s.level for s in knee.levels] == [1, 2, 4]
    assert knee.passed.level == 2 and knee.failed.stop == "wall"
    assert not any(s.stop == "timeout" for s in knee.levels)
    s = knee.sentence("server", "memory capacity")
    assert "at 4, the memory wall: available memory" in s and s.endswith("the wall is memory capacity")


def test_a_wall_while_bisecting_ends_the_search_too():
    """Doubling passes 1, 2, 4 and fails 8 on its SLO (twice: a failure is confirmed before bisecting below it);
    bisecting, 6 hits the wall: nothing runs after it."""
    from measure.control.bench.knee import Level

    ran = []

    def run(lv):
        ran.append(lv)
        if lv == 6:
            return Level(lv, False, "wall", "the memory wall: swap growing 3.0 MiB/s")
        return Level(lv, lv <= 4, None, "ok" if lv <= 4 else "TTFT p99 is 2.00 s (queue)")

    knee = find_knee(run, "users")
    assert ran == [1, 2, 4, 8, 8, 6] and knee.failed.stop == "wall" and knee.passed.level == 4


# ---- settled: a level still ramping has not settled -------------------------------------------------------
def _tick_series(values, requests=20):
    """Feed the step table one level's tok/s readings at 2 Hz, from 5 s in (warmup over, requests done)."""
    from measure.control.live.stats import LevelFigures
    from measure.control.live.steps import StepLevel, StepReading, StepTable

    figs = LevelFigures()
    for i in range(requests):
        ts = [NS + i * NS // 10 + j * 10**7 for j in range(4)]
        figs.add(RequestRecord("r", i, "batch", "null", "m", 0, 1, 4, t_scheduled_ns=ts[0] - 10**7,
                               t_started_ns=ts[0] - 10**7, t_first_token_ns=ts[0], t_done_ns=ts[-1], token_ns=ts,
                               output_tokens=4))
    table = StepTable()
    row = None
    for i, v in enumerate(values):
        now = (5 * NS) + i * NS // 2
        row = table.tick(StepLevel("K=1 B=4 batch", "batch", 1, 4, 0), StepReading(now, True, figs, v, 4.0))
    return row


def test_a_level_ramping_up_50_percent_is_not_settled():
    """tok/s rising steadily by half over 15 s (100 → 150, 2 Hz): its last 10 readings have CV 0.04 (the CV
    rule alone called it settled); the level is still climbing."""
    ramp = [100 + 50 * i / 29 for i in range(30)]
    row = _tick_series(ramp)
    assert not row.settled and "rising" in row.progress, row.progress


def test_a_flat_noisy_level_settles():
    """±5 % noise around 100 tok/s, no trend: settled after 10 readings."""
    noise = [0.0, 4.0, -3.0, 5.0, -5.0, 2.0, -2.0, 3.0, -4.0, 1.0, -1.0, 4.0]
    row = _tick_series([100 + x for x in noise])
    assert row.settled, row.progress

