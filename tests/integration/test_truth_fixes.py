"""Issue 43 item 4: figures that went wrong where features meet. Each test here failed on the code before its fix."""
from __future__ import annotations

import pytest

NS = 1_000_000_000


def _closed_loop(users: int, requests: int, tokens: int, tpot_s: float, ttft_s: float = 0.02) -> list:
    """A closed loop of `users` on an engine that never slows: each request TTFT then a token every TPOT, the
    user's next sent the moment it ends."""
    import heapq

    from measure.core.records import RequestRecord

    ready = [0.0] * users
    out = []
    for i in range(requests):
        t0 = heapq.heappop(ready)
        toks = [int((t0 + ttft_s + j * tpot_s) * NS) for j in range(tokens)]
        out.append(RequestRecord(run_id="r", request_id=i + 1, mode="instances", engine="null", model="m",
                                 model_bytes=1, k=users, b=1, worker=i % users, prompt_id="p", prompt_tokens=4,
                                 output_tokens=tokens, t_scheduled_ns=int(t0 * NS), t_submitted_ns=int(t0 * NS),
                                 t_started_ns=int(t0 * NS), t_first_token_ns=toks[0], t_done_ns=toks[-1],
                                 token_ns=toks))
        heapq.heappush(ready, toks[-1] / NS)
    return out


def test_burst_vs_sustained_does_not_read_a_partly_filled_last_round_as_a_slowdown():
    """3 users, 7 requests of 10 s each (TPOT 20 ms, no heat): the last round has one stream of three. Before, the
    last half's tokens ÷ its length read −44 % (150 → 83 tok/s); each stream's speed never changed."""
    from measure.core import metrics as M

    recs = _closed_loop(users=3, requests=7, tokens=500, tpot_s=0.02)
    burst, sustained = M.burst_sustained(recs)
    assert sustained == pytest.approx(burst, rel=0.01)
    conc = M.achieved_concurrency(recs, recs[0].t_scheduled_ns, max(r.t_done_ns for r in recs) + 1)
    assert burst == pytest.approx(50.0 * conc, rel=0.01)  # each stream's 50 tok/s, times the streams in service


def _shifted(recs: list, s: float) -> list:
    from dataclasses import replace

    d = int(s * NS)
    return [replace(r, t_scheduled_ns=r.t_scheduled_ns + d, t_submitted_ns=r.t_submitted_ns + d,
                    t_started_ns=r.t_started_ns + d, t_first_token_ns=r.t_first_token_ns + d, t_done_ns=r.t_done_ns + d,
                    token_ns=[t + d for t in r.token_ns]) for r in recs]


def test_burst_vs_sustained_still_sees_a_closed_loop_slow_down():
    """Three rounds of 3 users, 10 s each: the streams slow from 50 to 40 tok/s after the first. Sustained reads
    20 % below burst."""
    from measure.core import metrics as M

    recs = (_closed_loop(users=3, requests=3, tokens=500, tpot_s=0.02)
            + _shifted(_closed_loop(users=3, requests=3, tokens=400, tpot_s=0.025), 10.02)
            + _shifted(_closed_loop(users=3, requests=3, tokens=400, tpot_s=0.025), 20.04))
    burst, sustained = M.burst_sustained(recs)
    assert sustained / burst == pytest.approx(0.8, abs=0.01)


def test_the_client_queue_notes_p99_is_marked_by_the_requests_that_waited():
    """500 requests completed, 5 of them waited for a client stream: their wait's p99 rests on 5 values and is
    marked ≈ (before: marked from the 500 completed, it read as a tail estimate)."""
    from measure.control.bench.cell import Cell, Dist, LoadGen, Requests, client_note

    c = Cell(k=1, b=2, status="ok", requests=Requests(completed=500),
             load=LoadGen(client_waited=5, client_wait=Dist(p50=0.0, p99=31.0, max=40.0)))
    assert "p50/p99 0/≈31 ms" in client_note(c)
    many = Cell(k=1, b=2, status="ok", requests=Requests(completed=500),
                load=LoadGen(client_waited=300, client_wait=Dist(p50=4.0, p99=31.0, max=40.0)))
    assert "p50/p99 4/31 ms" in client_note(many)


def test_a_cell_that_ran_in_one_thermal_state_is_not_marked_changed():
    """The machine turned hot between two cells: the second saw only `throttled`. Before, the first cell's last
    state carried over into the second's and marked it thermal_changed."""
    from measure.core.readings import ThermalLog

    heat = ThermalLog()
    heat.mark()  # cell 1
    heat.note("nominal (no warning recorded)")
    heat.mark()  # cell 2
    heat.note("throttled (CPU speed limit 71 %)")
    heat.note("throttled (CPU speed limit 71 %)")
    assert not heat.changed and heat.describe() == "throttled (CPU speed limit 71 %)"
    heat.note("nominal (no warning recorded)")  # and cooled during it: that one changed
    assert heat.changed


def test_reasoning_tokens_from_a_final_count_follow_the_text_each_chunk_carried():
    """10 thinking chunks of one token (" tok") then 10 answer chunks of four (" tok tok tok tok"), and only a final
    usage of 50 tokens: 10 were thinking. Spread evenly over the 20 chunks it read 25 (2.5× off)."""
    from engines.http_openai import StreamResult, _Counter

    res = StreamResult()
    c = _Counter(res, None)
    for i in range(10):
        c.chunk({"choices": [{"delta": {"reasoning_content": " tok"}}]}, 1000 + i)
    for i in range(10):
        c.chunk({"choices": [{"delta": {"content": " tok tok tok tok"}}]}, 2000 + i)
    c.chunk({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 50}}, 3000)
    c.finish()
    assert res.reasoning_tokens == 10 and len(res.token_ns) == 50
    assert res.token_ns.count(1000) == 1 and res.token_ns.count(2000) == 4


def _req(rid: int, t0: float, ttft_s: float, tpot_s: float, tokens: int = 16):
    from measure.core.records import RequestRecord

    toks = [int((t0 + ttft_s + j * tpot_s) * NS) for j in range(tokens)]
    return RequestRecord(run_id="r", request_id=rid, mode="instances", engine="t", model="m", model_bytes=1, k=1,
                         b=1, worker=0, prompt_id="p", prompt_tokens=4, output_tokens=tokens,
                         t_scheduled_ns=int(t0 * NS), t_submitted_ns=int(t0 * NS), t_started_ns=int(t0 * NS),
                         t_first_token_ns=toks[0], t_done_ns=toks[-1], token_ns=toks)


def test_a_step_row_after_a_thermal_change_takes_its_request_figures_from_the_new_state():
    """A level settles at TPOT 10 ms, TTFT 50 ms; the machine throttles and its requests take TPOT 20 ms, TTFT
    100 ms. The row settles again on the new state's tok/s and now also its TPOT, per-user tok/s and TTFT (before:
    the 20 requests of the cool machine outvoted the 10 of the hot one, and the row kept 10 ms)."""
    from measure.control.live.stats import LevelFigures
    from measure.control.live.steps import StepLevel, StepReading, StepTable

    table, figures, level = StepTable(), LevelFigures(), StepLevel("K=1 B=1 instances", "instances", 1, 1, 0)
    rid, t = 0, 0.0
    for state, ttft, tpot, n in (("nominal", 0.05, 0.01, 20), ("throttled (CPU speed limit 71 %)", 0.1, 0.02, 10)):
        for _ in range(n):
            for _ in range(2):  # two readings (2 Hz) per request
                t += 0.5
                row = table.tick(level, StepReading(int(t * NS), True, figures, 100.0, 1.0, thermal=state))
            rid += 1
            figures.add(_req(rid, t, ttft, tpot))
        row = table.tick(level, StepReading(int(t * NS), True, figures, 100.0, 1.0, thermal=state))
        assert row.settled, row.progress
    assert row.tpot_p50 == pytest.approx(0.02) and row.per_user_tps == pytest.approx(50.0)
    assert row.ttft_p50 == pytest.approx(0.1) and row.requests == 10


def test_an_http_cells_thermal_state_says_it_is_the_client_machines(monkeypatch):
    """Over HTTP the engines run on the servers; the thermal state a cell reads is this client machine's, and its
    figure says so (before: an unlabelled "nominal", read as the servers')."""
    from pathlib import Path

    import presets
    from engines.null_server import Behaviour, NullServer
    from measure.control.bench.sweep import SweepConfig, run_sweep
    from measure.core.records import RunMeta
    from measure.machine import host, probes
    from measure.sources.http import HttpSource

    pmset = (Path(__file__).parents[1] / "data" / "mac" / "pmset_therm_nominal.txt").read_text()
    reader = host.ThermalReader(every_s=0, system=lambda: "Darwin", run=lambda cmd: pmset)
    probe = probes.SystemProbe(thermal=reader)
    monkeypatch.setattr("measure.control.bench.sweep.SystemProbe", lambda thermal=None: probe)
    with NullServer(Behaviour(ttft_ms=5.0, itl_ms=1.0)) as srv:
        src = HttpSource([srv.url], RunMeta("null", "null", 0, mode="http", simulated=True), b=1, events=False)
        src.start()
        try:
            cells, _, _ = run_sweep(src, presets.workload("default"), SweepConfig(
                mode="http", requests=2, max_tokens=4, cell_timeout_s=30), lambda m: None)
        finally:
            src.close()
    assert cells[0].machine.thermal == "this client machine's, not the servers': nominal (no warning recorded)"


def test_a_level_left_keeps_its_row_while_the_next_one_warms_up():
    """`m` on K=3 B=4 instances (34.9 tok/s settled): until the source says the batch level is ready (LevelReady;
    a real fleet sends it once its workers have loaded their batch contexts) the instances level still runs and
    its row must stay as it settled. It took the transition's readings and settled again at 153 tok/s, the batch
    mode's (the dashboard's K=3 row read 3.0 / 52.5 while current, 2.7 / 49.7 after `m`). Here the simulated
    fleet's LevelReady is held back 8 s, as a slow worker start would hold it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_live_figures import controller, run_for

    c, fleet, clock = controller(k=3, b=4, bandwidth=10.0, max_tokens=32, warmup_s=3.0)
    run_for(c, fleet, clock, 40)
    before = c.snapshot().steps[-1]
    assert before.level == "K=3 B=4 instances" and before.settled
    held, ready = [], c.level_ready
    c.level_ready = held.append  # the batch level's workers are not ready yet
    assert c.toggle_mode() is None
    run_for(c, fleet, clock, 8)
    assert c.snapshot().steps[-1] == before
    c.level_ready = ready
    for ev in held:
        ready(ev)
    run_for(c, fleet, clock, 2)
    rows = c.snapshot().steps
    assert rows[0] == before and rows[-1].level == "K=3 B=4 batch"
