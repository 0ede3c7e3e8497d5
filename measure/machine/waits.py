"""Waiting in the main thread: poll with time.sleep, never a Condition's or an
Event's wait. The dashboard, bench and replay turn SIGTERM and SIGHUP into an exception raised in the main thread
(tui/options.py sigterm_to_exit); raised while Condition.wait re-takes its lock, it leaves "RuntimeError: release
unlocked lock" in its place, and the program ends without its cleanup's summary (round 20: a bench hung up mid-cell).
A sleep the exception interrupts leaves nothing behind."""
from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.01


def poll_until(done: Callable[[], bool], deadline: float | None, step_s: float = POLL_S) -> bool:
    """Until done() holds (True) or time.monotonic() reaches `deadline` (False; None: no deadline), asking every
    `step_s`."""
    while not done():
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(step_s if deadline is None else max(0.0, min(step_s, deadline - time.monotonic())))
    return True
