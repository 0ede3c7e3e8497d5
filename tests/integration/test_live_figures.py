"""Issue 22, items 3, 4, 7, 8 and 15: the live figures against schedules computed by hand.

Most tests drive the SIMULATED fleet on a fake clock (tests/sim.py): decode steps of W/β per serving worker
(instances) or per batch, a fixed prefill, the next request admitted at the first sampler tick after one ends,
so every figure follows from the schedule. The fleet and HTTP tests run the null engine / null server.
"""
import math

import pytest

import presets
from measure.control.live.controller import LiveController, LiveHooks, LiveSettings
from measure.control.live.wall import Step, WallWatch
from measure.core import metrics as M
from measure.core.readings import SystemSample
from measure.core.records import RunMeta
from measure.sources.simulated import SimulatedFleet
from sim import NS, FakeClock, FixedProbe, NoProcesses, run_for, sim_controller


def controller(k=1, b=1, mode="instances", bandwidth=100.0, model_bytes=253_113_024, max_tokens=32,
               prefill_s=0.05, slo=None, **fleet_kw):
    """sim_controller with the schedule's knobs: W, β, the prefill, the answer length, the mode and B."""
    clock = FakeClock()
    meta = RunMeta(engine="llama.cpp", model="sim", model_bytes=model_bytes, mode=mode, b=b)
    fleet = SimulatedFleet(meta, k=k, bandwidth_gbps=bandwidth, prefill_s=prefill_s, clock=clock, threaded=False,
                           **fleet_kw)
    settings = LiveSettings(max_tokens=max_tokens, bandwidth_gbps=bandwidth, bandwidth_source="--bandwidth",
                            chip="test chip", slo=slo)
    c = LiveController(fleet, presets.workload("default"), settings,
                       hooks=LiveHooks(sys_probe=FixedProbe(), procs_probe=NoProcesses(), clock=clock))
    c.start(thread=False)
    return c, fleet, clock


def logged(c, text):
    return [t for _, _, _, t in c._log if text in t]


# ---- item 3: a pause or a step down is never the memory wall ------------------------------------------------
def test_a_pause_after_a_step_up_is_not_the_wall_and_the_brake_leaves_k_alone():
    """K 1 → 2, 12 s later p: tok/s falls to 0 in the window, below half the pre-step rate, 10 s after the
    step. No memory reading moved (fixed probe): that is a pause, not a wall. It read WALL and the brake set
    K back to 1 by itself."""
    c, fleet, clock = sim_controller(k=1)
    run_for(c, fleet, clock, 12)
    c.set_k(2)
    run_for(c, fleet, clock, 12)
    c.toggle_pause()
    run_for(c, fleet, clock, 15)
    snap = c.snapshot()
    assert snap.numbers.agg_tps == 0.0
    assert (snap.state, c.k, snap.numbers.wall) == ("paused", 2, None), logged(c, "wall")
    assert not logged(c, "memory wall") and not logged(c, "brake")


def test_lowering_b_is_not_the_wall_and_its_level_gets_a_row():
    """Batch mode, B=4 then B=1: the sim's aggregate is B tokens per step, so it falls to a quarter, below
    half the pre-step rate. A step down is not a wall: the state stays steady and the B=1 level settles
    into a row when B goes to 2. It read WALL for as long as B stayed at 1, and the level never got a row."""
    c, fleet, clock = sim_controller(k=1)
    c.toggle_mode()
    assert c.set_b(4) is None
    run_for(c, fleet, clock, 15)
    before = c.snapshot().numbers.agg_tps
    c.set_b(1)
    run_for(c, fleet, clock, 25)
    snap = c.snapshot()
    assert snap.numbers.agg_tps < 0.5 * before  # the fall the old rule called a wall
    assert snap.state == "steady" and not logged(c, "memory wall"), logged(c, "wall")
    c.set_b(2)
    run_for(c, fleet, clock, 1)
    rows = {r.level: r for r in c.snapshot().steps}
    assert "K=1 B=1 batch" in rows and rows["K=1 B=1 batch"].settled, list(rows)


def _sample(t_s, swap=0, pressure=0.0):
    return SystemSample(int(t_s * NS), 16 * 2**30, 8 * 2**30, 8 * 2**30, 2 * 2**30, swap, 0.0, 0.0,
                        "psi some avg10 %", pressure, 50.0)


def test_the_wall_needs_memory_evidence_or_a_fall_at_a_higher_load():
    """Readings with no memory evidence past its thresholds: tok/s 100 before a step, 30 from 10 s after it.
    After K 1 → 2 on a machine short of memory (1 % PSI) that is a wall and the brake undoes the step; with
    memory to spare it is not (other work took the cores: the box's own test run did, and the brake undid a
    user's K=2); after K 2 → 1 it is not; after K 1 → 2 and a pause it is not.
    Swap growing 50 MiB/s is a wall whatever the last step was."""
    t0 = 100 * NS
    up = WallWatch(brake=True)
    up.step(Step("k", 1, 2, t0, 100.0))
    hit = up.check(_sample(109, pressure=1.0), _sample(110, pressure=1.0), 30.0, t0 + 10 * NS)
    assert hit is not None and "collapsed" in hit.why and hit.undo is not None and hit.undo.new == 2
    spare = WallWatch(brake=True)  # the same fall with memory to spare (no swap, no pressure): other work
    spare.step(Step("k", 1, 2, t0, 100.0))
    assert spare.check(_sample(109), _sample(110), 30.0, t0 + 10 * NS) is None

    down = WallWatch(brake=True)
    down.step(Step("k", 2, 1, t0, 100.0))
    assert down.check(_sample(109), _sample(110), 30.0, t0 + 10 * NS) is None

    paused = WallWatch(brake=True)
    paused.step(Step("k", 1, 2, t0, 100.0))
    paused.load_changed()
    assert paused.check(_sample(109), _sample(110), 0.0, t0 + 10 * NS) is None

    paused.step(Step("k", 2, 1, t0, 100.0))
    hit = paused.check(_sample(109), _sample(110, swap=50 * 2**20), 30.0, t0 + 10 * NS)
    assert hit is not None and "swap growing" in hit.why and hit.undo is None  # nothing raised to undo


# ---- item 4: goodput over the settled window, not from the level's start ------------------------------------
W_SIM = 253_113_024


def sim_cycle_s(max_tokens, prefill_s, step_s, tick_s=0.25):
    """One closed-loop request of the sim, start to the next start: prefill, then a token every step; it ends
    at the first tick at or after its last token, and the next is admitted one tick later."""
    done = prefill_s + (max_tokens - 1) * step_s
    return math.ceil(done / tick_s - 1e-9) * tick_s + tick_s


def test_goodput_counts_over_the_settled_window_and_the_star_follows_the_true_rate():
    """Batch mode, K=1, β = 10 GB/s: a step every W/β = 25.3 ms serves all B sequences; 256-token answers
    take 0.05 + 255 × 25.3 ms = 6.50 s, a request cycle of 6.6 s (ticks of 50 ms). True goodput (every request
    meets the loose SLO) is B × 256 ÷ 6.6 s: 155.2 tok/s at B=4, 116.4 at B=3. B=4 is left 19.5 s after the
    load began, just before its third round of answers ends; B=3 runs 120 s. Counting from the level's start,
    B=4 read 8 × 256 ÷ 19.45 s = 105.3 (68 %: the first answers end only 6.55 s in) and lost the ★ to B=3
    (≈ 115). Over the settled window it reads its settled tok/s, the true rate."""
    slo = presets.SLO("loose", "loose", ttft_s=10.0, tpot_s=1.0)
    c, fleet, clock = controller(k=1, b=4, mode="batch", bandwidth=10.0, max_tokens=256, slo=slo)
    step_s = int(W_SIM / 10e9 * NS) / NS
    cycle = sim_cycle_s(256, 0.05, step_s, tick_s=0.05)
    assert cycle == pytest.approx(6.6)
    run_for(c, fleet, clock, 19.5, step=0.05)
    c.set_b(3)
    run_for(c, fleet, clock, 120, step=0.05)
    rows = {r.level: r for r in c.snapshot().steps}
    b4, b3 = rows["K=1 B=4 batch"], rows["K=1 B=3 batch"]
    assert b4.settled and b3.settled
    true4, true3 = 4 * 256 / cycle, 3 * 256 / cycle
    # every request met the SLO: goodput is the row's settled tok/s, which is the true rate to within the
    # phase of the request cycle in its 5 s readings
    assert b4.goodput_tps == pytest.approx(b4.agg_tps) and b3.goodput_tps == pytest.approx(b3.agg_tps)
    assert b4.goodput_tps == pytest.approx(true4, rel=0.05), (b4.goodput_tps, true4)
    assert b3.goodput_tps == pytest.approx(true3, rel=0.05), (b3.goodput_tps, true3)
    assert b4.goodput_rps == pytest.approx(b4.goodput_tps / 256)
    assert b4.attainment == 1.0 and b4.best and not b3.best


def test_goodput_is_the_settled_rate_times_the_share_of_tokens_that_met_the_slo():
    """StepTable fed by hand: 12 requests of 100 tokens finish before the level settles (all meet the SLO),
    then 10 of 100 tokens in the settled window, 4 of which miss it (TTFT 2 s > 1 s). Settled readings of
    200 tok/s: goodput = 200 × 600 ÷ 1000 = 120 tok/s, 1.2 req/s, attainment 6/10 (the window's requests),
    whatever the level's age."""
    from measure.control.live.stats import LevelFigures
    from measure.control.live.steps import SETTLE_AFTER_S, StepLevel, StepReading, StepTable
    from measure.core.records import RequestRecord

    slo = presets.SLO("t", "t", ttft_s=1.0)
    figs, table = LevelFigures(slo), StepTable(slo)

    def finish(rid, ttft_s):
        ts = [int((ttft_s + i * 0.01) * NS) for i in range(100)]
        figs.add(RequestRecord(run_id="r", request_id=rid, mode="instances", engine="e", model="m", model_bytes=1,
                               k=1, b=1, t_scheduled_ns=0, t_started_ns=0, t_first_token_ns=ts[0],
                               t_done_ns=ts[-1], token_ns=ts, output_tokens=100))

    for i in range(12):
        finish(i, 0.1)
    row = None
    for tick in range(200):  # 2 Hz for 100 s
        now = int(tick * 0.5 * NS)
        if tick * 0.5 == 20.0:
            for i in range(10):
                finish(100 + i, 2.0 if i < 4 else 0.1)
        row = table.tick(StepLevel("L", "instances", 1, 1, 0), StepReading(now, True, figs, 200.0, 1.0))
        if tick * 0.5 < SETTLE_AFTER_S:
            assert not row.settled
    assert row.settled
    assert row.goodput_tps == pytest.approx(120.0) and row.goodput_rps == pytest.approx(1.2)
    assert row.attainment == pytest.approx(0.6)


# ---- item 7: one achieved concurrency, Little's law over the time each request was in service ---------------
def test_live_concurrency_is_littles_law_over_the_time_in_service():
    """K=1, a 0.4 s prefill, 73 tokens 25 ms apart (W = 250 MB, β = 10 GB/s), ticks of 50 ms: a request is in
    service 0.4 + 72 × 25 ms = 2.2 s (started → done) of every 2.25 s cycle. Over the 5 s window at t = 20 s
    Little's law, Σ in-service overlap ÷ 5 s, is computed here from that schedule (≈ 0.98): the live panel,
    the step table's readings and bench's function must all say it. Token spans alone (first → last token in
    the window) leave out each prefill and read ≈ 0.8."""
    c, fleet, clock = controller(k=1, bandwidth=10.0, model_bytes=250_000_000, max_tokens=73, prefill_s=0.4)
    t_load = clock.now + int(0.05 * NS)  # the first tick starts the load and the first request
    run_for(c, fleet, clock, 20, step=0.05)
    now, a = clock.now, clock.now - 5 * NS
    cycle, busy = int(2.25 * NS), int(2.2 * NS)
    starts = range(t_load, now + 1, cycle)
    little = sum(max(0, min(s + busy, now) - max(s, a)) for s in starts) / (5 * NS)
    tokens_only = sum(max(0, min(s + busy, now) - max(s + int(0.4 * NS), a)) for s in starts) / (5 * NS)
    assert 0.95 < little < 1.0 and tokens_only < 0.85  # what the two definitions differ by here
    snap = c.snapshot()
    assert snap.numbers.concurrency == pytest.approx(little, abs=1e-6), (snap.numbers.concurrency, little,
                                                                           tokens_only)
    # bench's figure over the same records and window: the same function, the same number
    spans = [(r.t_started_ns, r.t_done_ns) for r in c.stats.records()]
    open_start = max(starts)
    assert M.achieved_concurrency(spans + [(open_start, None)], a, now) == pytest.approx(little, abs=1e-6)
    row = snap.steps[-1]
    assert row.settled and row.concurrency == pytest.approx(little, abs=0.05)


def test_a_batching_server_is_not_named_a_one_at_a_time_queue():
    """HTTP, B=2 streams to the null server (it serves every stream at once): 0.4 s TTFT, 30 tokens 20 ms apart,
    so each stream is in service ≈ 0.98 s of every ≈ 1 s and two streams read ≈ 2. Token spans counted 0.58 s
    of each: ≈ 1.2 streams, which named the wall 'server queue (one request at a time …)'."""
    import time

    from engines.null_server import Behaviour, NullServer
    from measure.sources.http import HttpSource

    with NullServer(Behaviour(ttft_ms=400, itl_ms=20)) as srv:
        src = HttpSource(srv.url, RunMeta(engine="http", model="null", model_bytes=0, mode="http"), b=2)
        c = LiveController(src, presets.workload("default"), LiveSettings(max_tokens=30),
                           hooks=LiveHooks(procs_probe=NoProcesses()))
        try:
            c.start(thread=False)
            end = time.monotonic() + 4.5
            while time.monotonic() < end:
                time.sleep(0.25)
                snap = c.tick()
        finally:
            c.close()
    n = snap.numbers
    assert 1.8 < n.concurrency <= 2.0, n.concurrency
    assert "queue" not in n.ceiling, n.ceiling


# ---- item 15: HTTP records say the endpoints serving, not K, while one is down ------------------------------
def _finished(src):
    out = []
    while not src.events.empty():
        ev = src.events.get_nowait()
        if type(ev).__name__ == "Finished":
            out.append(ev.record)
    return out


def test_http_records_say_k_minus_one_while_an_endpoint_is_down():
    """Two null servers as K=2, one stream each. Kill the second: while it is down every request goes to the
    first, and its records say K=1 (the fleet's records say K−1 when a worker dies); they said K=2. Started
    again, the second warms up and rejoins: records from then say K=2 again."""
    import time

    from conftest import NullServerProcess
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.http import Endpoint, HttpSource

    servers = [NullServerProcess(ttft_ms=5.0, itl_ms=20.0) for _ in range(2)]
    src = HttpSource([Endpoint(s.url, label=f"ep{i}") for i, s in enumerate(servers)],
                     RunMeta(engine="http", model="?", model_bytes=0, mode="http"), b=1)
    try:
        src.start()
        src.set_load(Load(presets.workload("default"), ClosedLoop(2), 8, True))
        time.sleep(1.0)
        servers[1].kill()
        t_kill = time.monotonic()
        while src.workers()[1].state != "down" and time.monotonic() - t_kill < 5:
            time.sleep(0.02)
        assert src.workers()[1].state == "down"
        t_down = time.perf_counter_ns()
        time.sleep(1.5)
        while_down = [r for r in _finished(src) if r.t_scheduled_ns > t_down and not r.error]
        servers[1].start()
        t_up = time.monotonic()
        while src.workers()[1].ready_ns is None and time.monotonic() - t_up < 10:
            time.sleep(0.05)
        rejoined = src.workers()[1].ready_ns
        time.sleep(1.0)
        after = [r for r in _finished(src) if rejoined and r.t_started_ns > rejoined and not r.error]
    finally:
        src.close()
        for s in servers:
            s.kill()
    assert len(while_down) >= 5 and {r.worker for r in while_down} == {0}
    assert {r.k for r in while_down} == {1}, sorted({r.k for r in while_down})
    assert rejoined is not None and after and {r.k for r in after} == {2} and {r.worker for r in after} == {0, 1}


# ---- item 8: a level starts when its workers are ready -------------------------------------------------------
def test_a_new_level_starts_when_its_workers_are_ready_and_earlier_records_keep_the_old_k():
    """β = 10 GB/s, W = 253 MB: TPOT is 25.3 ms with one worker serving and 50.6 ms with two; the SLO bounds
    TPOT at 35 ms. K 1 → 2 at t = 10 s; the new worker warms up 3 s while the first serves alone (requests
    meet the SLO). From the moment it is ready every request takes 50.6 ms a token and none meets it, so the
    K=2 level's attainment is 0 % and its TPOT p50 50.6 ms. Counting from the key press it showed the
    warmup's two K=1 requests as K=2 ones (50 % attainment 5 s after the key, 2 of 10 requests met 12 s
    after), and their records said K=2."""
    slo = presets.SLO("tpot35", "tpot35", tpot_s=0.035)
    c, fleet, clock = controller(k=1, bandwidth=10.0, max_tokens=32, slo=slo, warmup_s=3.0)
    run_for(c, fleet, clock, 10)
    t_step = clock.now
    c.set_k(2)
    run_for(c, fleet, clock, 5)  # 2 s after the new worker is ready
    assert c.snapshot().numbers.slo_attainment == 0.0  # it showed 50 %: 2 of 4, both served at K=1
    run_for(c, fleet, clock, 7)
    t_ready = t_step + 3 * NS
    assert fleet.workers()[1].ready_ns == t_ready
    snap = c.snapshot()
    step2 = int(2 * W_SIM / 10e9 * NS) / NS
    recs = c.stats.records()
    warm = [r for r in recs if t_step <= r.t_scheduled_ns and r.t_done_ns < t_ready]
    assert len(warm) == 2 and {r.k for r in warm} == {1}, sorted({r.k for r in warm})  # served by one worker
    assert c.stats.level_start_ns == t_ready and snap.numbers.level == "K=2 B=1 instances"
    f = c.stats.figures  # the level's own requests
    assert (f.met, snap.numbers.slo_attainment) == (0, 0.0) and f.finished >= 6, (f.met, f.finished)
    assert snap.numbers.requests >= 6 and snap.steps[-1].tpot_p50 == pytest.approx(step2, rel=1e-6)
    assert c.stats.levels[-1]["level"] == "K=1 B=1 instances" and c.stats.levels[-1]["end_ns"] == t_ready


def test_the_fleet_says_when_a_new_level_is_ready_and_stamps_the_k_that_served():
    """The process fleet on the null engine (a 1 s model load): K 1 → 2 under a closed loop. Requests begun
    while worker 2 loads are served by worker 1 alone and say K=1 (they said K=2); LevelReady comes once
    worker 2 is ready, with K=2, and requests begun after it say K=2, on both workers."""
    import time

    from engines.base import EngineSpec
    from measure.core.workload import ClosedLoop, Load
    from measure.sources.base import Finished, LevelReady
    from measure.sources.fleet import Fleet

    meta = RunMeta("null (scheduled tokens, no model)", "none", 0, simulated=True)
    fleet = Fleet(EngineSpec("null", "", options={"load_s": 1.0, "ttft_s": 0.02, "itl_s": 0.02}), meta, k=1,
                  threads=1)
    recs, ready, ready_at = [], None, 0.0
    try:
        assert fleet.capabilities().level_ready
        fleet.start(timeout=60)
        fleet.set_users(None)  # users follow the ready workers
        fleet.set_load(Load(presets.workload("synthetic:4"), ClosedLoop(1), 5))
        time.sleep(0.5)
        fleet.scale_to(2)
        end = time.monotonic() + 60
        while time.monotonic() < end and (ready is None or time.monotonic() < ready_at + 1.0):
            ev = fleet.events.get(timeout=1)
            if isinstance(ev, Finished):
                recs.append(ev.record)
            elif isinstance(ev, LevelReady):
                ready, ready_at = ev, time.monotonic()
    finally:
        fleet.close()
    assert ready is not None and (ready.k, ready.b, ready.mode) == (2, 1, "instances")
    w2 = next(w for w in fleet.workers() if w.wid == 2)
    assert w2.ready_ns is not None and ready.t_ns >= w2.ready_ns
    before = [r for r in recs if r.t_started_ns < w2.ready_ns]
    after = [r for r in recs if r.t_started_ns > ready.t_ns]
    assert len(before) >= 5 and {r.k for r in before} == {1} and {r.worker for r in before} == {1}
    assert after and {r.k for r in after} == {2} and {r.worker for r in after} == {1, 2}
