"""The live controller: the one object the dashboard talks to. No textual here.

A sampler thread (2 Hz by default) drains the fleet's events, keeps the fixed-size history buffers, samples the
system probes and publishes an immutable `Snapshot`; the UI only ever reads the latest snapshot and
calls the key actions below, so it never blocks on a worker.
"""
from __future__ import annotations

import json
import queue
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import metrics as M
from bench.fleet import physical_cores
from bench.guard import DEFAULT_BUDGET_FRACTION, DEFAULT_OVERHEAD_BYTES, Footprint, admit, detect_wall, footprint
from bench.probes import ProcessProbe, SystemProbe, SystemSample, total_memory_bytes
from bench.records import RequestRecord
from bench.workload import ClosedLoop, Poisson

NS = 1_000_000_000
CONFIRM_S = 5.0  # a refused key pressed again within this long goes ahead
WALL_HOLD_S = 10.0  # the WALL state stays this long after the last reading that showed it
ITL_REQUESTS = 100  # the live ITL p50 pools the gaps of the last 100 requests


@dataclass
class LiveSettings:
    max_tokens: int = 128
    rate: float | None = None
    users: int | None = None  # None: K × B
    window_s: float = 5.0
    history_s: float = 600.0
    sample_hz: float = 2.0
    bandwidth_gbps: float | None = None
    bandwidth_source: str = "unknown"
    chip: str = "unknown"
    ignore_eos: bool = True
    # the memory guard
    memory_budget: int | None = None  # bytes; None: 85 % of physical memory
    kv_bytes_per_token: float | None = None
    ctx: int = 2048
    force: bool = False
    brake: bool = True


@dataclass(frozen=True)
class Point:
    t: float  # seconds since start
    agg_tps: float
    tpot_p50: float | None  # seconds
    tpot_p90: float | None
    predicted_tpot: float | None
    bw_gbps: float | None
    mem_used: int
    swap_used: int


@dataclass(frozen=True)
class WorkerRow:
    wid: int
    pid: int | None
    state: str
    threads: int | None
    rss: int | None
    cpu: float | None
    tps: float
    requests: int
    last_ttft: float | None


@dataclass(frozen=True)
class Snapshot:
    version: int
    t: float
    state: str
    mode: str
    k: int
    b: int
    users: str
    paused: bool
    simulated: bool
    workers: tuple[WorkerRow, ...]
    numbers: dict
    system: SystemSample | None
    rss_sum: int
    history: tuple[Point, ...]
    markers: tuple[tuple[float, str], ...]
    log: tuple[tuple[int, float, str, str], ...]  # (seq, t, level, text)


def ceiling(bw_gbps: float | None, beta_gbps: float | None, workers_cpu_percent: float, cores: int) -> str:
    """Which wall the load is against: the chip's bandwidth, the CPU cores, or none yet."""
    if bw_gbps is not None and beta_gbps and bw_gbps >= 0.8 * beta_gbps:
        return f"memory bandwidth ({bw_gbps / beta_gbps:.0%} of spec)"
    if workers_cpu_percent >= 90.0 * cores:
        return f"CPU cores (workers busy on {workers_cpu_percent / 100:.1f} of {cores})"
    return "none reached"


class LiveController:
    def __init__(self, fleet, workload, settings: LiveSettings, recorder=None, sys_probe=None, clock=None):
        self.fleet = fleet
        self.workload = workload
        self.s = settings
        self.recorder = recorder
        self.mode = fleet.mode
        self.k = fleet.target_k
        self.b = fleet.b
        self.paused = False
        self._clock = clock or time.perf_counter_ns
        self.t0 = self._clock()
        self._sys = sys_probe or SystemProbe()
        self._procs = ProcessProbe()
        self._tokens: deque[tuple[int, int, int]] = deque()  # (t_ns, wid, rid) inside the window
        self._records: list[RequestRecord] = []  # since the last reset
        self._errors = 0
        maxlen = int(settings.history_s * settings.sample_hz)
        self._history: deque[Point] = deque(maxlen=maxlen)
        self._markers: deque[tuple[float, str]] = deque(maxlen=64)
        self._log: deque[tuple[int, float, str, str]] = deque(maxlen=500)
        self._log_seq = 0
        self._version = 0
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_sys: SystemSample | None = None
        self._cores = physical_cores()
        self._total_memory = total_memory_bytes()
        self._overhead: int | None = None  # runtime bytes beyond the weights, measured at warmup
        self._refused: tuple[str, float] | None = None
        self._last_step = None  # ("k" | "b", old, new, t_ns, tok/s before)
        self._braked_step = None
        self._tps_now = 0.0
        self._wall: str | None = None
        self._wall_until = 0

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, thread: bool = True) -> None:
        self.fleet.start(wait_ready=False)
        self.fleet.set_users(self.s.users)  # None: users follow ready workers × B
        self.fleet.set_load(self.workload, self._arrivals(), self.s.max_tokens, self.s.ignore_eos)
        self.log("info", f"serving {self.workload.key}: {self._arrivals_text()}, max_tokens {self.s.max_tokens}")
        if thread:
            self._thread = threading.Thread(target=self._run, name="live-sampler", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=1.0)
        self.fleet.close()
        if self.recorder:
            self.recorder.close()

    def _run(self) -> None:
        period = 1.0 / self.s.sample_hz
        while not self._stop.wait(period):
            try:
                self.tick()
            except Exception as exc:  # keep sampling; say what broke
                self.log("error", f"sampler: {type(exc).__name__}: {exc}")

    # ---- key actions (any thread) ------------------------------------------------------------
    def users(self) -> int:
        return self.s.users or self.k * (self.b if self.mode in ("batch", "http") else 1)

    def _arrivals(self):
        return Poisson(self.s.rate) if self.s.rate else ClosedLoop(self.users())

    def _arrivals_text(self) -> str:
        return f"open loop {self.s.rate:g} req/s" if self.s.rate else f"closed loop, {self.users()} users"

    # ---- the memory guard ---------------------------------------------------------------------
    def budget(self) -> int:
        return self.s.memory_budget or int(DEFAULT_BUDGET_FRACTION * self._total_memory)

    def footprint(self, k: int, b: int, mode: str | None = None) -> Footprint:
        """K × (weights + runtime overhead measured at warmup) + Σ KV of each worker's contexts.

        llama.cpp allocates a context's KV whole when it is made: the single-stream one (--ctx tokens)
        always, and in batch mode one of max(B, --max-b) sequences × --ctx beside it."""
        batch = (mode or self.mode) == "batch"
        seqs = max(b, getattr(self.fleet, "b_cap", b)) if batch else 0
        return footprint(k, seqs, self.s.ctx, self.fleet.meta.model_bytes, self.s.kv_bytes_per_token or 0.0,
                         self._overhead or DEFAULT_OVERHEAD_BYTES, extra_kv_tokens=self.s.ctx, label_b=b)

    def _admit(self, k: int, b: int, key: str, mode: str | None = None) -> str | None:
        """A refusal with the numbers, unless the step fits, --force is on, or the same key came again
        within CONFIRM_S of its refusal (the confirm key)."""
        if self.s.force:
            return None
        why = admit(self.footprint(k, b, mode), self.budget())
        if why is None:
            return None
        now = time.monotonic()
        if self._refused and self._refused[0] == key and now - self._refused[1] < CONFIRM_S:
            self._refused = None
            self.log("warn", f"over the budget on confirm: {why.split(';')[0]}")
            return None
        self._refused = (key, now)
        return f"{why}; press the key again within {CONFIRM_S:.0f} s to go ahead"

    def set_k(self, k: int, admit_check: bool = True) -> str | None:
        """Change K; returns a refusal message instead of acting when the change is not possible."""
        if k < 1:
            return "K cannot go below 1"
        if admit_check and k > self.k:
            refusal = self._admit(k, self.b, "k")
            if refusal:
                return refusal
        self._last_step = ("k", self.k, k, self._clock(), self._tps_now)
        old = self.k
        self.k = k
        self.fleet.scale_to(k)
        self.mark(f"K={k}")
        self.log("info", f"K {old} → {k} ({self._arrivals_text()})")
        return None

    def set_b(self, b: int, admit_check: bool = True) -> str | None:
        """Change B (sequences per engine, batch mode); returns a refusal message instead of acting."""
        if self.mode not in ("batch", "http"):
            return "B is the batch inside one engine: press m for batch mode first"
        if b < 1:
            return "B cannot go below 1"
        cap = getattr(self.fleet, "b_cap", b)
        if b > cap:
            return f"B={b} exceeds the {cap} sequences each batch context holds (start with --max-b {b})"
        if admit_check and b > self.b and self.mode != "http":  # a remote server's memory is not ours
            refusal = self._admit(self.k, b, "b")
            if refusal:
                return refusal
        self._last_step = ("b", self.b, b, self._clock(), self._tps_now)
        old = self.b
        self.b = b
        self.fleet.set_batch(self.mode, b)
        self.mark(f"B={b}")
        self.log("info", f"B {old} → {b} ({self._arrivals_text()})")
        return None

    def toggle_mode(self) -> str | None:
        if self.mode == "http":
            return "http engine: B is the number of concurrent streams; there is no instances mode"
        new = "batch" if self.mode == "instances" else "instances"
        if new == "batch":  # batch mode makes a batch context in every worker
            refusal = self._admit(self.k, self.b, "m", mode="batch")
            if refusal:
                return refusal
        self.mode = new
        self.fleet.set_batch(self.mode, self.b)
        self.mark(self.mode)
        self.log("info", f"mode → {self.mode}: " + ("+/- and ]/[ change B" if self.mode == "batch"
                                                    else "+/- change K, ]/[ change B in batch mode"))
        return None

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        self.fleet.pause(self.paused)
        self.mark("pause" if self.paused else "resume")

    def reset_stats(self) -> None:
        with self._lock:
            self._records = []
            self._errors = 0
        self.log("info", "statistics window reset")

    def export(self, path: str | Path | None = None) -> Path:
        snap = self.snapshot() or self.tick()
        path = Path(path or f"inference-top-{time.strftime('%Y%m%d-%H%M%S')}.json")
        with self._lock:
            records = list(self._records)
        out = {
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "mode": snap.mode, "k": snap.k, "b": snap.b, "users": snap.users, "state": snap.state,
            "simulated": snap.simulated,
            "model": self.fleet.meta.model, "model_bytes": self.fleet.meta.model_bytes,
            "engine": self.fleet.meta.engine, "chip": self.s.chip, "bandwidth_gbps": self.s.bandwidth_gbps,
            "window_s": self.s.window_s, "numbers": snap.numbers, "summary_since_reset": M.summarize(records),
            "workers": [asdict(w) for w in snap.workers],
            "history": [asdict(p) for p in snap.history],
            "markers": list(snap.markers),
        }
        path.write_text(json.dumps(out, indent=2))
        from bench.report import snapshot_png

        png = snapshot_png(snap, path.with_suffix(".png"), self.s.bandwidth_gbps)
        self.log("info", f"exported statistics to {path}" + (f" and the charts to {png}" if png else
                                                               " (pip install matplotlib for a PNG too)"))
        return path

    def mark(self, label: str) -> None:
        t = (self._clock() - self.t0) / NS
        self._markers.append((t, label))
        if self.recorder:
            self.recorder.event(self._clock(), label, type="marker")

    def log(self, level: str, text: str) -> None:
        with self._lock:
            self._log_seq += 1
            self._log.append((self._log_seq, (self._clock() - self.t0) / NS, level, text))
        if self.recorder:
            self.recorder.event(self._clock(), text, level=level)

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            return self._snapshot

    # ---- sampling ----------------------------------------------------------------------------
    def _drain(self) -> None:
        while True:
            try:
                ev = self.fleet.events.get_nowait()
            except queue.Empty:
                return
            kind = ev[0]
            if kind == "tokens":
                _, wid, rid, ts = ev
                self._tokens.extend((t, wid, rid) for t in ts)
            elif kind == "record":
                rec = ev[1]
                with self._lock:
                    self._records.append(rec)
                    if rec.error:
                        self._errors += 1
                if rec.error:
                    self.log("error", f"request {rec.request_id} failed: {rec.error}")
                if self.recorder:
                    self.recorder.record(rec)
            elif kind == "log":
                self.log("info", ev[1])
            elif kind == "error":
                self.log("error", ev[1])

    def _window_stats(self, now: int) -> tuple[float, list[float], dict[int, float], dict[int, float]]:
        a = now - int(self.s.window_s * NS)
        while self._tokens and self._tokens[0][0] < a:
            self._tokens.popleft()
        per_req: dict[int, list[int]] = {}
        per_worker: dict[int, int] = {}
        steps: dict[int, set] = {}  # batch mode: all tokens of one step share its timestamp
        for t, wid, rid in self._tokens:
            per_req.setdefault(rid, []).append(t)
            per_worker[wid] = per_worker.get(wid, 0) + 1
            steps.setdefault(wid, set()).add(t)
        # the window may hold less than window_s of history right after start
        span = min(self.s.window_s, max(1e-9, (now - self.t0) / NS))
        agg = len(self._tokens) / span
        tpots = [(ts[-1] - ts[0]) / (len(ts) - 1) / NS for ts in per_req.values() if len(ts) >= 2]
        return (agg, tpots, {w: n / span for w, n in per_worker.items()},
                {w: len(ts) / span for w, ts in steps.items()})

    def _check_wall(self, prev, cur, agg: float, now: int) -> None:
        step = self._last_step
        since = (now - step[3]) / NS if step else 0.0
        why = detect_wall(prev, cur, step[4] if step else None, agg if step else None, since)
        if why is None:
            return
        first = not (self._wall and now < self._wall_until)
        self._wall = why
        self._wall_until = now + int(WALL_HOLD_S * NS)
        if not first:
            return
        self.mark("WALL")
        self.log("error", f"memory wall: {why}")
        if self.s.brake and step and self._braked_step is not step:
            self._braked_step = step
            kind, old, new = step[0], step[1], step[2]
            if new > old:
                (self.set_k if kind == "k" else self.set_b)(old, admit_check=False)
                self.log("warn", f"brake: undid the last step, {kind.upper()} {new} → {old}")
        elif not self.s.brake:
            self.log("warn", "--no-brake: the last step stays; lower K or B by hand")

    def _request_numbers(self) -> dict:
        """TTFT and ITL over the requests since the last reset, recomputed only when one more ended."""
        with self._lock:
            key = (len(self._records), self._errors, id(self._records))
            if key == getattr(self, "_numbers_key", None):
                return self._numbers_cache
            records = list(self._records)
            errors = self._errors
        good = M.ok(records)
        ttfts = [M.ttft(r) for r in good]
        ttfte = [M.ttft_engine(r) for r in good]
        out = {
            "ttft_p50": M.percentile(ttfts, 50), "ttft_p99": M.percentile(ttfts, 99),
            "ttft_engine_p50": M.percentile(ttfte, 50), "ttft_engine_p99": M.percentile(ttfte, 99),
            "itl_p50": M.percentile(M.itls(good[-ITL_REQUESTS:]), 50),  # last ITL_REQUESTS
            "requests": len(good), "errors": errors,
        }
        self._numbers_key, self._numbers_cache = key, out
        return out

    def state(self, workers) -> str:
        if self._wall and self._clock() < self._wall_until:
            return "WALL"
        if self.paused:
            return "paused"
        active = [w for w in workers if w.state not in ("dead", "retired", "retiring")]
        if not any(w.ready_ns for w in active):
            return "loading"
        if any(not w.ready_ns for w in active) or len(active) < self.k:
            return "warming"
        return "steady"

    def tick(self) -> Snapshot:
        self._drain()
        now = self._clock()
        t = (now - self.t0) / NS
        agg, tpots, per_worker_tps, steps_per_s = self._window_stats(now)
        p50, p90 = M.percentile(tpots, 50), M.percentile(tpots, 90)
        W = self.fleet.meta.model_bytes
        workers = self.fleet.workers()
        serving = sum(1 for w in workers if w.ready_ns and w.state not in ("dead", "retired"))
        if self.mode == "http":
            bw = None  # the weights are read on the server
        elif self.mode == "batch":
            bw = M.bandwidth_product_batch(list(steps_per_s.values()), W) if steps_per_s else None
        else:
            bw = M.bandwidth_product_instances(1 / p50, W, max(1, serving)) if p50 else None
        # K instances share β; a batch of B reads the weights once per step for all B
        pred = M.predicted_tpot(self.k, W, self.s.bandwidth_gbps) if self.s.bandwidth_gbps else None
        prev_sys = self._last_sys
        sysv = self._sys.sample()
        self._last_sys = sysv
        self._tps_now = agg
        procs = self._procs.sample([w.pid for w in workers if w.state not in ("dead", "retired")])
        rows = tuple(
            WorkerRow(w.wid, w.pid, w.state, w.threads, procs.get(w.pid, (w.rss, None))[0],
                      procs.get(w.pid, (None, None))[1], per_worker_tps.get(w.wid, 0.0), w.requests_done,
                      w.last_ttft_s)
            for w in workers
        )
        rss_sum = sum(r.rss or 0 for r in rows if r.state not in ("dead", "retired"))
        if self._overhead is None:
            ready_rss = [w.rss for w in workers if w.ready_ns and w.rss]
            if ready_rss:  # what a warmed-up worker holds beyond its weights
                self._overhead = max(0, min(ready_rss) - self.fleet.meta.model_bytes)
        self._check_wall(prev_sys, sysv, agg, now)
        cpu_sum = sum(r.cpu or 0.0 for r in rows if r.state not in ("dead", "retired"))
        numbers = {
            **self._request_numbers(), "agg_tps": agg, "tpot_p50": p50, "tpot_p90": p90,
            "bw_gbps": bw, "predicted_tpot": pred, "streams": len(tpots),
            "bw_formula": {"batch": "Σ steps/s × W, W = file bytes (KV not live)",
                           "http": "n/a: the weights are on the server"}.get(self.mode,
                                                                             "1/TPOT p50 × W × K, W = file bytes"),
            "server_view": getattr(self.fleet, "server_view", None),
            "workers_cpu_percent": cpu_sum,
            "footprint": self.footprint(self.k, self.b).total, "budget": self.budget(), "wall": self._wall,
            "ceiling": ceiling(bw, self.s.bandwidth_gbps, cpu_sum, self._cores),
        }
        point = Point(t, agg, p50, p90, pred, bw, sysv.mem_used, sysv.swap_used)
        self._history.append(point)
        state = self.state(workers)
        if self.recorder:  # everything a replay needs to draw this moment again
            self.recorder.write({
                "kind": "sample", "t_ns": now, "t": t, "k": self.k, "b": self.b, "mode": self.mode,
                "paused": self.paused, "state": state, "users": self.users(), "system": asdict(sysv),
                "workers": [asdict(w) for w in workers], "procs": {str(p): list(v) for p, v in procs.items()},
                "agg_tps": agg, "tpot_p50": p50, "bw_gbps": bw,
            })
        with self._lock:
            self._version += 1
            snap = Snapshot(
                version=self._version, t=t, state=state, mode=self.mode, k=self.k, b=self.b,
                users=f"{self.s.rate:g}/s" if self.s.rate else str(self.users()), paused=self.paused,
                simulated=bool(self.fleet.meta.simulated), workers=rows, numbers=numbers, system=sysv,
                rss_sum=rss_sum, history=tuple(self._history), markers=tuple(self._markers), log=tuple(self._log),
            )
            self._snapshot = snap
        return snap


