"""The fleet: K engine workers (one process each: sources/child.py) draining one shared request queue.

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
import selectors
import signal
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from engines.base import EngineSpec
from measure.core.metrics import ttft
from measure.machine.probes import auto_threads, oom_kills, physical_cores
from measure.core.records import Mode, Outcome, Request, RequestRecord, RunMeta, ServedBy, build_record
from measure.core.workload import Load
from measure.sources.base import (Capabilities, CellStopped, CollectsRecords, Event, EventSink, LevelReady,
                                  LoadStarted, OutOfMemory, RecordCollector, SourceError, Started, Tokens, WorkerInfo,
                                  WorkerState)
from measure.sources.dispatch import Dispatcher
from measure.sources.child import Child, stop_all
from measure.sources.messages import (DoneMsg, FatalMsg, ModeMsg, ReqMsg, RetireMsg, StartMsg, StateMsg,
                                      StopMsg, ThreadsMsg, TokensMsg)

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    _ToWorker = ReqMsg | ThreadsMsg | ModeMsg | RetireMsg | StopMsg
    _FromWorker = StateMsg | StartMsg | TokensMsg | DoneMsg | FatalMsg

WAIT_S = 0.5  # the I/O thread sleeps this long at most; commands and workers wake it at once
ALIVE_POLL_S = 0.5  # the I/O thread asks each worker process whether it lives at most this often (waitpid)
RETIRED_SHOWN_S = 10.0  # a retired worker's row stays this long, then leaves the list (_forget_retired)
S = WorkerState

_OPEN: weakref.WeakSet[Fleet] = weakref.WeakSet()


@atexit.register
def _close_open_fleets() -> None:
    """One exit hook for every fleet still open, so no worker outlives the program."""
    for f in list(_OPEN):
        f.close()


__all__ = ["Fleet", "CellStopped", "RunMeta", "WorkerInfo", "physical_cores", "auto_threads"]


@dataclass
class _Worker:
    info: WorkerInfo
    proc: Child
    conn: Connection[_ToWorker, _FromWorker]
    inflight: set[int] = field(default_factory=set)
    idle_since: int = 0  # when its last request ended: the longest idle asks first, as on a shared queue
    mode_pending: bool = False  # a mode change sent, not yet applied (its batch context being made)
    retire: bool = False
    retired_at: float | None = None  # time.monotonic() when it said it retired


@dataclass
class _InFlight:
    req: Request
    wid: int | None = None
    t_started_ns: int | None = None
    tokens: list[int] = field(default_factory=list)


# ---- commands (any thread → the I/O thread) ------------------------------------------------------
class _Scale(NamedTuple):
    k: int


class _SetLoad(NamedTuple):
    load: Load | None


class _Pause(NamedTuple):
    paused: bool


class _Batch(NamedTuple):
    mode: Mode
    b: int


class _Users(NamedTuple):
    users: int | None


class _Collector(NamedTuple):
    collect: RecordCollector | None


class _Close(NamedTuple):
    pass


if TYPE_CHECKING:
    _Cmd = _Scale | _SetLoad | _Pause | _Batch | _Users | _Collector | _Close


class Fleet(CollectsRecords):
    """K engine workers on one shared queue: a LoadSource (sources/base.py)."""

    def __init__(self, spec: EngineSpec, meta: RunMeta, k: int = 1, threads: int | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None, b_cap: int | None = None,
                 events: bool = True) -> None:
        if k < 1:
            raise SourceError(f"K must be at least 1 (got {k})")
        self.spec = spec
        self.meta = meta
        self.fixed_threads = threads
        self._sink = EventSink(events, on_record)
        # what happened, for a live reader; a headless sweep reads records through on_record instead
        self.events: queue.Queue[Event] | None = self._sink.events
        self.target_k = k
        self.mode: Mode = meta.mode if meta.mode in ("instances", "batch") else "instances"
        self.b = meta.b
        self.b_cap = max(b_cap or 1, meta.b)  # sequences a batch context holds; B above it remakes it
        self.seq_ctx: int | None = None  # tokens per sequence in the batch context (None: the spec's ctx)
        self.run_id = uuid.uuid4().hex[:12]
        self.log_dir = Path(os.environ.get("INFERENCE_TOP_LOGS", Path.home() / ".cache" / "inference-top" / "logs")) / self.run_id
        self.rep = 0
        self._ctx = mp.get_context("spawn")
        self._workers: dict[int, _Worker] = {}
        self._ids = itertools.count(1)
        # the shared queue, the load's arrivals and start, the slot rule, pause and users (sources/dispatch.py)
        self._dispatch = Dispatcher(on_start=lambda t: self._sink.put(LoadStarted(t)), cap_open_loop=True)
        self._inflight: dict[int, _InFlight] = {}
        self._cmds: queue.Queue[_Cmd] = queue.Queue()
        self._cmds_put = 0
        self._cmds_done = 0
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._sel: selectors.BaseSelector | None = None  # the I/O thread's (_wait)
        self._watched: dict[int, _Worker] = {}
        self._next_poll = 0.0  # monotonic time of the next waitpid of every worker (ALIVE_POLL_S)
        self._lock = threading.Lock()
        self._snapshot: dict[int, WorkerInfo] = {}
        self._closed = False
        self._fatal: str | None = None
        self._last_death: str | None = None  # the last worker death, in words: why a queue with no worker fails
        self._unready_deaths = 0
        self._lost_ready = 0  # ready workers that died since K was last set: a load waits for K − this
        self._asked: tuple[int, int, Mode] = (k, self.b, self.mode)  # the level of the last step the I/O thread applied
        self._level_wait = False  # a step applied, its LevelReady not sent yet
        self._oom_seen = oom_kills() or 0
        # (K, B, mode) at each OOM kill: the guard's estimate was too low there
        self.oom_killed: list[tuple[int, int, str]] = []
        self._thread = threading.Thread(target=self._loop, name="fleet-io", daemon=True)
        self._started = False
        _OPEN.add(self)

    # ---- the LoadSource face (any thread) ----------------------------------------------------
    def capabilities(self) -> Capabilities:
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes,
                            modes=("instances", "batch"), scales_k=True, local=True, batch_capacity=self.b_cap,
                            server_view=False, simulated=self.meta.simulated, level_ready=True)

    def server_view(self) -> dict[str, Any] | None:
        return None

    def _command_put(self, cmd: _Cmd) -> None:
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
        """Block until every worker of the target K is ready (or raise SourceError)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._fatal:
                raise SourceError(self._fatal)
            with self._lock:
                synced = self._cmds_done >= self._cmds_put
            snap = self.workers()
            live = [w for w in snap if not w.state.leaving]
            # every command given before this call applied, every worker warmed up and in its mode
            if synced and len(live) >= self._serving_k() and all(w.ready_ns and w.state != S.WARMING for w in live):
                return
            if not live and snap:
                raise SourceError(self._first_error(snap) or "every worker died before it was ready")
            time.sleep(0.02)
        raise SourceError(f"workers not ready after {timeout:.0f} s")

    def scale_to(self, k: int) -> None:
        if k < 1:
            raise SourceError(f"K must be at least 1 (got {k})")
        self.target_k = k  # at once, so wait_ready() waits for the new workers
        self._command_put(_Scale(k))

    def set_batch(self, mode: Mode, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        """instances: one request per worker; batch: up to b sequences per worker, decoded together in a
        context made for b_cap sequences (default: the largest B so far) of seq_ctx tokens each."""
        if mode not in ("instances", "batch"):
            raise SourceError(f"mode must be instances or batch (got {mode!r})")
        if b < 1:
            raise SourceError(f"B must be at least 1 (got {b})")
        self.mode, self.b = mode, b
        self.b_cap = max(b, b_cap) if b_cap else max(self.b_cap, b)
        self.seq_ctx = seq_ctx or self.seq_ctx
        self._command_put(_Batch(mode, b))

    def set_load(self, load: Load | None) -> None:
        """Start (or replace) the load. Requests flow once every worker of the target K is ready."""
        self._command_put(_SetLoad(load))

    def pause(self, paused: bool = True) -> None:
        self._command_put(_Pause(paused))

    def set_users(self, users: int | None) -> None:
        """Closed-loop users; None: ready workers × B, so a warming worker's users do not queue."""
        self._command_put(_Users(users))

    def workers(self) -> list[WorkerInfo]:
        with self._lock:
            return [w.public() for w in self._snapshot.values()]

    # run_requests (sources/base.CollectsRecords): the collector goes to the I/O thread as a command
    def _collect(self, collector: RecordCollector | None) -> None:
        self._command_put(_Collector(collector))

    def _cell_stopped(self) -> None:
        self.pause(True)

    def _check(self) -> None:
        if self._fatal:
            raise SourceError(self._fatal)

    def close(self, grace: float = 1.0) -> None:
        """Stop every worker: ask, then SIGTERM, then SIGKILL. Idempotent; never leaves a child."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        self._command_put(_Close())
        if self._thread.is_alive():
            self._thread.join(timeout=grace + 0.5)
        for w in self._workers.values():
            self._send(w, StopMsg())
        stop_all([w.proc for w in self._workers.values()], grace)
        for w in self._workers.values():
            try:
                w.conn.close()
            except OSError:
                pass

    # ---- the I/O thread ----------------------------------------------------------------------
    def _threads_for(self, k: int) -> int:
        return self.fixed_threads or auto_threads(k)

    def _spawn(self) -> None:
        from measure.sources.worker import worker_main

        wid = next(self._ids)
        threads = self._threads_for(self.target_k)
        spec = dict(self.spec.to_dict(), threads=threads)
        proc = Child(worker_main, (wid, spec, str(self.log_dir / f"worker-{wid}.log")), f"it-worker-{wid}")
        info = WorkerInfo(wid, state=S.STARTING, pid=proc.pid, threads=threads)
        self._workers[wid] = _Worker(info, proc, proc.conn)
        self._sink.log(f"worker {wid} started (pid {proc.pid}, {threads} threads)")
        self._publish()

    def _forget_retired(self) -> None:
        """A worker retired (K lowered) RETIRED_SHOWN_S ago leaves the list: its row has said so, and every K step
        would otherwise add a row that each sample, panel and recording carries for the rest of the run. A dead
        worker stays: it says why the fleet is degraded."""
        now = time.monotonic()
        for wid, w in list(self._workers.items()):
            if w.retired_at is not None and now - w.retired_at > RETIRED_SHOWN_S and not w.proc.is_alive():
                w.proc.join(timeout=0)
                try:
                    w.conn.close()
                except OSError:
                    pass
                del self._workers[wid]

    def _publish(self) -> None:
        with self._lock:
            self._snapshot = {wid: w.info.public() for wid, w in self._workers.items()}

    def _send(self, w: _Worker, msg: _ToWorker) -> bool:
        try:
            w.conn.send(msg)
            return True
        except (OSError, ValueError):
            return False

    def _live(self) -> list[_Worker]:
        return [w for w in self._workers.values() if not w.info.state.gone]

    def _active(self) -> list[_Worker]:
        return [w for w in self._live() if not w.retire]

    def _loop(self) -> None:
        collector: RecordCollector | None = None
        try:
            while True:
                try:
                    while True:
                        cmd = self._cmds.get_nowait()
                        if isinstance(cmd, _Close):
                            return
                        if isinstance(cmd, _Collector):
                            collector = cmd.collect
                        else:
                            self._command(cmd)
                        self._cmds_done += 1
                except queue.Empty:
                    pass
                # new arrivals go out before the wait, so a closed-loop user's next request never waits
                # on this thread's sleep
                self._arrivals()
                self._send_queued(collector)
                self._level_check()
                self._forget_retired()
                self._publish()
                ready = self._wait(self._dispatch.wait_s(WAIT_S))
                if self._wake_r in ready:
                    while self._wake_r.poll():
                        self._wake_r.recv_bytes()
                for w in list(self._live()):
                    if w.conn in ready:  # one message now; the selector reports the pipe again while more wait
                        try:
                            self._handle(w, w.conn.recv(), collector)
                        except (EOFError, OSError):
                            pass
                # a death shows as its sentinel (the pipe's far end closes with the process); a poll of each
                # process twice a second covers one whose pipe a descendant still holds open
                now = time.monotonic()
                poll = now >= self._next_poll
                if poll:
                    self._next_poll = now + ALIVE_POLL_S
                for w in list(self._live()):
                    if w.proc.sentinel in ready or (poll and not w.proc.is_alive()):
                        self._drain(w, collector)
                        if not w.info.state.gone:
                            self._died(w, collector)
                        elif w.info.state == S.RETIRED:
                            w.proc.join(timeout=0.1)
        except Exception as exc:  # the I/O thread must never die silently
            self._fatal = f"fleet I/O thread failed: {type(exc).__name__}: {exc}"
            self._sink.log(self._fatal, "error")
        finally:
            if self._sel is not None:
                self._sel.close()
                self._sel, self._watched = None, {}

    def _wait(self, timeout: float) -> set[object]:
        """The wake pipe, pipes and sentinels ready within `timeout`, through one selector kept across waits
        (multiprocessing's wait() builds and fills a new one each call, and conn.poll() one per message: most of
        this thread's CPU at 70 tok/s). Its registrations follow the live workers."""
        live = {w.info.wid: w for w in self._live()}
        if self._sel is None:
            self._sel = selectors.DefaultSelector()
            self._sel.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        if live.keys() != self._watched.keys():
            for wid, w in self._watched.items():
                if wid not in live:
                    for obj in (w.conn, w.proc.sentinel):
                        try:
                            self._sel.unregister(obj)
                        except (KeyError, ValueError, OSError):
                            pass
            for wid, w in live.items():
                if wid not in self._watched:
                    self._sel.register(w.conn, selectors.EVENT_READ, w.conn)
                    self._sel.register(w.proc.sentinel, selectors.EVENT_READ, w.proc.sentinel)
            self._watched = live
        return {key.data for key, _ in self._sel.select(timeout)}

    def _level_check(self) -> None:
        """After a K, B or mode step: once every command given is applied and every worker of the level is
        ready (in its mode), say so (LevelReady): the level's figures count from then."""
        if self._level_wait and self._cmds_done >= self._cmds_put and self._ready_to_measure():
            self._level_wait = False
            self._sink.put(LevelReady(time.perf_counter_ns(), *self._asked))

    def _command(self, cmd: _Cmd) -> None:
        if isinstance(cmd, _Scale):
            self._asked, self._level_wait = (cmd.k, *self._asked[1:]), True
            self._scale(cmd.k)
        elif isinstance(cmd, _SetLoad):
            self._dispatch.set_load(cmd.load)
        elif isinstance(cmd, _Pause):
            self._dispatch.pause(cmd.paused)
            self._sink.log("load paused" if cmd.paused else "load resumed")
        elif isinstance(cmd, _Batch):
            self._asked, self._level_wait = (self._asked[0], cmd.b, cmd.mode), True
            for w in self._live():
                if w.info.ready_ns:
                    self._send_mode(w)
        elif isinstance(cmd, _Users):
            self._dispatch.set_users(cmd.users)

    def _send_mode(self, w: _Worker) -> None:
        """Tell a worker the mode; it takes no request until it says the mode is applied."""
        if self._send(w, ModeMsg("batch" if self.mode == "batch" else "single", self.b, self.b_cap, self.seq_ctx)):
            w.mode_pending = True
            w.info.state = S.WARMING if not w.inflight else w.info.state

    def _capacity(self) -> int:
        return self.b if self.mode == "batch" else 1

    def _scale(self, k: int) -> None:
        self._lost_ready = 0  # a new K: spawned up to it again
        active = self._active()
        if k > len(active):
            for _ in range(k - len(active)):
                self._spawn()
        elif k < len(active):
            # retire the newest first: idle ones at once, busy ones after their current request
            for w in sorted(active, key=lambda w: w.info.wid, reverse=True)[: len(active) - k]:
                w.retire = True
                w.info.state = S.RETIRING
                if not w.inflight:
                    self._send(w, RetireMsg())
        if self.fixed_threads is None:
            n = self._threads_for(k)
            for w in self._active():
                if w.info.threads != n:
                    if self._send(w, ThreadsMsg(n)):
                        w.info.threads = n

    def _serving_k(self) -> int:
        """K minus the ready workers that died since K was set (nothing replaces them): how many a load waits
        for."""
        return max(1, self.target_k - self._lost_ready)

    def _ready_k(self) -> int:
        """K on the records: the workers serving now (ready, in the current mode, not retiring). A worker still
        starting or warming up after a K step is not counted, nor one that died."""
        return max(1, sum(1 for w in self._active() if w.info.ready_ns and not w.mode_pending))

    def _ready_to_measure(self) -> bool:
        active = self._active()  # a ready worker that died since K was set is not waited for (nothing replaces it)
        return (len(active) >= self._serving_k()
                and all(w.info.ready_ns and not w.mode_pending for w in active))

    def _arrivals(self) -> None:
        # the load starts (the dispatcher says when) once every worker of the target K has finished its warmup;
        # with every worker dead and none coming it starts anyway: what arrives fails at once in _send_queued with
        # the death's reason, where it would have waited for the cell's timeout
        ready = self._ready_to_measure() or (bool(self._workers) and not self._active())
        self._dispatch.release(len(self._inflight), rep=self.rep, k=self.target_k, b=self.b, mode=self.mode,
                               slots=max(1, sum(1 for w in self._active() if w.info.ready_ns)) * self._capacity(),
                               ready=ready)

    def _room(self) -> _Worker | None:
        """Who takes the head of the queue (the dispatcher's rule): the least loaded worker with room, then the one
        idle longest."""
        cap = self._capacity()
        serving = [w for w in self._live() if w.info.ready_ns and not w.retire and not w.mode_pending]
        got = self._dispatch.choose(serving, lambda w: len(w.inflight), lambda w: cap, tie=lambda w: w.idle_since)
        return got[0] if got else None

    def _send_req(self, w: _Worker, req: Request) -> bool:
        if not self._send(w, ReqMsg.of(req)):
            return False
        w.inflight.add(req.request_id)
        # the level that serves it: the workers serving now (not one still warming up, nor one that died)
        req.k, req.b, req.mode = self._ready_k(), self.b, self.mode
        w.info.current = req.request_id
        w.info.active = len(w.inflight)
        w.info.state = S.SERVING
        self._inflight[req.request_id] = _InFlight(req, w.info.wid)
        return True

    def _send_queued(self, collector: Callable[[RequestRecord], None] | None = None) -> None:
        self._dispatch.dispatch(self._room, self._send_req)
        if self._dispatch.pending and not self._active():
            # nobody left to serve the queue: fail what waits rather than hang
            for req in self._dispatch.take_all():
                # (counted by the finite load's collector too: a bench cell waited out its timeout for them)
                self._finish(_InFlight(req), None, collector, error="no live worker to serve the request"
                             + (f" ({self._last_death})" if self._last_death else ""))

    def _drain(self, w: _Worker, collector: Callable[[RequestRecord], None] | None) -> None:
        try:
            while w.conn.poll():
                self._handle(w, w.conn.recv(), collector)
        except (EOFError, OSError):
            pass

    def _handle(self, w: _Worker, msg: _FromWorker, collector: Callable[[RequestRecord], None] | None) -> None:
        info = w.info
        if isinstance(msg, TokensMsg):
            fl = self._inflight.get(msg.request_id)
            if fl:
                fl.tokens.extend(msg.token_ns)
                info.tokens += len(msg.token_ns)
                self._sink.put(Tokens(info.wid, msg.request_id, msg.token_ns))
        elif isinstance(msg, StartMsg):
            fl = self._inflight.get(msg.request_id)
            if fl:
                fl.t_started_ns = msg.t_ns
                self._sink.put(Started(info.wid, msg.request_id, msg.t_ns))
        elif isinstance(msg, DoneMsg):
            self._done(w, msg, collector)
        elif isinstance(msg, StateMsg):
            self._state(w, msg)
        elif isinstance(msg, FatalMsg):
            info.error = f"{msg.message} (engine log: {self.log_dir / f'worker-{info.wid}.log'})"
            info.state = S.DEAD
            self._sink.log(f"worker {info.wid}: {info.error}", "error")
            if not any(x.info.ready_ns for x in self._workers.values()):
                self._fatal = info.error

    def _state(self, w: _Worker, msg: StateMsg) -> None:
        info = w.info
        for key in ("pid", "threads", "rss"):
            if getattr(msg, key) is not None:
                setattr(info, key, getattr(msg, key))
        if msg.state == "ready":
            if info.ready_ns is None:
                info.ready_ns = time.perf_counter_ns()
                self._sink.log(f"worker {info.wid} ready (pid {info.pid})")
                if self.mode == "batch":
                    self._send_mode(w)
                if w.retire:
                    self._send(w, RetireMsg())
            if msg.mode_applied:
                w.mode_pending = False
            if msg.error:
                self._sink.log(f"worker {info.wid}: {msg.error}", "error")
            if not w.retire:
                info.state = S.WARMING if w.mode_pending else S.IDLE if info.current is None else S.SERVING
        elif msg.state == "retired":
            info.state = S.RETIRED
            w.retired_at = time.monotonic()
            self._sink.log(f"worker {info.wid} retired")
        else:
            info.state = S(msg.state)

    def _done(self, w: _Worker, msg: DoneMsg, collector: Callable[[RequestRecord], None] | None) -> None:
        info = w.info
        fl = self._inflight.get(msg.request_id)
        if fl is None:
            return
        fl.tokens.extend(msg.token_ns)
        info.tokens += len(msg.token_ns)
        if msg.token_ns:
            self._sink.put(Tokens(info.wid, msg.request_id, msg.token_ns))
        info.rss = msg.rss or info.rss
        w.inflight.discard(msg.request_id)
        info.active = len(w.inflight)
        if not w.inflight:
            info.current = None
            w.idle_since = time.perf_counter_ns()
            if w.retire:
                self._send(w, RetireMsg())
            else:
                info.state = S.IDLE
        info.requests_done += 1
        rec = self._finish(fl, w, collector, error=msg.error, done=msg)
        if rec.t_first_token_ns is not None:
            info.last_ttft_s = ttft(rec)

    def _died(self, w: _Worker, collector: Callable[[RequestRecord], None] | None) -> None:
        info = w.info
        w.proc.join(timeout=1.0)  # the sentinel can fire a moment before the process is reaped
        code = w.proc.exitcode
        how = f"signal {-code} ({signal.Signals(-code).name})" if code and code < 0 else f"exit code {code}"
        oom = code == -signal.SIGKILL and (n := oom_kills()) is not None and n > self._oom_seen
        if oom:
            assert n is not None  # oom says so
            self._oom_seen = n
            how += ", out of memory? (the memory group's OOM killer count rose)"
            self.oom_killed.append((self.target_k, self.b, self.mode))
        phase = None if info.ready_ns else {S.STARTING: "while starting", S.LOADING: "while loading the model",
                                            S.WARMING: "during its warmup"}.get(info.state, "before it was ready")
        info.state = S.DEAD
        info.error = info.error or f"died{' ' + phase if phase else ''}: {how}"
        self._sink.log(f"worker {info.wid} (pid {info.pid}) died{' ' + phase if phase else ''}: {how}", "error")
        self._last_death = f"worker {info.wid} died{' ' + phase if phase else ''}: {how}; engine log in {self.log_dir}"
        if oom:  # the guard learns that its estimate was too low at this step
            self._sink.put(OutOfMemory(self.mode, self.target_k, self.b))
        if phase and not w.retire and not self._closed:
            self._replace_unready(info, how)
        elif not phase and not w.retire and not self._closed:
            self._lost_ready += 1
            self._sink.log(f"{max(0, self.target_k - self._lost_ready)} of K={self.target_k} workers serve on; records "
                           f"say K={self._serving_k()} until K is set "
                           "again (+/- in the dashboard spawns up to it)", "warn")
        lost = sorted(w.inflight)
        w.inflight.clear()
        info.current = None
        info.active = 0
        self._publish()
        for rid in lost:
            fl = self._inflight.get(rid)
            if fl:
                self._finish(fl, w, collector, error=f"worker {info.wid} (pid {info.pid}) died mid-request: {how}")

    def _replace_unready(self, info: WorkerInfo, how: str) -> None:
        """A worker that dies before it is ready is replaced once; a second such death lowers K by one (the
        records then say K − 1), so nothing waits on a worker that will never come."""
        if self._unready_deaths == 0:
            self._unready_deaths += 1
            self._sink.log(f"starting one replacement for worker {info.wid}", "warn")
            self._spawn()
            return
        self._unready_deaths += 1
        if self.target_k > 1:
            self.target_k -= 1
            self._sink.log(f"worker {info.wid} died before it was ready again ({how}): K lowered to "
                           f"{self.target_k}", "error")
        elif not any(x.info.ready_ns and not x.info.state.gone for x in self._workers.values()):
            first = self._first_error([x.info for x in self._workers.values()])
            self._fatal = (f"worker {info.wid} {first or how}; every worker died before it was ready (engine logs: "
                           f"{self.log_dir})")

    def _finish(self, fl: _InFlight, w: _Worker | None, collector: Callable[[RequestRecord], None] | None,
                error: str | None = None, done: DoneMsg | None = None) -> RequestRecord:
        """A request's record, said (`done`: the worker's end of it; None: it ended without one, `error` says
        why)."""
        self._inflight.pop(fl.req.request_id, None)
        rss = done.rss if done else None
        out = Outcome(fl.tokens, fl.t_started_ns, done.t_done_ns if done else None,
                      done.prompt_tokens if done else 0, done.finish_reason if done else None, error)
        more = {"extra": {"output_ids": done.token_ids}} if done and done.token_ids is not None else {}
        rec = build_record(fl.req, self.meta, self.run_id, out,
                           ServedBy(w.info.wid, w.info.pid, w.info.threads, rss) if w else ServedBy(None, rss=rss), **more)
        self._sink.record(rec, collector)
        return rec

    @staticmethod
    def _first_error(snap: list[WorkerInfo]) -> str | None:
        return next((w.error for w in snap if w.error), None)
