"""The fleet on the real embedded model: K workers, scaling mid-run, a killed worker, clean shutdown."""
import os
import signal
import time

import presets
from measure.core.workload import ClosedLoop, Load
from measure.sources.base import Finished
from conftest import descendants

WL = presets.workload("default")


def test_k1_records_have_every_field_and_token(make_fleet):
    fleet = make_fleet(k=1)
    fleet.start()
    recs = fleet.run_requests(Load(WL, ClosedLoop(1, total=2), 6), timeout=120)
    assert len(recs) == 2
    for r in recs:
        assert r.error is None and r.output_tokens == 6 and len(r.token_ns) == 6
        assert r.t_scheduled_ns <= r.t_submitted_ns <= r.t_started_ns < r.t_first_token_ns <= r.t_done_ns
        assert r.token_ns == sorted(r.token_ns) and r.token_ns[0] == r.t_first_token_ns
        assert r.prompt_tokens > 5 and r.k == 1 and r.b == 1 and r.mode == "instances"
        assert r.simulated is False and r.worker_rss_bytes > 100e6
    assert {r.prompt_id for r in recs} == {"default-1", "default-2"}


def test_k2_scale_up_and_down_mid_run(make_fleet, monkeypatch):
    from measure.sources import fleet as fleet_module

    monkeypatch.setattr(fleet_module, "RETIRED_SHOWN_S", 3.0)  # (10 s in a run)
    fleet = make_fleet(k=2)
    fleet.start()
    ws = fleet.workers()
    assert len(ws) == 2 and all(w.ready_ns for w in ws)
    fleet.set_load(Load(WL, ClosedLoop(2), 6))
    got = []
    deadline = time.monotonic() + 120

    def pump(until):
        while time.monotonic() < deadline and not until():
            try:
                ev = fleet.events.get(timeout=0.2)
            except Exception:
                continue
            if isinstance(ev, Finished):
                got.append(ev.record)

    pump(lambda: len(got) >= 2)
    fleet.scale_to(3)  # the third warms while the two keep serving
    pump(lambda: any(r.worker == 3 for r in got))
    assert any(r.worker == 3 for r in got), "the added worker never served"
    before = len(got)
    assert before >= 2
    fleet.scale_to(1)  # workers 3 and 2 retire after their current request
    pump(lambda: sum(w.state == "retired" for w in fleet.workers()) == 2)
    states = {w.wid: w.state for w in fleet.workers()}
    assert states[2] == "retired" and states[3] == "retired" and states[1] in ("idle", "serving")
    n = len(got)
    pump(lambda: len(got) >= n + 2)
    assert all(r.worker == 1 for r in got[n + 1 :])
    assert all(r.error is None for r in got)
    # the retired rows leave the list after RETIRED_SHOWN_S: each K step no longer adds one for good
    pump(lambda: len(fleet.workers()) == 1)
    assert [w.wid for w in fleet.workers()] == [1]


def test_worker_killed_mid_request_is_recorded(make_fleet):
    fleet = make_fleet(k=2)
    fleet.start()
    fleet.set_load(Load(WL, ClosedLoop(2), 200))
    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline:
        busy = [w for w in fleet.workers() if w.state == "serving" and w.current is not None]
        victim = busy[0] if busy else None
        time.sleep(0.05)
    assert victim is not None
    time.sleep(0.3)  # mid-request: some tokens out
    t_kill = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    failed = None
    while failed is None and time.monotonic() < t_kill + 5:
        try:
            ev = fleet.events.get(timeout=0.1)
        except Exception:
            continue
        if isinstance(ev, Finished) and ev.record.error:
            failed = ev.record
    assert failed is not None and time.monotonic() - t_kill < 2.0, "death not detected within 2 s"
    assert "SIGKILL" in failed.error and failed.worker == victim.wid
    assert failed.output_tokens > 0  # the tokens it produced before dying are kept
    assert {w.wid: w.state for w in fleet.workers()}[victim.wid] == "dead"
    fleet.close()
    assert descendants() == []


def test_close_leaves_no_child(make_fleet):
    fleet = make_fleet(k=2)
    fleet.start()
    assert len(descendants()) >= 2
    fleet.set_load(Load(WL, ClosedLoop(2), 100))
    time.sleep(0.5)
    t0 = time.monotonic()
    fleet.close()
    assert time.monotonic() - t0 < 3.0
    assert descendants() == []
