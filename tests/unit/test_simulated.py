"""The simulated fleet honours a load's open-loop arrivals as the real fleet does (sources/simulated.py): a request
goes out at its scheduled time, never before, waits in the shared queue for a free slot, and its TTFT (counted
from the scheduled time) includes that wait. A hand-computed case on a fake clock."""
from measure.core.arrivals import Schedule
from measure.core.records import RunMeta
from measure.core.workload import Load
from measure.sources.base import Finished, LoadStarted, Started
from measure.sources.simulated import SimulatedFleet
import presets

MS = 1_000_000
T0 = 1_000_000 * MS


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def test_an_open_loop_waits_for_its_arrival_and_for_a_free_slot_and_its_ttft_says_so():
    """K = 1, one request at a time; a step reads W = 1 GB at β = 100 GB/s: 10 ms; the prefill 50 ms; 2 tokens
    each. Arrivals at 0, 10 and 200 ms:
      A: arrives 0, starts 0, tokens 50, 60 (done 60): TTFT 50 ms.
      B: arrives 10 while A holds the slot, waits, starts 60 when A ends: tokens 110, 120: TTFT 110 − 10 = 100 ms
         (50 of it the wait for the slot).
      C: arrives 200 (the slot free since 120): starts 200, not before: tokens 250, 260: TTFT 50 ms.
    The fleet is advanced every 7 ms, off every one of these times: they come out exact all the same."""
    clock = Clock()
    fleet = SimulatedFleet(RunMeta("e", "m", 1_000_000_000), k=1, bandwidth_gbps=100.0, prefill_s=0.05, clock=clock,
                           threaded=False)
    fleet.start()
    fleet.set_load(Load(presets.workload("synthetic:16"), Schedule(iter([0, 10 * MS, 200 * MS]), 3, "test"), 2))
    while clock.now <= T0 + 300 * MS:
        fleet.advance(clock.now)
        clock.now += 7 * MS
    events = []
    while not fleet.events.empty():
        events.append(fleet.events.get())
    recs = sorted((e.record for e in events if isinstance(e, Finished)), key=lambda r: r.request_id)

    def ms(t):
        return (t - T0) / MS

    assert [ms(r.t_scheduled_ns) for r in recs] == [0, 10, 200]
    assert [ms(r.t_submitted_ns) for r in recs] == [0, 10, 200]  # released on schedule (no lateness of its own)
    assert [ms(r.t_started_ns) for r in recs] == [0, 60, 200]  # B waits for the slot; C not before it arrives
    assert [[ms(t) for t in r.token_ns] for r in recs] == [[50, 60], [110, 120], [250, 260]]
    assert [round((r.t_first_token_ns - r.t_scheduled_ns) / MS) for r in recs] == [50, 100, 50]  # TTFT
    assert [ms(e.t_ns) for e in events if isinstance(e, Started)] == [0, 60, 200]
    assert [ms(e.t_ns) for e in events if isinstance(e, LoadStarted)] == [0]  # once, at the first arrival's t0


def test_a_closed_loop_still_starts_each_request_the_moment_a_slot_is_free():
    """The closed loop is as before (the snapshots rely on it): 2 users over K = 1, one at a time; each request
    starts at the advance after the last one ended, scheduled and sent then."""
    from measure.core.workload import ClosedLoop

    clock = Clock()
    fleet = SimulatedFleet(RunMeta("e", "m", 1_000_000_000), k=1, bandwidth_gbps=100.0, prefill_s=0.05, clock=clock,
                           threaded=False)
    fleet.start()
    fleet.set_load(Load(presets.workload("synthetic:16"), ClosedLoop(2), 2))
    while clock.now <= T0 + 150 * MS:
        fleet.advance(clock.now)
        clock.now += 10 * MS
    recs = [e.record for e in list(fleet.events.queue) if isinstance(e, Finished)]
    assert [((r.t_scheduled_ns - T0) / MS, (r.t_started_ns - T0) / MS, (r.t_done_ns - T0) / MS) for r in recs] == [
        (0, 0, 60), (70, 70, 130)]
