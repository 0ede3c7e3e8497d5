"""The one scheduler of every load source: the fleet's I/O thread, the HTTP source's asyncio loop and the simulated
fleet's advance() each call a Dispatcher from their own loop (docs/design/glossary.md, Dispatcher).

It owns what a load means in time: the queue of requests released and not yet sent (one shared queue, first in,
first out), the release of a load's arrivals into it (an open loop at its scheduled times, a closed loop when a
user's last request ends, a session's user after its think time: core/workload.RequestMaker makes the Requests),
each request's lateness (t_submitted_ns, read from the dispatcher's clock as the request is released, against
t_scheduled_ns: arrivals.lateness_figures), pause and resume, a closed loop's users (told, or following the
slots the source can serve at once), and how long the source's loop may sleep before the next arrival is due.

It decides when a load starts (`release`: the first turn of the source's loop in which a load is set, not
paused, and every slot of the level is ready, said once per load through `on_start`; the schedule's t0 is that
turn's clock, as arrivals.Schedule counts from its first due()), and which slot a request may go out on (`choose`:
one with room, the least loaded (ties: the source's order) or the first in the source's order; where none has
room, an open loop the client does not cap spills onto a stream beyond B, anything else waits in the queue).

A source keeps what only it knows: which of its slots can serve now and how loaded each is (what it gives
`choose`), and how to send (`send`: True once it is on its way).
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from measure.core.records import Request
from measure.core.workload import Load, RequestMaker, is_open_loop

Slot = TypeVar("Slot")


class Dispatcher:
    """A load's arrivals → the shared queue → the slots a source names. Not thread-safe: one loop calls it (a
    source that changes the load from another thread holds its own lock around both)."""

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns, auto_users: bool = False,
                 on_start: Callable[[int], None] | None = None, cap_open_loop: bool = True):
        self.clock = clock
        self.requests = RequestMaker(clock)
        self.pending: deque[Request] = deque()  # released, not sent yet
        self.paused = False
        self.auto_users = auto_users  # a closed loop's users follow the slots the source serves (set_users(None))
        self.on_start = on_start  # told the time once per load, when it starts (the source's LoadStarted)
        self.started = False  # the load set last has started
        # an open loop's request waits for a free slot (True), or goes out when due on a stream beyond B (False)
        self.cap_open_loop = cap_open_loop

    @property
    def load(self) -> Load | None:
        return self.requests.load

    @property
    def flowing(self) -> bool:
        """A load is set and not paused: arrivals are released."""
        return self.requests.load is not None and not self.paused

    def set_load(self, load: Load | None, first_id: int | None = None, id_step: int = 1) -> None:
        """`first_id`, `id_step`: this load's request ids run first_id, first_id + step … (a pool's process takes
        every step-th id of one closed loop); else they run on from the last load's."""
        if first_id is not None:
            self.requests.number_from(first_id, id_step)
        self.requests.set_load(load)
        self.started = False

    def set_users(self, users: int | None) -> None:
        """Closed-loop users; None: they follow the slots the source can serve at once (release's `slots`)."""
        self.auto_users = users is None
        if users is not None:
            self.requests.set_users(users)

    def pause(self, paused: bool) -> None:
        """Paused: nothing is released. On resume the schedule moves on by the pause (no burst of the arrivals
        missed meanwhile)."""
        if self.paused and not paused:
            self.requests.resume(self.clock())
        self.paused = paused

    def release(self, outstanding: int, *, rep: int, k: int, b: int, mode: str,
                slots: int | None = None, ready: bool = True) -> list[Request]:
        """Put the arrivals due now at the back of the queue and return them. `outstanding`: requests sent and
        not finished (a closed loop's users count the queue and these); `slots`: what the source can serve at
        once now, a closed loop's users when they follow it; `ready`: every slot of the level asked is ready (a
        load starts only then: nothing is released before). The requests say rep, K, B and mode as given; the
        source stamps the level that serves each as it sends it."""
        if not self.flowing or not self.start(ready):
            return []
        if self.auto_users and slots is not None:
            self.requests.set_users(slots)
        new = self.requests.due(self.clock(), len(self.pending) + outstanding, rep=rep, k=k, b=b, mode=mode)
        self.pending.extend(new)
        return new

    def start(self, ready: bool = True) -> bool:
        """Whether the load set last has started: it starts the first time this is asked while it flows and the
        source is `ready` (on_start is told the time then, once per load)."""
        if not self.started and self.flowing and ready:
            self.started = True
            if self.on_start:
                self.on_start(self.clock())
        return self.started

    def choose(self, slots: Sequence[Slot], held: Callable[[Slot], int], capacity: Callable[[Slot], int], *,
               tie: Callable[[Slot], Any] | None = None, first: bool = False,
               spill: Sequence[Slot] = ()) -> tuple[Slot, bool] | None:
        """The slot the head of the queue goes out on. `slots`: the ones that can serve now, in the source's
        order; `held`: requests each holds; `capacity`: the most it may hold. One with room: the first in order
        (`first`: round robin, the first free) or the least loaded (ties: the smallest `tie`, else the first in
        order). None has room: in an open loop the client does not cap (cap_open_loop False), the least loaded of
        `spill` beyond its capacity (True: a stream beyond B); else None, and the request waits."""
        room = [s for s in slots if held(s) < capacity(s)]
        if room:
            return (room[0] if first else min(room, key=lambda s: (held(s), tie(s) if tie else 0))), False
        load = self.load
        if spill and not self.cap_open_loop and load is not None and is_open_loop(load.arrivals):
            return (spill[0] if first else min(spill, key=held)), True
        return None

    def dispatch(self, room: Callable[[], Slot | None], send: Callable[[Slot, Request], bool]) -> int:
        """The head of the queue to the slot `room` names, while it names one; a request `send` could not send
        goes back to the head and dispatching stops there. Returns how many were sent. Requests left because no
        slot had room are marked `waited_for_stream` (the source's own queue: over HTTP the client's)."""
        n = 0
        while self.pending:
            slot = room()
            if slot is None:
                for req in self.pending:
                    req.waited_for_stream = True
                break
            req = self.pending.popleft()
            if not send(slot, req):
                self.pending.appendleft(req)
                break
            n += 1
        return n

    def take_all(self) -> list[Request]:
        """Every request still queued, the queue emptied (nobody is left to serve them)."""
        out = list(self.pending)
        self.pending.clear()
        return out

    def finished(self, req: Request, answer: str | None, t_done_ns: int) -> None:
        """A request ended (answer: its text; None: it failed): a session's user takes it and thinks."""
        self.requests.finished(req, answer, t_done_ns)

    def wait_s(self, longest: float) -> float:
        """How long the source's loop may sleep: until the next scheduled arrival, `longest` at most."""
        nxt = self.requests.next_wakeup_ns() if self.flowing else None
        if nxt is None:
            return longest
        return min(longest, max(0.0, (nxt - self.clock()) / 1e9))
