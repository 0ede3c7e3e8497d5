"""The truth matrix (docs/design/truth-matrix.md): the combinations a user can make, run against engines whose figures follow
from their schedule, with invariants asserted on every cell.

The null engine (process fleet, instances and batch) and the null server (HTTP: one and two endpoints, one and two
client processes) serve every request on a fixed schedule (TTFT, then one token every ITL), so the truth of each
figure follows from the load's schedule alone. A cell is one combination: source × load (closed users, open
constant / Poisson / gamma / ramp, a trace's times, multi-turn sessions) × client processes × endpoints × segments
(two clients, each its share of one schedule from one start, then `report --combine`), plus `--find users|rate`
searches and live K/B steps with a warmup, recorded, reported. Invariants checked on every cell:

- every request of the schedule sent exactly once, with its own prompt (request i: the workload's i-th) and length;
- the users in flight are the users asked (a closed loop, sessions);
- the labels are what ran: K (endpoints or workers), B, users, client processes;
- the arrival rate (the records' and the cell's) is the rate asked, the matrix's own constant, to 1e-6;
- every figure (tok/s, goodput, attainment, concurrency, TTFT p50/p99 and the engine's, TPOT, ITL, E2E, lateness,
  the client's wait) within its measured tolerance of the truth its schedule implies (`serve`);
- segments combined = every client's requests pooled on one clock;
- a --find search against a server without a capacity limit never reports a knee inside its range;
- live steps with a warmup: one step-table row per level settled; the recording's report = the dashboard's rows;
- the machine's other work: recorded for local engines only, named exactly from a quarter of the cores.

    python benchmarks/truth_matrix.py            # every combination; ends with one JSON line
    python benchmarks/truth_matrix.py --cover 7  # make test's sample drawn with seed 7 (tests/integration/test_truth_matrix.py)
    python benchmarks/truth_matrix.py --sample 40 --seed 11 --only bench --spread   # the tolerances' evidence

Here the combinations are enumerated; the test draws its sample afresh each run (`cover`). The tolerances are stated
once, below, with the clean runs they come from in docs/design/truth-matrix.md. A cell runs once: no retries.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NS = 1_000_000_000
TTFT_MS = 20.0  # the null engine's and the null server's schedule
ITL_MS = 2.0  # the mean gap between tokens: the gaps vary by position (GAPS), as a real engine's do
GAP_CV, FIRST_GAP_MS, GAP_SEED = 0.5, 6.0, 0  # drawn with engines/null.gap_schedule: 6.0 1.77 2.03 3.25 1.93 1.4 2.4
TOKENS = 8  # max_tokens of every request (EOS ignored)
# the null servers' SSE shapes, one a server (real servers send each): usage in every chunk then a usage-only last one
# (vLLM's continuous_usage_stats); usage only in a last chunk of its own with chunks carrying no token besides
# (OpenAI's include_usage, llama-server's empty deltas); no usage at all, with empty chunks
SHAPES = (("continuous", ()), ("final", ("--empty-chunks",)), ("none", ("--empty-chunks",)))
RATE = 40.0  # constant, Poisson, gamma: req/s asked
RAMP = (20.0, 60.0)  # ramp: req/s at its start and its end (mean 40)
TRACE_GAPS = (0.01, 0.02, 0.05)  # a trace's gaps, drawn with random.Random(5)
# The tolerances, each from the spread of clean runs on this machine (docs/design/truth-matrix.md gives the numbers). A
# figure's truth is worked out twice, at no harness cost and at the most this source's clean runs showed
# (OVERHEAD_S: seconds on each request, and on each ITL); the figure must lie between the two, widened by TOL:
# a time by TOL[name] ms above (TOL["below"] below); a rate by the share TOL["rate"] (concurrency: TOL["concurrency"])
# either side. A tail (a p99 of 12 requests is about their maximum: one stall moves it) and a rate (a stall
# stretches the span) are widened also by the longest stall the cell's StallWatch saw, in ms and as a share of the
# cell's span: a busy machine is said and measured, never retried.
OVERHEAD_S = {"fleet": (0.003, 0.0), "batch": (0.003, 0.0015), "http": (0.003, 0.0), "pool": (0.008, 0.0)}
TOL = {"rate": 0.05, "concurrency": 0.10, "below": 1.0, "ttft_p50": 15.0, "e2e_p50": 15.0, "ttft_engine_p50": 8.0,
       "tpot_p50": 1.5, "itl_p50": 3.5, "tail": 30.0, "lateness_p50": 5.0}
RATES = ("output_throughput", "goodput_tps", "goodput_rps", "achieved_concurrency")
TAILS = ("ttft_p99", "e2e_p99", "tpot_p99", "itl_p99", "lateness_p99", "wait_max")
STALL_TICK_S, STALL_MS = 0.002, 20.0  # the stall detector's sleep, and the oversleep it calls a stall
# tests/integration/test_ray_clients.py compares a run on Ray's actors with one run here (two measured runs, not a run and its
# truth) with these, the matrix's tolerances before issue 43; the matrix itself no longer uses them
RATE_TOL, TTFT_TOL_MS = 0.30, 25.0
SOURCES = ("fleet", "batch", "http", "pool")
LOADS = ("closed", "constant", "poisson", "gamma", "ramp", "trace", "sessions")
OPEN = ("constant", "poisson", "gamma", "ramp", "trace")


@dataclass(frozen=True)
class Combo:
    """One cell of the matrix."""

    source: str  # fleet | batch | http | pool
    load: str  # LOADS
    users: int = 2  # closed loop and sessions: users; open loops: ignored
    b: int = 1  # streams per endpoint (http, pool), sequences per engine (batch)
    k: int = 1  # workers (fleet); endpoints in use (http, pool: 1 or 2)
    procs: int = 1  # client processes (pool: 2)
    segments: int = 1  # 2: two clients, each its share of one open-loop schedule, combined
    cap: bool = False  # http open loop: --b asked as the client's cap
    requests: int = 12

    def name(self) -> str:
        parts = [self.source, self.load, f"K={self.k}", f"B={self.b}"]
        if self.load in ("closed", "sessions"):
            parts.append(f"users={self.users}")
        if self.procs > 1:
            parts.append(f"procs={self.procs}")
        if self.segments > 1:
            parts.append(f"segments={self.segments}")
        if self.cap:
            parts.append("capped")
        return " ".join(parts)

    def valid(self) -> bool:
        http = self.source in ("http", "pool")
        if self.load == "sessions" and (not http or self.procs > 1 or self.segments > 1):
            return False  # sessions run against a server, in one client process, one client
        if self.segments > 1 and self.load not in OPEN:
            return False  # a segment splits an open-loop schedule
        if self.cap and (not http or self.load not in OPEN):
            return False
        if self.source == "pool" and self.procs < 2:
            return False
        if self.source != "pool" and self.procs > 1:
            return False
        if not http and self.k > 2:
            return False
        if self.source == "batch" and self.b < 2:
            return False
        if self.source == "fleet" and self.b != 1:
            return False
        return True


def all_combos() -> list[Combo]:
    out = []
    for source, load, users, b, k, segments, cap in itertools.product(
            SOURCES, LOADS, (1, 3), (1, 2, 4), (1, 2), (1, 2), (False, True)):
        c = Combo(source, load, users if load in ("closed", "sessions") else 1, b, k, 2 if source == "pool" else 1,
                  segments, cap)
        if c.valid() and c not in out:
            out.append(c)
    return out


def cover(seed: int, extra: int = 0) -> list[Combo]:
    """`make test`'s sample, drawn afresh from `seed`: one cell of each load kind (a closed loop of users ≥ 2 not
    split over a pool's processes, constant, Poisson, gamma, ramp, trace, sessions), each source among them (fleet, batch, http, pool), then
    `extra` cells drawn from the rest of the matrix."""
    rng = random.Random(seed)
    pool = [c for c in all_combos() if not (c.load in ("closed", "sessions") and c.users < 2)]
    loads = list(LOADS)
    rng.shuffle(loads)
    need = set(SOURCES)
    out: list[Combo] = []
    for load in loads:
        # the closed loop from workload.ClosedLoop (a pool's processes each run their share of the users instead)
        mine = [c for c in pool if c.load == load and not (load == "closed" and c.source == "pool")]
        fresh = [c for c in mine if c.source in need]
        # a source still missing, where this load can have one (sessions: http or pool; the others: any)
        pick = rng.choice(fresh or mine)
        out.append(pick)
        need.discard(pick.source)
    while need:  # (seven loads, four sources: every draw covers them all, but say so where one did not)
        out.append(rng.choice([c for c in pool if c.source == need.pop()]))
    if not any(queues(c) for c in out):  # and one whose requests wait their turn unevenly: TTFT p99 ≠ its p50
        out.append(rng.choice([c for c in pool if queues(c)]))
    for cls in CLASSES:  # stratified: a cell where each figure class can go wrong, whatever the draw above
        if not any(cls in classes(c) for c in out):
            out.append(rng.choice([c for c in pool if cls in classes(c)]))
    rest = [c for c in all_combos() if c not in out]
    return out + rng.sample(rest, min(extra, len(rest)))


# The figure classes, each with the cells where it can go wrong (`classes`): every cover draws one of each.
CLASSES = ("percentiles", "itl-gaps", "usage-continuous", "usage-final", "usage-none", "users-mean", "poisson",
           "gamma", "ramp", "bandwidth-instances", "bandwidth-batch", "bandwidth-http", "two-endpoints", "tail",
           "segments")


def classes(c: Combo) -> list[str]:
    """The figure classes this cell can catch a bug in: percentiles (every cell: recomputed with numpy); ITL's
    gaps (an engine whose gaps vary, the first unlike the rest: not the batch's steps); tokens against each SSE
    shape's usage (the null servers it uses); users in flight on average (an HTTP closed loop of at least two users
    more than streams: requests queue in the client); the arrival process (Poisson, gamma, ramp); the bandwidth product by mode; figures over two
    endpoints; a tail (TTFT p99 ≠ p50); segments combined."""
    http = c.source in ("http", "pool")
    out = ["percentiles"]
    if c.source != "batch":
        out.append("itl-gaps")
    if http:
        r = shape_of(c)
        out += [f"usage-{SHAPES[(r + i) % len(SHAPES)][0]}" for i in range(c.k)]
    n = slots(c)
    # two queued at once, in the HTTP source's own loop: a queue counted twice holds a user back (users in flight
    # 1.95 against 2.59–2.75; one queued on 2 slots of 3 users did not, nor the fleet's K=1, whose workers take
    # their requests from the queue at once)
    if c.load == "closed" and c.source == "http" and n is not None and c.users >= n + 2:
        out.append("users-mean")
    if c.load in ("poisson", "gamma", "ramp"):
        out.append(c.load)
    out.append("bandwidth-" + ("http" if http else "batch" if c.source == "batch" else "instances"))
    if http and c.k == 2:
        out.append("two-endpoints")
    if queues(c):
        out.append("tail")
    if c.segments > 1:
        out.append("segments")
    return out


def queues(c: Combo) -> bool:
    """Requests of this cell wait their turn unevenly in its truth: its TTFT p99 lies ≥ 10 ms above its p50 (a
    closed loop's users above its slots, a constant rate or a trace on too few slots; worked out where the schedule
    is known before it runs)."""
    if c.load not in ("closed", "sessions", "constant", "trace") or c.segments > 1:
        return False
    offsets = [i / RATE for i in range(c.requests)] if c.load == "constant" else trace_times(c.requests)
    f = truth_figures(serve(c, offsets, 0.0), gaps_s(c))
    return f["ttft_p99"] - f["ttft_p50"] >= 10.0


@dataclass
class Result:
    combo: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # each figure against its truth: ms above the truth at OVERHEAD_S (below the one at no cost, negative), or the
    # ratio − 1 for a rate (benchmarks/truth_matrix.py --spread prints them: where the tolerances come from)
    spread: dict[str, float] = field(default_factory=dict)
    stall_ms: Callable[[], float] = lambda: 0.0  # the longest stall the cell's StallWatch has seen so far
    stall_reset: Callable[[], None] = lambda: None  # the load begins: a stall while the source started is not its

    def check(self, ok: bool, what: str) -> None:
        self.checked += 1
        if not ok:
            self.failures.append(what)


# ---- the engines whose schedule is the truth -------------------------------------------------------------
def gaps_s(c: Combo | None = None) -> list[float]:
    """The gaps between a request's tokens (s) the cell's engine keeps: drawn by position (a first gap unlike the
    rest) on the null server and the null engine; the batch's steps are ITL_MS each."""
    if c is not None and c.source == "batch":
        return [ITL_MS / 1e3] * (TOKENS - 1)
    from engines.null import gap_schedule

    return gap_schedule(ITL_MS / 1e3, TOKENS, first_s=FIRST_GAP_MS / 1e3, cv=GAP_CV, seed=GAP_SEED)


def gap_args() -> tuple[str, ...]:
    return ("--itl-cv", str(GAP_CV), "--first-gap-ms", str(FIRST_GAP_MS), "--gap-seed", str(GAP_SEED))


def shape_of(c: Combo) -> int:
    """Which server (SHAPES) a cell's first endpoint is: the cells of one kind spread over every SSE shape."""
    import zlib

    return zlib.crc32(c.name().encode()) % len(SHAPES)


class NullServers:
    """Null servers, one per SSE shape (SHAPES), each in its own process on loopback (the client's loop does not
    share their GIL)."""

    def __init__(self, n: int = len(SHAPES)):
        from engines.null_server import spawn

        self.procs: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        try:
            for i in range(n):
                usage, more = SHAPES[i % len(SHAPES)]
                proc, url = spawn(TTFT_MS, ITL_MS, "--usage", usage, *more, *gap_args())
                self.procs.append(proc)
                self.urls.append(url)
        except RuntimeError:
            self.close()
            raise

    def for_cell(self, c: Combo) -> list[str]:
        """The cell's endpoints: K of them, from its shape's server on."""
        r = shape_of(c)
        return (self.urls[r:] + self.urls[:r])[:c.k]

    def close(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def _workload() -> Any:
    from presets import Workload

    return Workload("truth", "24 distinct prompts", prompts=tuple(f"prompt {i}: " + "word " * (i % 7 + 1)
                                                                    for i in range(24)))


def _meta(mode: str) -> Any:
    from measure.core.records import RunMeta

    return RunMeta(engine="null", model="null", model_bytes=1_000_000, mode=mode, simulated=True)


def _source(c: Combo, servers: NullServers | None) -> Any:
    if c.source in ("fleet", "batch"):
        from engines.base import EngineSpec
        from measure.sources.fleet import Fleet

        spec = EngineSpec("null", "", threads=1, ctx=1024, options={"ttft_s": TTFT_MS / 1e3, "itl_s": ITL_MS / 1e3,
                                                           "itl_cv": GAP_CV, "first_gap_s": FIRST_GAP_MS / 1e3,
                                                           "gap_seed": GAP_SEED})
        src = Fleet(spec, _meta("instances"), k=c.k, threads=1, events=False, b_cap=max(c.b, 1))
        src.start(timeout=120)
        return src
    assert servers is not None
    urls = servers.for_cell(c)
    kw: dict[str, Any] = dict(b=c.b, events=False, endpoint="chat" if c.load == "sessions" else "completions")
    if c.cap:
        kw["cap_open_loop"] = True
    if c.source == "pool":
        from measure.sources.http_pool import HttpPool

        # as `bench --b 1,B` makes it: sized for the largest B, started at the first (a sweep's cell at B=1 runs
        # first, _one)
        src = HttpPool(urls, _meta("http"), procs=c.procs, **dict(kw, b=1))
    else:
        from measure.sources.http import HttpSource

        src = HttpSource(urls, _meta("http"), **kw)
    src.start()
    return src


def _arrivals(c: Combo) -> Any:
    from measure.core.arrivals import ArrivalSpec

    if c.load == "constant":
        return ArrivalSpec("constant", rate=RATE)
    if c.load == "poisson":
        return ArrivalSpec("poisson", rate=RATE, seed=3)
    if c.load == "gamma":
        return ArrivalSpec("gamma", rate=RATE, burstiness=0.5, seed=3)
    if c.load == "ramp":
        return ArrivalSpec("ramp", ramp=RAMP, seed=3)
    if c.load == "trace":
        return ArrivalSpec("trace", times_s=trace_times(c.requests))
    return None


def _cfg(c: Combo, **kw: Any) -> Any:
    from measure.control.bench.sweep import SweepConfig
    from measure.core.sessions import SessionSpec
    from presets import slo

    mode = "http" if c.source in ("http", "pool") else ("batch" if c.source == "batch" else "instances")
    return SweepConfig(ks=[c.k], bs=[c.b], mode=mode, requests=c.requests, max_tokens=TOKENS,
                       users=c.users if c.load in ("closed", "sessions") else None,
                       arrivals=_arrivals(c), sessions=SessionSpec(2) if c.load == "sessions" else None,
                       slo=slo("interactive"), cell_timeout_s=120.0, **kw)


# ---- the truth of a schedule ----------------------------------------------------------------------------
# The rates asked are the matrix's own constants (RATE, RAMP, TRACE_GAPS): the realised arrival rate is checked
# against these, never against the records' own schedule (an open loop planted to send at half the rate asked fails).
def trace_times(n: int) -> list[float]:
    rng = random.Random(5)
    times, t = [], 0.0
    for _ in range(n):
        times.append(round(t, 4))
        t += rng.choice(TRACE_GAPS)
    return times


def asked_rate(c: Combo) -> float | None:
    """The arrival rate the cell asks (req/s, (n − 1) ÷ first → last): every open-loop schedule is conditioned on
    its count (core/arrivals.py: the gaps scaled to span (n − 1) ÷ rate), so its realised rate is this, exactly."""
    if c.load in ("constant", "poisson", "gamma"):
        return RATE
    if c.load == "ramp":
        return sum(RAMP) / 2
    if c.load == "trace":
        t = trace_times(c.requests)
        return (len(t) - 1) / t[-1]
    return None


@dataclass(frozen=True)
class Served:
    """One request as an engine that keeps the schedule exactly serves it (seconds from the first scheduled)."""

    sched: float
    start: float  # a slot (worker, sequence, client stream) took it
    first: float  # its first token
    done: float


def slots(c: Combo, engines: int = 1) -> int | None:
    """What serves at once: K workers (fleet), K × B sequences (batch) or client streams (http, pool); None where
    nothing bounds it (the null server, an open loop the client does not cap)."""
    if c.source in ("http", "pool") and c.load in OPEN and not c.cap:
        return None
    return engines * c.k * (1 if c.source == "fleet" else c.b)


def serve(c: Combo, offsets_s: list[float], o_s: float, itl_x: float = 0.0,
          engines: int = 1, stagger_s: float = 0.0) -> list[Served]:
    """The schedule served first come first served on `slots`, each request in o + TTFT + its gaps (each + itl_x,
    the harness's cost a gap) and its slot
    (and a closed loop's user) free o after its last token: o is the harness's cost on each request, spent one
    request at a time (the client's loop sends one request, then the next: a burst of arrivals waits its turn). An
    open loop at the offsets given; a closed loop (and sessions without think time) of min(U, n) users, each
    sending its next request when its last is done, the u-th first at u × stagger (users above the slots wait in
    turns that depend on how the slots' finishes fall: in step, one user of three waits a whole request; staggered
    by half of one, two wait half of one)."""
    import heapq

    ttft, tail = TTFT_MS / 1e3, sum(g + itl_x for g in gaps_s(c))
    cap = slots(c, engines)
    free: list[float] = []  # when each busy slot is free again
    out: list[Served] = []
    users = ([u * stagger_s for u in range(min(c.users, c.requests))] if c.load in ("closed", "sessions")
             else None)
    sender = 0.0  # when the client's loop is free to send the next request
    for i in range(c.requests):
        t = heapq.heappop(users) if users is not None else offsets_s[i]
        start = t
        if cap is not None and len(free) >= cap:
            start = max(t, heapq.heappop(free))
        sender = max(start, sender) + o_s
        first = sender + ttft
        done = first + tail
        if cap is not None:
            heapq.heappush(free, done + o_s)
        if users is not None:
            heapq.heappush(users, done + o_s)
        out.append(Served(t, start, first, done))
    return out


def pct(values: list[float], p: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), p))


def truth_figures(served: list[Served], gaps: list[float]) -> dict[str, float]:
    """Every figure of a cell, from the schedule served and each request's gaps between tokens (s; every request
    has the same): the figures the product must show (ms, tok/s, req/s), and users_mean, the users in flight
    (scheduled → done) on average over the span by Little's law."""
    t0 = min(s.sched for s in served)
    span = max(s.done for s in served) - t0
    n = len(served)
    ttft = [(s.first - s.sched) * 1e3 for s in served]
    e2e = [(s.done - s.sched) * 1e3 for s in served]
    wait = [(s.start - s.sched) * 1e3 for s in served]
    tpot = (served[0].done - served[0].first) / (TOKENS - 1) * 1e3
    tps = n * TOKENS / span
    return {"output_throughput": tps, "goodput_tps": tps, "goodput_rps": n / span,
            "achieved_concurrency": sum(s.done - s.start for s in served) / span,
            "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "e2e_p50": pct(e2e, 50), "e2e_p99": pct(e2e, 99),
            "ttft_engine_p50": TTFT_MS + (served[0].first - served[0].start - TTFT_MS / 1e3) * 1e3,
            "tpot_p50": tpot, "tpot_p99": tpot, "itl_p50": pct(gaps, 50) * 1e3, "itl_p99": pct(gaps, 99) * 1e3,
            "wait_p50": pct(wait, 50), "wait_max": max(wait), "users_mean": sum(s.done - s.sched for s in served) / span}


# ---- a stall detector: a busy machine is said, not retried --------------------------------------------------
class StallWatch:
    """A thread that sleeps STALL_TICK_S again and again while a cell runs and keeps the longest oversleep: how long
    this machine kept a runnable thread off its cores. A cell that fails says it beside its failures (a stalled
    machine, not a wrong figure, may be why); it still fails: the matrix never runs a cell twice."""

    def __init__(self) -> None:
        self.worst_ms = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(STALL_TICK_S)
            self.worst_ms = max(self.worst_ms, (time.perf_counter() - t - STALL_TICK_S) * 1e3)

    def reset(self) -> None:
        self.worst_ms = 0.0

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def note(self) -> str:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        stalled = "STALLED: " if self.worst_ms > STALL_MS else ""
        return (f"{stalled}this machine kept a thread off its cores for up to {self.worst_ms:.1f} ms during the cell "
                f"(load average {load:.1f} on {os.cpu_count()} cores)")


# ---- one cell --------------------------------------------------------------------------------------------
def run_combo(c: Combo, servers: NullServers | None) -> Result:
    res = Result(c.name())
    t0 = time.monotonic()
    with StallWatch() as watch:
        res.stall_ms, res.stall_reset = (lambda: watch.worst_ms), watch.reset
        try:
            if c.segments > 1:
                _segments(c, servers, res)
            else:
                _one(c, servers, res)
        except Exception as exc:  # noqa: BLE001 - a cell that crashes is a failure with its reason
            res.failures.append(f"crashed: {type(exc).__name__}: {exc}")
    if res.failures:
        res.failures.append(watch.note())
    res.spread["stall_ms"] = watch.worst_ms
    res.seconds = round(time.monotonic() - t0, 2)
    return res


def _one(c: Combo, servers: NullServers | None, res: Result) -> None:
    from measure.control.bench.sweep import run_sweep

    src = _source(c, servers)
    res.stall_reset()  # the source is up: the load's stalls from here
    cfg = _cfg(c)
    if c.source == "pool" and c.b > 1:
        cfg.bs = [1, c.b]  # the pool started at B=1, then its largest B
    try:
        cells, recs, src = run_sweep(src, _workload(), cfg, say=lambda m: None)
    finally:
        src.close()
    res.check(len(cells) == len(cfg.bs) and all(x.ok for x in cells),
              f"cells {[(x.b, x.status, x.reason) for x in cells]}")
    _check_cell(c, cells[-1], [r for r in recs if r.b == c.b], res)


def _check_cell(c: Combo, cell: Any, recs: list[Any], res: Result, engines: int = 1) -> None:
    """Every invariant of one cell. `engines`: how many copies of the source served the records (two clients run
    two local engines, or two sets of B client streams)."""
    _check_requests(c, recs, res)
    _check_span(cell, recs, res)
    _check_labels(c, cell, recs, res)
    _check_schedule(c, cell, recs, res)
    _check_figures(c, cell, recs, res, engines)
    _check_recompute(cell, recs, res)
    _check_tokens(recs, res)
    _check_users_mean(c, recs, res, engines)
    _check_process(c, recs, res)
    _check_bandwidth(c, recs, res)
    _check_other_work(c, cell, res)


def _check_other_work(c: Combo, cell: Any, res: Result) -> None:
    """The machine's other work over the cell (docs/design/wall.md "Threads beside other work"): local engines record
    the cores it kept busy (to 0.01, between 0 and the machine's cores) and name it, how many cores and the threads to
    keep, exactly where it reached OTHERS_SAID of the cores, in words written from the figure recorded; over HTTP
    nothing (a server on this machine is the client's other work), nor in two clients' records combined (segments:
    no one machine's figure). Whatever else runs beside the matrix, these hold."""
    from measure.core.roofline import OTHERS_SAID
    from measure.machine.probes import physical_cores

    m = cell.machine
    if c.source in ("http", "pool") or c.segments > 1:  # a combined cell pools two clients' records: no one machine's
        res.check(m.other_work_cores is None and m.other_work is None,
                  f"other work recorded over HTTP or for combined clients: {m.other_work_cores} cores, "
                  f"{m.other_work!r}")
        return
    x, cores = m.other_work_cores, physical_cores()
    res.check(x is not None and 0.0 <= x <= cores and round(x, 2) == x, f"other work {x} cores of {cores}")
    if x is not None:
        named = x >= OTHERS_SAID * cores
        res.check((m.other_work is not None) == named and (not named or str(m.other_work).startswith(
            f"{x:.1f} of {cores} cores")), f"other work {x} of {cores} cores said as {m.other_work!r}")


def _check_identities(recs: list[Any], res: Result) -> None:
    """Each request's figures against its own timestamps, exactly (1 µs; no noise enters an identity): TTFT = first
    token − schedule, TPOT · (n − 1) = last − first token, E2E = done − schedule, engine TTFT = first token − start,
    and its ITLs add up to the span of its distinct token times. A clock offset or a scale on one figure breaks them however the machine ran."""
    from measure.core import metrics as M

    bad: list[str] = []
    for r in recs:
        if r.error is not None or len(r.token_ns) < 2 or r.t_first_token_ns is None or r.t_done_ns is None:
            continue
        first, last, n = r.token_ns[0], r.token_ns[-1], len(r.token_ns)
        engine = () if r.t_started_ns is None else (
            ("engine ttft", M.ttft_engine(r), (r.t_first_token_ns - r.t_started_ns) / NS),)
        for name, got, want in (
                *engine,
                ("ttft", M.ttft(r), (r.t_first_token_ns - r.t_scheduled_ns) / NS),
                ("tpot·(n−1)", (M.tpot(r) or 0.0) * (n - 1), (last - first) / NS),
                ("e2e", M.e2e(r), (r.t_done_ns - r.t_scheduled_ns) / NS),
                ("Σ itl", float(sum(M.itl_gaps(r.token_ns))), (last - first) / NS)):
            if abs(got - want) > 1e-6:
                bad.append(f"request {r.request_id} {name} {got * 1e3:.3f} ms, its timestamps say {want * 1e3:.3f}")
    res.check(not bad, f"figures against each request's own timestamps: {len(bad)} off, e.g. {bad[:2]}")


def _check_span(cell: Any, recs: list[Any], res: Result) -> None:
    """The cell's tok/s against its records' own timestamps, exactly (1e-6): every token ÷ (the last done − the
    first scheduled request, docs/design/goodput.md). A span taken from elsewhere (the first token, the first send) moves it by
    less than the noise's ± 5 % on a short cell, and always by more than this."""
    done = [r.t_done_ns for r in recs if r.t_done_ns is not None]
    if not done or cell.output_throughput is None:
        return
    want = sum(len(r.token_ns) for r in recs) / ((max(done) - min(r.t_scheduled_ns for r in recs)) / NS)
    res.check(abs(cell.output_throughput - want) <= 1e-6 * want,
              f"tok/s {cell.output_throughput:.6f} against its records' tokens ÷ (last done − first scheduled) "
              f"{want:.6f}")


def _check_requests(c: Combo, recs: list[Any], res: Result) -> None:
    """Each request of the schedule sent once, with its own prompt and length; the users asked in flight."""
    from measure.core.datasets import prompt_for

    _check_identities(recs, res)

    wl = _workload()
    ids = sorted(r.request_id for r in recs)
    res.check(len(recs) == c.requests and ids == list(range(ids[0], ids[0] + c.requests)) if ids else False,
              f"every request sent once: {len(recs)} records of {c.requests}, ids {ids[:3]}…{ids[-3:]}")
    res.check(all(r.error is None for r in recs), f"errors: {[r.error for r in recs if r.error][:2]}")
    res.check(all(r.output_tokens == TOKENS == len(r.token_ns) for r in recs),
              f"lengths: {sorted({(r.output_tokens, len(r.token_ns)) for r in recs})} for max_tokens {TOKENS}")
    if c.load != "sessions" and ids:
        wrong = [(r.request_id - ids[0], r.prompt_id) for r in recs
                 if r.prompt_id != prompt_for(wl, r.request_id - ids[0]).prompt_id]
        res.check(not wrong, f"request i with the workload's i-th prompt: {len(wrong)} not, e.g. {wrong[:3]}")
    if c.load in ("closed", "sessions"):
        want = min(c.users, c.requests)
        peak = in_flight(recs)
        res.check(peak == want, f"users in flight {peak}, asked {want}")


def in_flight(recs: list[Any]) -> int:
    """The most requests in flight at once, scheduled → done (counted here, not with the product's function)."""
    ev = sorted([(r.t_scheduled_ns, 1) for r in recs if r.t_done_ns]
                + [(r.t_done_ns, -1) for r in recs if r.t_done_ns])
    now = peak = 0
    for _, d in ev:
        now += d
        peak = max(peak, now)
    return peak


def _check_labels(c: Combo, cell: Any, recs: list[Any], res: Result) -> None:
    """K, B, the endpoints and the client processes are what ran."""
    http = c.source in ("http", "pool")
    res.check(cell.k == c.k and cell.b == c.b, f"cell labelled K={cell.k} B={cell.b}, ran K={c.k} B={c.b}")
    res.check(all(r.b == c.b for r in recs), f"records' B {sorted({r.b for r in recs})}, ran {c.b}")
    if http:
        eps = {(r.extra or {}).get("endpoint", r.worker) for r in recs}
        used = min(c.k, len(recs))  # (one user's requests go to the endpoint with the fewest outstanding, in turn)
        res.check(len(eps) == used and all(r.k == c.k for r in recs),
                  f"endpoints: served by {len(eps)}, records say K={sorted({r.k for r in recs})}, asked {c.k}")
    else:
        workers = {(r.worker, r.pid) for r in recs}
        res.check(all(r.k == c.k for r in recs) and len(workers) <= c.k * (2 if c.segments > 1 else 1),
                  f"workers: {len(workers)} served, records say K={sorted({r.k for r in recs})}, ran {c.k}")
    if c.source == "pool":
        procs = {(r.extra or {}).get("proc") for r in recs}
        active = min(c.procs, c.b)
        want_p = min(active, c.users) if c.load == "closed" else active
        res.check(len(procs) == want_p, f"client processes that sent: {sorted(map(str, procs))}, expected {want_p}")
        res.check(cell.load.client_procs == want_p, f"the cell says {cell.load.client_procs} client processes, "
                  f"{want_p} sent")


def _check_schedule(c: Combo, cell: Any, recs: list[Any], res: Result) -> None:
    """An open loop's schedule is the one asked: its realised rate (the cell's and the records') = the rate asked,
    a constant rate's and a trace's every offset; the load generator on time (lateness)."""
    rate = asked_rate(c)
    sched = sorted(r.t_scheduled_ns for r in recs)
    if rate is not None and len(sched) > 1:
        got = (len(sched) - 1) / ((sched[-1] - sched[0]) / NS)
        res.check(abs(got / rate - 1) <= 1e-6, f"records' arrival rate {got:.4f} req/s, asked {rate:.4f}")
        cr = cell.load.arrival_rps
        res.check(cr is not None and abs(cr / rate - 1) <= 1e-6, f"the cell's arrival rate {cr} req/s, asked "
                  f"{rate:.4f}")
        want = ([i / RATE for i in range(len(sched))] if c.load == "constant" else
                trace_times(c.requests) if c.load == "trace" else None)
        if want is not None:
            off = max(abs((t - sched[0]) / NS - w) for t, w in zip(sched, want))
            res.check(off <= 1e-6, f"{c.load} schedule: an offset {off * 1e3:.3f} ms from the one asked")
    lp50, lp99 = cell.load.lateness.p50, cell.load.lateness.p99
    t50, t99 = TOL["lateness_p50"], tol_ms("lateness_p99", res)
    res.check(lp50 is not None and lp50 <= t50 and (lp99 or 0.0) <= t99,
              f"lateness p50 {lp50} ms, p99 {lp99} ms: the load generator late (truth 0; tolerance {t50:g} / "
              f"{t99:.1f} ms)")
    res.spread.update(lateness_p50=lp50 or 0.0, lateness_p99=lp99 or 0.0)
    own = sorted((r.t_submitted_ns - r.t_scheduled_ns) / 1e6 for r in recs if r.t_submitted_ns)
    res.check(not own or (lp50 is not None and abs(pct(own, 50) - lp50) <= 0.01),
              f"lateness p50 {lp50} ms, the records' {pct(own, 50) if own else None} ms")


def tol_ms(name: str, res: Result) -> float:
    """A time's tolerance above its truth, ms: its own, or a tail's plus the longest stall the cell saw."""
    return TOL["tail"] + res.stall_ms() if name in TAILS else TOL[name]


def _figures(c: Combo, cell: Any) -> dict[str, float | None]:
    r = cell.requests
    return {"output_throughput": cell.output_throughput, "goodput_tps": cell.goodput.tps,
            "goodput_rps": cell.goodput.rps, "achieved_concurrency": cell.achieved_concurrency,
            "ttft_p50": r.ttft.p50, "ttft_p99": r.ttft.p99, "e2e_p50": r.e2el.p50, "e2e_p99": r.e2el.p99,
            "ttft_engine_p50": r.ttft_engine.p50, "tpot_p50": r.tpot.p50, "tpot_p99": r.tpot.p99,
            "itl_p50": r.itl.p50, "itl_p99": r.itl.p99}


def _bounds(c: Combo, recs: list[Any], engines: int) -> tuple[dict[str, float], dict[str, float]]:
    """Each figure's truth at no harness cost and at the most this source's clean runs showed (OVERHEAD)."""
    t0 = min(r.t_scheduled_ns for r in recs)
    offsets = sorted((r.t_scheduled_ns - t0) / NS for r in recs)
    o_max, itl_x = OVERHEAD_S[c.source]
    d = TTFT_MS / 1e3 + sum(gaps_s(c))
    n = slots(c, engines)
    phases = (0.0, d / 4, d / 2) if c.load in ("closed", "sessions") and n is not None and c.users > n else (0.0,)
    runs = [truth_figures(serve(c, offsets, o, x, engines, st), [g + x for g in gaps_s(c)])
            for o, x in ((0.0, 0.0), (o_max, itl_x)) for st in phases]
    return ({k: min(r[k] for r in runs) for k in runs[0]}, {k: max(r[k] for r in runs) for k in runs[0]})


def _check_figures(c: Combo, cell: Any, recs: list[Any], res: Result, engines: int) -> None:
    """Every figure within its tolerance (TOL) of the truth the schedule implies."""
    lo, hi = _bounds(c, recs, engines)
    got = _figures(c, cell)
    span_s = (max(r.t_done_ns for r in recs) - min(r.t_scheduled_ns for r in recs)) / NS
    stalled = res.stall_ms() / 1e3 / span_s
    for name, value in got.items():
        a, b = lo[name], hi[name]
        if name in RATES:
            share = (TOL["concurrency"] if name == "achieved_concurrency" else TOL["rate"]) + stalled
            a, b = a * (1 - share), b * (1 + share)
        else:
            a, b = a - TOL["below"], b + tol_ms(name, res)
        if value is not None:
            res.spread[name] = _excursion(value, lo[name], hi[name], name in RATES)
        res.check(value is not None and a <= value <= b,
                  f"{name} {_f(value)} outside the schedule's truth {_f(lo[name])}–{_f(hi[name])} "
                  f"(tolerance {_f(a)}–{_f(b)})")
    rq = cell.requests
    res.check((rq.completed, rq.errors, rq.total_output_tokens) == (c.requests, 0, c.requests * TOKENS),
              f"the cell counts {rq.completed} completed, {rq.errors} errors, {rq.total_output_tokens} tokens; the "
              f"schedule {c.requests}, 0, {c.requests * TOKENS}")
    res.check(cell.goodput.attainment == 1.0, f"SLO attainment {cell.goodput.attainment}: every request of the "
              "schedule meets the interactive SLO (truth 1.0)")
    http = c.source in ("http", "pool")
    if http:
        queued = [float((r.extra or {}).get("client_queue_ms") or 0.0) for r in recs]  # from its release
        # … and from its schedule, as the truth counts it: the load generator's lateness before it
        waits = [q + ((r.t_submitted_ns or r.t_scheduled_ns) - r.t_scheduled_ns) / 1e6 if q else 0.0
                 for q, r in zip(queued, recs)]
        truth_waited = hi["wait_max"] > 0
        res.check(truth_waited or not cell.load.client_waited,
                  f"{cell.load.client_waited} requests waited for a client stream where none should")
        res.check(lo["wait_max"] - TOL["below"] <= max(waits) <= hi["wait_max"] + tol_ms("wait_max", res),
                  f"client wait max {max(waits):.1f} ms, the schedule's {lo['wait_max']:.1f}–{hi['wait_max']:.1f} ms")
        shown = cell.load.client_wait.max or 0.0
        res.check(abs(shown - max(queued)) <= 0.01, f"the cell's client wait max {shown} ms, its records' "
                  f"{max(queued):.1f} ms")


# ---- each figure class recomputed on its own, from each record's stamps (docs/design/metrics.md's definitions) -----
def recomputed(recs: list[Any]) -> dict[str, tuple[float, ...]]:
    """Every request figure of the cell worked out here, with numpy, from the records' own stamps (not with the
    product's functions): each distribution's (mean, p50, p90, p99) in ms. ITL: every gap between a request's
    consecutive distinct token stamps, its first gap included, pooled; TPOT: (last − first) ÷ (n − 1)."""
    import numpy as np

    good = [r for r in recs if r.error is None and r.t_first_token_ns is not None]
    ms = 1e-6
    vals = {"ttft": [(r.t_first_token_ns - r.t_scheduled_ns) * ms for r in good],
            "ttft_engine": [(r.t_first_token_ns - r.t_started_ns) * ms for r in good],
            "e2el": [(r.t_done_ns - r.t_scheduled_ns) * ms for r in good],
            "tpot": [(r.token_ns[-1] - r.token_ns[0]) * ms / (len(r.token_ns) - 1) for r in good
                     if len(r.token_ns) > 1],
            "itl": [float(g) * ms for r in good for g in np.diff(np.unique(np.asarray(r.token_ns, dtype=np.int64)))]}
    return {k: ((float(np.mean(v)), *(float(np.percentile(v, p)) for p in (50, 90, 99))) if v else ())
            for k, v in vals.items()}


def _check_recompute(cell: Any, recs: list[Any], res: Result) -> None:
    """The cell's percentiles and means against numpy's over the records' own stamps, to 1e-6 ms: a percentile's
    rank off by one, a gap dropped from ITL, a record left out: each moves one of them however the machine ran."""
    want = recomputed(recs)
    rq = cell.requests
    bad = []
    for name, dist, stats in (("ttft", rq.ttft, ("mean", "p50", "p90", "p99")), ("ttft_engine", rq.ttft_engine,
                              ("p50", "p99")), ("e2el", rq.e2el, ("p50", "p99")),
                              ("tpot", rq.tpot, ("mean", "p50", "p90", "p99")), ("itl", rq.itl, ("p50", "p99"))):
        w = dict(zip(("mean", "p50", "p90", "p99"), want[name]))
        for st in stats:
            got = getattr(dist, st)
            if w.get(st) is None or got is None or abs(got - w[st]) > 1e-6:
                bad.append(f"{name} {st} {_f(got)} ms, numpy over the records' stamps {_f(w.get(st))}")
    res.check(not bad, f"figures recomputed with numpy from each token's stamp: {len(bad)} off, e.g. {bad[:3]}")
    n_tokens = sum(len(r.token_ns) for r in recs if r.error is None)
    res.check(rq.total_output_tokens == n_tokens, f"the cell counts {rq.total_output_tokens} tokens, its records "
              f"stamp {n_tokens}")


def _check_tokens(recs: list[Any], res: Result) -> None:
    """Each request's tokens against the server's own usage count, where the server sent one (the null server
    counts exactly: a chunk carrying no token counted as one, or one missed, shows)."""
    off = [(r.request_id, len(r.token_ns), r.output_tokens, r.server_output_tokens) for r in recs
           if r.server_output_tokens is not None and not (len(r.token_ns) == r.output_tokens == r.server_output_tokens)]
    res.check(not off, f"tokens stamped, counted and the server's usage: {len(off)} disagree, e.g. {off[:2]}")


def users_mean(recs: list[Any]) -> float:
    """The users in flight, scheduled → done, on average over the span (Little's law: Σ time in flight ÷ span)."""
    a = min(r.t_scheduled_ns for r in recs)
    b = max(r.t_done_ns for r in recs)
    return sum(r.t_done_ns - r.t_scheduled_ns for r in recs) / (b - a)


def _check_users_mean(c: Combo, recs: list[Any], res: Result, engines: int) -> None:
    """A closed loop's (and sessions') users in flight on average, not only at their peak, within the concurrency
    tolerance of the truth's: a loop that sends a user's next request late, or too few users, reads low."""
    if c.load not in ("closed", "sessions"):
        return
    lo, hi = _bounds(c, recs, engines)
    got = users_mean(recs)
    span_s = (max(r.t_done_ns for r in recs) - min(r.t_scheduled_ns for r in recs)) / NS
    share = TOL["concurrency"] + res.stall_ms() / 1e3 / span_s
    res.spread["users_mean"] = _excursion(got, lo["users_mean"], hi["users_mean"], True)
    res.check(lo["users_mean"] * (1 - share) <= got <= hi["users_mean"] * (1 + share),
              f"users in flight on average {got:.3f}, the schedule's {lo['users_mean']:.3f}–{hi['users_mean']:.3f} "
              f"(± {share:.0%})")


KS_ALPHA_001 = 1.63  # Kolmogorov–Smirnov: D's critical value at α = 0.01 is 1.63 ÷ (√n + 0.12 + 0.11/√n)


def ks_distance(xs: list[float], cdf: Callable[[float], float]) -> float:
    """The Kolmogorov–Smirnov statistic of the sample against the distribution `cdf`."""
    xs = sorted(xs)
    n = len(xs)
    return max(max((i + 1) / n - cdf(x), cdf(x) - i / n) for i, x in enumerate(xs))


def ks_critical(n: int) -> float:
    import math

    return KS_ALPHA_001 / (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n))


def nominal_unit_gaps(load: str, times_s: list[float], rate: float) -> tuple[list[float], Callable[[float], float]]:
    """The gaps of an open loop's times mapped to the nominal process's own units, and their CDF there: Poisson
    and a ramp (its times through Λ(t), the expected arrivals by t) give unit exponential gaps; gamma's are
    gamma(0.5)'s, whose CDF is erf(√(x·rate·0.5 ÷ 0.5))."""
    import math

    if load == "ramp":
        r0, r1 = RAMP
        big_t = 2 * (len(times_s) - 1) / (r0 + r1)
        lam = [r0 * t + (r1 - r0) * t * t / (2 * big_t) for t in times_s]
        return [b - a for a, b in zip(lam, lam[1:])], lambda x: 1 - math.exp(-x)
    gaps = [(b - a) * rate for a, b in zip(times_s, times_s[1:])]
    if load == "gamma":  # shape 0.5, scale 1 ÷ (rate · 0.5): in units of 1 ÷ rate, scale 2, CDF = erf(√(x ÷ 2))
        return gaps, lambda x: math.erf(math.sqrt(max(0.0, x) * 0.5))
    return gaps, lambda x: 1 - math.exp(-x)


def _check_process(c: Combo, recs: list[Any], res: Result) -> None:
    """An open loop's arrivals against its nominal process, not against the records' own schedule: the gaps of
    Poisson, gamma and ramp cells pass a Kolmogorov–Smirnov test (α = 0.01) against the distribution asked, and
    their CV is the process's, not a constant's (0)."""
    if c.load not in ("poisson", "gamma", "ramp"):
        return
    import statistics

    t = sorted(r.t_scheduled_ns for r in recs)
    times = [(x - t[0]) / NS for x in t]
    gaps, cdf = nominal_unit_gaps(c.load, times, RATE)
    d, crit = ks_distance(gaps, cdf), ks_critical(len(gaps))
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    res.check(d <= crit and cv >= 0.4, f"{c.load} arrivals: KS distance {d:.3f} against the nominal process "
              f"(critical {crit:.3f} at α = 0.01), gaps' CV {cv:.2f} (a constant rate's is 0)")


class _WorkOnly:
    """A roofline that has the model's work and predicts nothing (the cell's bandwidth product reads only its work)."""

    def __init__(self, work: Any):
        self.work = work

    def level(self, *args: Any) -> None:
        return None


def moe_work() -> Any:
    """A mixture of experts whose token reads 0.4 MB of its 1 MB file: 0.3 MB always, 2 of 8 experts of 50 kB."""
    from measure.core.work import Experts, WorkModel

    return WorkModel("truth-moe", "the truth matrix", params=1, file_bytes=1_000_000, weight_bytes=300_000,
                     embd_row_bytes=0.0, matmul_params=1, layers=1, heads=1, kv_heads=1, head_dim=1,
                     experts=Experts(8, 2, 50_000.0, 1.0))


def _check_bandwidth(c: Combo, recs: list[Any], res: Result) -> None:
    """The bandwidth product against the bytes a token reads × the rate, worked out here: the cell measured again
    with a model whose token reads 0.4 of its file (instances: tok/s × read; batch: steps/s × the bytes a step of
    tok/s ÷ steps/s tokens reads; http, the served model's work given: Σ endpoints the bytes a step of tok/s × TPOT
    p50 tokens reads ÷ TPOT p50)."""
    import numpy as np

    from measure.control.bench.cell import Cell, Spec

    work = moe_work()
    mode = "http" if c.source in ("http", "pool") else ("batch" if c.source == "batch" else "instances")
    cell = Cell.measure(recs, Spec(c.k, c.b, work.file_bytes, mode=mode, roofline=_WorkOnly(work),  # type: ignore
                                   served=work if mode == "http" else None))
    tps = cell.output_throughput
    if mode == "instances":
        want = tps * work.read_bytes(1) / 1e9
    elif mode == "batch":
        good = [r for r in recs if r.error is None]
        span = (max(r.t_done_ns for r in good) - min(r.t_scheduled_ns for r in good)) / NS
        steps = len({(r.worker, r.pid, t) for r in good for t in r.token_ns}) / span
        want = steps * work.read_bytes(tps / steps) / 1e9
    else:  # a server steps 1 ÷ TPOT p50 times a second, each step reading what tok/s × TPOT p50 tokens read
        by_ep: dict[Any, list[Any]] = {}
        for r in recs:
            by_ep.setdefault(r.worker, []).append(r)
        span = (max(r.t_done_ns for r in recs) - min(r.t_scheduled_ns for r in recs)) / NS
        pairs = []
        for group in by_ep.values():
            t = float(np.percentile([(r.token_ns[-1] - r.token_ns[0]) / (len(r.token_ns) - 1) / NS for r in group], 50))
            pairs.append((t, sum(len(r.token_ns) for r in group) / span if len(by_ep) > 1 else tps))
        want = sum(work.read_bytes(max(1.0, x * t)) / t for t, x in pairs) / 1e9
    got = cell.bandwidth.gbps
    res.check(got is not None and abs(got - want) <= 1e-6 * want,
              f"bandwidth product {got} GB/s, the bytes a token reads × the rate {want:.6g} GB/s ({mode})")


def _excursion(value: float, lo: float, hi: float, rate: bool) -> float:
    """How far a figure lies outside its truth's span (0 inside): a rate as a ratio − 1, a time in ms."""
    if rate:
        return value / hi - 1 if value > hi else (value / lo - 1 if value < lo else 0.0)
    return value - hi if value > hi else (value - lo if value < lo else 0.0)


def _f(v: float | None) -> str:
    return "None" if v is None else f"{v:.3g}"


def _segments(c: Combo, servers: NullServers | None, res: Result) -> None:
    """Two clients, each its segment of one schedule from one --start-at, run at once; then report --combine."""
    from measure.control.bench.runs import Run, combine
    from measure.core.lines import RunHeader
    from measure.control.bench.cell import Cell, Spec
    from measure.control.bench.sweep import run_sweep
    from measure.core.clients import ClientShare
    from presets import slo

    out: dict[int, tuple[Any, list[Any]]] = {}
    errors: list[BaseException] = []
    sources = [_source(c, servers), _source(c, servers)]  # started first: the start is theirs to keep
    res.stall_reset()
    start_unix = time.time() + 0.5
    t0 = time.perf_counter_ns() + int(0.5 * NS)

    def client(i: int) -> None:
        try:
            src = sources[i - 1]
            try:
                cells, recs, src2 = run_sweep(src, _workload(), _cfg(c, client=ClientShare((i, 2), t0)),
                                              say=lambda m: None)
            finally:
                src.close()
            out[i] = (cells[0], recs)
        except BaseException as exc:  # noqa: BLE001 - said as the cell's failure
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    if errors or len(out) < 2:
        res.failures.append(f"a client failed: {errors[:1]}")
        return
    s = slo("interactive")
    runs = []
    for i in (1, 2):
        cell, recs = out[i]
        h = {"model_bytes": 1_000_000, "slo": s.describe(), "start_at_unix": start_unix, "start_perf_ns": t0,
             "segment": [i, 2], "max_tokens": TOKENS, "ignore_eos": True, "arrivals": "truth", "seed": 0,
             "requests": c.requests, "workload": "truth"}
        runs.append(Run(f"client{i}", RunHeader.of(h), [cell], records=recs))
    combined = combine(runs)
    res.check(len(combined.cells) == 1, f"combined cells: {len(combined.cells)}")
    cell = combined.cells[0]
    pooled = out[1][1] + out[2][1]
    truth = Cell.measure(pooled, Spec(c.k, c.b, 1_000_000, slo=s,
                                      mode="http" if c.source in ("http", "pool") else "instances"))
    for f, a, b in (("output_throughput", cell.output_throughput, truth.output_throughput),
                    ("achieved_concurrency", cell.achieved_concurrency, truth.achieved_concurrency),
                    ("goodput_tps", cell.goodput.tps, truth.goodput.tps),
                    ("slo_attainment", cell.goodput.attainment, truth.goodput.attainment),
                    ("p99_ttft_ms", cell.requests.ttft.p99, truth.requests.ttft.p99)):
        res.check(a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b)),
                  f"--combine {f} {a} ≠ pooled on one clock {b}")
    _check_cell(c, truth, pooled, res, engines=2)  # each client its own engine, or its own B streams


# ---- --find against a server without a capacity limit ----------------------------------------------------
def run_find(what: str, endpoints: int, servers: NullServers) -> Result:
    from measure.control.bench import knee as K
    from measure.control.bench.sweep import SweepConfig
    from measure.sources.http import HttpSource
    from presets import slo

    res = Result(f"find {what} over {endpoints} endpoint(s)")
    t_start = time.monotonic()
    level_s = K.LEVEL_S
    K.LEVEL_S = 2.0  # the matrix's short levels (a rate level offers at least this many seconds)
    try:
        src = HttpSource(servers.urls[:endpoints], _meta("http"), b=1, events=False)
        src.start()
        try:
            cfg = SweepConfig(mode="http", requests=8, max_tokens=TOKENS, slo=slo("interactive"), cell_timeout_s=60)
            run = K.measure_levels(src, _workload(), what, cfg, lambda m: None, k=endpoints)
            knee = K.find_knee(run, what, start=1 if what == "users" else 4, limit=8 if what == "users" else 32)
        finally:
            src.close()
    except Exception as exc:  # noqa: BLE001
        res.failures.append(f"crashed: {type(exc).__name__}: {exc}")
        return res
    finally:
        K.LEVEL_S = level_s
    res.check(knee.failed is None or knee.failed.stop == "client",
              f"a server without a capacity limit has no knee in range: {knee.sentence('interactive')}")
    for lv in knee.levels:
        cell = lv.cell
        if cell is None:
            continue
        res.check(cell.k == endpoints, f"level {lv.level:g} ran K={cell.k}, endpoints {endpoints}")
        if what == "users":
            res.check(cell.knee.peak_users == int(lv.level),
                      f"level {lv.level:g}: {cell.knee.peak_users} users in flight")
        else:  # a rate level offers its rate: (n − 1) ÷ its arrivals' span, conditioned on its count
            got = cell.knee.offered_rps
            res.check(got is not None and abs(got / lv.level - 1) <= 1e-6,
                      f"level {lv.level:g} req/s offered {got} req/s")
        eps = len(cell.bandwidth.endpoints or []) or 1
        res.check(eps == endpoints, f"level {lv.level:g}: {eps} endpoints in its figures")
    res.seconds = round(time.monotonic() - t_start, 2)
    return res


# ---- live K/B steps with a warmup, recorded and reported ----------------------------------------------------
def run_live(steps: tuple[str, ...], warmup_s: float) -> Result:
    """The simulated fleet on a fake clock (deterministic): the steps pressed 20 s apart, recorded; one settled
    row per level visited, and the recording's report gives each level the row's tok/s."""
    sys.path.insert(0, str(ROOT / "tests"))
    from sim import FakeClock, FixedProbe, NoProcesses

    from measure.control.live.controller import LiveController, LiveHooks, LiveSettings
    from measure.control.bench.runs import load_run
    from measure.machine.recorder import Recorder
    from measure.core.records import RunMeta
    from measure.sources.simulated import SimulatedFleet
    import presets

    res = Result(f"live {' '.join(steps)} warmup {warmup_s:g} s, recorded → report")
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rec.jsonl"
        clock = FakeClock()
        meta = RunMeta(engine="llama.cpp", model="gemma (simulated)", model_bytes=253_113_024)
        fleet = SimulatedFleet(meta, k=1, bandwidth_gbps=100.0, clock=clock, threaded=False, warmup_s=warmup_s)
        settings = LiveSettings(max_tokens=32, bandwidth_gbps=100.0, bandwidth_source="--bandwidth", chip="t",
                                slo=presets.slo("interactive"))
        rec = Recorder(path, {"command": "dashboard", "model_bytes": meta.model_bytes, "bandwidth_gbps": 100.0,
                              "max_tokens": 32, "slo": settings.slo.describe() if settings.slo else None})
        c = LiveController(fleet, presets.workload("default"), settings, recorder=rec,
                           hooks=LiveHooks(sys_probe=FixedProbe(), procs_probe=NoProcesses(), clock=clock))
        c.start(thread=False)

        def run_for(seconds: float) -> None:
            for _ in range(int(seconds / 0.25)):
                clock.now += int(0.25 * NS)
                fleet.advance(clock.now)
                c.tick()

        run_for(20)
        visited = [c.stats.level_label]
        for key in steps:
            why = {"+": lambda: c.set_k(c.k + 1), "m": c.toggle_mode, "]": lambda: c.set_b(c.b + 1)}[key]()
            res.check(why is None, f"step {key} refused: {why}")
            run_for(20)
            label = f"K={c.k} B={c.b} {c.mode}"
            if label != visited[-1]:
                visited.append(label)
        snap = c.snapshot()
        c.close()
        assert snap is not None
        rows = [r for r in snap.steps if r.settled]
        res.check([r.level for r in rows] == visited, f"settled rows {[r.level for r in rows]}, visited {visited}")
        res.check(sum(r.best for r in snap.steps) == 1, "one row marked best")
        # the ★ row: the settled row of the most goodput (an SLO is set), worked out here
        star = max(rows, key=lambda r: r.goodput_tps or 0.0) if rows else None
        res.check(star is not None and star.best, f"★ on {[r.level for r in snap.steps if r.best]}, the most "
                  f"goodput is {star.level if star else None}'s")
        run = load_run(path)
        for r in rows:
            cell = next((x for x in run.cells if (x.k, x.b, x.mode) == (r.k, r.b, r.mode)), None)
            res.check(cell is not None and cell.output_throughput is not None and r.agg_tps is not None
                      and abs(cell.output_throughput - r.agg_tps) <= 0.15 * r.agg_tps,
                      f"{r.level}: the report's tok/s {cell.output_throughput if cell else None} vs the row's "
                      f"{r.agg_tps}")
    res.seconds = round(time.monotonic() - t_start, 2)
    return res


# ---- the command line: what the header and summary.json say is what ran ------------------------------------
CLI = [
    ("two endpoints, no --k; B 1 then 4 over 2 client processes",
     ["--b", "1,4", "--client-procs", "2", "--requests", "8"]),
    ("sessions of 3 users over 2 endpoints", ["--turns", "2", "--users", "3", "--requests", "6", "--endpoint", "chat"]),
]


def run_cli(name: str, extra: list[str], servers: NullServers) -> Result:
    """`inference-top bench` as a user runs it, against both null servers: K is the endpoints given; each cell's
    K, B and users, and the header's client processes, are what its records show."""
    from measure.machine.recorder import read_jsonl

    res = Result(f"cli: {name}")
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "tui.cli", "bench", "--engine", "http", "--url", servers.urls[0], "--url",
               servers.urls[1], "--tokenizer", "none", "--max-tokens", str(TOKENS), "--out", d, *extra]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=str(ROOT))
        res.check(p.returncode == 0, f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
        if p.returncode != 0:
            return res
        headers, recs, _ = read_jsonl(Path(d) / "records.jsonl")
        cells = json.loads((Path(d) / "summary.json").read_text())
        h = headers[0]
        res.check(all(c["k"] == 2 for c in cells), f"cells' K {[c['k'] for c in cells]}, 2 endpoints given")
        res.check({(r.extra or {}).get("endpoint") for r in recs} == {e.label for e in h.endpoints or []},
                  "every endpoint given served requests")
        for c in cells:
            mine = [r for r in recs if r.b == c["b"]]
            res.check(len(mine) == c["completed"], f"B={c['b']}: {len(mine)} records, the cell says {c['completed']}")
            procs = {(r.extra or {}).get("proc") for r in mine} - {None}
            if "--client-procs" in extra:  # the first min(P, B) processes hold streams
                want = min(h.line.get("client_procs") or 1, c["b"])
                res.check(len(procs) == want == c.get("client_procs"),
                          f"B={c['b']}: {len(procs)} client processes sent (expected {want}), the cell says "
                          f"{c.get('client_procs')}, the header {h.line.get('client_procs')} started")
            if "--users" in extra:
                users = int(extra[extra.index("--users") + 1])
                res.check(in_flight(mine) == users, f"users in flight {in_flight(mine)}, asked {users}")
    res.seconds = round(time.monotonic() - t_start, 2)
    return res


LIVE = [(("+", "+"), 8.0), (("+", "+"), 0.0), (("m", "]", "]"), 8.0), (("+", "m", "]"), 8.0)]
FINDS = [("users", 1), ("users", 2), ("rate", 1), ("rate", 2)]
TEST_FINDS = [("users", 2), ("rate", 1)]  # make test's


def spread_table(results: list[Result], combos: list[Combo]) -> dict[str, dict[str, list[float]]]:
    """By source: each figure's lowest and highest excursion from its truth over the cells run (ms; a rate's ratio
    − 1; lateness and the stall detector's worst oversleep as they were)."""
    source = {c.name(): c.source for c in combos}
    out: dict[str, dict[str, list[float]]] = {}
    for r in results:
        if r.combo not in source:
            continue
        table = out.setdefault(source[r.combo], {})
        for k, v in r.spread.items():
            lo_hi = table.setdefault(k, [v, v])
            lo_hi[0], lo_hi[1] = round(min(lo_hi[0], v), 4), round(max(lo_hi[1], v), 4)
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, help="run this many bench combinations, drawn with --seed (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cover", type=int, metavar="SEED", help="`make test`'s sample drawn with this seed "
                    "(tests/integration/test_truth_matrix.py: one cell of each load kind over every source, its --find "
                    "searches, the live steps and the command line)")
    ap.add_argument("--only", choices=["bench", "find", "cli", "live"], help="one part of the matrix")
    ap.add_argument("--quiet", action="store_true", help="only the last JSON line")
    ap.add_argument("--no-cap", action="store_true", help="leave out the capped open loops (a version without "
                    "--b as the client's cap: the matrix run on older code)")
    ap.add_argument("--filter", action="append", help="only the bench cells of this exact name (as printed), "
                    "repeatable")
    ap.add_argument("--repeat", type=int, default=1, help="run the bench cells this many times over")
    ap.add_argument("--spread", action="store_true", help="then one more JSON line: each figure's worst excursion "
                    "from its truth by source (where the tolerances come from)")
    ap.add_argument("--stop-first", action="store_true", help="stop at the first cell that fails (benchmarks/"
                    "mutants.py: a mutant is killed by one)")
    return ap


def _parts(a: argparse.Namespace, servers: NullServers | None) -> Iterator[Callable[[], Result]]:
    """Each cell of the run asked, as a thunk that runs it."""
    combos = [c for c in all_combos() if not (a.no_cap and c.cap) and (not a.filter or c.name() in a.filter)]
    if a.cover is not None:
        combos = cover(a.cover)
    elif a.sample:
        combos = random.Random(a.seed).sample(combos, min(a.sample, len(combos)))
    if a.only in (None, "bench"):
        for _ in range(a.repeat):
            for c in combos:  # each cell once: one that fails is a failure (its stall note says if the machine was
                yield lambda c=c: run_combo(c, servers)  # busy), never run again to pass
    if a.only in (None, "find"):
        assert servers is not None
        for what, n in (TEST_FINDS if a.cover is not None else FINDS):
            yield lambda what=what, n=n: run_find(what, n, servers)
    if a.only in (None, "cli"):
        assert servers is not None
        for name, extra in CLI:
            yield lambda name=name, extra=extra: run_cli(name, extra, servers)
    if a.only in (None, "live"):
        for steps, warm in LIVE:
            yield lambda steps=steps, warm=warm: run_live(steps, warm)


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    results: list[Result] = []
    say = (lambda m: None) if a.quiet else (lambda m: print(m, flush=True))
    servers = NullServers(2) if a.only in (None, "bench", "find", "cli") else None
    if a.cover is not None:
        for c in cover(a.cover):
            say(f"cover {a.cover}: {c.name()} — {', '.join(classes(c))}")
    try:
        for part in _parts(a, servers):
            r = part()
            results.append(r)
            say(f"{'ok  ' if not r.failures else 'FAIL'} {r.combo} ({r.checked} checks, {r.seconds} s)"
                + "".join(f"\n       {f}" for f in r.failures))
            if r.failures and a.stop_first:
                break
    finally:
        if servers is not None:
            servers.close()
    failed = [r for r in results if r.failures]
    print(json.dumps({"cells": len(results), "invariants_checked": sum(r.checked for r in results),
                      "failures": sum(len(r.failures) for r in results), "failed_cells": [r.combo for r in failed],
                      "first_failures": failed[0].failures[:20] if failed else [],
                      "seconds": round(sum(r.seconds for r in results), 1)}))
    if a.spread:
        print(json.dumps(spread_table(results, all_combos())))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
