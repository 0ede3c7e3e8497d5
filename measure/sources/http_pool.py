"""B HTTP streams spread over P worker processes (docs/design/client-processes.md): each process runs sources/http.py's
HttpSource (one asyncio loop) with its share of the streams, and takes its share of one schedule from one
start, so the P loops together send what one loop would have sent, without one loop's CPU as the limit.

- **Streams**: process p of P (1-based) holds B ÷ P streams per endpoint (the first B mod P one more).
- **Open loop** (a finite schedule: --rate, --arrivals, a trace, a client's --segment): the requests are
  dealt round robin by their position in the schedule, as `bench --segment` deals them over machines
  (core/clients.Segment.share): each keeps its index, offset and id; all processes count from one t0.
- **Closed loop**: the U users are dealt the same way (process p: U ÷ P, the first U mod P one more) with
  the total; process p's requests take ids first + p − 1, first + p − 1 + P … so ids stay unique and, for a
  finite total, complete. All users start at one t0.
- **One clock**: records are stamped with time.perf_counter_ns, CLOCK_MONOTONIC on Linux (mach absolute
  time on macOS): one system-wide clock, so the processes' timestamps compare as one process's would.
- **Records and events** come back over a pipe per process to one reader thread here, which hands them to
  the same collector and event queue an HttpSource would: headless, each record as it ends; live, the
  events every 0.1 s in their order (a record as its Finished, after its Tokens), one LoadStarted, one
  LevelReady when every process has its share of the new level warmed. Records say the whole B and carry
  extra.proc = p.

Not split: multi-turn sessions and an endless open loop (the dashboard's --rate without --requests): the
pool refuses them in one line (use one process: --client-procs 1).
"""
from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import uuid
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, cast

from measure.core.arrivals import TurnArrivals
from measure.core.clients import Segment, shares, split
from measure.core.records import RequestRecord, RunMeta
from measure.core.workload import ClosedLoop, ClosedShare, Load
from measure.machine.waits import poll_until
from measure.sources.base import (Capabilities, Event, EventSink, Finished, LevelReady, LoadStarted,
                                  Log, RecordCollector, SourceError, WorkerInfo, WorkerState, summed_rows)
from measure.sources.child import Child, stop_all
from measure.sources.messages import (BatchMsg, ClosedMsg, EventsMsg, FatalMsg, LoadMsg, LogMsg, PauseMsg, PoolInit,
                                      ReadyMsg, RecordMsg, RowsMsg, ScaleMsg, StartedMsg, StopMsg, WaitReadyMsg)
from measure.sources.warmup import Warmup, WarmsUp

if TYPE_CHECKING:
    from measure.sources.http import HttpSource

_FromProc = StartedMsg | RecordMsg | EventsMsg | RowsMsg | ReadyMsg | LogMsg | ClosedMsg | FatalMsg
_ToProc = BatchMsg | ScaleMsg | PauseMsg | LoadMsg | WaitReadyMsg | StopMsg

START_LEAD_NS = 30_000_000  # a load's t0 is this far ahead of the moment it is handed out: every process has it
STREAMS_PER_PROC = 96  # about what one asyncio loop streams without falling behind (benchmarks/harness_overhead.py)
EVENT_EVERY_S = 0.1  # a process sends its live events this often
WORKERS_EVERY_S = 0.5  # …and its endpoints' rows


def http_source(procs: int | None, b: int) -> Callable[..., Any]:
    """The class to build B streams with: HttpSource for one process, else HttpPool over `procs` (None:
    auto_procs(b)); both take HttpSource's arguments."""
    from functools import partial

    from measure.sources.http import HttpSource

    p = client_procs(procs, b)
    return HttpSource if p == 1 else partial(HttpPool, procs=p)


def client_procs(procs: int | None, b: int) -> int:
    """The processes B streams go through: `procs` (None: auto_procs(b)), never more than the streams."""
    return auto_procs(b) if procs is None else max(1, min(procs, b))


def auto_procs(b: int, cores: int | None = None) -> int:
    """Processes for B streams: one per STREAMS_PER_PROC streams (rounded up), at most one per core, at
    least 1."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(-(-b // STREAMS_PER_PROC), cores))


# ---- one process -----------------------------------------------------------------------------------
def _child(conn: Connection, init: PoolInit) -> None:
    """Process `init.proc` (1-based), a child.Child: an HttpSource driven by the parent's messages."""
    send = _sender(conn)
    src = _child_source(init, send)
    if src is None:
        return
    send(StartedMsg(src.meta))
    stop = threading.Event()
    threading.Thread(target=_pump, args=(src, send, stop), name="pool-pump", daemon=True).start()
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(msg, StopMsg):
                break
            _obey(src, msg, send)
    finally:
        stop.set()
        src.close()
        send(ClosedMsg())


def _sender(conn: Connection) -> Callable[[_FromProc], None]:
    """Sends from any of the process's threads, one message at a time; nothing once the parent went away."""
    lock = threading.Lock()

    def send(msg: _FromProc) -> None:
        with lock:
            try:
                conn.send(msg)
            except (OSError, ValueError):
                pass  # the parent went away

    return send


def _child_source(init: PoolInit, send: Callable[[_FromProc], None]) -> HttpSource | None:
    """The process's HttpSource, started (its tokenizer loaded here from its path); None, said as FatalMsg,
    when it cannot start."""
    from measure.sources.http import HttpSource

    kw = dict(init.kw)
    tok = kw.pop("tokenizer_path", None)
    if tok is not None:
        try:
            from engines.tokenizer import GGUFTokenizer

            kw["tokenizer"] = GGUFTokenizer(tok)
        except Exception as exc:  # noqa: BLE001 - said to the parent, prompts go as text
            send(LogMsg("warn", f"process {init.proc}: no local tokenizer ({exc}): prompts go as text"))
    # live: a record travels as its Finished, in order after its Tokens; headless: at once, by itself
    src = HttpSource(**kw, events=init.events,
                     on_record=None if init.events else lambda r: send(RecordMsg(r)))
    src.proc, src.run_id = init.proc, init.run_id
    try:
        src.start(wait_ready=False, timeout=30.0)
    except SourceError as exc:
        send(FatalMsg(str(exc)))
        return None
    return src


def _pump(src: HttpSource, send: Callable[[_FromProc], None], stop: threading.Event) -> None:
    """Every EVENT_EVERY_S the events since (live), every WORKERS_EVERY_S the endpoints' rows."""
    last_rows = 0.0
    while not stop.wait(EVENT_EVERY_S):
        if src.events is not None:
            batch = []
            while True:
                try:
                    batch.append(src.events.get_nowait())
                except queue.Empty:
                    break
            if batch:
                send(EventsMsg(batch))
        if time.monotonic() - last_rows >= WORKERS_EVERY_S:
            last_rows = time.monotonic()
            send(RowsMsg(src.workers(), src.server_view()))


def _obey(src: HttpSource, msg: _ToProc, send: Callable[[_FromProc], None]) -> None:
    """One of the parent's messages, done."""
    if isinstance(msg, BatchMsg):
        src.level_b = msg.level_b
        src.set_batch("http", msg.streams)
    elif isinstance(msg, ScaleMsg):
        src.scale_to(msg.k)
    elif isinstance(msg, PauseMsg):
        src.pause(msg.paused)
    elif isinstance(msg, LoadMsg):
        src.rep = msg.rep
        src.set_load(msg.load, msg.first_id, msg.step)
    elif isinstance(msg, WaitReadyMsg):
        err = None
        try:
            src.wait_ready(msg.timeout)
        except SourceError as exc:
            err = str(exc)
        send(RowsMsg(src.workers(), src.server_view()))
        send(ReadyMsg(msg.token, err))


# ---- the pool --------------------------------------------------------------------------------------
class HttpPool(WarmsUp):
    """An HttpSource's face (sources/base.LoadSource) over `procs` processes (None: auto_procs(b)). `http`:
    the rest of HttpSource's arguments (endpoint, model, api_key_env, stall_s, prefix_cache, tokenizer,
    routing, cap_open_loop), checked here and handed to each process's HttpSource."""

    def __init__(self, url: Any, meta: RunMeta, b: int = 1, procs: int | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None, events: bool = True, **http: Any):
        import inspect

        from measure.sources.http import Endpoint, HttpSource

        inspect.signature(HttpSource).bind(url, meta, **http)  # TypeError here, not in every process
        specs = url if isinstance(url, list) else [url]
        self._specs = [e if isinstance(e, Endpoint) else Endpoint(e) for e in specs]
        self.procs = max(1, procs or auto_procs(b))
        tokenizer = http.pop("tokenizer", None)
        self.warmup = http.pop("warmup", Warmup(requests=0))  # the pool warms a level; its processes do not
        self._kw = dict(http, url=self._specs, meta=meta, b=1)
        if tokenizer is not None:
            self._kw["tokenizer_path"] = str(getattr(tokenizer, "path", tokenizer))
        self.meta = RunMeta(**{**meta.__dict__, "mode": "http"})
        self._sink = EventSink(events, on_record)
        self.events: queue.Queue[Event] | None = self._sink.events
        self.mode = "http"
        self.target_k = len(self._specs)
        self.b = b
        self.rep = 0
        self.oom_killed: list[tuple[int, int, str]] = []
        self.run_id = uuid.uuid4().hex[:12]
        self.shown_url = ", ".join(e.shown() for e in self._specs)
        self._conns: list[Connection] = []
        self._children: list[Child] = []
        self._rows: dict[int, tuple[list[WorkerInfo], dict[str, Any] | None]] = {}
        self._collector: RecordCollector | None = None
        self._next_id = 1
        self._users: int | None = None
        self._ready_tokens: dict[int, dict[int, str | None]] = {}
        self._token = itertools.count(1)
        self._load_started = False
        self._level_ready: dict[int, LevelReady] = {}
        self._awaiting: set[int] = set()  # the processes whose share of a new B must say LevelReady
        self._error: str | None = None
        self._closed: set[int] = set()
        self._started: dict[int, RunMeta] = {}
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._reader: threading.Thread | None = None

    def keep_answers(self) -> None:
        """Each process's records keep their answers' text (HttpOptions.answers): before start()."""
        if self._children:
            raise RuntimeError("keep_answers() after the pool's processes started")
        self._kw["answers"] = True

    # ---- the LoadSource face -----------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        n = len(self._specs)
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes, modes=("http",),
                            scales_k=n > 1, local=False, batch_capacity=1 << 30, server_view=True,
                            simulated=False, endpoint=self.shown_url, max_k=n, level_ready=True)

    def _active(self) -> int:
        """The processes holding streams at this B: the first min(P, B) of the P started (all P are started,
        however small the first B, so a sweep's larger B later finds them)."""
        return min(len(self._conns) or self.procs, max(1, self.b))

    def _shares(self) -> list[int]:
        """Each started process's streams at this B (0 for one beyond the first B)."""
        n = len(self._conns) or self.procs
        act = self._active()
        return shares(self.b, [1] * act) + [0] * (n - act)

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> None:
        if self._children:
            return
        n = self.procs
        for p, share in enumerate(self._shares(), 1):
            init = PoolInit(p, dict(self._kw, b=share), self._sink.events is not None, self.run_id)
            child = Child(_child, (init,), f"it-pool-{p}")
            self._conns.append(child.conn)
            self._children.append(child)
        self._reader = threading.Thread(target=self._read, name="http-pool-reader", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout + 30  # the processes import and check the endpoints first
        if not poll_until(lambda: len(self._started) >= n or self._error is not None, deadline):
            with self._cv:
                self._error = self._error or f"the {n} client processes did not start within {timeout + 30:.0f} s"
        if self._error is not None:
            self.close()
            raise SourceError(self._error)
        self.meta = self._started[1]
        self._sink.log(f"{self.b} streams over {self._active()} of {n} client processes (one asyncio loop each, "
                       "one schedule)")
        self._send_all_batch()
        if self.target_k != len(self._specs):  # scale_to before start
            self.scale_to(self.target_k)
        if wait_ready:
            self.wait_ready(timeout)

    def _send(self, p: int, msg: _ToProc) -> None:
        try:
            self._conns[p - 1].send(msg)
        except (OSError, ValueError) as exc:
            raise SourceError(f"client process {p} is gone ({exc})") from None

    def _send_all_batch(self, before: list[int] | None = None) -> None:
        shares = self._shares()
        with self._lock:
            self._level_ready.clear()
            self._awaiting = {p for p, s in enumerate(shares, 1) if s and (before is None or before[p - 1] != s)}
        for p, share in enumerate(shares, 1):
            self._send(p, BatchMsg(share, self.b))

    def wait_ready(self, timeout: float = 120.0) -> None:
        token = next(self._token)
        n = len(self._conns)
        with self._cv:
            self._ready_tokens[token] = {}
        for p in range(1, n + 1):
            self._send(p, WaitReadyMsg(timeout, token))
        deadline = time.monotonic() + timeout + 5
        if not poll_until(lambda: len(self._ready_tokens[token]) >= n or self._error is not None, deadline):
            raise SourceError(f"warmup of {self.b} streams at {self.shown_url} did not finish within {timeout:.0f} s")
        with self._cv:
            got = self._ready_tokens.pop(token)
        err = self._error or next((e for e in got.values() if e), None)
        if err:
            raise SourceError(err)

    def scale_to(self, k: int) -> None:
        self.target_k = max(1, min(k, len(self._specs)))
        for p in range(1, len(self._conns) + 1):
            self._send(p, ScaleMsg(k))

    def set_batch(self, mode: str, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        before = self._shares() if self._conns else None
        self.b = b
        if self._conns:
            self._send_all_batch(before)

    def set_users(self, users: int | None) -> None:
        """A closed loop's users, dealt round robin to the processes holding streams at its load (set_load): kept
        here until then."""
        self._users = users

    def pause(self, paused: bool = True) -> None:
        for p in range(1, len(self._conns) + 1):
            self._send(p, PauseMsg(paused))

    def set_load(self, load: Load | None) -> None:
        n = self._active()  # the processes holding streams (B < P: the first B)
        for p in range(n + 1, len(self._conns) + 1):
            self._send(p, LoadMsg(None, None, 1, self.rep))
        if load is None:
            for p in range(1, n + 1):
                self._send(p, LoadMsg(None, None, 1, self.rep))
            return
        arr = load.arrivals
        t0 = time.perf_counter_ns() + START_LEAD_NS
        first = self._next_id
        if isinstance(arr, ClosedLoop):
            # user u of U sends requests u, u + U … (core/workload.ClosedShare): users dealt round robin to the
            # processes, each request keeping its index, id and prompt; a process without users gets no load
            users = self._users or arr.users
            used = min(n, users)
            mine = split(users, [1] * used)
            for p in range(1, n + 1):
                if p > used:
                    self._send(p, LoadMsg(None, None, 1, self.rep))
                    continue
                share = ClosedShare(mine[p - 1], users, arr.total,
                                    t0 if arr.start_ns is None else arr.start_ns)
                if share.total == 0:
                    self._send(p, LoadMsg(None, None, 1, self.rep))
                    continue
                self._send(p, LoadMsg(Load(load.workload, share, load.max_tokens, load.ignore_eos), first, 1,
                                      self.rep))
            self._next_id += arr.total if arr.total is not None else 1 << 40  # endless: far past its ids
            return
        if isinstance(arr, TurnArrivals):
            raise SourceError("multi-turn sessions run in one client process (--client-procs 1)")
        if isinstance(arr, Segment):
            whole = arr
        else:
            try:
                whole = Segment(arr)
            except ValueError:
                raise SourceError("an endless open-loop schedule is not split over client processes: give it "
                                  "--requests N, or run one process (--client-procs 1)") from None
        for p in range(1, n + 1):
            part = whole.share(p, n, t0)
            self._send(p, LoadMsg(Load(load.workload, part, load.max_tokens, load.ignore_eos), first, 1, self.rep))
        self._next_id += whole.full_total

    def workers(self) -> list[WorkerInfo]:
        """One row per endpoint, summed over the processes (state: the first process's)."""
        with self._lock:
            rows = [self._rows[p][0] for p in sorted(self._rows)]
        if not rows:
            return [WorkerInfo(i, state=WorkerState.STARTING, label=e.name()) for i, e in enumerate(self._specs)]
        return summed_rows(rows)

    def server_view(self) -> dict[str, Any] | None:
        with self._lock:
            return self._rows[min(self._rows)][1] if self._rows else None

    def pids(self) -> list[int]:
        """The client processes' pids (a benchmark reads their CPU)."""
        return [c.pid for c in self._children]

    def close(self, grace: float = 1.0) -> None:
        for p in range(1, len(self._conns) + 1):
            try:
                self._send(p, StopMsg())
            except SourceError:
                pass
        stop_all(self._children, grace + 5)  # each closes its source first
        if self._reader is not None:
            self._reader.join(2)
        for c in self._conns:
            c.close()

    # ---- the reader --------------------------------------------------------------------------
    def _read(self) -> None:
        live: dict[Any, int] = {c: p for p, c in enumerate(self._conns, 1)}
        while live:
            for ready in wait(list(live)):
                c = cast(Connection, ready)  # wait() gives back the Connections it was given
                p = live[c]
                try:
                    msg: _FromProc = c.recv()
                except (EOFError, OSError):
                    del live[c]
                    self._gone(p)
                    continue
                if isinstance(msg, ClosedMsg):
                    del live[c]
                    with self._cv:
                        self._closed.add(p)
                    continue
                self._handle(p, msg)

    def _gone(self, p: int) -> None:
        with self._cv:
            if p not in self._closed and self._error is None:
                self._error = f"client process {p} ended unexpectedly"
                self._sink.log(self._error, "error")
            self._cv.notify_all()

    def _handle(self, p: int, msg: _FromProc) -> None:
        if isinstance(msg, RecordMsg):
            self._sink.record(msg.record, self._collector)
        elif isinstance(msg, EventsMsg):
            for ev in msg.events:
                self._event(p, ev)
        elif isinstance(msg, RowsMsg):
            with self._lock:
                self._rows[p] = (msg.workers, msg.server_view)
        elif isinstance(msg, ReadyMsg):
            with self._cv:
                if msg.token in self._ready_tokens:
                    self._ready_tokens[msg.token][p] = msg.error
                self._cv.notify_all()
        elif isinstance(msg, StartedMsg):
            with self._cv:
                self._started[p] = msg.meta
                self._cv.notify_all()
        elif isinstance(msg, FatalMsg):
            with self._cv:
                self._error = f"client process {p}: {msg.message}"
                self._cv.notify_all()
        elif isinstance(msg, LogMsg):
            self._sink.log(msg.text, msg.level)

    def _event(self, p: int, ev: Any) -> None:
        if isinstance(ev, LoadStarted):
            if not self._load_started:
                self._load_started = True
                self._sink.put(ev)
        elif isinstance(ev, LevelReady):
            with self._lock:
                self._level_ready[p] = ev
                done = bool(self._awaiting) and self._awaiting <= set(self._level_ready)
                if done:
                    self._awaiting = set()
                    t = max(e.t_ns for e in self._level_ready.values())
                    self._level_ready.clear()
            if done:
                self._sink.put(LevelReady(t, self.target_k, self.b, "http"))
        elif isinstance(ev, Log):
            if p == 1 or ev.level != "info":  # the processes say the same things: the first one speaks
                self._sink.put(ev)
        elif isinstance(ev, Finished):
            self._sink.record(ev.record, self._collector)
        else:  # Tokens, Started (worker: the endpoint's index)
            self._sink.put(ev)


__all__ = ["HttpPool", "auto_procs", "http_source", "STREAMS_PER_PROC"]
