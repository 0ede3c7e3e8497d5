"""Issue 22, items 3, 4, 7, 8 and 15: the live figures against schedules computed by hand.

Most tests drive the SIMULATED fleet on a fake clock (tests/sim.py): decode steps of W/β per serving worker
(instances) or per batch, a fixed prefill, the next request admitted at the first sampler tick after one ends,
so every figure follows from the schedule. The fleet and HTTP tests run the null engine / null server.
"""
import math

import pytest

import presets
from measure.control.live import LiveController, LiveSettings
from measure.control.wall import Step, WallWatch
from measure.core import metrics as M
from measure.core.probes import SystemSample
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
    c = LiveController(fleet, presets.workload("default"), settings, sys_probe=FixedProbe(),
                       procs_probe=NoProcesses(), clock=clock)
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
    """Readings with no memory evidence: tok/s 100 before a step, 30 from 10 s after it. After K 1 → 2 that
    is a wall and the brake undoes the step; after K 2 → 1 it is not; after K 1 → 2 and a pause it is not.
    Swap growing 50 MiB/s is a wall whatever the last step was."""
    t0 = 100 * NS
    up = WallWatch(brake=True)
    up.step(Step("k", 1, 2, t0, 100.0))
    hit = up.check(_sample(109), _sample(110), 30.0, t0 + 10 * NS)
    assert hit is not None and "collapsed" in hit.why and hit.undo is not None and hit.undo.new == 2

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
