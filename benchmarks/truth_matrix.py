"""The truth matrix (docs/design.md §22): the combinations a user can make, run against engines whose figures follow
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
- TTFT = the set TTFT + the lateness and client queue the cell reports (an open loop is never silently capped);
- tok/s and achieved concurrency within a stated tolerance of the schedule's truth;
- segments combined = every client's requests pooled on one clock; goodput and the SLO kept;
- a --find search against a server without a capacity limit never reports a knee inside its range;
- live steps with a warmup: one step-table row per level settled; the recording's report = the dashboard's rows.

    python benchmarks/truth_matrix.py            # every combination; ends with one JSON line
    python benchmarks/truth_matrix.py --sample 12 --seed 1   # a seeded sample (tests/test_truth_matrix.py)

Combinations are drawn with Hypothesis in the test (seeded, shrinking a failure to its smallest case); here they are
enumerated. The tolerances are stated once, below; they hold on a busy 2-core machine.
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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NS = 1_000_000_000
TTFT_MS = 20.0  # the null engine's and the null server's schedule
ITL_MS = 2.0
TOKENS = 8  # max_tokens of every request (EOS ignored)
RATE_TOL = 0.30  # tok/s and concurrency within 30 % of the schedule's truth (a busy 2-core box)
OVERHEAD_MS = 15.0  # the harness's cost on each request, at most, on a busy machine (the rates' truth spans 0 to it)
TTFT_TOL_MS = 25.0  # median TTFT − (set TTFT + lateness + client queue) within this, + 50 % of the set TTFT
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


@dataclass
class Result:
    combo: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def check(self, ok: bool, what: str) -> None:
        self.checked += 1
        if not ok:
            self.failures.append(what)


# ---- the engines whose schedule is the truth -------------------------------------------------------------
class NullServers:
    """Two null servers, each in its own process on loopback (the client's loop does not share their GIL)."""

    def __init__(self, n: int = 2):
        from engines.null_server import spawn

        self.procs: list[subprocess.Popen[bytes]] = []
        self.urls: list[str] = []
        try:
            for _ in range(n):
                proc, url = spawn(TTFT_MS, ITL_MS)
                self.procs.append(proc)
                self.urls.append(url)
        except RuntimeError:
            self.close()
            raise

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

        spec = EngineSpec("null", "", threads=1, ctx=1024, options={"ttft_s": TTFT_MS / 1e3, "itl_s": ITL_MS / 1e3})
        src = Fleet(spec, _meta("instances"), k=c.k, threads=1, events=False, b_cap=max(c.b, 1))
        src.start(timeout=120)
        return src
    assert servers is not None
    urls = servers.urls[:c.k]
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
        return ArrivalSpec("constant", rate=40.0)
    if c.load == "poisson":
        return ArrivalSpec("poisson", rate=40.0, seed=3)
    if c.load == "gamma":
        return ArrivalSpec("gamma", rate=40.0, burstiness=0.5, seed=3)
    if c.load == "ramp":
        return ArrivalSpec("ramp", ramp=(20.0, 60.0), seed=3)
    if c.load == "trace":
        rng = random.Random(5)
        times, t = [], 0.0
        for _ in range(c.requests):
            times.append(round(t, 4))
            t += rng.choice((0.01, 0.02, 0.05))
        return ArrivalSpec("trace", times_s=times)
    return None


def _cfg(c: Combo, **kw: Any) -> Any:
    from measure.control.sweep import SweepConfig
    from measure.core.sessions import SessionSpec
    from presets import slo

    mode = "http" if c.source in ("http", "pool") else ("batch" if c.source == "batch" else "instances")
    return SweepConfig(ks=[c.k], bs=[c.b], mode=mode, requests=c.requests, max_tokens=TOKENS,
                       users=c.users if c.load in ("closed", "sessions") else None,
                       arrivals=_arrivals(c), sessions=SessionSpec(2) if c.load == "sessions" else None,
                       slo=slo("interactive"), cell_timeout_s=120.0, **kw)


# ---- the truth of a schedule ----------------------------------------------------------------------------
def ideal(c: Combo, scheduled_ns: list[int], sent_ns: list[int], extra_s: float = 0.0) -> tuple[float, float]:
    """(tok/s, achieved concurrency) of an engine that serves each request in exactly TTFT + (n − 1)·ITL (+ extra_s)
    on its slots, first come first served: K workers (fleet), K × B streams (http capped by --b), unbounded (the
    null server, the client not capping an open loop). An open loop from each request's send (a request the
    client sent late, as its lateness says, from then); a closed loop of min(U, slots) users back to back."""
    import heapq

    d = (TTFT_MS + (TOKENS - 1) * ITL_MS) / 1e3 + extra_s
    n = len(scheduled_ns)
    http = c.source in ("http", "pool")
    slots = c.k * (1 if c.source == "fleet" else c.b)
    if c.load in OPEN:
        free: list[float] = []  # when each busy slot is free again
        done = []
        for t in sorted(max(a, b) / NS for a, b in zip(scheduled_ns, sent_ns)):
            if http and not c.cap:
                start = t
            elif len(free) < slots:
                start = t
            else:
                start = max(t, heapq.heappop(free))
            heapq.heappush(free, start + d)
            done.append(start + d)
        span = max(done) - min(scheduled_ns) / NS
    else:  # users above the slots wait their turn
        rounds = -(-n // min(c.users, slots))
        span = rounds * d
    return n * TOKENS / span, n * d / span


# ---- one cell --------------------------------------------------------------------------------------------
def run_combo(c: Combo, servers: NullServers | None) -> Result:
    res = Result(c.name())
    t0 = time.monotonic()
    try:
        if c.segments > 1:
            _segments(c, servers, res)
        else:
            _one(c, servers, res)
    except Exception as exc:  # noqa: BLE001 - a cell that crashes is a failure with its reason
        res.failures.append(f"crashed: {type(exc).__name__}: {exc}")
    res.seconds = round(time.monotonic() - t0, 2)
    return res


def _one(c: Combo, servers: NullServers | None, res: Result) -> None:
    from measure.control.sweep import run_sweep

    src = _source(c, servers)
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


def _check_cell(c: Combo, cell: Any, recs: list[Any], res: Result, asked_users: int | None = None,
                engines: int = 1) -> None:
    """`engines`: how many copies of the source served the records (two clients run two local engines, or two
    sets of B client streams)."""
    from measure.control.knee import peak_in_flight
    from measure.core import metrics as M
    from measure.core.datasets import prompt_for

    wl = _workload()
    ids = sorted(r.request_id for r in recs)
    res.check(len(recs) == c.requests and ids == list(range(ids[0], ids[0] + c.requests)) if ids else False,
              f"every request sent once: {len(recs)} records of {c.requests}, ids {ids[:3]}…{ids[-3:]}")
    res.check(all(r.error is None for r in recs), f"errors: {[r.error for r in recs if r.error][:2]}")
    res.check(all(r.output_tokens == TOKENS for r in recs),
              f"lengths: {sorted({r.output_tokens for r in recs})} for max_tokens {TOKENS}")
    if c.load != "sessions" and ids:
        wrong = [(r.request_id - ids[0], r.prompt_id) for r in recs
                 if r.prompt_id != prompt_for(wl, r.request_id - ids[0]).prompt_id]
        res.check(not wrong, f"request i with the workload's i-th prompt: {len(wrong)} not, e.g. {wrong[:3]}")
    if c.load in ("closed", "sessions"):
        want = min(asked_users or c.users, c.requests)
        peak = peak_in_flight(recs)
        res.check(peak == want, f"users in flight {peak}, asked {want}")
    # labels: what ran
    http = c.source in ("http", "pool")
    res.check(cell.k == c.k and cell.b == c.b, f"cell labelled K={cell.k} B={cell.b}, ran K={c.k} B={c.b}")
    res.check(all(r.b == c.b for r in recs), f"records' B {sorted({r.b for r in recs})}, ran {c.b}")
    if http:
        eps = {(r.extra or {}).get("endpoint", r.worker) for r in recs}
        used = min(c.k, len(recs))  # (one user's requests go to the endpoint with the fewest outstanding, in turn)
        res.check(len(eps) == used and all(r.k == c.k for r in recs),
                  f"endpoints: served by {len(eps)}, records say K={sorted({r.k for r in recs})}, asked {c.k}")
    if c.source == "pool":
        procs = {(r.extra or {}).get("proc") for r in recs}
        active = min(c.procs, c.b)
        want_p = min(active, c.users) if c.load == "closed" else active
        res.check(len(procs) == want_p, f"client processes that sent: {sorted(map(str, procs))}, expected {want_p}")
    # TTFT = set TTFT + lateness + client queue (an open loop never silently capped)
    if http or c.source == "fleet":
        excess = []
        for r in recs:
            if r.t_first_token_ns is None:
                continue
            late = (r.t_submitted_ns - r.t_scheduled_ns) / 1e6 if r.t_submitted_ns else 0.0
            queue = float((r.extra or {}).get("client_queue_ms") or 0.0) if http else \
                ((r.t_started_ns or r.t_submitted_ns) - r.t_submitted_ns) / 1e6
            excess.append(M.ttft(r) * 1e3 - TTFT_MS - late - queue)
        med = sorted(excess)[len(excess) // 2] if excess else 0.0
        res.check(abs(med) <= TTFT_TOL_MS + 0.5 * TTFT_MS,
                  f"TTFT p50 exceeds set TTFT + lateness + client queue by {med:.1f} ms (unreported wait)")
        if http and not c.cap:
            res.check(not cell.load.client_waited if c.load in OPEN else True,
                      f"open loop capped by the client: {cell.load.client_waited} requests waited")
    # rates within tolerance of the schedule's truth
    if c.load != "sessions" and c.source != "batch":
        sched, sent = [r.t_scheduled_ns for r in recs], [r.t_submitted_ns or r.t_scheduled_ns for r in recs]
        served = replace(c, k=c.k * engines)
        tps, conc = ideal(served, sched, sent)  # no harness cost at all …
        tps_lo, conc_hi = ideal(served, sched, sent, OVERHEAD_MS / 1e3)  # … and OVERHEAD_MS of it on every request
        got_t, got_c = cell.output_throughput or 0.0, cell.achieved_concurrency or 0.0
        res.check(tps_lo * (1 - RATE_TOL) <= got_t <= tps * (1 + RATE_TOL),
                  f"tok/s {got_t:.1f} vs the schedule's {tps_lo:.1f}–{tps:.1f}")
        res.check(conc * (1 - RATE_TOL) - 0.1 <= got_c <= conc_hi * (1 + RATE_TOL) + 0.1,
                  f"concurrency {got_c:.2f} vs the schedule's {conc:.2f}–{conc_hi:.2f}")


def _segments(c: Combo, servers: NullServers | None, res: Result) -> None:
    """Two clients, each its segment of one schedule from one --start-at, run at once; then report --combine."""
    from measure.control.runs import Run, combine
    from measure.control.cell import Cell, Spec
    from measure.control.sweep import run_sweep
    from measure.core.clients import ClientShare
    from presets import slo

    out: dict[int, tuple[Any, list[Any]]] = {}
    errors: list[BaseException] = []
    sources = [_source(c, servers), _source(c, servers)]  # started first: the start is theirs to keep
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
        runs.append(Run(f"client{i}", h, [cell], records=recs))
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
    from measure.control import knee as K
    from measure.control.sweep import SweepConfig
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

    from measure.control.live import LiveController, LiveSettings
    from measure.control.runs import load_run
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
        c = LiveController(fleet, presets.workload("default"), settings, recorder=rec, sys_probe=FixedProbe(),
                           procs_probe=NoProcesses(), clock=clock)
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
    from measure.control.knee import peak_in_flight
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
        res.check({(r.extra or {}).get("endpoint") for r in recs} == {e["label"] for e in h["endpoints"]},
                  "every endpoint given served requests")
        for c in cells:
            mine = [r for r in recs if r.b == c["b"]]
            res.check(len(mine) == c["completed"], f"B={c['b']}: {len(mine)} records, the cell says {c['completed']}")
            procs = {(r.extra or {}).get("proc") for r in mine} - {None}
            if "--client-procs" in extra:  # the first min(P, B) processes hold streams
                want = min(h.get("client_procs") or 1, c["b"])
                res.check(len(procs) == want == c.get("client_procs"),
                          f"B={c['b']}: {len(procs)} client processes sent (expected {want}), the cell says "
                          f"{c.get('client_procs')}, the header {h.get('client_procs')} started")
            if "--users" in extra:
                users = int(extra[extra.index("--users") + 1])
                res.check(peak_in_flight(mine) == users, f"users in flight {peak_in_flight(mine)}, asked {users}")
    res.seconds = round(time.monotonic() - t_start, 2)
    return res


LIVE = [(("+", "+"), 8.0), (("+", "+"), 0.0), (("m", "]", "]"), 8.0), (("+", "m", "]"), 8.0)]
FINDS = [("users", 1), ("users", 2), ("rate", 1), ("rate", 2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, help="run this many bench combinations, drawn with --seed (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", choices=["bench", "find", "cli", "live"], help="one part of the matrix")
    ap.add_argument("--quiet", action="store_true", help="only the last JSON line")
    ap.add_argument("--no-cap", action="store_true", help="leave out the capped open loops (a version without "
                    "--b as the client's cap: the matrix run on older code)")
    ap.add_argument("--filter", action="append", help="only the bench cells of this exact name (as printed), "
                    "repeatable")
    a = ap.parse_args(argv)
    combos = [c for c in all_combos() if not (a.no_cap and c.cap) and (not a.filter or c.name() in a.filter)]
    if a.sample:
        combos = random.Random(a.seed).sample(combos, min(a.sample, len(combos)))
    results: list[Result] = []
    flaky: list[str] = []  # cells that failed once and passed when run again (their first failures)
    say = (lambda m: None) if a.quiet else (lambda m: print(m, flush=True))

    def done(r: Result) -> None:
        results.append(r)
        say(f"{'ok  ' if not r.failures else 'FAIL'} {r.combo} ({r.checked} checks, {r.seconds} s)"
            + "".join(f"\n       {f}" for f in r.failures))

    servers = NullServers(2) if a.only in (None, "bench", "find", "cli") else None
    try:
        if a.only in (None, "bench"):
            for c in combos:
                r = run_combo(c, servers)
                if r.failures:  # run once more: a stall of this shared machine is not a wrong figure
                    again = run_combo(c, servers)
                    if not again.failures:
                        flaky.append(f"{r.combo}: {'; '.join(r.failures)}")
                        r = again
                done(r)
        if a.only in (None, "find"):
            assert servers is not None
            for what, n in FINDS:
                done(run_find(what, n, servers))
        if a.only in (None, "cli"):
            assert servers is not None
            for name, extra in CLI:
                done(run_cli(name, extra, servers))
        if a.only in (None, "live"):
            for steps, warm in LIVE:
                done(run_live(steps, warm))
    finally:
        if servers is not None:
            servers.close()
    failed = [r for r in results if r.failures]
    print(json.dumps({"cells": len(results), "invariants_checked": sum(r.checked for r in results),
                      "failures": sum(len(r.failures) for r in results), "failed_cells": [r.combo for r in failed],
                      "passed_on_a_second_run": flaky,
                      "seconds": round(sum(r.seconds for r in results), 1)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
