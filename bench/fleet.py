"""The fleet: K engine workers (one process each, spawn context) draining one shared request queue.

One I/O thread in the parent owns all fleet state: it waits on every worker's pipe and process
sentinel at once, hands the head of the shared queue to whichever worker asks first, turns worker
messages into records, and detects a dead worker within one wait (≤ 50 ms). Everything outside talks
to it through `self._cmds` and reads what happened from `self.events`; nothing here blocks a UI.
"""
from __future__ import annotations

import atexit
import itertools
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

from bench.records import RequestRecord
from bench.workload import Request, prompt_for
from engines.base import EngineSpec
from presets import Workload

WAIT_S = 0.5  # the I/O thread sleeps this long at most; commands and workers wake it at once


class FleetError(RuntimeError):
    """The fleet cannot go on (no worker could load, or all died); the message is one line."""


class CellStopped(RuntimeError):
    """A finite load stopped early (the memory wall); `records` holds what finished before."""

    def __init__(self, why: str, records):
        super().__init__(why)
        self.records = list(records)


class RecordCollector:
    """The records of one finite load, and the wait for them (both fleets' run_requests)."""

    def __init__(self, total: int):
        self.total = total
        self.done: list[RequestRecord] = []
        self._ev = threading.Event()

    def __call__(self, rec: RequestRecord) -> None:
        self.done.append(rec)
        if len(self.done) >= self.total:
            self._ev.set()

    def wait(self, timeout: float | None, should_stop: Callable[[], str | None] | None) -> list[RequestRecord]:
        """Until all records are in; TimeoutError past `timeout`, CellStopped when should_stop (asked twice
        a second) gives a reason."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ev.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"cell did not finish within {timeout:.0f} s "
                                   f"({len(self.done)}/{self.total} requests)")
            if not self._ev.wait(0.5 if left is None else min(0.5, left)) and should_stop and (why := should_stop()):
                raise CellStopped(why, self.done)
        return self.done


def physical_cores() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        return os.cpu_count() or 1


def auto_threads(k: int) -> int:
    """Physical cores ÷ K, at least 1, so K workers never oversubscribe the CPU."""
    return max(1, physical_cores() // max(1, k))


@dataclass
class WorkerInfo:
    wid: int
    state: str = "starting"  # starting | loading | warming | serving | idle | retiring | retired | dead
    pid: int | None = None
    threads: int | None = None
    rss: int | None = None
    requests_done: int = 0
    tokens: int = 0
    last_ttft_s: float | None = None
    current: int | None = None  # the request it began last, None when idle
    active: int = 0  # requests it holds now (up to B in batch mode)
    ready_ns: int | None = None
    error: str | None = None

    def public(self) -> "WorkerInfo":
        return WorkerInfo(**self.__dict__)


@dataclass
class _Worker:
    info: WorkerInfo
    proc: mp.Process
    conn: object
    inflight: set = field(default_factory=set)
    idle_since: int = 0  # when its last request ended: the longest idle asks first, as on a shared queue
    mode_pending: bool = False  # a mode change sent, not yet applied (its batch context being made)
    retire: bool = False


@dataclass
class _InFlight:
    req: Request
    wid: int | None = None
    t_started_ns: int | None = None
    tokens: list[int] = field(default_factory=list)


@dataclass
class RunMeta:
    engine: str
    model: str
    model_bytes: int
    mode: str = "instances"
    b: int = 1
    simulated: bool = False


class Fleet:
    def __init__(self, spec: EngineSpec, meta: RunMeta, k: int = 1, threads: int | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None, b_cap: int | None = None,
                 events: bool = True):
        if k < 1:
            raise FleetError(f"K must be at least 1 (got {k})")
        self.spec = spec
        self.meta = meta
        self.fixed_threads = threads
        self.on_record = on_record
        # what happened, for a live reader; a headless sweep reads records through on_record instead
        self.events: queue.Queue | None = queue.Queue() if events else None
        self.target_k = k
        self.mode = meta.mode if meta.mode in ("instances", "batch") else "instances"
        self.b = meta.b
        self.b_cap = max(b_cap or 1, meta.b)  # sequences a batch context holds; B above it remakes it
        self.seq_ctx: int | None = None  # tokens per sequence in the batch context (None: the spec's ctx)
        self.run_id = uuid.uuid4().hex[:12]
        self.log_dir = Path(os.environ.get("INFERENCE_TOP_LOGS", Path.home() / ".cache" / "inference-top" / "logs")) / self.run_id
        self.rep = 0
        self._ctx = mp.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._ids = itertools.count(1)
        self._req_ids = itertools.count(1)
        self._pending: deque[Request] = deque()  # the one shared request queue
        self._inflight: dict[int, _InFlight] = {}
        self._cmds: queue.Queue = queue.Queue()
        self._cmds_put = 0
        self._cmds_done = 0
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._lock = threading.Lock()
        self._snapshot: dict[int, WorkerInfo] = {}
        self._load = None  # (workload, arrivals, max_tokens, ignore_eos)
        self._load_started = False
        self._paused = False
        self._auto_users = False  # True: closed-loop users follow ready workers × B (the dashboard)
        self._closed = False
        self._fatal: str | None = None
        self._thread = threading.Thread(target=self._loop, name="fleet-io", daemon=True)
        self._started = False
        self._prompt_index = itertools.count()
        atexit.register(self.close)

    # ---- public API (any thread) -------------------------------------------------------------
    def _command_put(self, cmd) -> None:
        with self._lock:
            self._cmds_put += 1
        self._cmds.put(cmd)
        try:
            self._wake_w.send_bytes(b"!")
        except (OSError, ValueError):
            pass

    def start(self, wait_ready: bool = True, timeout: float = 600.0) -> None:
        self._started = True
        for _ in range(self.target_k):
            self._spawn()
        self._thread.start()
        if wait_ready:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Block until every worker of the target K is ready (or raise FleetError)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._fatal:
                raise FleetError(self._fatal)
            with self._lock:
                synced = self._cmds_done >= self._cmds_put
            snap = self.workers()
            live = [w for w in snap if w.state not in ("retired", "dead", "retiring")]
            # every command given before this call applied, every worker warmed up and in its mode
            if synced and len(live) >= self.target_k and all(w.ready_ns and w.state != "warming" for w in live):
                return
            if not live and snap:
                raise FleetError(self._first_error(snap) or "every worker died before it was ready")
            time.sleep(0.02)
        raise FleetError(f"workers not ready after {timeout:.0f} s")

    def scale_to(self, k: int) -> None:
        if k < 1:
            raise FleetError(f"K must be at least 1 (got {k})")
        self.target_k = k  # at once, so wait_ready() waits for the new workers
        self._command_put(("scale", k))

    def set_batch(self, mode: str, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        """instances: one request per worker; batch: up to b sequences per worker, decoded together in a
        context made for b_cap sequences (default: the largest B so far) of seq_ctx tokens each."""
        if mode not in ("instances", "batch"):
            raise FleetError(f"mode must be instances or batch (got {mode!r})")
        if b < 1:
            raise FleetError(f"B must be at least 1 (got {b})")
        self.mode, self.b = mode, b
        self.b_cap = max(b, b_cap) if b_cap else max(self.b_cap, b)
        self.seq_ctx = seq_ctx or self.seq_ctx
        self._command_put(("batch", (mode, b)))

    def set_load(self, workload: Workload, arrivals, max_tokens: int, ignore_eos: bool = True) -> None:
        """Start (or replace) the load. Requests flow once every worker of the target K is ready."""
        self._command_put(("load", (workload, arrivals, max_tokens, ignore_eos)))

    def pause(self, paused: bool = True) -> None:
        self._command_put(("pause", paused))

    def set_users(self, users: int | None) -> None:
        """Closed-loop users; None: ready workers × B, so a warming worker's users do not queue."""
        self._command_put(("users", users))

    def workers(self) -> list[WorkerInfo]:
        with self._lock:
            return [w.public() for w in self._snapshot.values()]

    def run_requests(self, workload: Workload, arrivals, max_tokens: int, ignore_eos: bool = True,
                     timeout: float | None = None, should_stop: Callable[[], str | None] | None = None
                     ) -> list[RequestRecord]:
        """Run a finite load to completion and return its records (the headless sweep's cell).

        `should_stop` is asked twice a second; a reason from it ends the wait with CellStopped."""
        assert arrivals.total is not None, "run_requests needs arrivals with a total"
        collect = RecordCollector(arrivals.total)
        self._command_put(("collector", collect))
        self.set_load(workload, arrivals, max_tokens, ignore_eos)
        try:
            done = collect.wait(timeout, should_stop)
        except CellStopped:
            self.pause(True)
            raise
        finally:
            self._command_put(("collector", None))
        if self._fatal:
            raise FleetError(self._fatal)
        return done

    def close(self, grace: float = 1.0) -> None:
        """Stop every worker: ask, then SIGTERM, then SIGKILL. Idempotent; never leaves a child."""
        if self._closed:
            return
        self._closed = True
        self._command_put(("close", None))
        if self._thread.is_alive():
            self._thread.join(timeout=grace + 0.5)
        procs = [w.proc for w in self._workers.values()]
        for w in self._workers.values():
            self._send(w, ("stop",))
        deadline = time.monotonic() + grace
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=0.5)
            if p.is_alive():
                p.kill()
                p.join(timeout=0.5)
        for w in self._workers.values():
            try:
                w.conn.close()
            except OSError:
                pass

    # ---- the I/O thread ----------------------------------------------------------------------
    def _threads_for(self, k: int) -> int:
        return self.fixed_threads or auto_threads(k)

    def _spawn(self) -> None:
        from bench.worker import worker_main

        wid = next(self._ids)
        threads = self._threads_for(self.target_k)
        spec = dict(self.spec.to_dict(), threads=threads)
        parent, child = self._ctx.Pipe(duplex=True)
        log = str(self.log_dir / f"worker-{wid}.log")
        proc = self._ctx.Process(target=worker_main, args=(wid, child, spec, log), name=f"it-worker-{wid}",
                                 daemon=True)
        proc.start()
        child.close()
        info = WorkerInfo(wid, state="starting", pid=proc.pid, threads=threads)
        self._workers[wid] = _Worker(info, proc, parent)
        self._emit("log", f"worker {wid} started (pid {proc.pid}, {threads} threads)")
        self._publish()

    def _emit(self, kind: str, *payload) -> None:
        if self.events is not None:
            self.events.put((kind, *payload))

    def _publish(self) -> None:
        with self._lock:
            self._snapshot = {wid: w.info.public() for wid, w in self._workers.items()}

    def _send(self, w: _Worker, msg) -> bool:
        try:
            w.conn.send(msg)
            return True
        except (OSError, ValueError):
            return False

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers.values() if w.info.state not in ("dead", "retired")]

    def _active(self) -> list[_Worker]:
        return [w for w in self._live() if not w.retire]

    def _loop(self) -> None:
        collector = None
        try:
            while True:
                try:
                    while True:
                        cmd, arg = self._cmds.get_nowait()
                        if cmd == "close":
                            return
                        if cmd == "collector":
                            collector = arg
                        else:
                            self._command(cmd, arg)
                        self._cmds_done += 1
                except queue.Empty:
                    pass
                # new arrivals go out before the wait, so a closed-loop user's next request never waits
                # on this thread's sleep
                self._arrivals()
                self._dispatch()
                self._publish()
                objs = [self._wake_r]
                for w in self._live():
                    objs += [w.conn, w.proc.sentinel]
                timeout = WAIT_S
                if self._load and not self._paused:
                    nxt = self._load[1].next_wakeup_ns()
                    if nxt is not None:
                        timeout = min(WAIT_S, max(0.0, (nxt - time.perf_counter_ns()) / 1e9))
                ready = wait(objs, timeout)
                if self._wake_r in ready:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                for w in list(self._live()):
                    if w.conn in ready:
                        self._drain(w, collector)
                for w in list(self._live()):
                    if w.proc.sentinel in ready or not w.proc.is_alive():
                        self._drain(w, collector)
                        if w.info.state not in ("retired", "dead"):
                            self._died(w, collector)
                        elif w.info.state == "retired":
                            w.proc.join(timeout=0.1)
        except Exception as exc:  # the I/O thread must never die silently
            self._fatal = f"fleet I/O thread failed: {type(exc).__name__}: {exc}"
            self._emit("error", self._fatal)

    def _command(self, cmd: str, arg) -> None:
        if cmd == "scale":
            self._scale(arg)
        elif cmd == "load":
            self._load = arg
            self._load_started = False
        elif cmd == "pause":
            if self._paused and not arg and self._load:
                self._load[1].resume(time.perf_counter_ns())
            self._paused = arg
            self._emit("log", "load paused" if arg else "load resumed")
        elif cmd == "batch":
            for w in self._live():
                if w.info.ready_ns:
                    self._send_mode(w)
        elif cmd == "users":
            self._auto_users = arg is None
            if arg is not None and self._load and hasattr(self._load[1], "users"):
                self._load[1].users = arg

    def _send_mode(self, w: _Worker) -> None:
        """Tell a worker the mode; it takes no request until it says the mode is applied."""
        if self._send(w, self._mode_msg()):
            w.mode_pending = True
            w.info.state = "warming" if not w.inflight else w.info.state

    def _mode_msg(self):
        return ("mode", "batch" if self.mode == "batch" else "single", self.b, self.b_cap, self.seq_ctx)

    def _capacity(self) -> int:
        return self.b if self.mode == "batch" else 1

    def _scale(self, k: int) -> None:
        active = self._active()
        if k > len(active):
            for _ in range(k - len(active)):
                self._spawn()
        elif k < len(active):
            # retire the newest first: idle ones at once, busy ones after their current request
            for w in sorted(active, key=lambda w: w.info.wid, reverse=True)[: len(active) - k]:
                w.retire = True
                w.info.state = "retiring"
                if not w.inflight:
                    self._send(w, ("retire",))
        if self.fixed_threads is None:
            n = self._threads_for(k)
            for w in self._active():
                if w.info.threads != n:
                    if self._send(w, ("threads", n)):
                        w.info.threads = n

    def _ready_to_measure(self) -> bool:
        active = self._active()
        return len(active) >= self.target_k and all(w.info.ready_ns and not w.mode_pending for w in active)

    def _arrivals(self) -> None:
        if not self._load or self._paused:
            return
        if not self._load_started:
            # measurement starts only when every worker of the target K has finished its warmup
            if not self._ready_to_measure():
                return
            self._load_started = True
        workload, arrivals, max_tokens, ignore_eos = self._load
        if self._auto_users and hasattr(arrivals, "users"):
            arrivals.users = max(1, sum(1 for w in self._active() if w.info.ready_ns)) * self._capacity()
        now = time.perf_counter_ns()
        for t_sched in arrivals.due(now, len(self._pending) + len(self._inflight)):
            req = Request(next(self._req_ids), prompt_for(workload, next(self._prompt_index)), max_tokens,
                          ignore_eos, t_scheduled_ns=t_sched, rep=self.rep, k=self.target_k, b=self.b,
                          mode=self.mode)
            req.t_submitted_ns = time.perf_counter_ns()
            self._pending.append(req)

    def _dispatch(self) -> None:
        cap = self._capacity()
        while self._pending:
            # the least loaded worker, then the one idle longest, takes the head of the queue
            room = [w for w in self._live()
                    if w.info.ready_ns and not w.retire and not w.mode_pending and len(w.inflight) < cap]
            if not room:
                break
            w = min(room, key=lambda w: (len(w.inflight), w.idle_since))
            req = self._pending.popleft()
            if not self._send(w, ("req", req.wire())):
                self._pending.appendleft(req)
                break
            w.inflight.add(req.request_id)
            w.info.current = req.request_id
            w.info.active = len(w.inflight)
            w.info.state = "serving"
            self._inflight[req.request_id] = _InFlight(req, w.info.wid)
        if self._pending and not self._active():
            # nobody left to serve the queue: fail what waits rather than hang
            while self._pending:
                req = self._pending.popleft()
                self._finish(_InFlight(req), None, error="no live worker to serve the request", finish="error")

    def _drain(self, w: _Worker, collector) -> None:
        try:
            while w.conn.poll():
                self._handle(w, w.conn.recv(), collector)
        except (EOFError, OSError):
            pass

    def _handle(self, w: _Worker, msg, collector) -> None:
        kind = msg[0]
        info = w.info
        if kind == "state":
            state, extra = msg[1], msg[2]
            for key in ("pid", "threads", "rss"):
                if extra.get(key) is not None:
                    setattr(info, key, extra[key])
            if state == "ready":
                if info.ready_ns is None:
                    info.ready_ns = time.perf_counter_ns()
                    self._emit("log", f"worker {info.wid} ready (pid {info.pid})")
                    if self.mode == "batch":
                        self._send_mode(w)
                    if w.retire:
                        self._send(w, ("retire",))
                if extra.get("mode_applied"):
                    w.mode_pending = False
                if extra.get("error"):
                    self._emit("error", f"worker {info.wid}: {extra['error']}")
                if not w.retire:
                    info.state = ("warming" if w.mode_pending else
                                  "idle" if info.current is None else "serving")
            elif state == "retired":
                info.state = "retired"
                self._emit("log", f"worker {info.wid} retired")
            else:
                info.state = state
        elif kind == "start":
            fl = self._inflight.get(msg[1])
            if fl:
                fl.t_started_ns = msg[2]
        elif kind == "tok":
            fl = self._inflight.get(msg[1])
            if fl:
                fl.tokens.extend(msg[2])
                info.tokens += len(msg[2])
                self._emit("tokens", info.wid, msg[1], msg[2])
        elif kind == "done":
            _, rid, toks, n_prompt, finish, error, t_done, rss = msg
            fl = self._inflight.get(rid)
            if fl is None:
                return
            fl.tokens.extend(toks)
            info.tokens += len(toks)
            if toks:
                self._emit("tokens", info.wid, rid, toks)
            info.rss = rss or info.rss
            w.inflight.discard(rid)
            info.active = len(w.inflight)
            if not w.inflight:
                info.current = None
                w.idle_since = time.perf_counter_ns()
                if w.retire:
                    self._send(w, ("retire",))
                else:
                    info.state = "idle"
            info.requests_done += 1
            rec = self._finish(fl, w, error=error, finish=finish, t_done=t_done, n_prompt=n_prompt, rss=rss)
            if rec.t_first_token_ns is not None:
                info.last_ttft_s = (rec.t_first_token_ns - rec.t_scheduled_ns) / 1e9
            if collector:
                collector(rec)
        elif kind == "fatal":
            info.error = f"{msg[1]} (engine log: {self.log_dir / f'worker-{info.wid}.log'})"
            info.state = "dead"
            self._emit("error", f"worker {info.wid}: {info.error}")
            if not any(x.info.ready_ns for x in self._workers.values()):
                self._fatal = info.error

    def _died(self, w: _Worker, collector) -> None:
        info = w.info
        w.proc.join(timeout=1.0)  # the sentinel can fire a moment before the process is reaped
        code = w.proc.exitcode
        how = f"signal {-code} ({signal.Signals(-code).name})" if code and code < 0 else f"exit code {code}"
        info.state = "dead"
        info.error = info.error or f"died: {how}"
        self._emit("error", f"worker {info.wid} (pid {info.pid}) died: {how}")
        lost = sorted(w.inflight)
        w.inflight.clear()
        info.current = None
        info.active = 0
        self._publish()
        for rid in lost:
            fl = self._inflight.get(rid)
            if fl:
                rec = self._finish(fl, w, error=f"worker {info.wid} (pid {info.pid}) died mid-request: {how}",
                                   finish="error")
                if collector:
                    collector(rec)

    def _finish(self, fl: _InFlight, w: _Worker | None, *, error=None, finish=None, t_done=None,
                n_prompt=0, rss=None) -> RequestRecord:
        self._inflight.pop(fl.req.request_id, None)
        req = fl.req
        toks = fl.tokens
        rec = RequestRecord(
            run_id=self.run_id, request_id=req.request_id, mode=req.mode, engine=self.meta.engine,
            model=self.meta.model, model_bytes=self.meta.model_bytes, k=req.k, b=req.b,
            worker=w.info.wid if w else None, prompt_id=req.prompt.prompt_id, prompt_tokens=n_prompt,
            output_tokens=len(toks), t_scheduled_ns=req.t_scheduled_ns, t_submitted_ns=req.t_submitted_ns,
            t_started_ns=fl.t_started_ns, t_first_token_ns=toks[0] if toks else None,
            t_done_ns=t_done or time.perf_counter_ns(), token_ns=list(toks), finish_reason=finish, error=error,
            simulated=self.meta.simulated, rep=req.rep, pid=w.info.pid if w else None,
            threads=w.info.threads if w else None, worker_rss_bytes=rss,
        )
        self._emit("record", rec)
        if self.on_record:
            self.on_record(rec)
        return rec

    @staticmethod
    def _first_error(snap: list[WorkerInfo]) -> str | None:
        return next((w.error for w in snap if w.error), None)
