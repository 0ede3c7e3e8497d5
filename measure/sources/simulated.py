"""A SIMULATED fleet for tests and demos: no engine runs, tokens follow the bandwidth model.

Every record it makes says ``simulated: true`` and the dashboard shows SIMULATED in its header.
A worker added by a K step warms up for `warmup_s` (default 0) before it serves.
Decode follows TPOT(K) = K · W / β_sim with a fixed prefill time, so its numbers are what the physics
predicts, not a measurement. It is driven by `advance(now_ns)`: from a thread in a demo, by hand (with
a fake clock) in snapshot tests, so the screen is deterministic.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from measure.core.metrics import ttft
from measure.core.records import Mode, Outcome, RunMeta, ServedBy, build_record
from measure.core.units import NS
from measure.core.workload import ClosedLoop, Load, Request
from measure.sources.base import (Capabilities, Event, Finished, LevelReady, LoadStarted, Log, Started, Tokens,
                                  WorkerInfo, WorkerState)
from measure.sources.dispatch import Dispatcher

if TYPE_CHECKING:
    from presets import Workload

S = WorkerState


class SimulatedFleet:
    def __init__(self, meta: RunMeta, k: int = 1, bandwidth_gbps: float = 100.0, prefill_s: float = 0.05,
                 clock: Callable[[], int] | None = None, threaded: bool = True, warmup_s: float = 0.0) -> None:
        self.meta = RunMeta(**{**meta.__dict__, "simulated": True})
        self.target_k = k
        self.beta = bandwidth_gbps
        self.prefill_ns = int(prefill_s * NS)
        self.warmup_ns = int(warmup_s * NS)
        self._ready_at: dict[int, int] = {}  # a warming worker → when it is ready
        self._level_wait = False  # a K/B/mode step whose LevelReady is not sent yet
        self.events: queue.Queue[Event] = queue.Queue()
        self.rep = 0
        self.oom_killed: list[tuple[int, int, str]] = []  # nothing here runs under this machine's OOM killer
        self.run_id = "simulated"
        self._clock = clock or time.perf_counter_ns
        self._threaded = threaded
        self._ids = itertools.count(1)
        self._dispatch = Dispatcher(self._clock)  # request ids, prompts and release (sources/dispatch.py)
        self._workers: dict[int, WorkerInfo] = {}
        self._busy: dict[int, dict[str, Any]] = {}  # wid -> {"reqs": [request states], "next": next step time}
        self.mode = self.meta.mode
        self.b = self.meta.b
        self.b_cap = max(16, self.b)
        self._load: tuple[Workload, int] | None = None
        self._paused = False
        self._users: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last = None
        self._started_load = False

    def capabilities(self) -> Capabilities:
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes,
                            modes=("instances", "batch"), scales_k=True, local=True, batch_capacity=self.b_cap,
                            server_view=False, simulated=True, level_ready=True, finite_loads=False)

    def server_view(self) -> dict[str, Any] | None:
        return None

    def wait_ready(self, timeout: float = 0) -> None:
        pass

    def start(self, wait_ready: bool = True, timeout: float = 0) -> None:
        for _ in range(self.target_k):
            self._spawn()
        if self._threaded:
            threading.Thread(target=self._run, daemon=True, name="simulated-fleet").start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.advance(self._clock())

    def _spawn(self, warm: bool = False) -> None:
        wid = next(self._ids)
        now = self._clock()
        warming = warm and self.warmup_ns > 0
        self._workers[wid] = WorkerInfo(wid, state=S.WARMING if warming else S.IDLE, pid=None, threads=1,
                                        rss=300_000_000, ready_ns=None if warming else now)
        if warming:
            self._ready_at[wid] = now + self.warmup_ns
        self.events.put(Log("info", f"worker {wid} started (simulated)"))

    def scale_to(self, k: int) -> None:
        with self._lock:
            active = [w for w in self._workers.values() if not w.state.leaving]
            self.target_k = k
            for _ in range(k - len(active)):
                self._spawn(warm=True)
            for w in sorted(active, key=lambda w: -w.wid)[: max(0, len(active) - k)]:
                w.state = S.RETIRING if self._busy.get(w.wid, {}).get("reqs") else S.RETIRED
            self.events.put(Log("info", f"K → {k}"))
            self._level_wait = True
            self._level_check(self._clock())

    def set_load(self, load: Load | None) -> None:
        self._load = (load.workload, load.max_tokens) if load else None
        # its own closed loop whatever the load's arrivals: a request starts the moment a slot is free (below
        # `users`), never queued, so the snapshots stay the same on every machine
        self._dispatch.set_load(Load(load.workload, ClosedLoop(1), load.max_tokens) if load else None)
        if self._users is None and load is not None:
            self._users = load.arrivals.users if isinstance(load.arrivals, ClosedLoop) else 10**9

    def set_users(self, users: int | None) -> None:
        self._users = users or 10**9  # None: every ready worker serves

    def pause(self, paused: bool = True) -> None:
        self._paused = paused
        self._dispatch.paused = paused  # its closed loop has no schedule to move on

    def workers(self) -> list[WorkerInfo]:
        with self._lock:
            return [w.public() for w in self._workers.values()]

    def close(self, grace: float = 0) -> None:
        self._stop.set()

    def set_batch(self, mode: Mode, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        self.mode, self.b = mode, b
        self.b_cap = max(self.b_cap, b)
        with self._lock:
            self._level_wait = True
            self._level_check(self._clock())

    def _serving(self) -> list[WorkerInfo]:
        return [w for w in self._workers.values() if w.ready_ns and not w.state.leaving]

    def _level_check(self, now: int) -> None:
        """Every worker of the K asked is ready: the level asked last starts now (LevelReady)."""
        active = [w for w in self._workers.values() if not w.state.leaving]
        if self._level_wait and len(active) >= self.target_k and all(w.ready_ns for w in active):
            self._level_wait = False
            self.events.put(LevelReady(now, self.target_k, self.b, self.mode))

    def advance(self, now: int) -> None:
        """Move the simulation to `now`: admit requests into free slots, emit the tokens of every step
        that is due. A step reads the weights once for all of a worker's sequences; K workers share β."""
        with self._lock:
            if self._load is None:
                return
            if not self._started_load:
                self._started_load = True
                self.events.put(LoadStarted(now))
            cap = self.b if self.mode == "batch" else 1
            for wid, t in sorted(self._ready_at.items()):
                if t <= now:
                    del self._ready_at[wid]
                    w = self._workers[wid]
                    if w.state == S.WARMING:
                        w.state, w.ready_ns = S.IDLE, t
                        self.events.put(Log("info", f"worker {wid} ready (simulated)"))
                        self._level_check(t)
            active = [w for w in self._workers.values() if not w.state.gone]
            n_serving = max(1, sum(1 for w in active if w.ready_ns and w.state != S.RETIRING))  # warming: no reads
            step_ns = int(n_serving * self.meta.model_bytes / (self.beta * 1e9) * NS)
            in_flight = sum(len(v["reqs"]) for v in self._busy.values())
            serving = [w for w in active if w.ready_ns and w.state != S.RETIRING]
            free = sum(max(0, cap - len(self._busy.get(w.wid, {}).get("reqs", ()))) for w in serving)
            if free:  # as many requests as there are free slots, up to the users
                assert self._users is not None  # set with the first load (set_load), and a load is set here
                self._dispatch.set_users(min(self._users, in_flight + free))
                self._dispatch.release(in_flight, rep=self.rep, k=self.target_k, b=self.b, mode=self.mode)
            for w in active:
                st = self._busy.setdefault(w.wid, {"reqs": [], "next": None})
                if w in serving:
                    self._dispatch.dispatch(lambda: w if len(st["reqs"]) < cap else None,
                                            lambda w, req: self._admit(w, st, req, now))
                while st["reqs"] and st["next"] is not None and st["next"] <= now:
                    t = st["next"]
                    for r in st["reqs"]:
                        r["tokens"].append(t)
                        self.events.put(Tokens(w.wid, r["rid"], [t]))
                        w.tokens += 1
                    for r in [r for r in st["reqs"] if len(r["tokens"]) >= r["max_tokens"]]:
                        st["reqs"].remove(r)
                        self._finish(w, r)
                    st["next"] = t + step_ns
                if not st["reqs"]:
                    st["next"] = None
                    w.current = None
                    w.state = S.RETIRED if w.state == S.RETIRING else (S.IDLE if w.state == S.SERVING else w.state)
                w.active = len(st["reqs"])

    def _admit(self, w: WorkerInfo, st: dict[str, Any], req: Request, now: int) -> bool:
        """A request into a free slot of `w`: it starts now (its first token after the prefill)."""
        st["reqs"].append({"rid": req.request_id, "req": req, "max_tokens": req.max_tokens, "t0": now, "tokens": []})
        self.events.put(Started(w.wid, req.request_id, now))
        st["reqs"][-1]["k"] = max(1, len(self._serving()))  # the workers serving it: its records' K
        if st["next"] is None:
            st["next"] = now + self.prefill_ns
        w.state, w.current = S.SERVING, req.request_id
        return True

    def _finish(self, w: WorkerInfo, cur: dict[str, Any]) -> None:
        toks = cur["tokens"]
        req = replace(cur["req"], max_tokens=len(toks), ignore_eos=True, t_scheduled_ns=cur["t0"],
                      t_submitted_ns=cur["t0"], rep=self.rep, k=cur.get("k", self.target_k), b=self.b, mode=self.mode)
        rec = build_record(req, self.meta, self.run_id, Outcome(toks, cur["t0"], toks[-1], 16, "length"),
                           ServedBy(w.wid, rss=w.rss))
        w.requests_done += 1
        w.last_ttft_s = ttft(rec)
        self.events.put(Finished(rec))
