"""When open-loop requests arrive (docs/design/workloads.md): constant rate, Poisson, gamma with a burstiness factor,
a linear ramp, or a trace's own times (time-scaled by --speed); and how late the load generator put each
request out against that schedule (lateness), so a generator that falls behind says so.

Every pattern is a `Schedule`: the i-th request is due at t0 + offset_i, t0 being the moment the load starts. It
plugs into the dispatcher (workload.RequestMaker) like Poisson and ClosedLoop: the `Arrivals` protocol (due(),
next_wakeup_ns(), resume(), exhausted(), total), declared here for every arrival process. A finite level (a bench
cell's `--requests`) is conditioned on its count: the random gaps are scaled so the n arrivals span exactly (n − 1)
÷ rate, and the level offers the rate it is named for (the shape of the gaps, bursts and lulls, is kept)."""
from __future__ import annotations

import heapq
import itertools
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

from engines.base import Prompt
from measure.core.datasets import Dataset, request_for
from measure.core.records import ChatMessage, RequestRecord
from measure.core.units import NS
from presets import Workload

LATE_MS = 10.0  # a cell whose p99 lateness is above this is marked behind its schedule
PATTERNS = ("constant", "poisson", "gamma:B", "ramp:FROM-TO")


class Arrivals(Protocol):
    """What the dispatcher (workload.RequestMaker) asks of every arrival process: workload.ClosedLoop,
    ClosedShare and Poisson, a Schedule and a trace's TraceSessions (here), a client's clients.Segment of a
    schedule, multi-turn sessions.Sessions. `total`: the requests it sends (None: without end)."""

    @property
    def total(self) -> int | None: ...

    def describe(self) -> str: ...

    def due(self, now_ns: int, outstanding: int) -> list[int]: ...

    def next_wakeup_ns(self) -> int | None: ...

    def resume(self, now_ns: int) -> None: ...

    def exhausted(self) -> bool: ...


class IndexedArrivals(ABC):
    """Arrivals that number their requests within a whole: a client's clients.Segment of one schedule, a
    process's workload.ClosedShare of a closed loop. due_indexed() gives each due request's index in the whole
    (the dispatcher takes its id, base + index + 1, its prompt and lengths from it); `full_total` is the whole's
    count (None: without end)."""

    full_total: int | None

    @abstractmethod
    def due_indexed(self, now_ns: int, outstanding: int) -> list[tuple[int, int]]:
        """(index in the whole, scheduled ns) of each request due by now_ns."""


@dataclass
class DueTurn:
    """A turn due to be sent: what RequestMaker turns into a Request."""

    t_scheduled_ns: int
    prompt: Prompt
    max_tokens: int
    session: int  # 1-based within its load
    turn: int  # 1-based within its session
    key: str  # unique to the session within the run: its prefix-cache marker
    messages: list[ChatMessage]
    user: int


class TurnArrivals(ABC):
    """Arrivals that make their own requests, turn by turn: multi-turn sessions.Sessions, a trace's
    TraceSessions. The dispatcher asks due_turns() instead of due(), tells sent() and finished(); `users`: its
    closed-loop users (set by RequestMaker.set_users)."""

    users: int

    @abstractmethod
    def due_turns(self, now_ns: int, workload: Workload, max_tokens: int) -> list[DueTurn]:
        """The turns due by now_ns, each to become one Request."""

    @abstractmethod
    def sent(self, request_id: int, turn: DueTurn) -> None:
        """Turn `turn` went out as request `request_id`."""

    @abstractmethod
    def finished(self, request_id: int, answer: str | None, t_done_ns: int) -> None:
        """Request `request_id` ended at t_done_ns: its answer's text (None: it failed)."""


class Schedule:
    """Open-loop arrivals at t0 + offsets[i] (offsets in ns, non-decreasing); t0 = the first call to due()."""

    def __init__(self, offsets: Iterator[int], total: int | None, label: str):
        self.total = total
        self.issued = 0
        self.label = label
        self._offsets = offsets
        self._next: int | None = next(self._offsets, None)
        self._t0: int | None = None

    def describe(self) -> str:
        return f"open loop, {self.label}"

    def exhausted(self) -> bool:
        return self._next is None or (self.total is not None and self.issued >= self.total)

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        if self._t0 is None:
            self._t0 = now_ns
        out = []
        # exhausted() is true when _next is None: the explicit check only tells the type checker so
        while self._next is not None and not self.exhausted() and self._t0 + self._next <= now_ns:
            out.append(self._t0 + self._next)
            self.issued += 1
            self._next = next(self._offsets, None)
        return out

    def next_wakeup_ns(self) -> int | None:
        if self._next is None or self.exhausted() or self._t0 is None:  # (exhausted() when _next is None)
            return None
        return self._t0 + self._next

    def resume(self, now_ns: int) -> None:
        """After a pause the rest of the schedule moves on by the pause: arrivals missed while paused are not
        sent as a burst, and the gaps after them keep their lengths."""
        if self._t0 is not None and self._next is not None:
            self._t0 = max(self._t0, now_ns - self._next)


def _cumulative(gaps: Iterator[float]) -> Iterator[int]:
    t = 0.0
    yield 0
    for g in gaps:
        t += g
        yield round(t * NS)


def _scaled(gaps: list[float], span_s: float) -> list[float]:
    """The gaps scaled to sum to span_s (a level conditioned on its count)."""
    s = sum(gaps)
    return [g * span_s / s for g in gaps] if s > 0 else [span_s / len(gaps)] * len(gaps) if gaps else []


@dataclass(frozen=True)
class ArrivalSpec:
    """An open-loop pattern as asked on the command line; make() gives one level's Schedule."""

    pattern: str  # constant | poisson | gamma | ramp | trace
    rate: float | None = None  # req/s (constant, poisson, gamma)
    burstiness: float | None = None  # gamma's shape: 1 = Poisson, < 1 burstier, > 1 more even
    ramp: tuple[float, float] | None = None  # req/s at the start and at the end of the level
    times_s: Sequence[float] = ()  # trace: each request's time, s from the first (core/traces.py: read as needed)
    speed: float = 1.0  # trace: 2 = twice as fast
    seed: int = 0
    after: Sequence[int] | None = None  # trace: each request's parent's index, −1 for none (TraceSessions)

    # The pattern's own parameters, set for it by parse_arrivals (rate: constant, poisson, gamma; burstiness: gamma;
    # ramp: ramp): asserted where used, as the pattern needs them.
    def _rate(self) -> float:
        assert self.rate is not None, f"{self.pattern} arrivals need a rate"
        return self.rate

    def _burstiness(self) -> float:
        assert self.burstiness is not None, f"{self.pattern} arrivals need a burstiness"
        return self.burstiness

    def _ramp(self) -> tuple[float, float]:
        assert self.ramp is not None, f"{self.pattern} arrivals need a ramp"
        return self.ramp

    def describe(self) -> str:
        if self.pattern == "trace":
            span = self.times_s[-1] if self.times_s else 0.0
            return (f"trace replay, {len(self.times_s)} requests over {span:g} s"
                    + (f" at ×{self.speed:g} speed" if self.speed != 1 else ""))
        if self.pattern == "ramp":
            return f"ramp {self._ramp()[0]:g} → {self._ramp()[1]:g} req/s (Poisson)"
        if self.pattern == "gamma":
            return (f"gamma {self.rate:g} req/s, burstiness {self.burstiness:g} "
                    f"(CV {1 / math.sqrt(self._burstiness()):.2f})")
        return f"{'Poisson' if self.pattern == 'poisson' else 'constant'} {self.rate:g} req/s"

    def mean_rate(self) -> float | None:
        """The rate a level offers on average (req/s)."""
        if self.pattern == "ramp":
            return (self._ramp()[0] + self._ramp()[1]) / 2
        if self.pattern == "trace":
            n, span = len(self.times_s), (self.times_s[-1] if self.times_s else 0.0)
            return (n - 1) / span * self.speed if n > 1 and span > 0 else None
        return self.rate

    def make(self, total: int | None, rep: int = 0) -> Schedule:
        """One level's arrivals: `total` requests (None: without end, the dashboard), seeded by (seed, rep) so
        every cell's rep r sends the same schedule."""
        rng = random.Random(self.seed * 1_000_003 + rep)
        label = self.describe()
        if self.pattern == "trace" and self.after is not None:
            return TraceSessions(self._trace_offsets(), self.after, total, label)
        if self.pattern == "trace":
            return Schedule(self._trace_offsets(), total, label)
        if self.pattern == "ramp":
            if total is None:
                raise ValueError("a ramp climbs over a level's requests: it needs bench --requests N")
            return Schedule(self._ramp_offsets(total, rng), total, label)
        gaps_of: dict[str, Callable[[], float]] = {
            "constant": lambda: 1.0 / self._rate(),
            "poisson": lambda: rng.expovariate(self._rate()),
            "gamma": lambda: rng.gammavariate(self._burstiness(), 1.0 / (self._rate() * self._burstiness()))}
        gap = gaps_of[self.pattern]
        if total is None:
            return Schedule(_cumulative(gap() for _ in itertools.count()), None, label)
        gaps = [gap() for _ in range(max(0, total - 1))]
        return Schedule(_cumulative(iter(_scaled(gaps, (total - 1) / self._rate()))), total, label)

    def _ramp_offsets(self, n: int, rng: random.Random) -> Iterator[int]:
        """A Poisson process whose rate climbs linearly from r0 to r1 over the level: unit-rate arrivals in
        operational time u (conditioned: the last at u = n − 1), each mapped to real time by Λ⁻¹, where
        Λ(t) = r0·t + (r1 − r0)·t²/(2T) and T = 2(n − 1)/(r0 + r1), so Λ(T) = n − 1."""
        r0, r1 = self._ramp()
        if n < 2:
            return iter([0])
        big_t = 2 * (n - 1) / (r0 + r1)
        a = (r1 - r0) / (2 * big_t)
        gaps = _scaled([rng.expovariate(1.0) for _ in range(n - 1)], n - 1)

        def t_of(u: float) -> float:
            if abs(a) < 1e-12:
                return u / r0
            return (-r0 + math.sqrt(max(0.0, r0 * r0 + 4 * a * u))) / (2 * a)

        u = 0.0
        out = [0]
        for g in gaps:
            u += g
            out.append(round(t_of(u) * NS))
        return iter(out)

    def _trace_offsets(self) -> Iterator[int]:
        """The trace's times ÷ speed, and past its end the trace again, one mean gap after its last request."""
        ts = self.times_s
        n = len(ts)
        period = ts[-1] + (ts[-1] / (n - 1) if n > 1 and ts[-1] > 0 else 1.0)
        for i in itertools.count():
            yield round((ts[i % n] + (i // n) * period) / self.speed * NS)


def parse_arrivals(text: str | None, rate: float | None, *, speed: float | None = None,
                   trace_times: Sequence[float] | None = None, seed: int = 0,
                   trace_after: Sequence[int] | None = None) -> ArrivalSpec | None:
    """--arrivals, --rate, --speed and a trace workload's times → the open-loop spec, or None (closed loop).
    ValueError: one line saying what was wrong and what to write."""
    if trace_times is not None:
        if text or rate:
            raise ValueError("a trace brings its own arrival times: drop --rate and --arrivals (--speed 2 replays "
                             "it twice as fast)")
        return ArrivalSpec("trace", times_s=tuple(trace_times) if isinstance(trace_times, list) else trace_times,
                           speed=speed or 1.0, seed=seed, after=trace_after)
    if speed is not None:
        raise ValueError("--speed scales a trace's times: it applies to --workload trace:FILE")
    if text is None:
        return ArrivalSpec("poisson", rate=rate, seed=seed) if rate else None
    t = text.strip().lower()
    name, _, arg = t.partition(":")
    known = ("write constant, poisson, gamma:B (with --rate; burstiness B: 1 is Poisson, below 1 burstier, e.g. "
             "gamma:0.5) or ramp:FROM-TO (req/s, e.g. ramp:1-8)")
    if name == "ramp":
        lo, sep, hi = arg.partition("-")
        try:
            r0, r1 = float(lo), float(hi)
        except ValueError:
            r0 = r1 = -1.0
        if not sep or not (r0 >= 0 and r1 >= 0 and r0 + r1 > 0 and math.isfinite(r0 + r1)):
            raise ValueError(f"--arrivals {text!r}: a ramp is ramp:FROM-TO in req/s, e.g. ramp:1-8 (FROM may be 0)")
        if rate:
            raise ValueError(f"--arrivals {text!r} names its own rates: drop --rate")
        return ArrivalSpec("ramp", ramp=(r0, r1), seed=seed)
    if name not in ("constant", "poisson", "gamma"):
        raise ValueError(f"--arrivals {text!r}: unknown pattern; {known}")
    if name == "gamma":
        try:
            b = float(arg)
        except ValueError:
            b = -1.0
        if not (b > 0 and math.isfinite(b)):
            raise ValueError(f"--arrivals {text!r}: gamma needs its burstiness, a number above 0: gamma:0.5 is "
                             "burstier than Poisson, gamma:1 is Poisson, gamma:4 more even")
    elif arg:
        raise ValueError(f"--arrivals {text!r}: {name} takes no parameter; {known}")
    if not rate:
        raise ValueError(f"--arrivals {name} needs --rate R (requests per second)")
    return ArrivalSpec(name, rate=rate, burstiness=b if name == "gamma" else None, seed=seed)


def realised_rate(times_ns: Sequence[int]) -> float | None:
    """(n − 1) ÷ (first → last) in req/s: the rate a schedule offered."""
    if len(times_ns) < 2 or times_ns[-1] <= times_ns[0]:
        return None
    return (len(times_ns) - 1) / ((times_ns[-1] - times_ns[0]) / NS)


class ClientWait(TypedDict, total=False):
    """client_wait_figures: the requests that waited for a free client stream and their wait, ms."""

    client_waited: int
    client_wait_p50_ms: float
    client_wait_p99_ms: float
    client_wait_max_ms: float


class Lateness(TypedDict):
    """lateness_figures: the load generator's lateness against its schedule, ms, and the rate requests arrived at."""

    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: float | None
    behind_schedule: bool
    arrival_rps: float | None


def client_wait_figures(records: Sequence[RequestRecord]) -> ClientWait:
    """HTTP: the requests that were due while every client stream was busy (extra.client_queue_ms: released on
    schedule, then queued in the client until a stream was free: an open loop capped by --b, or a closed loop's
    users above its streams), their count and their wait's p50/p99/max over every request sent (0 for one that
    did not wait), in ms. Empty where none waited. A queue-inclusive TTFT holds this wait; without these figures
    it would read as the server's latency."""
    waits = [float((r.extra or {}).get("client_queue_ms") or 0.0) for r in records]
    waited = sum(1 for r in records if "client_queue_ms" in (r.extra or {}))
    if not waited:
        return {}
    import numpy as np

    a = np.asarray(waits)
    return {"client_waited": waited, "client_wait_p50_ms": float(np.percentile(a, 50)),
            "client_wait_p99_ms": float(np.percentile(a, 99)), "client_wait_max_ms": float(a.max())}


def lateness_figures(records: Sequence[RequestRecord]) -> Lateness:
    """How late the load generator put requests out against their schedule: lateness = t_submitted −
    t_scheduled, p50/p99/max in ms over every record (ok or failed: the generator sent them all); the rate the
    requests arrived at per rep, (n − 1) ÷ (first → last scheduled), meaned (open loop: the schedule's rate;
    closed loop: what the users' loop made); `behind_schedule` when p99 > LATE_MS. TTFT counts from the
    schedule, so lateness is inside it, never hidden."""
    import numpy as np

    late = [(r.t_submitted_ns - r.t_scheduled_ns) / 1e6 for r in records if r.t_submitted_ns]
    reps: dict[int, list[int]] = {}
    for r in records:
        reps.setdefault(r.rep, []).append(r.t_scheduled_ns)
    rates = [x for x in (realised_rate(sorted(v)) for v in reps.values()) if x is not None]
    if not late:
        return {"lateness_p50_ms": None, "lateness_p99_ms": None, "lateness_max_ms": None,
                "behind_schedule": False, "arrival_rps": sum(rates) / len(rates) if rates else None}
    p50, p99 = (float(np.percentile(late, q)) for q in (50, 99))
    return {"lateness_p50_ms": p50, "lateness_p99_ms": p99, "lateness_max_ms": max(late),
            "behind_schedule": p99 > LATE_MS, "arrival_rps": sum(rates) / len(rates) if rates else None}


# ---- a trace's sessions (follow-ups after their parents: traces.TraceFormat.sessions) ------------------------


@dataclass
class _Turn:
    index: int
    due_ns: int


@dataclass
class TraceTurn(DueTurn):
    """A trace's request as a session's turn: its row index too (to release its follow-ups when it ends)."""

    index: int = 0


class TraceSessions(Schedule, TurnArrivals):
    """A trace whose follow-ups wait for their parents (its format has sessions): request i is due at t0 +
    offset_i, and a follow-up not before its parent's answer has ended (then at once). It makes its own requests,
    as sessions.Sessions does (RequestMaker asks due_turns and tells finished); session = its root's index + 1,
    turn = the file's."""

    def __init__(self, offsets: Iterator[int], after: Sequence[int], total: int | None, label: str):
        super().__init__(offsets, total, label)
        self.after = after
        self.users = 1  # RequestMaker.set_users sets it; a trace has no users
        self._released = 0  # rows whose own time has come
        self._ready: list[tuple[int, int]] = []  # (due ns, index), a heap
        self._waiting: dict[int, list[_Turn]] = {}  # parent index → follow-ups whose time came before its end
        self._ended: dict[int, int] = {}  # index → when its answer ended
        self._root: dict[int, int] = {}
        self._flight: dict[int, int] = {}  # request id → index

    def describe(self) -> str:
        return f"open loop, {self.label}, follow-ups after their parents' answers"

    def _parent(self, i: int) -> int:
        n = len(self.after)
        p = self.after[i % n]
        return -1 if p < 0 else p + (i // n) * n

    def _release(self, now_ns: int) -> None:
        assert self._t0 is not None
        while (self._next is not None and self._t0 + self._next <= now_ns
               and (self.total is None or self._released < self.total)):
            i, due = self._released, self._t0 + self._next
            self._released += 1
            self._next = next(self._offsets, None)
            p = self._parent(i)
            self._root[i] = self._root.get(p, p) if p >= 0 else i
            if p < 0:
                heapq.heappush(self._ready, (due, i))
            elif p in self._ended:
                heapq.heappush(self._ready, (max(due, self._ended[p]), i))
            else:
                self._waiting.setdefault(p, []).append(_Turn(i, due))

    def due_turns(self, now_ns: int, workload: Workload, max_tokens: int) -> list[DueTurn]:
        if self._t0 is None:
            self._t0 = now_ns
        self._release(now_ns)
        out: list[DueTurn] = []
        while self._ready and self._ready[0][0] <= now_ns and not self.exhausted():
            due, i = heapq.heappop(self._ready)
            prompt, n = request_for(workload, i, max_tokens)
            turn = workload.turn_at(i) if isinstance(workload, Dataset) else 1
            out.append(TraceTurn(due, prompt, n, self._root[i] + 1, turn, "", [], 0, i))
            self.issued += 1
        return out

    def sent(self, request_id: int, turn: DueTurn) -> None:
        assert isinstance(turn, TraceTurn)
        self._flight[request_id] = turn.index

    def finished(self, request_id: int, answer: str | None, t_done_ns: int) -> None:
        i = self._flight.pop(request_id, None)
        if i is None:
            return
        self._ended[i] = t_done_ns
        for w in self._waiting.pop(i, []):
            heapq.heappush(self._ready, (max(w.due_ns, t_done_ns), w.index))

    def exhausted(self) -> bool:
        if self.total is not None:
            return self.issued >= self.total
        return self._next is None and not self._ready and not self._waiting

    def next_wakeup_ns(self) -> int | None:
        if self.exhausted() or self._t0 is None:
            return None
        times = [self._ready[0][0]] if self._ready else []
        if self._next is not None and (self.total is None or self._released < self.total):
            times.append(self._t0 + self._next)
        return min(times, default=None)

    def resume(self, now_ns: int) -> None:
        """After a pause: the rows still to come move on by it (Schedule.resume); ready ones are due now."""
        super().resume(now_ns)
        self._ready = [(max(d, now_ns), i) for d, i in self._ready]
        heapq.heapify(self._ready)

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        raise TypeError("a trace's sessions make their own requests: RequestMaker asks due_turns()")


__all__ = ["Arrivals", "IndexedArrivals", "TurnArrivals", "DueTurn", "ArrivalSpec", "Schedule", "TraceSessions",
           "parse_arrivals", "lateness_figures", "client_wait_figures", "Lateness", "ClientWait", "realised_rate", "LATE_MS"]
