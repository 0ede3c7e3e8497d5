"""The live dashboard's load from client actors on a Ray cluster (`inference-top --ray ADDRESS --clients N`,
docs/design/ray.md): one load source (sources/base.LoadSource's face) whose streams are dealt over N actors, each
holding an HTTP source of its own on its own machine. B (the streams) and a closed loop's users are dealt by
the weights; an open loop (--rate) is split into one Poisson stream a client, at its share of the rate (the
superposition of independent Poisson streams is Poisson at the whole rate). A thread of the driver polls every
actor for its events, puts them on the driver's clock (each actor's perf_counter offset, measured by round
trips as bench --ray does) and hands them to the live controller as one source's; one row a client under the
workers, as --peer's rows. A client that dies is named and its streams are dealt to the others (B stays what
was asked); one that stops answering is named as stalled. The actors, their placement, clocks and poll are
machine/ray_cluster.py's ClientGroup (a bench's clients use the same); here: each actor's job (LiveShare) and
what the dashboard does with its clients."""
from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar, NamedTuple

from measure.core.clients import shares, split
from measure.core.records import RequestRecord, RunMeta, shifted
from measure.core.workload import ClosedLoop, ClosedShare, Load, Poisson
from measure.machine.ray_cluster import ClientGroup, ClusterError, RayClient
from measure.sources.base import (Capabilities, Event, EventSink, Finished, LevelReady, LoadStarted, Log, PeerReading,
                                  SourceError, Started, Tokens, WorkerInfo, WorkerState, summed_rows)

ID_STRIDE = 1 << 40  # each load dealt to a client takes its request ids from its own block of this many
TPS_WINDOW_S = 5.0  # a client row's tok/s: the tokens of its requests finished in this window


class LiveTaken(NamedTuple):
    """What a live client actor's take() hands the driver: the events since the last take, its source's rows
    and its server view."""

    events: list[Event]
    rows: list[WorkerInfo]
    view: dict[str, Any] | None


class LiveShare:
    """A client actor's job in the live dashboard (machine/ray_cluster.ClientJob): its HTTP source, made (`make`,
    the driver's, run here) and started at `b` streams on its node (its endpoints checked and warmed); the
    source's setters run through the actor's `call`; `take` hands the driver its events."""

    CALLS: ClassVar[tuple[str, ...]] = ("set_batch", "set_users", "set_load", "scale_to", "pause")

    def __init__(self, make: Callable[[], Any], b: int) -> None:
        self._make, self._b = make, b
        self._source: Any = None

    def start(self) -> RunMeta:
        self._source = self._make()
        self._source.set_batch("http", max(1, self._b))
        self._source.start(wait_ready=False)
        meta: RunMeta = self._source.meta
        return meta

    def set_batch(self, *args: Any) -> None:  # the source's setters, as the driver calls them
        self._source.set_batch(*args)

    def set_users(self, *args: Any) -> None:
        self._source.set_users(*args)

    def set_load(self, *args: Any) -> None:
        self._source.set_load(*args)

    def scale_to(self, *args: Any) -> None:
        self._source.scale_to(*args)

    def pause(self, *args: Any) -> None:
        self._source.pause(*args)

    def take(self) -> LiveTaken:
        """The events since the last take, the source's rows and its server view."""
        out: list[Event] = []
        q = self._source.events
        while True:
            try:
                out.append(q.get_nowait())
            except queue.Empty:
                break
        return LiveTaken(out, self._source.workers(), self._source.server_view())

    def close(self) -> None:
        if self._source is not None:
            self._source.close()


@dataclass
class LiveClient(RayClient):
    """What the driver knows of one live client (machine/ray_cluster.RayClient's, and its load)."""

    streams: int = 0  # its share of B now
    up: bool = True
    why: str | None = None
    requests: int = 0
    errors: int = 0
    done: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, tokens) of its recent records
    rows: list[WorkerInfo] = field(default_factory=list)
    view: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"client {self.i}/{self.n} {self.ip}"

    def reading(self, now: float) -> PeerReading:
        self.done = [(t, n) for t, n in self.done if t >= now - TPS_WINDOW_S]
        tps = sum(n for _, n in self.done) / TPS_WINDOW_S
        return PeerReading(f"ray:{self.host}:{self.pid}", self.name, self.up, True, tps if self.up else None,
                           self.requests, self.errors, None, self.why, now)


class RayClients:
    """sources/base.LoadSource over N live client actors (see the module's docstring). Its `readings()` give
    one row a client (base.PeerReading), the figures of the records it sent, so it also serves as the
    dashboard's client watch (`with_own = False`: there is no load of the driver's own to add)."""

    with_own = False

    def __init__(self, plan: Any, make: Callable[[], Any], address: str, n: int | None, weights: list[int] | None,
                 events: bool = True, on_record: Callable[[RequestRecord], None] | None = None, say: Callable[[str], None] = print):
        self.plan, self.address, self._n, self._weights, self._say = plan, address, n, weights, say
        self._make = make  # each client's source, made on its node (picklable: control/wiring.make_source's partial)
        self._sink = EventSink(events, on_record)
        self.events: queue.Queue[Event] | None = self._sink.events
        self.meta: RunMeta = plan.meta()
        self.mode = "http"
        self.target_k = len(plan.endpoints) or 1
        self.b = (plan.bs or [1])[0]
        self.rep = 0
        self.oom_killed: list[tuple[int, int, str]] = []  # nothing here runs under this machine's OOM killer
        self.run_id = uuid.uuid4().hex[:12]
        self.clients: list[LiveClient] = []
        self._users: int | None = None
        self._load: Load | None = None
        self._lock = threading.Lock()
        self._deal = threading.RLock()  # set_batch from the controller and from the poller (a client died)
        self._poller: threading.Thread | None = None
        self._group: ClientGroup[LiveClient] | None = None
        self._load_started = False
        self._awaiting: set[int] = set()
        self._level_ready: dict[int, int] = {}
        self._blocks = 0  # the id blocks dealt (set_load)

    # ---- the LoadSource face -----------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        n = self.target_k
        return Capabilities(engine=self.meta.engine, weight_bytes=self.meta.model_bytes, modes=("http",),
                            scales_k=n > 1, local=False, batch_capacity=1 << 30, server_view=True,
                            simulated=False, endpoint=self.plan.url or "", max_k=n, level_ready=True)

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> None:
        if self.clients:
            return
        self._group = ClientGroup(self.address, self._sink.log)
        try:
            self._start_clients(self._group)
        except BaseException:
            self.close()
            raise
        self._poller = threading.Thread(target=self._poll, args=(self._group,), name="ray-clients", daemon=True)
        self._poller.start()

    def _start_clients(self, group: ClientGroup[LiveClient]) -> None:
        n = self._n or group.nodes()
        weights = self._weights or [1] * n
        if len(weights) != n:
            raise ClusterError(f"--weights gives {len(weights)} weights for {n} clients: one a client")
        self.clients = [LiveClient(i, n, w) for i, w in enumerate(weights, 1)]
        for c, b in zip(self.clients, shares(self.b, weights)):
            c.streams = b
        metas = group.open(self.clients, [partial(LiveShare, self._make, c.streams) for c in self.clients])
        group.sync_clocks()
        for c in self.clients:
            self._sink.log(f"{c.name} ({c.host}, pid {c.pid}): {c.streams} of {self.b} streams; clock "
                           f"{c.offset_ns / 1e6:+.3f} ms from the driver's, ± {c.bound_ns / 1e6:.3f} ms")
        self.meta = metas[0]

    def wait_ready(self, timeout: float = 120.0) -> None:
        return None  # each client warms its own streams; LevelReady says when the level counts

    def scale_to(self, k: int) -> None:
        self.target_k = max(1, min(k, len(self.plan.endpoints) or 1))
        for c in self.clients:
            self._send(c, "scale_to", k)

    def set_batch(self, mode: str, b: int, b_cap: int | None = None, seq_ctx: int | None = None) -> None:
        """B streams dealt by the weights over the clients that are up; a client left at 0 holds no stream
        and no load. The load is dealt again only where the clients holding streams change."""
        with self._deal:
            self._set_batch(b)

    def _set_batch(self, b: int) -> None:
        up = [c for c in self.clients if c.up]
        parts = shares(b, [c.weight for c in up]) if up else []
        before = {c.i for c in self.clients if c.up and c.streams}
        with self._lock:
            self.b = b
            self._awaiting = {c.i for c, s in zip(up, parts) if s and s != c.streams}
            self._level_ready.clear()
        for c, s in zip(up, parts):
            if s and s != c.streams:
                self._send(c, "set_batch", "http", s)
            c.streams = s
        if self._load is not None and before != {c.i for c in self.clients if c.up and c.streams}:
            self._set_load(self._load)

    def set_users(self, users: int | None) -> None:
        self._users = users

    def set_load(self, load: Load | None) -> None:
        with self._deal:
            self._set_load(load)

    def _set_load(self, load: Load | None) -> None:
        """The load dealt to the clients holding streams: a closed loop whose users follow B runs in each client
        at its own B; one of U users (--users) is dealt by the weights (user u keeps sending the requests u,
        u + U …, core/workload.ClosedShare); an endless Poisson stream is split by rate. Each load dealt to a
        client takes its request ids from a block of ID_STRIDE of its own, so no two clients' ids meet."""
        self._load = load
        holding = [c for c in self.clients if c.up and c.streams]
        for c in self.clients:
            if c.up and c not in holding:
                self._send(c, "set_load", None)
        if load is None or not holding:
            return
        arr = load.arrivals
        parts: list[Any]
        users = self._users
        if isinstance(arr, ClosedLoop) and users is None:  # each client's users follow its own streams
            parts = [ClosedLoop(arr.users, arr.total) for _ in holding]
            for c in holding:
                self._send(c, "set_users", None)
        elif isinstance(arr, ClosedLoop) and users is not None:
            mine = split(users, [c.weight for c in holding])
            parts = [ClosedShare(m, users, arr.total, None) if m else None for m in mine]
            for c, m in zip(holding, mine):
                self._send(c, "set_users", len(m) or None)
        elif isinstance(arr, Poisson) and arr.total is None:
            whole = sum(c.weight for c in holding)
            parts = [arr.part(c.weight / whole) for c in holding]
        else:
            raise SourceError("the live dashboard's Ray clients take a closed loop (users) or an endless --rate: "
                              "a finite schedule is bench --ray's")
        if not self._load_started:  # said by the driver as it deals the load (the clients' streams are warm since
            self._load_started = True  # prepare), so before any client's first request on the driver's clock
            self._sink.put(LoadStarted(time.perf_counter_ns()))
        for c, part in zip(holding, parts):
            if part is None:
                self._send(c, "set_load", None)
                continue
            self._blocks += 1
            self._send(c, "set_load", Load(load.workload, part, load.max_tokens, load.ignore_eos),
                       1 + self._blocks * ID_STRIDE, 1)

    def pause(self, paused: bool = True) -> None:
        for c in self.clients:
            if c.up and c.streams:
                self._send(c, "pause", paused)

    def workers(self) -> list[WorkerInfo]:
        """One row an endpoint, summed over the clients (as a pool of client processes does)."""
        with self._lock:
            rows = [c.rows for c in self.clients if c.up and c.rows]
        if not rows:
            return [WorkerInfo(0, state=WorkerState.STARTING, label="ray clients")]
        return summed_rows(rows)

    def server_view(self) -> dict[str, Any] | None:
        with self._lock:
            return next((c.view for c in self.clients if c.up and c.view is not None), None)

    def readings(self) -> list[PeerReading]:
        now = time.monotonic()
        with self._lock:
            return [c.reading(now) for c in self.clients]

    def header(self) -> dict[str, Any]:
        """The recording's account of the clients (docs/design/ray.md)."""
        return {"address": self.address, "clients": len(self.clients), "weights": [c.weight for c in self.clients],
                "clock": "each actor's perf_counter − the driver's, by round trips: bound = half the round trip",
                "client_list": [{"client": c.i, "ip": c.ip, "host": c.host, "pid": c.pid,
                                 "clock_offset_ns": c.offset_ns, "clock_bound_ns": c.bound_ns}
                                for c in self.clients]}

    def close(self, grace: float = 1.0) -> None:
        group = self._group
        if group is not None:
            group.stopped.set()
        if self._poller is not None:
            self._poller.join(timeout=grace + 2)
        if group is not None:
            group.close(ask=[c for c in self.clients if c.up and c.actor is not None], grace=grace)

    # ---- the driver's side -------------------------------------------------------------------
    def _send(self, c: LiveClient, name: str, *args: Any) -> None:
        if c.up and c.actor is not None:
            c.actor.call.remote(name, *args)

    def _poll(self, group: ClientGroup[LiveClient]) -> None:
        """The poll thread: the group's poll over the clients that are up until close (a client silent past
        STALL_S is named, never stopped: it may answer again, and the dashboard runs on)."""
        while not group.stopped.is_set():
            group.poll([c for c in self.clients if c.up], self._absorb, self._gone)

    def _gone(self, c: LiveClient, state: str, why: str) -> None:
        with self._lock:
            c.up, c.why, c.rows = False, why, []
            self._awaiting.discard(c.i)
        lost, c.streams = c.streams, 0
        if not any(x.up for x in self.clients):
            self._sink.log(f"{c.name} died ({why}): no client is left; the load has stopped", "error")
            return
        self._sink.log(f"{c.name} died ({why}): its {lost} of {self.b} streams are dealt to the other clients "
                       f"(B stays {self.b})", "error")
        with self._deal:  # its users or its part of the rate, too
            self._set_batch(self.b)
            if self._load is not None:
                self._set_load(self._load)

    def _absorb(self, c: LiveClient, got: LiveTaken) -> None:
        events, rows, view = got
        d = -c.offset_ns
        rows = [replace(w, ready_ns=None if w.ready_ns is None else w.ready_ns + d) for w in rows]  # our clock
        with self._lock:
            c.rows, c.view = rows, view
        for ev in events:
            if isinstance(ev, Finished):
                rec = shifted(ev.record, d)  # a copy: on the driver's clock, under this source's run id
                rec.run_id, rec.extra = self.run_id, dict(rec.extra or {}, client=c.i)
                with self._lock:
                    c.requests += 1
                    c.errors += rec.error is not None
                    c.done.append((time.monotonic(), rec.output_tokens))
                self._sink.record(rec)
            elif isinstance(ev, Tokens):
                self._sink.put(Tokens(ev.worker, ev.request_id, [t + d for t in ev.token_ns]))
            elif isinstance(ev, Started):
                self._sink.put(Started(ev.worker, ev.request_id, ev.t_ns + d))
            elif isinstance(ev, LoadStarted):
                pass  # a client's own start: the driver said the load's when it dealt it (_set_load)
            elif isinstance(ev, LevelReady):
                self._level(c, ev.t_ns + d)
            elif isinstance(ev, Log):
                if c.i == 1 or ev.level != "info":  # the clients say the same things: the first one speaks
                    self._sink.put(Log(ev.level, f"{c.name}: {ev.text}" if c.i != 1 else ev.text))
            else:
                self._sink.put(ev)

    def _level(self, c: LiveClient, t_ns: int) -> None:
        """A client's share of the new B is warm; the level counts once every client that changed says so."""
        with self._lock:
            self._level_ready[c.i] = t_ns
            done = bool(self._awaiting) and self._awaiting <= set(self._level_ready)
            if done:
                self._awaiting = set()
                t = max(self._level_ready.values())
                self._level_ready.clear()
        if done:
            self._sink.put(LevelReady(t, self.target_k, self.b, "http"))


__all__ = ["RayClients", "LiveShare", "LiveClient", "shares", "ID_STRIDE"]
