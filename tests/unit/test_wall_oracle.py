"""Oracles for the live wall (measure/control/live/wall.py; docs/design/wall.md): the wall named from measured
figures, the memory wall's evidence and its hold, the brake that undoes one step up once, and when the residency
watch may read slowly. Worked by hand on tiny cases; no machine read (benchmarks/mutation.py mutates the module
against these)."""
from __future__ import annotations

from measure.control.live.wall import (WALL_HOLD_S, ResidencyView, Step, WallHit, WallLoad, WallWatch, calm,
                                       measured_wall)
from measure.core.readings import SystemSample, crowded, other_work_cores
from measure.core.residency import Residency

NS = 1_000_000_000
GiB = 1 << 30


def sample(t_s, *, avail=16 * GiB, swap_used=0, swap_in=0.0, pressure=None, source="none"):
    return SystemSample(int(t_s * NS), 32 * GiB, 32 * GiB - avail, avail, 8 * GiB, swap_used, swap_in, 0.0, source,
                        pressure, 50.0)


# --- which wall -----------------------------------------------------------------------------------------------

def test_measured_wall_by_the_naming_rule():
    # 64 GB/s moved of 80 attainable: 80 % is the bandwidth wall; of 100 spec where no probe measured it
    assert measured_wall(64.0, 100.0, 50.0, 8, attainable_gbps=80.0) == "memory bandwidth (80% of attainable)"
    assert measured_wall(64.0, 100.0, 50.0, 8) == "none: 36% headroom"  # 64 % of spec; 0.5 of 8 cores
    assert measured_wall(80.0, 100.0, 50.0, 8) == "memory bandwidth (80% of spec)"
    assert measured_wall(79.0, 100.0, 50.0, 8) == "none: 21% headroom"
    # the workers' CPU: 720 % of 8 cores is 0.9 of them
    assert measured_wall(10.0, 100.0, 720.0, 8) == "CPU cores (7.2 of 8 busy)"
    assert measured_wall(10.0, 100.0, 710.0, 8) == "none: 11% headroom"  # 7.1 ÷ 8 = 0.8875
    # compute binds where the roofline says so and the cores given are busy enough (0.45 × 4 threads = 1.8)
    assert measured_wall(10.0, 100.0, 180.0, 8, predicted_binding="compute", load=WallLoad(threads=4)) == \
        "compute (1.8 of 8 cores busy)"
    assert measured_wall(10.0, 100.0, 170.0, 8, predicted_binding="compute", load=WallLoad(threads=4)) == \
        "none: 79% headroom"  # 1.7 < 1.8: the largest share is 0.2125 of the cores
    assert measured_wall(10.0, 100.0, 180.0, 8, predicted_binding="bandwidth", load=WallLoad(threads=4)) == \
        "none: 78% headroom"
    assert measured_wall(None, 100.0, 0.0, 8) == "none reached"
    assert measured_wall(50.0, None, 0.0, 8) == "none reached" and measured_wall(50.0, 0.0, 0.0, 8) == "none reached"


def test_other_work_on_the_cores_is_named_in_the_cores_wall():
    # the machine at 97 % of 2 cores = 1.94 cores busy; inference-top's own processes 10 % of one core: 1.84 are
    # other work's. The workers' 5 % with them: 1.89 of 2 = 0.945 ≥ 0.9, the cores wall, 1.84 ≥ 0.25 × 2 named
    others = other_work_cores(0.97 * 2, 0.10)
    assert abs(others - 1.84) < 1e-12 and other_work_cores(0.10 * 2, 0.50) == 0.0  # never below 0
    assert measured_wall(1.0, 100.0, 5.0, 2, load=WallLoad(others=others)) == \
        "CPU cores (1.9 of 2 busy, 1.8 of them other work)"
    # others 0.4 of 2 (under 0.25 × 2 = 0.5) with the workers' 1.5: 1.9 of 2, the cores wall, other work not named
    assert measured_wall(1.0, 100.0, 150.0, 2, load=WallLoad(others=0.4)) == "CPU cores (1.9 of 2 busy)"
    # exactly 0.5 of 2 is named; below the wall other work still takes its share of the headroom: 0.5 + 0.5 of 2
    assert measured_wall(1.0, 100.0, 130.0, 2, load=WallLoad(others=0.5)) == \
        "CPU cores (1.8 of 2 busy, 0.5 of them other work)"
    assert measured_wall(1.0, 100.0, 50.0, 2, load=WallLoad(others=0.5)) == "none: 50% headroom"


def test_the_cores_wall_beside_other_work_says_how_many_threads_to_keep():
    # 2 cores, 1.0 of them other work, one engine of 2 threads: 1 free core, so 1 thread (13.5 → 24.8 tok/s measured)
    one = WallLoad(others=1.0, threads=2, engines=1)
    assert measured_wall(1.0, 100.0, 100.0, 2, load=one) == (
        "CPU cores (2.0 of 2 busy, 1.0 of them other work); 2 engine threads for 1.0 free cores wait on each other "
        "at every step: try --threads 1")
    # 0.5 of 2: 1.5 free cores round to 2, which the 2 threads fit (2 threads ran 35.2 tok/s there, 1 thread 25.7)
    assert measured_wall(1.0, 100.0, 150.0, 2, load=WallLoad(others=0.5, threads=2, engines=1)) == \
        "CPU cores (2.0 of 2 busy, 0.5 of them other work)"
    # 0.6 of 2: 1.4 free rounds to 1
    assert measured_wall(1.0, 100.0, 140.0, 2, load=WallLoad(others=0.6, threads=2, engines=1)).endswith(
        "; 2 engine threads for 1.4 free cores wait on each other at every step: try --threads 1")
    # 8 cores, 3 of them other work, 2 engines of 4 threads: 5 free, 2 each
    assert measured_wall(1.0, 100.0, 500.0, 8, load=WallLoad(others=3.0, threads=8, engines=2)).endswith(
        "; 8 engine threads for 5.0 free cores wait on each other at every step: try --threads 2")
    # one thread an engine already (K = 2 of 1 thread): nothing to take away; engines not known: nothing said
    assert "try" not in measured_wall(1.0, 100.0, 100.0, 2, load=WallLoad(others=1.0, threads=2, engines=2))
    assert "try" not in measured_wall(1.0, 100.0, 100.0, 2, load=WallLoad(others=1.0, threads=2))
    # all the cores other work's (2.0 of 2): 0 free, still one thread; the wall below the cores line says nothing
    assert measured_wall(1.0, 100.0, 0.0, 2, load=WallLoad(others=2.0, threads=2, engines=1)).endswith(
        "; 2 engine threads for 0.0 free cores wait on each other at every step: try --threads 1")
    assert measured_wall(1.0, 100.0, 50.0, 8, load=WallLoad(others=1.0, threads=8, engines=1)) == "none: 81% headroom"
    assert crowded(2.0, 1, 2, 1.0).startswith("; 2 engine threads") and crowded(2.0, 1, 2, 0.4) == ""


def test_measured_wall_of_a_remote_server_is_its_queue_or_not_measured():
    queue = WallLoad(remote=True, streams_asked=4, streams_decoding=1.2)
    assert measured_wall(90.0, 100.0, 900.0, 8, load=queue) == \
        "server queue (one request at a time: 1.2 of 4 streams decode)"
    for load in (WallLoad(remote=True, streams_asked=4, streams_decoding=1.21),
                 WallLoad(remote=True, streams_asked=4, streams_decoding=0.0),
                 WallLoad(remote=True, streams_asked=1, streams_decoding=1.0)):
        assert measured_wall(90.0, 100.0, 900.0, 8, load=load) == "not measured here (the server's machine)"


# --- the memory wall and its brake ------------------------------------------------------------------------------

def test_a_memory_reading_names_the_wall_and_holds_it_ten_seconds():
    w = WallWatch(brake=False)
    assert w.check(None, sample(0), 100.0, 0) is None and not w.active(0)
    hit = w.check(sample(0), sample(1, swap_used=2 * (1 << 20) + 1), 100.0, 1 * NS)
    assert hit == WallHit("swap growing 2.0 MiB/s", True, None, "measured 100.0 tok/s")
    assert w.reason == "swap growing 2.0 MiB/s"
    assert w.active(1 * NS) and w.active(int((1 + WALL_HOLD_S) * NS) - 1) and not w.active(int((1 + WALL_HOLD_S) * NS))
    again = w.check(None, sample(5, swap_in=1.0), 90.0, 5 * NS)  # the same episode: not the first reading
    assert again is not None and not again.first and again.why == "swapping in 0.0 MiB/s"
    assert w.active(int(14.9 * NS)) and not w.active(15 * NS)  # held 10 s from the last reading that showed it


def test_a_collapse_after_a_step_up_is_the_wall_only_short_of_memory_and_after_ten_seconds():
    w = WallWatch(brake=True)
    up = Step("b", 4, 8, 100 * NS, 200.0)
    w.step(up)
    short = sample(111, avail=int(6.3 * GiB))  # under 20 % of 32 GiB available: short of memory
    assert w.check(None, short, 99.0, 109 * NS) is None  # 9 s after the step: not settled
    hit = w.check(None, short, 99.0, 110 * NS)  # 10 s: 99 < 0.5 × 200
    assert hit == WallHit("aggregate tok/s collapsed 200 → 99 after the last step", True, up,
                          "measured 99.0 tok/s")
    assert w.check(None, sample(111), 99.0, 110 * NS) is None  # memory to spare: the cores or other work
    assert WallWatch(brake=True).check(None, short, 99.0, 110 * NS) is None  # no step: nothing to compare with
    w2 = WallWatch(brake=True)
    w2.step(up)
    assert w2.check(None, short, 100.0, 110 * NS) is None  # exactly half: not below it


def test_a_step_down_a_pause_or_a_mode_change_is_never_a_collapse():
    for change in ("down", "same", "pause"):
        w = WallWatch(brake=True)
        w.step(Step("k", 2, 1, 0, 200.0) if change == "down" else Step("k", 2, 2, 0, 200.0) if change == "same"
               else Step("k", 1, 2, 0, 200.0))
        if change == "pause":
            w.load_changed()
        assert w.check(None, sample(20, avail=int(6 * GiB)), 10.0, 20 * NS) is None, change


def test_the_brake_undoes_the_step_up_once_and_says_both_rates():
    w = WallWatch(brake=True)
    up = Step("k", 1, 2, 0, 100.0)
    w.step(up)
    w.predicted_tps = 41.25
    hit = w.check(None, sample(1, swap_in=4 * (1 << 20)), 40.0, 1 * NS)
    assert hit == WallHit("swapping in 4.0 MiB/s", True, up, "predicted 41.2 tok/s, measured 40.0 tok/s")
    # past its hold, the wall again: the same step is not undone twice
    hit = w.check(None, sample(30, swap_in=4 * (1 << 20)), 40.0, 30 * NS)
    assert hit is not None and hit.first and hit.undo is None
    # a new step up that hits the wall is undone
    up2 = Step("b", 1, 4, 40 * NS, 50.0)
    w.step(up2)
    assert w.check(None, sample(60, swap_in=1.0), 10.0, 60 * NS).undo is up2
    # a step down that hits the wall is not undone; without the brake nothing is
    w.step(Step("b", 4, 2, 80 * NS, 50.0))
    assert w.check(None, sample(100, swap_in=1.0), 10.0, 100 * NS).undo is None
    off = WallWatch(brake=False)
    off.step(up)
    assert off.check(None, sample(1, swap_in=1.0), 10.0, NS).undo is None
    assert off.last_step is up


# --- reading residency slowly when far from the wall ---------------------------------------------------------------

def res(share=1.0, swapped=0, swap_in=0.0, majflt=0.0):
    return Residency(1000, round(1000 * share), True, 500, swapped, majflt, swap_in, 0.0, None, "none")


def test_calm_needs_room_for_twice_what_is_held_and_nothing_brought_back():
    assert calm(res(), 1000, 1000, 900.0)  # headroom 1000 ≥ max(held 1000, footprint 900)
    assert calm(res(), 1000, 900, 1000.0)
    assert not calm(res(), 999, 1000, 900.0) and not calm(res(), 999, 900, 1000.0)
    assert not calm(None, 10_000, 1, 1.0)
    assert calm(res(share=0.99), 1000, 1, 1.0) and not calm(res(share=0.989), 1000, 1, 1.0)
    assert not calm(res(swapped=1), 1000, 1, 1.0)
    assert not calm(res(swap_in=0.001), 1000, 1, 1.0)
    assert not calm(res(majflt=0.01), 1000, 1, 1.0)
    assert calm(res(majflt=None), 1000, 1, 1.0)  # faults not counted (a Mac): not a sign either way


def test_the_residency_view_in_the_numbers_panel():
    v = ResidencyView("weights 100% resident", "page cache first: 2.0 GB left", 3.5, "past the wall: 3.5 tok/s")
    assert v.numbers() == {"residency": "weights 100% resident", "gives_out": "page cache first: 2.0 GB left",
                           "past_wall": "past the wall: 3.5 tok/s"}
    assert ResidencyView().numbers() == {"residency": None, "gives_out": None, "past_wall": None}


def test_edges_of_the_watch():
    fresh = WallWatch(brake=True)
    assert fresh.last_step is None and fresh.reason is None and fresh.predicted_tps is None
    # a remote server asked 2 streams decoding 1.0: its queue
    assert measured_wall(None, None, 0.0, 8, load=WallLoad(remote=True, streams_asked=2, streams_decoding=1.0)) == \
        "server queue (one request at a time: 1.0 of 2 streams decode)"
    # a 'step' to the same level that meets the wall is not undone (only a step up is)
    fresh.step(Step("k", 2, 2, 0, 100.0))
    hit = fresh.check(None, sample(1, swap_in=1.0), 10.0, NS)
    assert hit is not None and hit.first and hit.undo is None
