"""More than one client machine (docs/design/client-machines.md): one seeded schedule split across N clients
(`bench --segment i/N`), started together at a wall-clock time (`--start-at`), and a check of this client's
clock against the server's (its HTTP `Date` header), so the clients' runs can be combined as one load.

- **Segment**: client i of N takes the requests whose index in the schedule is ≡ i − 1 (mod N), round robin,
  each at its scheduled offset and with its request id, prompt and lengths: the N clients together send
  exactly what one client would have sent, and each spreads its share over the whole span.
- **Start**: the first load's time zero is the asked instant on this client's clock (perf_counter, mapped
  from the wall clock once, at start); nothing is sent before it.
- **Clock check**: machine/clock.py's `clock_check` reads the server's `Date` (whole seconds) back to back and
  brackets the moment it ticks (`offset_from_ticks`, here), so the server's clock minus this client's is known to
  about one round trip.
"""
from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from measure.core.arrivals import Arrivals, IndexedArrivals
from measure.core.lines import ClockCheck
from measure.core.records import RequestRecord
from measure.core.workload import ClosedLoop

NS = 1_000_000_000
CLOCK_WARN_S = 0.05  # an offset known to be larger than this is said: clients that far apart do not start together
PAST_S = 1.0  # a --start-at further in the past than this is refused


def parse_segment(text: str) -> tuple[int, int]:
    """'i/N' → (i, N), 1 ≤ i ≤ N. ValueError: one line."""
    a, sep, b = (text or "").strip().partition("/")
    try:
        i, n = int(a), int(b)
    except ValueError:
        raise ValueError(f"--segment {text!r}: write i/N, e.g. 1/2 (this is client 1 of 2)") from None
    if not sep or not (1 <= i <= n):
        raise ValueError(f"--segment {text!r}: i runs 1 … N (client i of N clients), e.g. 1/2 and 2/2")
    return i, n


def parse_start_at(text: str, now: float | None = None) -> float:
    """An ISO time (local unless it names its zone: Z or +02:00) or unix seconds → unix seconds. ValueError
    (one line) for anything else, or a time more than PAST_S in the past."""
    t = (text or "").strip()
    try:
        v = float(t)
    except ValueError:
        try:
            v = datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00")).timestamp()
        except ValueError:
            raise ValueError(f"--start-at {text!r}: give an ISO time (2025-06-01T14:30:00, local unless it names "
                             "its zone: …Z or …+02:00) or unix seconds (1748788200), the same on every client") from None
    if not math.isfinite(v):
        raise ValueError(f"--start-at {text!r}: not a time")
    now = time.time() if now is None else now
    if v < now - PAST_S:
        raise ValueError(f"--start-at {text}: that was {now - v:.0f} s ago (more than {PAST_S:g} s in the past); "
                         "give a time ahead of now, the same on every client")
    return v


def perf_ns_at(unix_s: float) -> tuple[int, dict[str, Any]]:
    """The perf_counter_ns reading that corresponds to wall-clock `unix_s` on this machine, and the anchor it
    was mapped with ({unix, perf_ns}: read together, the perf reading the mean of one before and one after)."""
    p0 = time.perf_counter_ns()
    u = time.time()
    p1 = time.perf_counter_ns()
    perf = (p0 + p1) // 2
    return perf + round((unix_s - u) * NS), {"unix": u, "perf_ns": perf}


def deal(weights: list[int], total: int) -> list[int]:
    """The client (1-based) of each of `total` requests in schedule order, dealt so that every prefix of the
    schedule is shared by weight within one request (docs/design/ray.md "Shares"). Each turn, of the clients not
    ahead of their share (taken × Σw ≤ dealt × w), the one whose next request falls due first at its share
    ((taken + 1) ÷ w) takes it; a tie goes to the smaller weight (the one less ahead of its share once it takes the
    request), then to the first. Client i takes wᵢ of every run of Σw requests, spread through it (2,1,1 → 1 2 3 1
    1 2 3 1 …); equal weights deal plain round robin (index ≡ i − 1 mod N). Smooth round robin alone strays further
    on many clients: 295 over 1,1,1,1,6,6,6,6,6 gave a weight-1 client 1.06 requests more than its share (found by
    Hypothesis). The deal repeats every Σw requests, so one run of Σw shows a list's worst prefix: every list of 1–9
    clients of weights 1–6 (each order up to 6 clients, twelve orders of more) stays within 0.96 of its share
    (6,1,6,6,6,6,6,6,6 at 16 requests; no proof past them)."""
    if not weights or min(weights) < 1:
        raise ValueError(f"weights {weights}: one whole number ≥ 1 a client")
    whole = sum(weights)
    due_step = [math.lcm(*weights) // w for w in weights]  # (taken + 1) ÷ w in whole units: (taken + 1) × this
    taken = [0] * len(weights)
    out = []
    for dealt in range(total):
        # someone is never ahead: Σ taken × Σw = dealt × Σw = Σ dealt × w
        behind = [i for i, w in enumerate(weights) if taken[i] * whole <= dealt * w]
        j = min(behind, key=lambda i: ((taken[i] + 1) * due_step[i], weights[i], i))
        taken[j] += 1
        out.append(j + 1)
    return out


def split(total: int, weights: Sequence[int]) -> list[list[int]]:
    """The one split of a load over clients (docs/design/client-machines.md): the indices 0 … total − 1 (of a schedule's
    requests, a closed loop's users, B streams) dealt over len(weights) clients, part p the indices client p + 1
    takes, in order. Equal weights: round robin (part p: p, p + N, p + 2N …); else `deal`'s weighted deal
    (every prefix within one request of its share). Every index is in exactly one part. Client processes
    (sources/http_pool.py), Ray client actors (control/bench/cluster.py, sources/ray_clients.py) and --segment
    (Segment) all split by it."""
    if not weights or min(weights) < 1:
        raise ValueError(f"weights {list(weights)}: one whole number ≥ 1 a client")
    n = len(weights)
    if len(set(weights)) == 1:
        return [list(range(p, total, n)) for p in range(n)]
    parts: list[list[int]] = [[] for _ in weights]
    for idx, owner in enumerate(deal(list(weights), total)):
        parts[owner - 1].append(idx)
    return parts


def shares(total: int, weights: Sequence[int]) -> list[int]:
    """How many of `total` each client takes in `split`: 5 over weights 2,1,1 → 3,1,1."""
    return [len(part) for part in split(total, weights)]


ArrivalsT = TypeVar("ArrivalsT", bound=Arrivals)  # wrap gives back what it was given, or a Segment of it


class Segment(IndexedArrivals):
    """Client i of n's share of one finite open-loop schedule (an arrivals.Schedule, or anything with its
    due() interface and a total): the requests whose index ≡ i − 1 (mod n), each due at t0 + its offset in
    the whole schedule. `t0_ns` (the asked start on this clock) anchors it; else t0 is the first due() call.
    due_indexed() gives each request's index in the whole schedule (the dispatcher takes the request id,
    prompt and lengths from it); full_total is the whole schedule's count."""

    full_total: int  # a segment's whole schedule is finite

    def __init__(self, inner: Arrivals, i: int = 1, n: int = 1, t0_ns: int | None = None,
                 weights: list[int] | None = None):
        if isinstance(inner, ClosedLoop) or inner.total is None:
            raise ValueError("a segment splits a finite open-loop schedule (bench --rate / --arrivals / trace)")
        offsets = inner.due(0, 0) + inner.due(2**62, 0)  # the whole schedule, from its time zero
        self.i, self.n = i, n
        mine = split(len(offsets), weights or [1] * n)[i - 1]  # unequal clients (bench --ray … --weights): weighted
        self._own = [(idx, offsets[idx]) for idx in mine]
        self.full_total = len(offsets)
        self.total = len(self._own)
        self.issued = 0
        self._t0 = t0_ns
        self._inner_label: str = inner.describe()

    def share(self, j: int, m: int, t0_ns: int | None = None) -> Segment:
        """Part j of m of this segment (its requests at positions ≡ j − 1 mod m), each keeping its index in
        the whole schedule and its offset: one client's processes (sources/http_pool.py) split it again, all
        from this segment's start where it has one (--start-at), else from `t0_ns`."""
        out = Segment.__new__(Segment)
        out.i, out.n = self.i, self.n
        out._own = [self._own[x] for x in split(len(self._own), [1] * m)[j - 1]]
        out.full_total, out.total, out.issued = self.full_total, len(out._own), 0
        out._t0 = t0_ns if self._t0 is None else self._t0
        out._inner_label = self._inner_label
        return out

    def describe(self) -> str:
        share = f", segment {self.i}/{self.n}: {self.total} of its {self.full_total} requests" if self.n > 1 else ""
        return self._inner_label + share

    def exhausted(self) -> bool:
        return self.issued >= self.total

    def due_indexed(self, now_ns: int, outstanding: int) -> list[tuple[int, int]]:
        if self._t0 is None:
            self._t0 = now_ns
        out = []
        while self.issued < self.total and self._t0 + self._own[self.issued][1] <= now_ns:
            idx, off = self._own[self.issued]
            out.append((idx, self._t0 + off))
            self.issued += 1
        return out

    def due(self, now_ns: int, outstanding: int) -> list[int]:
        return [t for _, t in self.due_indexed(now_ns, outstanding)]

    def next_wakeup_ns(self) -> int | None:
        if self.exhausted() or self._t0 is None:
            return None
        due: int = self._t0 + self._own[self.issued][1]
        return due

    def resume(self, now_ns: int) -> None:
        """After a pause the rest moves on by the pause (as arrivals.Schedule does)."""
        if self._t0 is not None and not self.exhausted():
            self._t0 = max(self._t0, now_ns - self._own[self.issued][1])


@dataclass
class ClientShare:
    """What --segment and --start-at do to a bench's first load (`wrap`, called by the sweep with each load's
    arrivals): an open loop becomes this client's Segment, anchored at t0; a closed loop's users start at t0.
    Later loads are left alone (a segment is one load: the CLI refuses more than one cell or rep)."""

    segment: tuple[int, int] = (1, 1)
    t0_ns: int | None = None
    used: bool = False
    weights: list[int] | None = None  # unequal shares (bench --ray … --weights): Segment's weighted deal
    made: Segment | None = None  # the segment wrap made (its progress: issued of total)

    def wrap(self, arrivals: ArrivalsT) -> ArrivalsT | Segment:
        if self.used:
            if self.segment[1] > 1:
                raise ValueError("--segment splits one load: one cell, one rep")
            return arrivals
        self.used = True
        if isinstance(arrivals, ClosedLoop):
            if self.segment[1] > 1:
                raise ValueError("--segment splits an open-loop schedule, not a closed loop")
            arrivals.start_ns = self.t0_ns
            return arrivals
        if self.segment == (1, 1) and self.t0_ns is None:
            return arrivals
        self.made = Segment(arrivals, *self.segment, t0_ns=self.t0_ns, weights=self.weights)
        return self.made


# ---- the clock check ---------------------------------------------------------------------------------

class Tick(NamedTuple):
    """One answer of the clock check: its local send and receive times (s) and the server's Date in whole unix
    seconds."""

    sent: float
    received: float
    date: int


def offset_from_ticks(samples: list[Tick]) -> tuple[float, float] | None:
    """(server clock − this clock, ± bound) in s from answers (Tick: local send time, local receive time, the
    server's Date in whole unix seconds). Each answer says the server read D … D + 1 while it was between send
    and receive: θ ∈ [D − recv, D + 1 − send]. (Two answers whose Dates differ put the tick to the later Date D'
    between the earlier's send and the later's receive, θ ∈ (D' − recv', D' − send): already inside the two
    answers' own bounds, since D' ≥ D + 1 in whole seconds.) The offset is the middle of the intersection; None
    when the answers contradict each other (a Date cached, or a clock stepped)."""
    lo, hi = -math.inf, math.inf
    for s, r, d in samples:
        lo, hi = max(lo, d - r), min(hi, d + 1 - s)
    if not samples or lo > hi:
        return None
    return (lo + hi) / 2, (hi - lo) / 2


def describe_clock(c: ClockCheck | None) -> str:
    """One line for the bench's output: the offset and what it means."""
    if c is None:
        return "clock: not checked"
    if c.offset_s is None:
        return f"clock: not checked against the server ({c.why})"
    off, bound = c.offset_s, c.bound_s or 0.0
    how = (f"within {bound * 1e3:.1f} ms of" if abs(off) <= bound else
           f"{abs(off) * 1e3:.1f} ± {bound * 1e3:.1f} ms {'ahead of' if off > 0 else 'behind'}")
    line = f"clock: the server's clock is {how} this client's ({c.samples} reads of its Date header)"
    if abs(off) - bound > CLOCK_WARN_S:
        line += (f"; more than {CLOCK_WARN_S * 1e3:.0f} ms: clients whose clocks differ this much do not start "
                 "together at --start-at; set the clocks (NTP) or expect the offset in the combined run")
    return line


def start_lateness_ms(t0: int | None, arrivals: str | None, records: Iterable[RequestRecord]) -> float | None:
    """How late a client's first request went out against what its start asked (`t0`: its header's start_perf_ns;
    `arrivals`: its header's, None for a closed loop): open loop, its send − its scheduled time (t0 + its offset);
    closed loop, its send − t0. None without --start-at."""
    recs = [r for r in records if r.t_submitted_ns]
    if t0 is None or not recs:
        return None
    first = min(recs, key=lambda r: r.t_submitted_ns)
    ref: int = first.t_scheduled_ns if arrivals else t0
    return (first.t_submitted_ns - ref) / 1e6


__all__ = ["parse_segment", "parse_start_at", "perf_ns_at", "Segment", "ClientShare",
           "Tick", "offset_from_ticks", "describe_clock", "deal", "split", "start_lateness_ms", "CLOCK_WARN_S"]
