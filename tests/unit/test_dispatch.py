"""The dispatcher on its own (sources/dispatch.py): release of a load's arrivals, the shared queue, lateness and
admission through a source's "who has room" and "send", on a fake clock."""
from measure.core.arrivals import ArrivalSpec
from measure.core.workload import ClosedLoop, Load
from measure.sources.dispatch import Dispatcher
import presets

MS = 1_000_000
WL = presets.Workload("t", "", ("a", "b", "c"))


class Clock:
    def __init__(self, now=0):
        self.now = now

    def __call__(self):
        return self.now


def test_closed_loop_of_two_users_through_one_slot_sends_in_order_as_each_request_ends():
    clock = Clock()
    d = Dispatcher(clock)
    d.set_load(Load(WL, ClosedLoop(2, total=5), 4))
    busy: list = []  # the one slot: the request it holds
    sent = []  # (request id, when sent, when released)

    def room():
        return "slot" if not busy else None

    def send(slot, req):
        busy.append(req)
        sent.append((req.request_id, clock.now, req.t_scheduled_ns, req.t_submitted_ns))
        return True

    for t in range(0, 60, 10):  # every request takes 10 ms; the loop runs as each one ends
        clock.now = t * MS
        if busy and t > 0:
            busy.pop()
        d.release(len(busy), rep=0, k=1, b=1, mode="instances")
        d.dispatch(room, send)
    # two users: 1 and 2 released at 0, then one more each time a request ends (the queue counts as a user's)
    assert [s[0] for s in sent] == [1, 2, 3, 4, 5]
    assert [s[1] // MS for s in sent] == [0, 10, 20, 30, 40]  # sent when the slot frees
    assert [s[2] // MS for s in sent] == [0, 0, 10, 20, 30]  # scheduled when a user's last request ended
    assert [s[3] // MS for s in sent] == [0, 0, 10, 20, 30]  # released then: a closed loop is never late
    assert not d.pending and d.load.arrivals.exhausted()


def test_open_loop_is_released_at_its_times_and_says_how_late():
    t0 = 1_000 * MS
    clock = Clock(t0)
    d = Dispatcher(clock)
    d.set_load(Load(WL, ArrivalSpec("constant", rate=10.0).make(4), 4))  # at t0 + 0, 100, 200, 300 ms
    first = d.release(0, rep=2, k=3, b=1, mode="instances")
    assert [(r.request_id, r.t_scheduled_ns - t0, r.rep, r.k) for r in first] == [(1, 0, 2, 3)]
    assert d.wait_s(0.5) == 0.1  # the loop sleeps until the next arrival
    clock.now = t0 + 150 * MS
    late = d.release(1, rep=2, k=3, b=1, mode="instances")
    assert [(r.t_scheduled_ns - t0) // MS for r in late] == [100]
    assert [(r.t_submitted_ns - r.t_scheduled_ns) // MS for r in late] == [50]  # lateness: 50 ms
    clock.now = t0 + 400 * MS
    rest = d.release(0, rep=2, k=3, b=1, mode="instances")
    assert [r.request_id for r in rest] == [3, 4]
    assert [(r.t_submitted_ns - r.t_scheduled_ns) // MS for r in rest] == [200, 100]
    assert d.wait_s(0.5) == 0.5  # nothing more is due
    assert [r.request_id for r in d.pending] == [1, 2, 3, 4]  # nothing sent: no room was asked


def test_the_source_names_the_slot_and_a_failed_send_keeps_the_head():
    clock = Clock()
    d = Dispatcher(clock)
    d.set_load(Load(WL, ClosedLoop(4, total=4), 4))
    d.release(0, rep=0, k=2, b=2, mode="batch")
    held = {"a": 1, "b": 0}  # requests each slot holds

    def room():  # the least loaded of two slots of two sequences each
        free = [s for s in held if held[s] < 2]
        return min(free, key=lambda s: held[s]) if free else None

    order = []

    def send(slot, req):
        if req.request_id == 4:
            return False  # the pipe broke: it stays queued
        held[slot] += 1
        order.append((req.request_id, slot))
        return True

    assert d.dispatch(room, send) == 3  # three sequences free, then no room: 4 waits
    assert order == [(1, "b"), (2, "a"), (3, "b")]  # least loaded first, ties to the first named
    assert [r.request_id for r in d.pending] == [4]
    held["a"] = 0
    assert d.dispatch(room, send) == 0  # room now, but 4's send fails: it goes back to the head
    assert [r.request_id for r in d.pending] == [4] and held["a"] == 0
    assert [r.request_id for r in d.take_all()] == [4] and not d.pending


def test_paused_releases_nothing_and_the_schedule_moves_on_by_the_pause():
    t0 = 5_000 * MS
    clock = Clock(t0)
    d = Dispatcher(clock)
    d.set_load(Load(WL, ArrivalSpec("constant", rate=10.0).make(None), 4))
    assert len(d.release(0, rep=0, k=1, b=1, mode="instances")) == 1
    d.pause(True)
    clock.now = t0 + 1_000 * MS
    assert d.release(0, rep=0, k=1, b=1, mode="instances") == []
    assert d.wait_s(0.5) == 0.5  # paused: nothing to wake for
    d.pause(False)  # the arrivals missed while paused are not sent as a burst
    again = d.release(0, rep=0, k=1, b=1, mode="instances")
    assert [(r.t_scheduled_ns - t0) // MS for r in again] == [1_000]


def test_users_follow_the_slots_until_told():
    clock = Clock()
    d = Dispatcher(clock, auto_users=True)
    d.set_load(Load(WL, ClosedLoop(1), 4))
    assert len(d.release(0, rep=0, k=3, b=1, mode="instances", slots=3)) == 3
    d.set_users(5)
    assert len(d.release(0, rep=0, k=3, b=1, mode="instances", slots=3)) == 2  # told: 5 users (3 queued)
    assert len(d.pending) == 5


def test_a_load_may_number_its_requests_from_a_first_id_by_a_step():
    """A pool's process takes every step-th id of one closed loop (sources/http_pool.py)."""
    d = Dispatcher(Clock())
    d.set_load(Load(WL, ClosedLoop(3, total=3), 4), first_id=2, id_step=4)
    assert [r.request_id for r in d.release(0, rep=0, k=1, b=3, mode="http")] == [2, 6, 10]
    d.take_all()
    d.set_load(Load(WL, ClosedLoop(2, total=2), 4))  # ids run on
    assert [r.request_id for r in d.release(0, rep=0, k=1, b=3, mode="http")] == [14, 18]


def test_the_load_starts_once_per_load_when_the_source_is_ready_and_nothing_is_released_before():
    clock = Clock(5 * MS)
    said = []
    d = Dispatcher(clock, on_start=said.append)
    d.set_load(Load(WL, ClosedLoop(2, total=4), 4))
    assert d.release(0, rep=0, k=1, b=1, mode="instances", ready=False) == [] and said == []  # warming up
    clock.now = 7 * MS
    assert len(d.release(0, rep=0, k=1, b=1, mode="instances")) == 2 and said == [7 * MS]
    clock.now = 9 * MS
    d.release(0, rep=0, k=1, b=1, mode="instances", ready=False)  # a later step warming: the load goes on
    assert said == [7 * MS]
    d.pause(True)
    d.set_load(Load(WL, ClosedLoop(1, total=1), 4))  # a new load: it starts again, once it flows
    assert not d.start() and said == [7 * MS]
    d.pause(False)
    assert d.start() and d.start() and said == [7 * MS, 9 * MS]


def test_the_slot_rule_least_loaded_then_tie_or_the_first_and_an_uncapped_open_loop_spills():
    d = Dispatcher(Clock(), cap_open_loop=False)
    held = {"a": 2, "b": 1, "c": 1, "d": 4}
    cap = {"a": 4, "b": 1, "c": 4, "d": 4}.__getitem__
    tie = {"a": 0, "b": 0, "c": 9, "d": 0}.__getitem__
    assert d.choose("abcd", held.__getitem__, cap) == ("c", False)  # b is full; c the least loaded with room
    assert d.choose("abcd", held.__getitem__, cap, first=True) == ("a", False)  # round robin: the first with room
    held["a"] = 1
    assert d.choose("abcd", held.__getitem__, cap, tie=tie) == ("a", False)  # a and c hold 1: the tie says a
    full = dict.fromkeys("abcd", 4).__getitem__
    assert d.choose("abcd", full, cap, spill="cd") is None  # no load: nothing spills
    d.set_load(Load(WL, ClosedLoop(2), 4))
    assert d.choose("abcd", full, cap, spill="cd") is None  # a closed loop waits for a free slot
    d.set_load(Load(WL, ArrivalSpec("constant", rate=10.0).make(4), 4))
    assert d.choose("abcd", {"a": 4, "b": 1, "c": 7, "d": 5}.__getitem__, cap, spill="cd") == ("d", True)  # beyond B
    d.cap_open_loop = True
    assert d.choose("abcd", full, cap, spill="cd") is None  # B asked as the client's cap: it waits
