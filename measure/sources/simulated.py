"""A SIMULATED fleet for tests and demos: no engine runs, tokens follow the bandwidth model.

Every record it makes says ``simulated: true`` and the dashboard shows SIMULATED in its header.
A worker added by a K step warms up for `warmup_s` (default 0) before it serves.
Decode follows TPOT(K) = K · W / β_sim with a fixed prefill time, so its numbers are what the physics
predicts, not a measurement. It is driven by `advance(now_ns)`: from a thread in a demo, by hand (with
a fake clock) in snapshot tests, so the screen is deterministic.

A closed loop runs as its own: a request starts the moment a slot is free (below `users`), never queued. An open
loop (Poisson, a constant rate, a trace: core/arrivals.py) is honoured as the real fleet honours it: a request is
released at its scheduled time, never before, waits in the shared queue for a free slot (its TTFT, counted from
the scheduled time, includes that wait) and starts when a slot is free and it has arrived, at that instant, not
at the next `advance` (the simulation has no client of its own: its lateness is 0).
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
from measure.core.records import Request
from measure.core.workload import ClosedLoop, Load, is_open_loop
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
        self._now = 0  # the time advance() moves the simulation to: the dispatcher's clock
        # request ids, prompts, the load's arrivals and start, the slot rule (sources/dispatch.py)
        self._dispatch = Dispatcher(lambda: self._now, on_start=lambda t: self.events.put(LoadStarted(t)))
        self._open = False  # the load's arrivals are an open loop (its own schedule)
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
        self._open = load is not None and is_open_loop(load.arrivals)
        # an open loop as it is; else its own closed loop: a request starts the moment a slot is free (below
        # `users`), never queued, so the snapshots stay the same on every machine
        with self._lock:
            self._dispatch.set_load(None if load is None else load if self._open
                                    else Load(load.workload, ClosedLoop(1), load.max_tokens))
        if self._users is None and load is not None:
            self._users = load.arrivals.users if isinstance(load.arrivals, ClosedLoop) else 10**9

    def set_users(self, users: int | None) -> None:
        self._users = users or 10**9  # None: every ready worker serves

    def pause(self, paused: bool = True) -> None:
        self._paused = paused
        with self._lock:
            if self._open:  # the rest of an open loop's schedule moves on by the pause
                self._dispatch.pause(paused)
            else:  # its closed loop has no schedule to move on
                self._dispatch.paused = paused

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
            self._now = now
            self._dispatch.start()  # the load starts at the first advance that has one (LoadStarted)
            cap = self.b if self.mode == "batch" else 1
            self._warmed(now)
            active = [w for w in self._workers.values() if not w.state.gone]
            n_serving = max(1, sum(1 for w in active if w.ready_ns and w.state != S.RETIRING))  # warming: no reads
            step_ns = int(n_serving * self.meta.model_bytes / (self.beta * 1e9) * NS)
            in_flight = sum(len(v["reqs"]) for v in self._busy.values())
            serving = [w for w in active if w.ready_ns and w.state != S.RETIRING]
            free = sum(max(0, cap - len(self._busy.get(w.wid, {}).get("reqs", ()))) for w in serving)
            if self._open:  # its arrivals due by now, each at its own time, into the shared queue
                for req in self._dispatch.release(in_flight, rep=self.rep, k=self.target_k, b=self.b, mode=self.mode):
                    req.t_submitted_ns = req.t_scheduled_ns  # released on schedule: no client of its own to be late
            elif free:  # as many requests as there are free slots, up to the users
                assert self._users is not None  # set with the first load (set_load), and a load is set here
                self._dispatch.set_users(min(self._users, in_flight + free))
                self._dispatch.release(in_flight, rep=self.rep, k=self.target_k, b=self.b, mode=self.mode)
            for w in active:
                self._serve(w, w in serving, cap, now, step_ns)

    def _warmed(self, now: int) -> None:
        """Workers whose warmup ended by `now` serve from its end."""
        for wid, t in sorted(self._ready_at.items()):
            if t <= now:
                del self._ready_at[wid]
                w = self._workers[wid]
                if w.state == S.WARMING:
                    w.state, w.ready_ns = S.IDLE, t
                    self.events.put(Log("info", f"worker {wid} ready (simulated)"))
                    self._level_check(t)

    def _serve(self, w: WorkerInfo, serving: bool, cap: int, now: int, step_ns: int) -> None:
        """One worker up to `now`: requests into its free slots, then its decode steps that are due. In an open
        loop a request starts when both it has arrived and a slot is free (after the step that freed it)."""
        st = self._busy.setdefault(w.wid, {"reqs": [], "next": None, "free_at": w.ready_ns or 0})
        if serving:
            self._fill(w, st, cap, now)
        while st["reqs"] and st["next"] is not None and st["next"] <= now:
            t = st["next"]
            for r in st["reqs"]:
                if self._open and r["t0"] > t:  # admitted after this step began: its first token is the next one
                    continue
                r["tokens"].append(t)
                self.events.put(Tokens(w.wid, r["rid"], [t]))
                w.tokens += 1
            for r in [r for r in st["reqs"] if len(r["tokens"]) >= r["max_tokens"]]:
                st["reqs"].remove(r)
                self._finish(w, r)
            st["next"] = t + step_ns
            if self._open and serving:
                st["free_at"] = t
                if not st["reqs"]:
                    st["next"] = None
                self._fill(w, st, cap, now)
        if not st["reqs"]:
            st["next"] = None
            w.current = None
            w.state = S.RETIRED if w.state == S.RETIRING else (S.IDLE if w.state == S.SERVING else w.state)
        w.active = len(st["reqs"])

    def _fill(self, w: WorkerInfo, st: dict[str, Any], cap: int, now: int) -> None:
        """The head of the shared queue into `w`'s free slots (the dispatcher's rule: this worker, while it has
        room); in an open loop each starts at max(its arrival, when the slot became free), else now."""
        def admit(w: WorkerInfo, req: Request) -> bool:
            at = max(req.t_scheduled_ns, st["free_at"], w.ready_ns or 0) if self._open else now
            return self._admit(w, st, req, at)

        def room() -> WorkerInfo | None:
            got = self._dispatch.choose([w], lambda _: len(st["reqs"]), lambda _: cap, first=True)
            return got[0] if got else None

        self._dispatch.dispatch(room, admit)

    def _admit(self, w: WorkerInfo, st: dict[str, Any], req: Request, now: int) -> bool:
        """A request into a free slot of `w`: it starts at `now` (its first token after the prefill)."""
        st["reqs"].append({"rid": req.request_id, "req": req, "max_tokens": req.max_tokens, "t0": now, "tokens": []})
        self.events.put(Started(w.wid, req.request_id, now))
        st["reqs"][-1]["k"] = max(1, len(self._serving()))  # the workers serving it: its records' K
        if st["next"] is None:
            st["next"] = now + self.prefill_ns
        w.state, w.current = S.SERVING, req.request_id
        return True

    def _finish(self, w: WorkerInfo, cur: dict[str, Any]) -> None:
        toks = cur["tokens"]
        req: Request = cur["req"]
        # an open loop's request keeps its arrival (its TTFT includes the wait for a slot); a closed loop's user
        # sent it the moment it started
        t_sched, t_sub = (req.t_scheduled_ns, req.t_submitted_ns) if self._open else (cur["t0"], cur["t0"])
        req = replace(req, max_tokens=len(toks), ignore_eos=True, t_scheduled_ns=t_sched,
                      t_submitted_ns=t_sub, rep=self.rep, k=cur.get("k", self.target_k), b=self.b, mode=self.mode)
        rec = build_record(req, self.meta, self.run_id, Outcome(toks, cur["t0"], toks[-1], 16, "length"),
                           ServedBy(w.wid, rss=w.rss))
        self._dispatch.finished(req, None, toks[-1])
        w.requests_done += 1
        w.last_ttft_s = ttft(rec)
        self.events.put(Finished(rec))
