"""The live tune's side of the search (tui/tune_app.py): its keys (`TuneControl`), asked from the search's
thread, and what its screen draws (`TuneView`)."""
from __future__ import annotations

import threading
from dataclasses import dataclass


class TuneControl:
    """The live tune's keys (tui/tune_app.py), asked by the search from its own thread: `pause` holds the next
    run until resumed (the one going on finishes); `skip` stops the run going on at once (its row: skipped) or,
    with none going on, the next one; `stop` ends the search: the run going on stops, nothing more is run, and
    the answer is made of what was measured."""

    def __init__(self) -> None:
        self._go = threading.Event()
        self._go.set()
        self._skip = threading.Event()
        self._stop = threading.Event()
        self.running: str | None = None  # the candidate being measured, for the screen

    @property
    def paused(self) -> bool:
        return not self._go.is_set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def pause(self, paused: bool = True) -> None:
        if paused:
            self._go.clear()
        else:
            self._go.set()

    def skip(self) -> None:
        self._skip.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()

    def wait(self) -> None:
        """Until resumed, or stopped."""
        while not self._go.wait(0.2):
            pass

    def take_skip(self) -> bool:
        """Whether a skip was asked (and it is used up)."""
        asked = self._skip.is_set()
        self._skip.clear()
        return asked

    def cut(self) -> str | None:
        """Why the run going on stops now (the cell's should_stop), or None: a skip or a stop asked."""
        if self._stop.is_set():
            return "the tune was stopped (q)"
        if self._skip.is_set():
            return "skipped (s)"
        return None


@dataclass(frozen=True)
class TuneRowView:
    """One candidate as the live tune's table shows it: its longest measured run (or its last try's status)."""

    key: str
    status: str
    requests: int
    goodput_tps: float | None
    tps: float | None
    p99_ttft_ms: float | None
    predicted_tps: float | None
    reason: str


@dataclass(frozen=True)
class TuneView:
    """The live tune at one moment (made on the search's thread, drawn on the screen's): its rows, best first,
    the Pareto front, the winner so far, the candidate running, and where the budget stands."""

    rows: tuple[TuneRowView, ...]
    front: tuple[str, ...]
    winner: str | None
    running: str | None
    paused: bool
    stopped: str
    spent_s: float
    budget_s: float
    # every measured candidate's (key, TTFT p99, goodput) at the one run length the front compares (front_n)
    front_points: tuple[tuple[str, float | None, float], ...] = ()
    front_n: int | None = None
